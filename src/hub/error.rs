//! Why a hub file could not be had: each error names the repo, the file and, for the network, the endpoint and
//! the next steps.

use std::path::{Path, PathBuf};

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
    pub(crate) fn is_cancelled(&self) -> bool {
        matches!(self, HubError::Cancelled { .. })
    }

    /// Whether the repo answered that it has no such file (HTTP 404).
    pub(crate) fn is_not_found(&self) -> bool {
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
