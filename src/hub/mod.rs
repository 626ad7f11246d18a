//! The Hugging Face Hub: model and dataset repositories fetched into the standard cache, or found there alone when
//! offline.
//!
//! * Settings are values ([`HubSettings`]: endpoint, cache folder, offline switch, token, proxy, timeout, retries)
//!   that the command layer builds from its flags and environment (`HF_ENDPOINT`, `HF_HOME`, `HF_HUB_CACHE`,
//!   `HF_HUB_OFFLINE`, `HF_TOKEN`); nothing below reads the environment.
//! * The cache is the layout Python's `huggingface_hub` and the `hf-hub` crate share
//!   (`huggingface/hub-docs docs/hub/local-cache.md`): `<cache>/models--org--name/` (`datasets--…` for datasets)
//!   with `blobs/<etag>`, `snapshots/<commit>/<path>` as relative links to the blobs, `refs/<revision>` holding the
//!   commit, `.no_exist/<commit>/<path>` marking files the repo does not have; `hf_hub::Repo` names the folders.
//! * Every transfer has a connect and read timeout and bounded retries with backoff; an interrupted file resumes
//!   from the bytes on disk (`blobs/<etag>.incomplete`); a [`Cancel`] stops it within a fraction of a second, even
//!   while a connection hangs. `hf-hub`'s own client has no timeouts and no way to stop it, so the transfers are
//!   made here with `ureq` (the client `hf-hub` uses).
//! * Offline ([`HubSettings::offline`]), nothing touches the network: files come from the cache or the call fails
//!   naming the file and what to do.

mod cache;
pub mod data;
mod http;
mod many;
mod transfer;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use cache::CacheRepo;
pub use data::{DataLocation, FetchedData};

use crate::interrupt::Cancel;

/// The Hub's public address, the default endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// Default seconds to wait for a connection, and for the next bytes of an answer.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// Default retries of a failed transfer after the first attempt.
pub const DEFAULT_RETRIES: u32 = 3;

/// How to reach the Hub and where its cache lives.
#[derive(Debug, Clone, PartialEq)]
pub struct HubSettings {
    /// Base URL (`HF_ENDPOINT`), without a trailing slash.
    pub endpoint: String,
    /// The cache folder (`HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`).
    pub cache_dir: PathBuf,
    /// Never use the network (`HF_HUB_OFFLINE`).
    pub offline: bool,
    /// Bearer token (`HF_TOKEN`, else the cache's `token` file), for gated or private repos.
    pub token: Option<String>,
    /// HTTP(S) or SOCKS proxy URL for the endpoint, if any.
    pub proxy: Option<String>,
    /// Connect timeout, and the longest wait for the next bytes of an answer.
    pub timeout: Duration,
    /// Retries after a failed first attempt (timeouts, dropped connections, HTTP 5xx/429/408).
    pub retries: u32,
    /// Show progress bars on a terminal.
    pub progress: bool,
}

impl Default for HubSettings {
    /// No network and no cache: every hub id fails with a clear error (local folders need no hub).
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_ENDPOINT.into(),
            cache_dir: PathBuf::new(),
            offline: true,
            token: None,
            proxy: None,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            retries: DEFAULT_RETRIES,
            progress: false,
        }
    }
}

/// Access to the Hub: the settings and the stop request every transfer honours.
#[derive(Debug, Clone, Default)]
pub struct Hub {
    /// How to reach it.
    pub settings: HubSettings,
    /// Stops transfers (Ctrl-C, SIGTERM, or code).
    pub cancel: Cancel,
}

impl PartialEq for Hub {
    /// Two hubs are the same when their settings are (the stop token is not a setting).
    fn eq(&self, other: &Self) -> bool {
        self.settings == other.settings
    }
}

/// Model or dataset repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoKind {
    /// A model repo (`org/name`).
    Model,
    /// A dataset repo (`datasets/org/name` in URLs).
    Dataset,
}

impl RepoKind {
    fn hf(self) -> hf_hub::RepoType {
        match self {
            RepoKind::Model => hf_hub::RepoType::Model,
            RepoKind::Dataset => hf_hub::RepoType::Dataset,
        }
    }

    /// `model` or `dataset`, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            RepoKind::Model => "model",
            RepoKind::Dataset => "dataset",
        }
    }
}

