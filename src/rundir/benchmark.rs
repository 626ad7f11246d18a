//! Finding the benchmark a folder's predictions belong to, for `score`, `report` and `merge` alike: the folder
//! given with `--data`, else the one the folder's manifest (or scored record) names, else the embedded sample when
//! it is the one the folder was made on; and, when the folder records its benchmark's hash, the check that the
//! benchmark found is that one — scoring predictions against another benchmark would be meaningless.

use std::path::{Path, PathBuf};

use super::{Origin, RunDirError};
use crate::dataset::{Benchmark, DATA_FILE};
use crate::fingerprint::sha256_hex;

/// A benchmark loaded for a folder.
#[derive(Debug, Clone)]
pub(crate) struct FoundBenchmark {
    /// The benchmark.
    pub bench: Benchmark,
    /// SHA-256 of its `data.jsonl`.
    pub hash: String,
}

/// The benchmark of a folder whose predictions were made as `origin` says (see the module documentation).
/// `named_by` is the file that recorded `origin` (for messages). Without `--data` and without an origin, the
/// embedded sample is used when `sample_by_default`, else the caller must pass `--data`.
pub(crate) fn find_benchmark(
    data: Option<&Path>,
    origin: Option<&Origin>,
    named_by: &Path,
    sample_by_default: bool,
) -> Result<FoundBenchmark, RunDirError> {
    let dir = match (data, origin) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(o)) if o.data().join(DATA_FILE).is_file() => o.data().to_path_buf(),
        (None, Some(o)) => sample_if_same(o, named_by)?,
        (None, None) if sample_by_default => sample()?,
        (None, None) => {
            return Err(RunDirError::Benchmark(format!(
                "{} not found, so the benchmark is unknown: pass --data with the benchmark folder",
                named_by.display()
            )))
        }
    };
    let file = dir.join(DATA_FILE);
    let bytes = std::fs::read(&file).map_err(super::io_err(&file))?;
    let hash = sha256_hex(&bytes);
    if let Some(o) = origin {
        if hash != o.data_hash() {
            let want = o.data_hash();
            return Err(RunDirError::Benchmark(format!(
                "{} was made on another benchmark (data.jsonl sha256 {}…) than {} (sha256 {}…); scoring its \
                 predictions against it would be meaningless. Pass --data with the folder's own benchmark ({})",
                named_by.display(),
                &want[..want.len().min(12)],
                file.display(),
                &hash[..12],
                o.data().display()
            )));
        }
    }
    let bench = Benchmark::load(&dir)
        .map_err(|e| RunDirError::Benchmark(format!("loading the benchmark: {e}")))?;
    Ok(FoundBenchmark { bench, hash })
}

fn sample() -> Result<PathBuf, RunDirError> {
    crate::sample::materialize_default()
        .map_err(|e| RunDirError::Benchmark(format!("writing the embedded sample benchmark: {e}")))
}

/// The embedded sample when it is the benchmark `origin` was made on (it lives in a temporary folder that another
/// machine, or a later day, may not have).
fn sample_if_same(origin: &Origin, named_by: &Path) -> Result<PathBuf, RunDirError> {
    let dir = sample()?;
    let file = dir.join(DATA_FILE);
    let bytes = std::fs::read(&file).map_err(super::io_err(&file))?;
    if sha256_hex(&bytes) == origin.data_hash() {
        return Ok(dir);
    }
    Err(RunDirError::Benchmark(format!(
        "the benchmark {} named by {} is not here; pass --data with its folder",
        origin.data().display(),
        named_by.display()
    )))
}
