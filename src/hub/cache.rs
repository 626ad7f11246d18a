//! One repository's folder in the Hugging Face cache, laid out as Python's `huggingface_hub` lays it out
//! (`huggingface/hub-docs docs/hub/local-cache.md`), so either program can fill the cache for the other.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{io_err, HubError};
use crate::interrupt::Cancel;

/// `<cache>/<models|datasets>--org--name/` and its lock folder `<cache>/.locks/<same name>/`.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheRepo {
    root: PathBuf,
    locks: PathBuf,
}

impl CacheRepo {
    /// The folder of repo `folder` (`models--org--name`) in cache `cache_dir`.
    pub fn new(cache_dir: &Path, folder: &str) -> Self {
        Self {
            root: cache_dir.join(folder),
            locks: cache_dir.join(".locks").join(folder),
        }
    }

    /// The repo's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The commit `refs/<revision>` names, if the cache has it.
    pub(crate) fn read_ref(&self, revision: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.root.join("refs").join(revision)).ok()?;
        let commit = text.trim();
        super::is_commit(commit).then(|| commit.to_string())
    }

    /// Point `refs/<revision>` at `commit`.
    pub(crate) fn write_ref(&self, revision: &str, commit: &str) -> Result<(), HubError> {
        let path = self.root.join("refs").join(revision);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        crate::safe_io::replace_atomic(&path, &tmp, commit.as_bytes()).map_err(io_err(&path))
    }

    /// `snapshots/<commit>/`.
    pub(crate) fn snapshot_dir(&self, commit: &str) -> PathBuf {
        self.root.join("snapshots").join(commit)
    }

    /// `blobs/<etag>`.
    pub fn blob(&self, etag: &str) -> PathBuf {
        self.root.join("blobs").join(etag)
    }

    fn no_exist(&self, commit: &str, path: &str) -> PathBuf {
        self.root.join(".no_exist").join(commit).join(path)
    }

    /// What the cache knows of `path` at `commit`: `Some(Some(file))` when the snapshot has it, `Some(None)` when
    /// it is marked absent, `None` when the cache cannot tell.
    pub(crate) fn lookup(&self, commit: &str, path: &str) -> Option<Option<PathBuf>> {
        let file = self.snapshot_dir(commit).join(path);
        if file.is_file() {
            return Some(Some(file));
        }
        self.no_exist(commit, path).exists().then_some(None)
    }

    /// Mark `path` as absent from `commit` (an empty file under `.no_exist/`, as Python's client does).
    pub(crate) fn mark_absent(&self, commit: &str, path: &str) -> Result<(), HubError> {
        let mark = self.no_exist(commit, path);
        if let Some(parent) = mark.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        File::create(&mark).map(drop).map_err(io_err(&mark))
    }

    /// Make `snapshots/<commit>/<path>` point at `blobs/<etag>` (a relative link; a copy where links fail).
    pub fn link(&self, commit: &str, path: &str, etag: &str) -> Result<PathBuf, HubError> {
        let file = self.snapshot_dir(commit).join(path);
        let parent = file.parent().expect("a snapshot file has a folder");
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        // A link left dangling (its blob deleted) or an older copy is replaced.
        if file.symlink_metadata().is_ok() {
            std::fs::remove_file(&file).map_err(io_err(&file))?;
        }
        let blob = self.blob(etag);
        let depth = path.split('/').count() + 1;
        let target = Path::new(&"../".repeat(depth)).join("blobs").join(etag);
        #[cfg(unix)]
        let linked = std::os::unix::fs::symlink(&target, &file).is_ok();
        #[cfg(not(unix))]
        let linked = false;
        if !linked {
            std::fs::copy(&blob, &file).map_err(io_err(&file))?;
        }
        Ok(file)
    }

    /// Hold the download lock of blob `etag` (`.locks/<repo>/<etag>.lock`, the lock file Python's client takes),
    /// waiting while another process holds it; `None` when `cancel` is set while waiting.
    pub(crate) fn lock_blob(&self, etag: &str, cancel: &Cancel) -> Result<Option<File>, HubError> {
        std::fs::create_dir_all(&self.locks).map_err(io_err(&self.locks))?;
        let path = self.locks.join(format!("{etag}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        let mut waited = false;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Some(file)),
                Err(std::fs::TryLockError::WouldBlock) => {
                    if !waited {
                        tracing::info!("waiting for another download of {}", path.display());
                        waited = true;
                    }
                    if cancel.is_cancelled() {
                        return Ok(None);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io_err(&path)(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_relative_and_lookups_see_marks() {
        let dir = tempfile::tempdir().unwrap();
        let repo = CacheRepo::new(dir.path(), "datasets--o--n");
        let commit = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(repo.read_ref("main"), None);
        repo.write_ref("main", commit).unwrap();
        assert_eq!(repo.read_ref("main").as_deref(), Some(commit));
        std::fs::create_dir_all(repo.blob("e").parent().unwrap()).unwrap();
        std::fs::write(repo.blob("e"), b"png").unwrap();
        let f = repo.link(commit, "images/a.png", "e").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"png");
        assert_eq!(repo.lookup(commit, "images/a.png"), Some(Some(f)));
        assert_eq!(repo.lookup(commit, "b.json"), None);
        repo.mark_absent(commit, "b.json").unwrap();
        assert_eq!(repo.lookup(commit, "b.json"), Some(None));
        let lock = repo.lock_blob("e", &Cancel::new()).unwrap();
        assert!(lock.is_some());
    }
}
