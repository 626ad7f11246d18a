//! The calibration of a CBLAS library against the built-in GEMM, measured once per machine and kept in a small
//! JSON file, so that every later load (a resume, another shard, a test process) takes the same decision instead
//! of following the timing noise of its own short measurement: on one machine, a run's GEMM library — and so
//! the last bits of its results — does not change from one start to the next.
//!
//! The file holds one [`Calibration`] for one [`CalibrationKey`] (this CPU, its thread count, the library, its
//! kernels, the built-in GEMM it was timed against and this program's version); any other key is measured again and replaces it. Measuring and writing
//! happen under an exclusive lock on a `.lock` file beside it, so processes started together measure once and
//! agree. A file that cannot be read, locked or written is reported in the log and the rates measured now are
//! used.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Version of the calibration file's format.
pub(crate) const CALIBRATION_SCHEMA_VERSION: u32 = 1;

/// What a calibration was measured on: a different value means a different measurement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalibrationKey {
    /// The CPU (`model name`, family, model and stepping of `/proc/cpuinfo`).
    pub cpu: String,
    /// Threads the products ran on.
    pub threads: usize,
    /// The library (its description).
    pub library: String,
    /// The kernels OpenBLAS picked, when it says.
    pub corename: Option<String>,
    /// This program's version (and `debug` for a debug build, whose measurements a release build must not reuse).
    pub program: String,
    /// The built-in GEMM the library was timed against ([`super::BuiltinGemm::describe`]).
    #[serde(default)]
    pub builtin: String,
}

impl CalibrationKey {
    /// The key of a library on this machine, timed against the built-in GEMM `builtin`.
    pub fn here(library: &str, corename: Option<&str>, builtin: &str) -> Self {
        Self {
            cpu: cpu_name(),
            threads: rayon::current_num_threads(),
            library: library.to_string(),
            corename: corename.map(str::to_string),
            program: if cfg!(debug_assertions) {
                concat!(env!("CARGO_PKG_VERSION"), " debug").to_string()
            } else {
                env!("CARGO_PKG_VERSION").to_string()
            },
            builtin: builtin.to_string(),
        }
    }
}

/// The calibration file: the rates of one key (`R`: a library's against the built-in GEMM's, [`LibraryRates`], or
/// another measurement's kept the same way).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration<R = LibraryRates> {
    /// Version of this format.
    pub schema_version: u32,
    /// What was measured.
    pub key: CalibrationKey,
    /// The rates measured.
    #[serde(flatten)]
    pub rates: R,
    /// When (Unix seconds).
    pub measured_at_unix: u64,
}

/// A library's rate against the built-in GEMM's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LibraryRates {
    /// GFLOP/s of the calibration products through the library.
    pub blas_gflops: f64,
    /// GFLOP/s of the same products through the built-in path.
    pub builtin_gflops: f64,
}

/// The rates `(library, built-in)` in GFLOP/s for `key` and where they come from (for the log and the manifest):
/// read from the file at `path` when it holds this key, else measured by `measure` now (and written there).
pub fn rates(
    path: &Path,
    key: &CalibrationKey,
    measure: impl FnOnce() -> candle_core::Result<(f64, f64)>,
) -> candle_core::Result<((f64, f64), String)> {
    let measure = || {
        measure().map(|(blas_gflops, builtin_gflops)| LibraryRates {
            blas_gflops,
            builtin_gflops,
        })
    };
    let (r, source) = kept_in_file(path, key, measure)?;
    Ok(((r.blas_gflops, r.builtin_gflops), source))
}

/// The rates `R` of `key` and where they come from: read from the file at `path` when it holds this key, else
/// measured by `measure` now and written there (under the file's lock, so processes started together measure
/// once); a file that cannot be locked or written is reported and the rates measured now are used. Fails only
/// where `measure` does, with its error.
pub(crate) fn kept_in_file<R: Serialize + serde::de::DeserializeOwned, E>(
    path: &Path,
    key: &CalibrationKey,
    measure: impl FnOnce() -> Result<R, E>,
) -> Result<(R, String), E> {
    let lock = match lock(path) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(
                "CPU GEMM calibration file {}: {e}; measuring at load",
                path.display()
            );
            return Ok((
                measure()?,
                format!("measured at load ({} unusable)", path.display()),
            ));
        }
    };
    if let Some(c) = read::<R>(path).filter(|c| &c.key == key) {
        let source = format!("measured once on this machine, kept in {}", path.display());
        return Ok((c.rates, source));
    }
    let record = Calibration {
        schema_version: CALIBRATION_SCHEMA_VERSION,
        key: key.clone(),
        rates: measure()?,
        measured_at_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let source = match write(path, &record) {
        Ok(()) => format!("measured now, kept in {}", path.display()),
        Err(e) => {
            tracing::warn!("CPU GEMM calibration file {}: {e}", path.display());
            format!("measured at load ({} not written)", path.display())
        }
    };
    drop(lock);
    Ok((record.rates, source))
}

