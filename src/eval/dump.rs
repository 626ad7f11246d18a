//! `eval --dump-prompts FILE`: every step prompt a run builds, one JSON line each (what it is, its chat messages
//! and its screenshots), for checking what a model was shown. Lines are written as prompts are built, on any
//! worker thread, so their order is not the benchmark's.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::backend::ChatRequest;

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
