//! Who owns a run folder: an exclusive advisory lock held for the life of the process, and fresh default folder
//! names that two runs started at the same moment cannot share.
//!
//! The lock is `flock(LOCK_EX | LOCK_NB)` on `RUN/.lock` (through [`std::fs::File::try_lock`]), and the file holds
//! the holder's PID and host ([`LockHolder`], JSON) so that a second process can say who has the folder.
//!
//! Taking over a *stale* lock needs no special case: the kernel releases an `flock` when the last descriptor of
//! its open file is closed, which happens when the process exits or is killed (`kill -9`, an OOM kill, a crash).
//! A lock file left behind by a dead process is therefore unlocked, and the next run simply locks it and
//! overwrites the PID and host. There is no window in which two live processes both believe they hold the
//! folder, unlike PID-file schemes that check whether the recorded PID is alive and then write their own (the PID
//! may have been reused, and two checkers can both find it dead). The file is never deleted, so every process
//! locks the same inode. (On network file systems without `flock` support the call fails, and the error says so.)

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside a run folder.
pub(crate) const LOCK_FILE: &str = ".lock";

/// Errors of locking or creating a run folder.
#[derive(Debug, thiserror::Error)]
pub enum RunLockError {
    /// Another live process holds the folder.
    #[error(
        "{dir} is in use by another run (pid {pid} on host {host}, per {lock}); wait for it to finish, stop it, \
         or use another --out folder"
    )]
    Busy {
        /// The run folder.
        dir: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The holder's process id, as it wrote it (`?` when unreadable).
        pid: String,
        /// The holder's host name, as it wrote it (`?` when unreadable).
        host: String,
    },
    /// A file-system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunLockError + '_ {
    move |source| RunLockError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The content of `RUN/.lock`: who holds the folder (meaningful only while the lock is held).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LockHolder {
    /// Version of this record's layout.
    pub schema_version: u32,
    /// The holder's process id.
    pub pid: u32,
    /// The holder's host name.
    pub host: String,
}

/// An exclusive lock on a run folder, released when dropped (or when the process dies).
#[derive(Debug)]
pub(crate) struct RunLock {
    file: File,
}

impl RunLock {
    /// Create `dir` if needed and lock it, or fail at once with [`RunLockError::Busy`] naming the holder.
    pub(crate) fn acquire(dir: &Path) -> Result<Self, RunLockError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let path = dir.join(LOCK_FILE);
        // Not truncated on open: the holder's PID and host must stay readable for the error message.
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                // The holder may still be writing it: then its PID and host are shown as `?`.
                let holder = serde_json::from_str::<LockHolder>(&text).ok();
                return Err(RunLockError::Busy {
                    dir: dir.to_path_buf(),
                    pid: holder.as_ref().map_or("?".into(), |h| h.pid.to_string()),
                    host: holder.map_or("?".into(), |h| h.host),
                    lock: path,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io_err(&path)(e)),
        }
        let holder = LockHolder {
            schema_version: 1,
            pid: std::process::id(),
            host: host_name(),
        };
        let holder = serde_json::to_string(&holder).expect("a LockHolder serialises") + "\n";
        file.set_len(0).map_err(io_err(&path))?;
        file.seek(SeekFrom::Start(0)).map_err(io_err(&path))?;
        file.write_all(holder.as_bytes()).map_err(io_err(&path))?;
        file.flush().map_err(io_err(&path))?;
        Ok(Self { file })
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // The PID is left in the file on purpose: it is only meaningful while the lock is held, and removing the
        // file would let a third process lock a fresh inode while a second still waits on the old one.
        let _ = self.file.unlock();
    }
}

/// This machine's host name (`gethostname(2)` on Unix, else `unknown`).
pub(crate) fn host_name() -> String {
    system_host_name()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(unix)]
fn system_host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is passed; the result is NUL-terminated or
    // truncated, and only the bytes before the first NUL are read.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).trim().to_string())
}

#[cfg(not(unix))]
fn system_host_name() -> Option<String> {
    None
}

/// Create a fresh run folder `PARENT/<UTC yyyymmddThhmmss.mmmZ>-<4 hex>-<model name>` and return it.
///
/// The folder is made with `create_dir` (not `create_dir_all`), which fails when the name exists, so two runs
/// started in the same millisecond that also drew the same suffix cannot share a folder: the loser draws again.
pub(crate) fn create_fresh_run_dir(parent: &Path, model: &str) -> Result<PathBuf, RunLockError> {
    std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    let name = safe_model_name(model);
    for _ in 0..1000 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let suffix = random_u16();
        let dir = parent.join(format!("{}-{suffix:04x}-{name}", utc_millis(now)));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(&dir)(e)),
        }
    }
    Err(io_err(parent)(std::io::Error::other(
        "could not find a free run folder name after 1000 tries",
    )))
}

/// The last path component of a model folder or hub id, with unusual characters replaced by `_`.
fn safe_model_name(model: &str) -> String {
    let last = model.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    let name: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.chars().all(|c| c == '.') {
        "model".into()
    } else {
        name
    }
}

/// 16 random bits from the standard library's per-process random hash keys, the PID and the clock.
fn random_u16() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish() as u16
}

/// `yyyymmddThhmmss.mmmZ` for a time since the Unix epoch (UTC, proleptic Gregorian calendar).
pub(crate) fn utc_millis(since_epoch: std::time::Duration) -> String {
    let secs = since_epoch.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since_epoch.subsec_millis()
    )
}

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn utc_names_sort_by_time() {
        assert_eq!(utc_millis(Duration::from_millis(0)), "19700101T000000.000Z");
        // 2024-02-29 23:59:59.999 UTC (a leap day).
        assert_eq!(
            utc_millis(Duration::from_millis(1_709_251_199_999)),
            "20240229T235959.999Z"
        );
    }

    #[test]
    fn a_second_lock_on_the_same_folder_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = RunLock::acquire(dir.path()).unwrap();
        let err = RunLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        assert!(err.contains(&host_name()), "{err}");
        drop(held);
        RunLock::acquire(dir.path()).expect("free again once released");
    }

    #[test]
    fn a_stale_lock_file_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let stale =
            r#"{"schema_version":1,"pid":999999999,"host":"gone-and-longer-than-this-one"}"#;
        std::fs::write(dir.path().join(LOCK_FILE), stale).unwrap();
        let _lock = RunLock::acquire(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        let holder: LockHolder = serde_json::from_str(&text).unwrap();
        assert_eq!(holder.pid, std::process::id());
        assert_eq!(holder.host, host_name());
    }

    #[test]
    fn fresh_run_dirs_never_collide() {
        let dir = tempfile::tempdir().unwrap();
        let made: std::collections::HashSet<PathBuf> = (0..200)
            .map(|_| create_fresh_run_dir(dir.path(), "org/Qwen2.5-VL 3B/").unwrap())
            .collect();
        assert_eq!(made.len(), 200);
        let one = made.iter().next().unwrap().to_string_lossy().into_owned();
        assert!(one.ends_with("-Qwen2.5-VL_3B"), "{one}");
    }
}
