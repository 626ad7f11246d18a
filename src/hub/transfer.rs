//! One file from the Hub into the cache: its metadata, then its bytes into `blobs/<etag>.incomplete` (resumed from
//! what is already there), checked against its size and, for LFS/Xet files, its SHA-256, then renamed to the blob
//! and linked into the snapshot. Failures that may pass are retried with a growing pause; a stop request ends the
//! wait at once ([`run_cancellable`] runs the blocking work on a helper thread and polls the token).

use std::collections::HashSet;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use sha2::Digest;

use super::http::{self, bad, Agents, Failure, Final, Metadata};
use super::{CacheRepo, HubError, HubRepo, HubSettings};
use crate::interrupt::Cancel;
use crate::retry::GaveUp;

/// What every transfer of one hub shares: its agents, settings and stop token.
pub(crate) struct Net {
    agents: Agents,
    settings: HubSettings,
    cancel: Cancel,
}

impl Net {
    /// The agents for `settings`.
    pub fn new(settings: &HubSettings, cancel: &Cancel) -> Result<Arc<Self>, HubError> {
        let agents = Agents::new(settings).map_err(HubError::Invalid)?;
        Ok(Arc::new(Self {
            agents,
            settings: settings.clone(),
            cancel: cancel.clone(),
        }))
    }
}

/// One file to fetch, with everything the helper thread needs.
#[derive(Debug, Clone)]
pub struct Job {
    repo: String,
    file: String,
    url: String,
    cache: CacheRepo,
}

/// A fetched file: the commit it belongs to, and its place in the snapshot.
#[derive(Debug)]
pub struct Fetched {
    /// The commit the Hub named.
    pub commit: String,
    /// The snapshot file.
    pub path: PathBuf,
}

impl Job {
    /// File `path` of `repo`, at the repo's commit when known.
    pub fn new(repo: &HubRepo, path: &str) -> Self {
        Self {
            repo: repo.id().to_string(),
            file: path.to_string(),
            url: repo.file_url(path),
            cache: repo.cache().clone(),
        }
    }

    /// The repo-information call for the revision of `repo`.
    pub fn revision_info(repo: &HubRepo) -> Self {
        Self {
            repo: repo.id().to_string(),
            file: format!("the file list of revision {}", repo.revision()),
            url: repo.api_url(),
            cache: repo.cache().clone(),
        }
    }

    /// The file this job fetches.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The error for HTTP `status` (with the Hub's `X-Error-Code`, if any) about this file.
    pub fn missing(&self, endpoint: &str, status: u16, code: Option<&str>) -> HubError {
        let (what, hint) = match (status, code) {
            (404, Some("RepoNotFound")) => ("no such repo", MISSING_HINT),
            (404, Some("RevisionNotFound")) => ("no such revision", MISSING_HINT),
            (404, _) => ("no such repo or file", MISSING_HINT),
            (401 | 403, Some("GatedRepo")) => ("a gated repo", AUTH_HINT),
            (401 | 403, _) => ("not authorized", AUTH_HINT),
            _ => ("refused", ""),
        };
        HubError::Missing {
            repo: self.repo.clone(),
            file: self.file.clone(),
            endpoint: endpoint.to_string(),
            status,
            what,
            hint,
        }
    }

    fn bad(&self, net: &Net, reason: String) -> HubError {
        HubError::BadAnswer {
            repo: self.repo.clone(),
            file: self.file.clone(),
            endpoint: net.settings.endpoint.clone(),
            reason,
        }
    }

    fn cancelled(&self) -> HubError {
        HubError::Cancelled {
            repo: self.repo.clone(),
            file: self.file.clone(),
        }
    }
}

const MISSING_HINT: &str = "; check the id and the revision, and HF_ENDPOINT";
const AUTH_HINT: &str =
    "; a private or gated repo needs HF_TOKEN set to a token with access (after accepting its terms on the Hub)";

/// Run `f` on a helper thread and wait for it, returning [`HubError::Cancelled`] as soon as `cancel` is set
/// (the helper notices the token between reads and stops by itself).
pub(crate) fn run_cancellable<T: Send + 'static>(
    cancel: &Cancel,
    what: (&str, &str),
    f: impl FnOnce() -> Result<T, HubError> + Send + 'static,
) -> Result<T, HubError> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("hub-transfer".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| HubError::Invalid(format!("cannot start a download thread: {e}")))?;
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(r) => return r,
            Err(mpsc::RecvTimeoutError::Timeout) if cancel.is_cancelled() => {
                return Err(HubError::Cancelled {
                    repo: what.0.to_string(),
                    file: what.1.to_string(),
                })
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(HubError::Invalid(format!(
                    "the download of {} of {} stopped unexpectedly",
                    what.1, what.0
                )))
            }
        }
    }
}

