//! What the whole answer ([`super::routes`]) and the streamed one ([`super::stream`]) share: what every answer of
//! one request repeats (its id, time, model and fingerprint), the wait for the engine's next event (cut short by
//! the shutdown deadline), and the random seed both ids and unseeded sampling draw from.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::watch;

use super::worker::Event;
use crate::openai::ApiError;

/// What every answer of a request repeats: its id, time and model.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    /// `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The served name.
    pub model: String,
    /// The checkpoint's fingerprint, shortened.
    pub fingerprint: String,
}

impl Meta {
    /// A fresh id for a request to the model served as `served_name`, whose checkpoint has `fingerprint`.
    pub(crate) fn new(served_name: &str, fingerprint: &str) -> Self {
        Self {
            id: format!("chatcmpl-{:016x}", random_seed()),
            created: now_unix(),
            model: served_name.to_string(),
            fingerprint: format!("fp_{}", fingerprint.chars().take(12).collect::<String>()),
        }
    }
}

/// Unix seconds now.
fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A seed from the process's random hasher keys and the clock (for ids and requests that gave none).
pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// The error of a request cut off by the shutdown deadline.
pub(crate) fn cut_off() -> ApiError {
    ApiError::unavailable(
        "the server stopped before this answer was complete (its shutdown deadline, --shutdown-timeout, passed)",
    )
}

/// The next event of a request, or `None` once the shutdown deadline cut it off.
pub(crate) async fn next_event(
    rx: &mut UnboundedReceiver<Event>,
    abort: &mut watch::Receiver<bool>,
) -> Option<Option<Event>> {
    tokio::select! {
        e = rx.recv() => Some(e),
        _ = async {
            // A sender gone (it lives as long as the server) is no deadline: wait on.
            if abort.wait_for(|a| *a).await.is_err() {
                std::future::pending::<()>().await;
            }
        } => None,
    }
}