/// The rates `(library, built-in)` for `key` and where they come from: read from or measured into the file at
/// `file` where there is one ([`rates`]), else from this process's first measurement of the same key (a
/// measurement, not a setting: kept so that two model loads in one process agree), else measured by `measure` now.
pub(crate) fn kept_rates(
    file: Option<&Path>,
    key: &CalibrationKey,
    measure: impl FnOnce() -> candle_core::Result<(f64, f64)>,
) -> candle_core::Result<((f64, f64), String)> {
    static IN_PROCESS: std::sync::Mutex<Vec<(CalibrationKey, (f64, f64))>> =
        std::sync::Mutex::new(Vec::new());
    if let Some(path) = file {
        return rates(path, key, measure);
    }
    let mut seen = IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, r)) = seen.iter().find(|(k, _)| k == key) {
        return Ok((*r, "measured earlier in this process".into()));
    }
    let r = measure()?;
    seen.push((key.clone(), r));
    Ok((r, "measured at load".into()))
}

/// Seconds one call of `f` takes (at least a nanosecond).
pub(crate) fn seconds(f: &mut dyn FnMut() -> candle_core::Result<()>) -> candle_core::Result<f64> {
    let t = std::time::Instant::now();
    f()?;
    Ok(t.elapsed().as_secs_f64().max(1e-9))
}

/// The file's calibration, when it is one of this format (anything else is measured again and replaced).
fn read<R: serde::de::DeserializeOwned>(path: &Path) -> Option<Calibration<R>> {
    let text = std::fs::read_to_string(path).ok()?;
    match serde_json::from_str::<Calibration<R>>(&text) {
        Ok(c) if c.schema_version == CALIBRATION_SCHEMA_VERSION => Some(c),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(
                "{}: not a calibration ({e}); measuring again",
                path.display()
            );
            None
        }
    }
}

/// An exclusive lock on `path` + `.lock` (its folder created), held until the file is dropped.
fn lock(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(path))?;
    file.lock()?;
    Ok(file)
}

fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    path.with_file_name(name)
}

/// Write `c` atomically (a temporary file, then a rename).
fn write<R: Serialize>(path: &Path, c: &Calibration<R>) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(c).expect("a calibration serialises");
    let tmp = path.with_extension("json.tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The value of the first `name : value` line of `/proc/cpuinfo`'s text `info`, trimmed.
pub fn cpuinfo_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The CPU's name on Linux (`model name`, family, model, stepping), else the architecture.
fn cpu_name() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| cpuinfo_field(&info, name).unwrap_or_default();
    let name = field("model name");
    if name.is_empty() {
        return std::env::consts::ARCH.to_string();
    }
    let (family, model, stepping) = (field("cpu family"), field("model"), field("stepping"));
    format!("{name} (family {family}, model {model}, stepping {stepping})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(library: &str) -> CalibrationKey {
        CalibrationKey::here(library, Some("Haswell"), "gemm crate (candle)")
    }

    #[test]
    fn measured_once_then_read_back_and_measured_again_for_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/cpu-gemm.json");
        let ((b, g), src) = rates(&path, &key("a"), || Ok((10.0, 20.0))).unwrap();
        assert_eq!((b, g), (10.0, 20.0));
        assert!(src.contains("measured now"), "{src}");
        let (again, src) = rates(&path, &key("a"), || panic!("not measured twice")).unwrap();
        assert_eq!(again, (10.0, 20.0));
        assert!(src.contains("measured once on this machine"), "{src}");
        let (other, _) = rates(&path, &key("b"), || Ok((30.0, 5.0))).unwrap();
        assert_eq!(other, (30.0, 5.0), "another library is measured");
        let kept: Calibration =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(kept.key, key("b"));
        assert!(kept.key.cpu.len() > 1);
    }

    #[test]
    fn a_damaged_or_unusable_file_is_measured_around() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu-gemm.json");
        std::fs::write(&path, "{not json").unwrap();
        let (r, src) = rates(&path, &key("a"), || Ok((1.0, 2.0))).unwrap();
        assert_eq!(r, (1.0, 2.0));
        assert!(src.contains("measured now"), "{src}");
        assert!(
            read::<LibraryRates>(&path).is_some(),
            "replaced by a good record"
        );
        let blocked = dir.path().join("file");
        std::fs::write(&blocked, "").unwrap();
        let (r, src) = rates(&blocked.join("x.json"), &key("a"), || Ok((3.0, 4.0))).unwrap();
        assert_eq!(r, (3.0, 4.0));
        assert!(src.contains("unusable"), "{src}");
    }
}
