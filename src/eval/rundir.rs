//! The run folder: `manifest.json` (settings that must not change across a resume), crash-safe JSONL appends
//! (`predictions.jsonl`, `judgements.jsonl`), and the scan that tells a resumed run what is already done.
//!
//! A line is only ever appended whole and newline-terminated; a run killed mid-write leaves at most one partial
//! last line, which [`JsonlAppender::open`] cuts off before appending, so the step is simply redone.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::records::{JudgementLine, Manifest, PredictionLine, RunSettings};

/// Errors of the run folder.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The existing manifest is not JSON.
    #[error("{path}: not a valid manifest: {source}")]
    BadManifest {
        /// The manifest file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// The existing run was made with other settings.
    #[error(
        "{path} was made with other settings, so its results cannot be resumed with these:\n{diffs}\n\
         Use another --out folder, or the original settings."
    )]
    ManifestMismatch {
        /// The manifest file.
        path: PathBuf,
        /// One line per differing setting.
        diffs: String,
    },
    /// A weight file of the resumed run was replaced.
    #[error(transparent)]
    WeightsChanged(#[from] crate::fingerprint::FingerprintError),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunDirError + '_ {
    move |source| RunDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Create the run folder, or check that an existing one was made with the same `settings` (everything that
/// changes the predictions: model hash, dtype, prompts, pixel bounds, …). Returns the previous manifest when
/// resuming.
pub fn open_or_create(dir: &Path, settings: &RunSettings) -> Result<Option<Manifest>, RunDirError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let path = dir.join("manifest.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    let bad = |source| RunDirError::BadManifest {
        path: path.clone(),
        source,
    };
    let old: Manifest = serde_json::from_str(&text).map_err(bad)?;
    // A replaced weight file gets its own message, before the settings diff.
    crate::fingerprint::check_unchanged(&path, &old.settings.weights, &settings.weights)?;
    let as_value = |s: &RunSettings| serde_json::to_value(s).map_err(bad);
    let diffs = diff_settings(&as_value(&old.settings)?, &as_value(settings)?);
    if diffs.is_empty() {
        Ok(Some(old))
    } else {
        Err(RunDirError::ManifestMismatch {
            path,
            diffs: diffs.join("\n"),
        })
    }
}

/// Human-readable differences between two settings objects, one line per key (`key: old → new`).
pub fn diff_settings(old: &Value, new: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| o.get(*k) != n.get(*k))
        .map(|k| {
            let show =
                |v: Option<&Value>| v.map_or_else(|| "(absent)".to_string(), |v| v.to_string());
            format!("  {k}: {} → {}", show(o.get(k)), show(n.get(k)))
        })
        .collect()
}

/// Write `value` as pretty JSON atomically (temp file + rename), so a reader never sees half a file.
pub fn write_json_atomic(path: &Path, value: &impl Serialize) -> Result<(), RunDirError> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(value).expect("serialising a JSON value cannot fail");
    // Hook (issue 18): no `manifest.json.tmp` stays behind after a failed write.
    crate::safe_io::replace_atomic(path, &tmp, (text + "\n").as_bytes()).map_err(io_err(path))
}

/// Appends JSON lines to a file, flushing every line and fsyncing every `sync_every` lines.
pub struct JsonlAppender {
    path: PathBuf,
    file: File,
    unsynced: usize,
    sync_every: usize,
}

