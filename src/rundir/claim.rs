//! Taking a folder for a run: a path that names a file or holds a benchmark is refused, a missing folder is
//! created, and the folder is locked for the life of the claim. A folder the claim created is removed again when
//! the run writes nothing into it (a failed start: bad data, a model that does not load), so failures leave no
//! litter.

use std::path::{Path, PathBuf};

use super::{io_err, RunDir, RunDirError, RunLock, LOCK_FILE};
use crate::dataset::DATA_FILE;

/// A run folder held by this process (see the module documentation).
#[derive(Debug)]
pub struct ClaimedRun {
    dir: RunDir,
    lock: Option<RunLock>,
    /// The folders this claim created, deepest first (removed on drop while they hold nothing else).
    created: Vec<PathBuf>,
}

impl ClaimedRun {
    /// The folder.
    pub fn dir(&self) -> &RunDir {
        &self.dir
    }
}

impl RunDir {
    /// Take this folder for a run (see the module documentation).
    pub fn claim(&self) -> Result<ClaimedRun, RunDirError> {
        let root = self.root();
        if root.exists() && !root.is_dir() {
            return Err(not_a_run_folder(root, "is a file, not a folder"));
        }
        if root.join(DATA_FILE).exists() {
            return Err(not_a_run_folder(
                root,
                "holds a benchmark (data.jsonl); a run folder must be another folder",
            ));
        }
        let created = missing_ancestors(root);
        std::fs::create_dir_all(root).map_err(io_err(root))?;
        let mut claim = ClaimedRun {
            dir: self.clone(),
            lock: None,
            created,
        };
        claim.lock = Some(RunLock::acquire(root)?);
        Ok(claim)
    }

    /// Create a fresh folder `PARENT/<UTC time>-<random>-<model name>` and take it; it is removed again when the
    /// run writes nothing into it.
    pub(crate) fn claim_fresh(parent: &Path, model: &str) -> Result<ClaimedRun, RunDirError> {
        let mut created = missing_ancestors(parent);
        let root = super::create_fresh_run_dir(parent, model)?;
        created.insert(0, root.clone());
        let mut claim = ClaimedRun {
            dir: RunDir::new(root),
            lock: None,
            created,
        };
        claim.lock = Some(RunLock::acquire(claim.dir.root())?);
        Ok(claim)
    }
}

fn not_a_run_folder(path: &Path, reason: &str) -> RunDirError {
    RunDirError::NotARunFolder {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// `path` and those of its ancestors that do not exist yet, deepest first.
fn missing_ancestors(path: &Path) -> Vec<PathBuf> {
    path.ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
        .map(Path::to_path_buf)
        .collect()
}

impl Drop for ClaimedRun {
    fn drop(&mut self) {
        let Some(first) = self.created.first() else {
            return;
        };
        let only_the_lock = std::fs::read_dir(first).is_ok_and(|entries| {
            entries
                .filter_map(Result::ok)
                .all(|e| e.file_name() == LOCK_FILE)
        });
        if !only_the_lock {
            return;
        }
        // Unlocked and removed: nothing of this run exists, so no other process can be waiting on it.
        drop(self.lock.take());
        let _ = std::fs::remove_file(first.join(LOCK_FILE));
        for dir in &self.created {
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }
}