/// Why a hub file could not be had.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// A stop was requested (Ctrl-C, SIGTERM) while fetching.
    #[error("stopped while fetching {file} of {repo}; what was downloaded stays in the cache and the next run resumes it")]
    Cancelled {
        /// `org/name`.
        repo: String,
        /// The file being fetched.
        file: String,
    },
    /// The repo or the file does not exist (HTTP 404), or is not accessible (401/403).
    #[error("{repo}: cannot fetch {file}: {endpoint} answered HTTP {status} ({what}){hint}")]
    Missing {
        /// `org/name`.
        repo: String,
        /// The file.
        file: String,
        /// The endpoint asked.
        endpoint: String,
        /// HTTP status.
        status: u16,
        /// What the status means here.
        what: &'static str,
        /// Next steps.
        hint: &'static str,
    },
    /// The transfer failed after every retry.
    #[error(
        "{repo}: cannot fetch {file} from {endpoint} ({attempts} attempt{}): {reason}{}",
        if *attempts == 1 { "" } else { "s" },
        NO_NETWORK_HINT
    )]
    Unreachable {
        /// `org/name`.
        repo: String,
        /// The file.
        file: String,
        /// The endpoint asked.
        endpoint: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        reason: String,
    },
    /// The answer was not what the Hub sends (headers missing, a wrong size or hash).
    #[error("{repo}: cannot fetch {file} from {endpoint}: {reason}")]
    BadAnswer {
        /// `org/name`.
        repo: String,
        /// The file.
        file: String,
        /// The endpoint asked.
        endpoint: String,
        /// What was wrong.
        reason: String,
    },
    /// Offline, and the cache does not hold the file.
    #[error(
        "{repo}: {file} is not in the local Hugging Face cache ({}) and HF_HUB_OFFLINE is set. Next steps: run \
         once with the network (without HF_HUB_OFFLINE) to fill the cache, or carry the files over with \
         `mobile-r1-eval pack` on a connected machine (docs/air-gap.md)",
        cache.display()
    )]
    NotCached {
        /// `org/name`.
        repo: String,
        /// The file.
        file: String,
        /// The cache folder searched.
        cache: PathBuf,
    },
    /// The fetched `data.jsonl` is not a benchmark.
    #[error(transparent)]
    Data(crate::dataset::DatasetError),
    /// A repo id, revision or file path that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// Reading or writing the cache failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl HubError {
    /// Whether this is a stop request rather than a failure.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, HubError::Cancelled { .. })
    }

    /// Whether the repo answered that it has no such file (HTTP 404).
    pub fn is_not_found(&self) -> bool {
        matches!(self, HubError::Missing { status: 404, .. })
    }
}

/// Next steps printed when the Hub cannot be reached at all.
const NO_NETWORK_HINT: &str = ".\n  Next steps: check HF_ENDPOINT (the Hub or a mirror that answers) and the network (a proxy \
     goes in HTTPS_PROXY); or, with the files already in the local cache ($HF_HOME/hub), set HF_HUB_OFFLINE=1; \
     or pass a local folder, e.g. one carried over with `mobile-r1-eval pack` (docs/air-gap.md)";

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `org/name`: two non-empty parts of safe characters.
pub fn check_repo_id(id: &str) -> Result<(), HubError> {
    let parts: Vec<&str> = id.split('/').collect();
    let ok = parts.len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        });
    if ok {
        Ok(())
    } else {
        Err(HubError::Invalid(format!(
            "{id:?} is not a hub repo id (org/name, letters, digits, `-`, `_`, `.`)"
        )))
    }
}

/// A path inside a repo: relative, `/`-separated, no `..`, no empty or `.` part.
pub fn check_repo_path(path: &str) -> Result<(), HubError> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.contains('\\')
        || path.contains('\0')
        || path
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..");
    if bad {
        Err(HubError::Invalid(format!(
            "{path:?} is not a file path inside a hub repo"
        )))
    } else {
        Ok(())
    }
}

/// A 40-hex-digit commit id.
pub fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit())
}

/// One repository at one revision: files come from the cache when its snapshot has them, else from the Hub.
pub struct HubRepo {
    hub: Hub,
    kind: RepoKind,
    id: String,
    revision: String,
    cache: CacheRepo,
    /// The commit the revision resolved to (from the cache's refs, or the first answer).
    commit: std::sync::Mutex<Option<String>>,
    /// Agents and settings of the transfers, built on first use.
    net: std::sync::OnceLock<std::sync::Arc<transfer::Net>>,
}

