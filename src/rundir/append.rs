//! Crash-safe appends to a run's JSONL files: each record is one whole, newline-terminated line, flushed at once
//! and fsync'd in small groups; a partial last line left by a killed run is cut off when the file is opened again.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{io_err, RunDirError};

/// Appends JSON lines to a file, flushing every line and fsyncing every `sync_every` lines.
pub(crate) struct JsonlAppender {
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
    pub(crate) fn append(&mut self, record: &impl Serialize) -> Result<(), RunDirError> {
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
