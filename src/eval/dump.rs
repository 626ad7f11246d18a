//! `eval --dump-prompts FILE`: every step prompt a run builds, one JSON line each (what it is, its chat messages
//! and its screenshots), for checking what a model was shown. Lines are written as prompts are built, on any
//! worker thread, so their order is not the benchmark's. Every line carries [`DUMP_KIND`] and a schema version, so
//! that an earlier dump is told apart from any other file before it is replaced.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::backend::ChatRequest;

/// The `kind` of every dump line.
pub(crate) const DUMP_KIND: &str = "step_prompt";
/// Version of a dump line's layout.
pub(crate) const DUMP_SCHEMA_VERSION: u32 = 1;

/// Refuse a dump path that would destroy something: a path inside one of `guarded` (the run's inputs and outputs:
/// its benchmark, run folder, model folders, each named by what it is), or an existing non-empty file that is not
/// an earlier dump. Paths are compared resolved (symbolic links and `..` followed), so another spelling of a
/// guarded path is caught too.
pub(crate) fn check_target(path: &Path, guarded: &[(&str, &Path)]) -> Result<()> {
    let target = resolved(path);
    for (what, folder) in guarded {
        if target.starts_with(resolved(folder)) {
            anyhow::bail!(
                "--dump-prompts {}: is inside the {what} {}, which the run reads or writes; write the dump \
                 elsewhere",
                path.display(),
                folder.display()
            );
        }
    }
    let Ok(meta) = std::fs::metadata(&target) else {
        return Ok(());
    };
    if meta.is_file() && meta.len() > 0 && !is_dump(&target) {
        anyhow::bail!(
            "--dump-prompts {}: exists and is not a prompt dump (its first line has no \"kind\": \"{DUMP_KIND}\"); \
             refusing to replace it (give a new file, or remove it first)",
            path.display()
        );
    }
    Ok(())
}

/// Whether the file's first line is a dump line.
fn is_dump(path: &Path) -> bool {
    use std::io::{BufRead, Read};
    let Ok(file) = File::open(path) else {
        return false;
    };
    let mut first = String::new();
    // A dump line is one JSON object; a line far longer than any prompt is no dump's.
    let mut reader = std::io::BufReader::new(file).take(64 << 20);
    if reader.read_line(&mut first).is_err() {
        return false;
    }
    serde_json::from_str::<Value>(&first)
        .ok()
        .is_some_and(|v| v["kind"] == DUMP_KIND)
}

/// `path` made absolute with its deepest existing ancestor canonicalized (links followed) and the rest appended.
fn resolved(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut rest = Vec::new();
    let mut base = absolute.as_path();
    loop {
        if let Ok(real) = base.canonicalize() {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                base = parent;
            }
            _ => return absolute,
        }
    }
}

/// An open prompt dump.
#[derive(Debug)]
pub struct PromptDump {
    path: PathBuf,
    file: Mutex<BufWriter<File>>,
}

impl PromptDump {
    /// Create (or empty) `path`.
    pub(crate) fn create(path: &Path) -> Result<Self> {
        let file =
            File::create(path).with_context(|| format!("--dump-prompts {}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(BufWriter::new(file)),
        })
    }

    /// Append one prompt: the fields of `what` (an object), then `messages` and `images`.
    pub fn write(&self, what: Value, request: &ChatRequest) -> Result<()> {
        let mut line = match what {
            Value::Object(m) => m,
            other => [("what".to_string(), other)].into_iter().collect(),
        };
        line.insert("kind".into(), DUMP_KIND.into());
        line.insert("schema_version".into(), DUMP_SCHEMA_VERSION.into());
        line.insert("messages".into(), request.messages.clone());
        let images: Vec<String> = request
            .images
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        line.insert("images".into(), images.into());
        let text = serde_json::to_string(&Value::Object(line))?;
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        writeln!(f, "{text}").with_context(|| format!("writing {}", self.path.display()))
    }

    /// Write out what is buffered.
    pub(crate) fn flush(&self) -> Result<()> {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f.flush()
            .with_context(|| format!("writing {}", self.path.display()))
    }
}