impl Hub {
    /// A handle on repository `id` (`org/name`) of `kind` at `revision` (a branch, tag or commit).
    pub fn repo(&self, kind: RepoKind, id: &str, revision: &str) -> Result<HubRepo, HubError> {
        check_repo_id(id)?;
        if revision.is_empty() || revision.split('/').any(|p| p.is_empty() || p == "..") {
            return Err(HubError::Invalid(format!(
                "{id}@{revision}: not a revision (a branch, tag or commit)"
            )));
        }
        let hf_repo = hf_hub::Repo::with_revision(id.to_string(), kind.hf(), revision.to_string());
        let cache = CacheRepo::new(&self.settings.cache_dir, &hf_repo.folder_name());
        let commit = if is_commit(revision) {
            Some(revision.to_ascii_lowercase())
        } else {
            cache.read_ref(revision)
        };
        Ok(HubRepo {
            hub: self.clone(),
            kind,
            id: id.to_string(),
            revision: revision.to_string(),
            cache,
            commit: std::sync::Mutex::new(commit),
            net: std::sync::OnceLock::new(),
        })
    }
}

impl std::fmt::Debug for HubRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubRepo")
            .field("kind", &self.kind)
            .field("id", &self.id)
            .field("revision", &self.revision)
            .field("commit", &self.commit())
            .finish()
    }
}

impl HubRepo {
    /// `org/name`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The revision asked for.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// The commit the revision resolved to, once known.
    pub fn commit(&self) -> Option<String> {
        self.commit.lock().expect("commit lock").clone()
    }

    /// The repo's cache folder.
    pub fn cache(&self) -> &CacheRepo {
        &self.cache
    }

    /// The hub this repo is reached through.
    pub fn hub(&self) -> &Hub {
        &self.hub
    }

    /// The snapshot folder of the resolved commit, once known.
    pub fn snapshot_dir(&self) -> Option<PathBuf> {
        self.commit().map(|c| self.cache.snapshot_dir(&c))
    }