/// The longest time one transfer waits out busy answers (429) of the Hub before it gives up; a 429 costs no retry.
const BUSY_BUDGET: Duration = Duration::from_secs(300);

/// Fetch `job` with retries into the snapshot.
pub fn fetch(net: &Net, job: &Job) -> Result<Fetched, HubError> {
    retrying(net, job, attempt_once)
}

/// The commit a revision names and the repo's file list (`GET /api/{models|datasets}/{id}/revision/{rev}`, the
/// Hub's repo-info call: `sha` and `siblings[].rfilename`), with retries.
pub fn revision_info(net: &Net, job: &Job) -> Result<(String, HashSet<String>), HubError> {
    retrying(net, job, |net, job| {
        let mut req = net.agents.follow.get(&job.url);
        if let Some(t) = &net.settings.token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let resp = req
            .call()
            .map_err(|e| http::classify(e, net.settings.timeout))?;
        let text = resp
            .into_string()
            .map_err(|e| Failure::transient(format!("reading the answer: {e}")))?;
        let info: RevisionInfo = serde_json::from_str(&text).map_err(|e| {
            bad(format!(
                "the repo information is not what the Hub sends: {e}"
            ))
        })?;
        if !super::is_commit(&info.sha) {
            return Err(bad(format!("{:?} is not a commit id", info.sha)));
        }
        let files = info.siblings.into_iter().map(|s| s.rfilename).collect();
        Ok((info.sha, files))
    })
}

/// The fields of the Hub's repo information this program reads.
#[derive(serde::Deserialize)]
struct RevisionInfo {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(serde::Deserialize)]
struct Sibling {
    rfilename: String,
}

/// Run `attempt` under the retry policy (`retries` further tries after a transient failure, 429s waited out up
/// to [`BUSY_BUDGET`]), pausing between attempts; a stop request ends it.
fn retrying<T>(
    net: &Net,
    job: &Job,
    mut attempt: impl FnMut(&Net, &Job) -> Result<T, Failure>,
) -> Result<T, HubError> {
    let policy = crate::retry::Policy {
        retries: net.settings.retries,
        busy_budget: BUSY_BUDGET,
    };
    let stopped = || net.cancel.is_cancelled();
    let log = |wait: Duration, reason: &str| {
        tracing::warn!(
            "{}: {} from {}: {reason}; retrying in {:.1} s",
            job.repo,
            job.file,
            net.settings.endpoint,
            wait.as_secs_f64()
        );
    };
    let out = crate::retry::run(policy, &stopped, &log, || attempt(net, job));
    let unreachable = |reason: String| HubError::Unreachable {
        repo: job.repo.clone(),
        file: job.file.clone(),
        endpoint: net.settings.endpoint.clone(),
        attempts: out.attempts as u32,
        reason,
    };
    match out.result {
        Ok(v) => Ok(v),
        Err(GaveUp::Retries(reason)) => Err(unreachable(reason)),
        Err(GaveUp::Busy(reason)) => Err(unreachable(format!(
            "{reason}: still busy after {} s of waiting",
            BUSY_BUDGET.as_secs()
        ))),
        Err(GaveUp::Cancelled(_)) => Err(job.cancelled()),
        Err(GaveUp::Final(Final::Status(code, err))) => {
            Err(job.missing(&net.settings.endpoint, code, err.as_deref()))
        }
        Err(GaveUp::Final(Final::Bad(reason))) => Err(job.bad(net, reason)),
        Err(GaveUp::Final(Final::Io(path, source))) => Err(HubError::Io { path, source }),
    }
}

fn attempt_once(net: &Net, job: &Job) -> Result<Fetched, Failure> {
    let token = net.settings.token.as_deref();
    let meta = http::metadata(&net.agents, &job.url, token, net.settings.timeout)?;
    let blob = job.cache.blob(&meta.etag);
    if !blob.is_file() {
        let lock = job
            .cache
            .lock_blob(&meta.etag, &net.cancel)
            .map_err(hub_io)?
            .ok_or(Failure::Cancelled)?;
        if !blob.is_file() {
            download(net, job, &meta, &blob)?;
        }
        drop(lock);
    }
    let path = job
        .cache
        .link(&meta.commit, &job.file, &meta.etag)
        .map_err(hub_io)?;
    Ok(Fetched {
        commit: meta.commit,
        path,
    })
}

