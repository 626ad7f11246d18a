//! Finding the shard folders of a run (`RUN/shards/I-of-N/`), telling complete ones from missing or unfinished
//! ones, and checking that they were made with the same settings.

use std::path::{Path, PathBuf};

use super::MergeError;
use crate::records::{Manifest, RunSettings};
use crate::rundir::{self, RunDir};
use crate::shard::ShardSpec;

/// One expected shard and what was found of it.
#[derive(Debug, Clone)]
pub(crate) struct ShardState {
    /// Which shard.
    pub spec: ShardSpec,
    /// Its folder (`RUN/shards/I-of-N`).
    pub dir: PathBuf,
    /// Its manifest, when readable.
    pub manifest: Option<Manifest>,
    /// Why it is not complete; `None` when complete.
    pub problem: Option<String>,
}

impl ShardState {
    /// The shard finished (its manifest has `finished_at_unix`).
    pub fn complete(&self) -> bool {
        self.problem.is_none()
    }

    /// The shard's settings without its shard spec (what must agree across shards), when it has a manifest.
    pub(crate) fn common_settings(&self) -> Option<RunSettings> {
        let mut s = self.manifest.as_ref()?.settings.clone();
        s.shard = None;
        Some(s)
    }
}

/// The shard counts found in `RUN/shards/` (folder names `I-of-N`), sorted.
fn counts_found(run: &Path) -> Result<Vec<usize>, MergeError> {
    let dir = run.join(rundir::SHARDS);
    let entries = std::fs::read_dir(&dir).map_err(|source| MergeError::NoShards {
        run: run.to_path_buf(),
        reason: source.to_string(),
    })?;
    let mut counts = Vec::new();
    for e in entries {
        let e = e.map_err(|source| MergeError::Io {
            path: dir.clone(),
            source,
        })?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(n) = name
            .split_once("-of-")
            .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
            .and_then(|(i, n)| ShardSpec::new(i, n).ok())
        {
            counts.push(n.count);
        }
    }
    counts.sort_unstable();
    counts.dedup();
    Ok(counts)
}

/// Every shard `0..N` of the run, complete or not. Errors when there is no shard folder, or folders of
/// several counts (`2-of-3` beside `0-of-4`).
pub(crate) fn discover(run: &Path) -> Result<Vec<ShardState>, MergeError> {
    let counts = counts_found(run)?;
    let count = match counts.as_slice() {
        [n] => *n,
        [] => {
            return Err(MergeError::NoShards {
                run: run.to_path_buf(),
                reason: "no I-of-N folder".into(),
            })
        }
        many => {
            return Err(MergeError::MixedCounts {
                run: run.to_path_buf(),
                counts: many
                    .iter()
                    .map(|n| format!("N={n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    };
    Ok((0..count)
        .map(|index| state(run, ShardSpec { index, count }))
        .collect())
}

fn state(run: &Path, spec: ShardSpec) -> ShardState {
    let dir = RunDir::new(run).shard(spec).root().to_path_buf();
    let path = dir.join(rundir::MANIFEST);
    let (manifest, problem) = match std::fs::read_to_string(&path) {
        Err(_) if !dir.is_dir() => (None, Some("missing (no folder)".to_string())),
        Err(e) => (None, Some(format!("no readable manifest.json ({e})"))),
        Ok(text) => match serde_json::from_str::<Manifest>(&text) {
            Err(e) => (
                None,
                Some(format!("manifest.json is not a run manifest ({e})")),
            ),
            Ok(m) => {
                let problem = shard_problem(&m, spec);
                (Some(m), problem)
            }
        },
    };
    ShardState {
        spec,
        dir,
        manifest,
        problem,
    }
}

fn shard_problem(m: &Manifest, spec: ShardSpec) -> Option<String> {
    match &m.shard {
        None => Some("manifest.json has no shard entry (not made by eval --shard)".into()),
        Some(e) if (e.index, e.count) != (spec.index, spec.count) => Some(format!(
            "manifest.json says shard {}/{}, the folder {}",
            e.index,
            e.count,
            spec.dir_name()
        )),
        Some(_) if m.finished_at_unix.is_none() => {
            Some("not finished (still running, or stopped: run it again to resume)".into())
        }
        Some(_) => None,
    }
}

/// The trajectory ids a shard's manifest lists.
pub(crate) fn listed_trajectories(s: &ShardState) -> &[String] {
    s.manifest
        .as_ref()
        .and_then(|m| m.shard.as_ref())
        .map_or(&[], |e| e.trajectories.as_slice())
}

/// Lines `shard I-of-N vs 0-of-N: key: a → b` for every setting in which a shard with a manifest differs from
/// the first.
pub(crate) fn settings_differences(shards: &[ShardState]) -> Vec<String> {
    let with: Vec<(&ShardState, RunSettings)> = shards
        .iter()
        .filter_map(|s| Some((s, s.common_settings()?)))
        .collect();
    let Some((first, base)) = with.first() else {
        return Vec::new();
    };
    with.iter()
        .skip(1)
        .flat_map(|(s, settings)| {
            base.differences(settings).into_iter().map(move |d| {
                format!(
                    "shard {} vs {}: {d}",
                    s.spec.dir_name(),
                    first.spec.dir_name()
                )
            })
        })
        .collect()
}