impl JsonlAppender {
    /// Open `path` for appending, first cutting off a partial last line left by a killed run.
    pub fn open(path: &Path, sync_every: usize) -> Result<Self, RunDirError> {
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(io_err(path))?;
        truncate_partial_line(&mut file).map_err(io_err(path))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            unsynced: 0,
            sync_every: sync_every.max(1),
        })
    }

    /// Append one record as one line.
    pub fn append(&mut self, record: &impl Serialize) -> Result<(), RunDirError> {
        let mut line = serde_json::to_vec(record).expect("serialising a record cannot fail");
        line.push(b'\n');
        self.file.write_all(&line).map_err(io_err(&self.path))?;
        self.unsynced += 1;
        if self.unsynced >= self.sync_every {
            self.sync()?;
        }
        Ok(())
    }

    /// Flush and fsync what was appended.
    pub fn sync(&mut self) -> Result<(), RunDirError> {
        self.file.flush().map_err(io_err(&self.path))?;
        self.file.sync_data().map_err(io_err(&self.path))?;
        self.unsynced = 0;
        Ok(())
    }
}

impl Drop for JsonlAppender {
    fn drop(&mut self) {
        let _ = self.sync();
    }
}

fn truncate_partial_line(file: &mut File) -> std::io::Result<()> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut reader = BufReader::new(&*file);
    reader.seek(SeekFrom::Start(0))?;
    let mut keep = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            keep += n as u64;
        }
    }
    if keep < len {
        tracing::warn!(
            "dropping a partial last line ({} bytes) left by an interrupted run",
            len - keep
        );
        file.set_len(keep)?;
    }
    Ok(())
}

/// The records of a JSONL file of `T` lines, in file order; lines that do not parse (a torn last line, hand
/// edits) are skipped. A missing file has none.
pub fn read_records<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, RunDirError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(path)(e)),
    };
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        if let Ok(r) = serde_json::from_str(&line.map_err(io_err(path))?) {
            out.push(r);
        }
    }
    Ok(out)
}

/// The keys (`"<trajectory>#<step>"`) of the steps of a predictions file that ran (no `error`).
pub fn completed_steps(path: &Path) -> Result<HashSet<String>, RunDirError> {
    Ok(read_records::<PredictionLine>(path)?
        .into_iter()
        .filter(|p| p.error.is_none())
        .map(|p| step_key(&p.trajectory, p.step))
        .collect())
}

/// The trajectory ids of a judgements file whose prompt ran (no `error`).
pub fn completed_trajectories(path: &Path) -> Result<HashSet<String>, RunDirError> {
    Ok(read_records::<JudgementLine>(path)?
        .into_iter()
        .filter(|j| j.error.is_none())
        .map(|j| j.trajectory)
        .collect())
}

/// The key of a step: `"<trajectory>#<step>"`.
pub fn step_key(trajectory: &str, step: usize) -> String {
    format!("{trajectory}#{step}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn partial_last_line_is_cut_and_redone() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("predictions.jsonl");
        std::fs::write(
            &p,
            "{\"trajectory\":\"a\",\"step\":0,\"response\":\"x\"}\n{\"trajectory\":\"a\",\"st",
        )
        .unwrap();
        assert_eq!(completed_steps(&p).unwrap().len(), 1);
        let mut w = JsonlAppender::open(&p, 1).unwrap();
        w.append(&json!({"trajectory": "a", "step": 1, "response": "y"}))
            .unwrap();
        drop(w);
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.ends_with("\"y\"}\n"));
        let keys = completed_steps(&p).unwrap();
        assert!(keys.contains("a#0") && keys.contains("a#1"));
    }

    #[test]
    fn errored_steps_are_not_completed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.jsonl");
        std::fs::write(
            &p,
            "{\"trajectory\":3,\"step\":0,\"response\":\"\",\"error\":\"bad png\"}\n",
        )
        .unwrap();
        assert!(completed_steps(&p).unwrap().is_empty());
    }

    #[test]
    fn settings_differences_name_each_setting() {
        let s1 = json!({"dtype": "f32", "max_new_tokens": 8});
        let s2 = json!({"dtype": "bf16", "max_new_tokens": 8});
        let diffs = diff_settings(&s1, &s2).join("\n");
        assert!(diffs.contains("dtype: \"f32\" → \"bf16\""), "{diffs}");
        assert!(!diffs.contains("max_new_tokens"), "{diffs}");
    }
}
