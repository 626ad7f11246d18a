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
mod error;
mod http;
mod many;
mod transfer;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) use cache::CacheRepo;
pub(crate) use data::DataLocation;
pub(crate) use error::io_err;
pub(crate) use error::HubError;

use crate::interrupt::Cancel;

/// The Hub's public address, the default endpoint.
pub(crate) const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// Default seconds to wait for a connection, and for the next bytes of an answer.
pub(crate) const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// Default retries of a failed transfer after the first attempt.
pub(crate) const DEFAULT_RETRIES: u32 = 3;

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
    pub(crate) fn noun(self) -> &'static str {
        match self {
            RepoKind::Model => "model",
            RepoKind::Dataset => "dataset",
        }
    }
}

/// `org/name`: two non-empty parts of safe characters.
pub(crate) fn check_repo_id(id: &str) -> Result<(), HubError> {
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
pub(crate) fn check_repo_path(path: &str) -> Result<(), HubError> {
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
pub(crate) fn is_commit(rev: &str) -> bool {
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
    #[cfg(test)]
    pub(crate) fn get_optional(&self, path: &str) -> Result<Option<PathBuf>, HubError> {
        match self.get(path) {
            Err(HubError::NotCached { .. }) => Ok(None),
            other => other,
        }
    }

    /// File `path`, which must exist: a missing file is an error naming the repo, the file and the endpoint.
    pub(crate) fn get_required(&self, path: &str) -> Result<PathBuf, HubError> {
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
    pub(crate) fn get_many(&self, wanted: &[Vec<String>]) -> Result<(), HubError> {
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