    /// File `path` of the repo: its place in the snapshot folder, or `None` when the repo has no such file (HTTP
    /// 404, or a `.no_exist` mark in the cache). Offline, a file the cache lacks is [`HubError::NotCached`].
    pub fn get(&self, path: &str) -> Result<Option<PathBuf>, HubError> {
        match self.get_required(path) {
            Ok(p) => Ok(Some(p)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Like [`HubRepo::get`], with a file that is not there (absent from the repo, or offline and not cached)
    /// as `None`.
    pub fn get_optional(&self, path: &str) -> Result<Option<PathBuf>, HubError> {
        match self.get(path) {
            Err(HubError::NotCached { .. }) => Ok(None),
            other => other,
        }
    }

    /// File `path`, which must exist: a missing file is an error naming the repo, the file and the endpoint.
    pub fn get_required(&self, path: &str) -> Result<PathBuf, HubError> {
        check_repo_path(path)?;
        let endpoint = &self.hub.settings.endpoint;
        if let Some(commit) = self.commit() {
            match self.cache.lookup(&commit, path) {
                Some(Some(found)) => return Ok(found),
                Some(None) => {
                    return Err(transfer::Job::new(self, path).missing(endpoint, 404, None));
                }
                None => {}
            }
        }
        if self.hub.settings.offline {
            return Err(HubError::NotCached {
                repo: self.id.clone(),
                file: path.to_string(),
                cache: self.hub.settings.cache_dir.clone(),
            });
        }
        let net = self.net()?;
        let job = transfer::Job::new(self, path);
        let what = (self.id.as_str(), path);
        match transfer::run_cancellable(&self.hub.cancel, what, move || transfer::fetch(&net, &job))
        {
            Ok(fetched) => {
                self.learn_commit(&fetched.commit)?;
                Ok(fetched.path)
            }
            Err(e) => {
                if let (true, Some(commit)) = (e.is_not_found(), self.commit()) {
                    self.cache.mark_absent(&commit, path)?;
                }
                Err(e)
            }
        }
    }

    /// The commit the revision names now and the repo's file list, from the Hub (one request).
    pub fn revision_info(&self) -> Result<HashSet<String>, HubError> {
        if self.hub.settings.offline {
            return Err(HubError::NotCached {
                repo: self.id.clone(),
                file: format!("the file list of revision {}", self.revision),
                cache: self.hub.settings.cache_dir.clone(),
            });
        }
        let net = self.net()?;
        let job = transfer::Job::revision_info(self);
        let what = (self.id.as_str(), "its file list");
        let (sha, files) = transfer::run_cancellable(&self.hub.cancel, what, move || {
            transfer::revision_info(&net, &job)
        })?;
        self.learn_commit(&sha)?;
        Ok(files)
    }

    /// Fetch several files at once ([`many::PARALLEL_TRANSFERS`] at a time), each from the first of its candidate
    /// paths the repo has (a 404 moves on to the next).
    pub fn get_many(&self, wanted: &[Vec<String>]) -> Result<(), HubError> {
        if self.hub.settings.offline {
            let first = wanted.first().and_then(|c| c.first()).cloned();
            return Err(HubError::NotCached {
                repo: self.id.clone(),
                file: first.unwrap_or_default(),
                cache: self.hub.settings.cache_dir.clone(),
            });
        }
        let mut jobs = std::collections::VecDeque::new();
        for cands in wanted {
            for p in cands {
                check_repo_path(p)?;
            }
            jobs.push_back(cands.iter().map(|p| transfer::Job::new(self, p)).collect());
        }
        let progress = many::Progress::new(&self.hub.settings, wanted.len());
        let fetched = many::run(&self.id, self.net()?, &self.hub.cancel, jobs, &progress)?;
        for f in fetched {
            self.learn_commit(&f.commit)?;
        }
        Ok(())
    }

    /// The transfer state shared by this repo's downloads (built on first use).
    fn net(&self) -> Result<std::sync::Arc<transfer::Net>, HubError> {
        if let Some(n) = self.net.get() {
            return Ok(n.clone());
        }
        let n = transfer::Net::new(&self.hub.settings, &self.hub.cancel)?;
        Ok(self.net.get_or_init(|| n).clone())
    }

    /// Record the commit the revision resolved to (and the cache's ref for a branch or tag).
    fn learn_commit(&self, commit: &str) -> Result<(), HubError> {
        let mut known = self.commit.lock().expect("commit lock");
        if known.as_deref() != Some(commit) {
            if !is_commit(&self.revision) {
                self.cache.write_ref(&self.revision, commit)?;
            }
            *known = Some(commit.to_string());
        }
        Ok(())
    }

    /// The repo-information URL of the revision asked for.
    fn api_url(&self) -> String {
        format!(
            "{}/api/{}s/{}/revision/{}",
            self.hub.settings.endpoint,
            self.kind.noun(),
            self.id,
            http::encode_segment(&self.revision)
        )
    }

    /// The URL of `path` at the resolved commit (else the revision asked for).
    fn file_url(&self, path: &str) -> String {
        let rev = self.commit().unwrap_or_else(|| self.revision.clone());
        let prefix = match self.kind {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
        };
        format!(
            "{}/{prefix}{}/resolve/{}/{}",
            self.hub.settings.endpoint,
            self.id,
            http::encode_segment(&rev),
            http::encode_path(path)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_and_paths_are_checked() {
        check_repo_id("Qwen/Qwen2.5-VL-3B-Instruct").unwrap();
        for bad in ["Qwen", "a/b/c", "../x", "a/", "a b/c", "/a"] {
            assert!(check_repo_id(bad).is_err(), "{bad}");
        }
        check_repo_path("images/a b.png").unwrap();
        for bad in ["", "/etc/passwd", "a/../b", "a//b", "./a", "a\\b"] {
            assert!(check_repo_path(bad).is_err(), "{bad}");
        }
        assert!(is_commit("0123456789abcdef0123456789abcdef01234567"));
        assert!(!is_commit("main"));
    }

    #[test]
    fn offline_never_reaches_the_network() {
        let dir = tempfile::tempdir().unwrap();
        let hub = Hub {
            settings: HubSettings {
                endpoint: "http://127.0.0.1:9".into(),
                cache_dir: dir.path().into(),
                ..HubSettings::default()
            },
            cancel: Cancel::new(),
        };
        let repo = hub.repo(RepoKind::Model, "org/name", "main").unwrap();
        let e = repo.get("config.json").unwrap_err();
        assert!(matches!(e, HubError::NotCached { .. }), "{e}");
        assert!(repo.get_optional("config.json").unwrap().is_none());
    }
}