fn hub_io(e: HubError) -> Failure {
    match e {
        HubError::Io { path, source } => Failure::Final(Final::Io(path, source)),
        other => bad(other.to_string()),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Failure + '_ {
    move |e| Failure::Final(Final::Io(path.to_path_buf(), e))
}

/// The bytes of `meta` into `blob`, through `<blob>.incomplete` (kept between attempts and runs).
fn download(net: &Net, job: &Job, meta: &Metadata, blob: &Path) -> Result<(), Failure> {
    let part = blob.with_file_name(format!("{}.incomplete", meta.etag));
    let dir = part.parent().expect("blobs folder");
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&part)
        .map_err(io(&part))?;
    let mut have = file.metadata().map_err(io(&part))?.len();
    if have > meta.size {
        file.set_len(0).map_err(io(&part))?;
        have = 0;
    }
    if have < meta.size {
        if have > 0 {
            tracing::info!("{}: resuming {} at byte {have}", job.repo, job.file);
        }
        receive(net, job, meta, &mut file, &part, have)?;
    }
    let len = file.metadata().map_err(io(&part))?.len();
    if len != meta.size {
        return Err(Failure::transient(format!(
            "the connection closed after {len} of {} bytes",
            meta.size
        )));
    }
    drop(file);
    check_sha256(&part, &meta.etag)?;
    std::fs::rename(&part, blob).map_err(io(blob))
}

/// One request for the bytes from `have` on, appended to `file`.
fn receive(
    net: &Net,
    job: &Job,
    meta: &Metadata,
    file: &mut std::fs::File,
    part: &Path,
    have: u64,
) -> Result<(), Failure> {
    let timeout = net.settings.timeout;
    let mut req = match &meta.location {
        Some(loc) => net.agents.follow.get(loc),
        None => {
            let r = net.agents.follow.get(&job.url);
            match &net.settings.token {
                Some(t) => r.set("Authorization", &format!("Bearer {t}")),
                None => r,
            }
        }
    };
    req = req.set("Range", &format!("bytes={have}-"));
    let resp = req.call().map_err(|e| http::classify(e, timeout))?;
    let start = match resp.status() {
        206 => resp
            .header("Content-Range")
            .and_then(|r| r.trim().strip_prefix("bytes "))
            .and_then(|r| r.split('-').next())
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(have),
        _ => 0,
    };
    if start != have {
        // The server sent the file from another offset (a 200 with the whole file): start over.
        file.set_len(0).map_err(io(part))?;
        if start != 0 {
            return Err(Failure::transient(format!(
                "the server resumed at byte {start}, not {have}"
            )));
        }
    }
    file.seek(std::io::SeekFrom::Start(start))
        .map_err(io(part))?;
    let bar = progress_bar(net, job, meta.size, start);
    let mut reader = resp.into_reader();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        if net.cancel.is_cancelled() {
            return Err(Failure::Cancelled);
        }
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                file.flush().map_err(io(part))?;
                return Err(Failure::transient(format!("reading the answer: {e}")));
            }
        };
        file.write_all(&buf[..n]).map_err(io(part))?;
        if let Some(b) = &bar {
            b.inc(n as u64);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    file.flush().map_err(io(part))
}

/// A byte bar for files of 8 MiB or more, on a terminal; a log line otherwise.
fn progress_bar(net: &Net, job: &Job, size: u64, start: u64) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if size < 8 << 20 {
        return None;
    }
    tracing::info!(
        "downloading {} of {} ({:.1} MB)",
        job.file,
        job.repo,
        size as f64 / 1e6
    );
    if !net.settings.progress || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(size);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(job.file.clone());
    bar.set_position(start);
    Some(bar)
}

/// An LFS/Xet blob is named by the SHA-256 of its bytes: check it (other ETags are not content hashes).
fn check_sha256(part: &Path, etag: &str) -> Result<(), Failure> {
    if etag.len() != 64 || !etag.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(());
    }
    let mut f = std::fs::File::open(part).map_err(io(part))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io(part))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let got = crate::fingerprint::hex(&h.finalize());
    if got.eq_ignore_ascii_case(etag) {
        return Ok(());
    }
    let _ = std::fs::remove_file(part);
    Err(Failure::transient(format!(
        "the bytes received have SHA-256 {got}, not {etag}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancelled_wait_returns_at_once() {
        let cancel = Cancel::new();
        let c = cancel.clone();
        let t = std::time::Instant::now();
        let r: Result<(), HubError> = run_cancellable(&cancel, ("o/n", "f"), move || {
            c.cancel();
            std::thread::sleep(Duration::from_secs(30));
            Ok(())
        });
        assert!(r.unwrap_err().is_cancelled());
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
