//! The output folder of an import. Everything is written into a hidden staging folder beside `--out`
//! (`.NAME.import-PID`), `benchmark.json` last, and the staging folder is renamed to `--out` at the end, so a killed
//! import never leaves a folder at `--out` that looks complete. `--out` must be absent, empty, or an earlier import
//! of the same source (same format and source path, nothing but what an import writes), which is then replaced.

use std::path::{Path, PathBuf};

use super::episode::IMAGES_DIR;
use super::{io_err, ImportError};
use crate::dataset::{BenchmarkInfo, SourceInfo, DATA_FILE, INFO_FILE};

/// The output folder being prepared.
pub(crate) struct Target {
    out: PathBuf,
    staging: PathBuf,
    /// `--out` holds an earlier import of the same source, replaced at commit.
    replace: bool,
    committed: bool,
}

fn out_err(out: &Path, message: String) -> ImportError {
    ImportError::Out {
        path: out.to_path_buf(),
        message,
    }
}

/// Why `out` may not be replaced, or `Ok(true)` when it holds an earlier import of `source` (`Ok(false)`: empty).
fn check_existing(out: &Path, source: &SourceInfo) -> Result<bool, ImportError> {
    if !out.is_dir() {
        return Err(out_err(out, "exists and is not a folder".into()));
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(out).map_err(io_err(out))? {
        let entry = entry.map_err(io_err(out))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    if names.is_empty() {
        return Ok(false);
    }
    let info = BenchmarkInfo::read(out).map_err(|e| out_err(out, e.to_string()))?;
    let Some(earlier) = info.and_then(|i| i.source) else {
        return Err(out_err(
            out,
            format!(
                "is not empty and holds no {INFO_FILE} of an import; refusing to write into it (choose a new or \
                 empty folder)"
            ),
        ));
    };
    if earlier.format != source.format || earlier.path != source.path {
        return Err(out_err(
            out,
            format!(
                "holds an import of {} {} (see its {INFO_FILE}), not of {} {}; refusing to replace it",
                earlier.format,
                earlier.path.display(),
                source.format,
                source.path.display()
            ),
        ));
    }
    let mut foreign: Vec<&String> = names
        .iter()
        .filter(|n| ![DATA_FILE, INFO_FILE, IMAGES_DIR].contains(&n.as_str()))
        .collect();
    foreign.sort();
    if !foreign.is_empty() {
        let list: Vec<&str> = foreign.iter().map(|s| s.as_str()).collect();
        return Err(out_err(
            out,
            format!(
                "holds an earlier import of the same source but also {}, which an import does not write; \
                 refusing to replace it",
                list.join(", ")
            ),
        ));
    }
    Ok(true)
}

impl Target {
    /// Check `out` and create the staging folder beside it.
    pub fn prepare(out: &Path, source: &SourceInfo) -> Result<Target, ImportError> {
        let replace = if out.exists() {
            check_existing(out, source)?
        } else {
            false
        };
        let name = out
            .file_name()
            .ok_or_else(|| out_err(out, "has no folder name".into()))?
            .to_string_lossy()
            .into_owned();
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(io_err(&parent))?;
        warn_leftovers(&parent, &name);
        let staging = parent.join(format!(".{name}.import-{}", std::process::id()));
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(io_err(&staging))?;
        }
        std::fs::create_dir(&staging).map_err(io_err(&staging))?;
        Ok(Target {
            out: out.to_path_buf(),
            staging,
            replace,
            committed: false,
        })
    }

    /// The folder the import writes into.
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// Write `benchmark.json` (last), then move the staging folder to `--out`. Returns whether an earlier import
    /// was replaced.
    pub fn commit(mut self, info: &BenchmarkInfo) -> Result<bool, ImportError> {
        let info_path = self.staging.join(INFO_FILE);
        let tmp = self.staging.join(format!("{INFO_FILE}.tmp"));
        crate::safe_io::replace_atomic(&info_path, &tmp, info.to_json().as_bytes())
            .map_err(io_err(&info_path))?;
        if self.replace {
            let old = self.staging.with_file_name(
                self.staging
                    .file_name()
                    .map(|n| n.to_string_lossy().replace(".import-", ".replaced-"))
                    .unwrap_or_default(),
            );
            std::fs::rename(&self.out, &old).map_err(io_err(&self.out))?;
            std::fs::rename(&self.staging, &self.out).map_err(io_err(&self.out))?;
            self.committed = true;
            std::fs::remove_dir_all(&old).map_err(io_err(&old))?;
        } else {
            if self.out.is_dir() {
                // Empty (checked in `prepare`); remove_dir refuses anything else.
                std::fs::remove_dir(&self.out).map_err(io_err(&self.out))?;
            }
            std::fs::rename(&self.staging, &self.out).map_err(io_err(&self.out))?;
            self.committed = true;
        }
        Ok(self.replace)
    }
}

impl Drop for Target {
    /// A failed or interrupted import leaves nothing behind (a killed one leaves its hidden staging folder).
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

/// Staging folders of earlier imports that were killed: named, not removed (another import may be running).
fn warn_leftovers(parent: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let prefix = format!(".{name}.import-");
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&prefix) {
            tracing::warn!(
                "{} is left from an interrupted import of {name}; remove it when no import is running",
                e.path().display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(path: &str) -> SourceInfo {
        SourceInfo {
            format: "aitz".into(),
            path: path.into(),
            split: None,
            level: None,
            limit: None,
        }
    }

    fn info(path: &str) -> BenchmarkInfo {
        BenchmarkInfo {
            schema_version: 1,
            source: Some(source(path)),
            rules: None,
            counts: None,
            program_version: None,
        }
    }

    fn commit_into(out: &Path, path: &str) -> Result<bool, ImportError> {
        let t = Target::prepare(out, &source(path))?;
        std::fs::write(t.staging().join(DATA_FILE), "{}\n").unwrap();
        t.commit(&info(path))
    }

    #[test]
    fn new_empty_and_same_source_are_written_others_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("bench");
        assert!(!commit_into(&out, "/src/a").unwrap());
        assert!(out.join(INFO_FILE).is_file());
        // The same source again: replaced.
        assert!(commit_into(&out, "/src/a").unwrap());
        // Another source: refused, folder untouched.
        let e = commit_into(&out, "/src/b").unwrap_err().to_string();
        assert!(e.contains("holds an import of aitz /src/a"), "{e}");
        // A folder with something else in it: refused.
        std::fs::write(out.join("notes.txt"), "mine").unwrap();
        let e = commit_into(&out, "/src/a").unwrap_err().to_string();
        assert!(e.contains("also notes.txt"), "{e}");
        // A non-empty folder that is no import: refused.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join(DATA_FILE), "x").unwrap();
        let e = commit_into(&other, "/src/a").unwrap_err().to_string();
        assert!(e.contains("holds no benchmark.json"), "{e}");
        // An empty folder: written.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(!commit_into(&empty, "/src/a").unwrap());
        // No staging folder is left anywhere.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn an_abandoned_import_leaves_no_output_folder() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("bench");
        let t = Target::prepare(&out, &source("/src/a")).unwrap();
        std::fs::write(t.staging().join(DATA_FILE), "{}\n").unwrap();
        drop(t);
        assert!(!out.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
