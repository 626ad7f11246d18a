//! The HTTP calls of the OpenAI backend (ureq, blocking, one call per worker thread), with bounded retries: a
//! connection error, a timeout, 408, 409, 429 and any 5xx are tried again after `Retry-After` (`retry-after-ms`
//! first, then `retry-after` in seconds) or an exponential backoff with jitter, `min(0.5 s · 2ⁿ, 8 s)` less up to
//! a quarter (the rules of openai-python's `_base_client.py`); any other status is the request's answer.

use std::time::Duration;

use serde_json::Value;

use crate::interrupt::Cancel;
use crate::openai::{parse_error_body, ApiKey};

/// The longest wait a `Retry-After` may ask for before it is cut short.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Most bytes of an answer read.
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// Why a call did not give an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Worth another try (after `after` when the server said so).
    Retry {
        /// What happened.
        message: String,
        /// The server's `Retry-After`.
        after: Option<Duration>,
    },
    /// The server's final word (a 4xx), or an answer that cannot be read.
    Final(String),
}

impl Failure {
    fn message(&self) -> &str {
        match self {
            Failure::Retry { message, .. } | Failure::Final(message) => message,
        }
    }
}

/// A client of one server.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    agent: ureq::Agent,
    key: Option<ApiKey>,
    max_retries: u32,
    cancel: Cancel,
}

/// One call's outcome with the number of calls it took.
#[derive(Debug)]
pub(crate) struct Called {
    /// The answer, or why there is none.
    pub result: Result<Value, String>,
    /// HTTP calls made.
    pub attempts: usize,
}

impl Client {
    /// A client sending `key`, each call given at most `timeout`, each request tried `max_retries` more times.
    pub fn new(key: Option<ApiKey>, timeout: Duration, max_retries: u32, cancel: Cancel) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(timeout.min(Duration::from_secs(10)))
            .timeout(timeout)
            .build();
        Self {
            agent,
            key,
            max_retries,
            cancel,
        }
    }

    /// `GET url`, with retries.
    pub fn get(&self, url: &str) -> Called {
        self.with_retries(|| self.once(self.agent.get(url), None, url))
    }

    /// `POST url` with a JSON body, with retries.
    pub fn post(&self, url: &str, body: &Value) -> Called {
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        self.with_retries(|| self.once(self.agent.post(url), Some(&bytes), url))
    }

    fn with_retries(&self, call: impl Fn() -> Result<Value, Failure>) -> Called {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let failure = match call() {
                Ok(v) => {
                    return Called {
                        result: Ok(v),
                        attempts,
                    }
                }
                Err(f) => f,
            };
            let tries = self.max_retries as usize + 1;
            let after = match &failure {
                Failure::Retry { after, .. } if attempts < tries => {
                    after.map_or_else(|| backoff(attempts - 1), |a| a.min(MAX_RETRY_AFTER))
                }
                Failure::Retry { message, .. } => {
                    let result = Err(format!("gave up after {attempts} attempts: {message}"));
                    return Called { result, attempts };
                }
                Failure::Final(message) => {
                    return Called {
                        result: Err(message.clone()),
                        attempts,
                    }
                }
            };
            tracing::debug!(
                "retrying in {:.1} s: {}",
                after.as_secs_f64(),
                failure.message()
            );
            if !self.sleep(after) {
                let result = Err(format!(
                    "stopped while waiting to retry: {}",
                    failure.message()
                ));
                return Called { result, attempts };
            }
        }
    }

    /// Sleep `d` unless a stop is requested meanwhile (then `false`).
    fn sleep(&self, d: Duration) -> bool {
        let end = std::time::Instant::now() + d;
        while std::time::Instant::now() < end {
            if self.cancel.is_cancelled() {
                return false;
            }
            std::thread::sleep((end - std::time::Instant::now()).min(Duration::from_millis(50)));
        }
        true
    }

    fn once(&self, req: ureq::Request, body: Option<&[u8]>, url: &str) -> Result<Value, Failure> {
        let mut req = req.set("Accept", "application/json");
        if let Some(k) = &self.key {
            req = req.set("Authorization", &format!("Bearer {}", k.expose()));
        }
        let sent = match body {
            Some(b) => req.set("Content-Type", "application/json").send_bytes(b),
            None => req.call(),
        };
        match sent {
            Ok(resp) => {
                let text = read(resp).map_err(|e| Failure::Retry {
                    message: format!("{url}: reading the answer: {e}"),
                    after: None,
                })?;
                serde_json::from_str(&text).map_err(|e| {
                    Failure::Final(format!(
                        "{url}: the answer is not JSON ({e}): {}",
                        excerpt(&text)
                    ))
                })
            }
            Err(ureq::Error::Status(code, resp)) => {
                let after = retry_after(&resp);
                let text = read(resp).unwrap_or_default();
                let message = status_message(code, url, &text);
                if retryable(code) {
                    Err(Failure::Retry { message, after })
                } else {
                    Err(Failure::Final(message))
                }
            }
            // The transport error names the URL itself.
            Err(ureq::Error::Transport(t)) => Err(Failure::Retry {
                message: t.to_string(),
                after: None,
            }),
        }
    }
}

fn read(resp: ureq::Response) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    resp.into_reader()
        .take(MAX_ANSWER_BYTES)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// Statuses worth another try.
pub(crate) fn retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || status >= 500
}

/// `HTTP 400 from URL: message (code)`, from an error body in either shape, else its first characters.
pub(crate) fn status_message(status: u16, url: &str, body: &str) -> String {
    match parse_error_body(body.as_bytes()) {
        Some(e) => {
            let code = match e.code {
                Some(Value::String(s)) => format!(" ({s})"),
                _ => String::new(),
            };
            format!("HTTP {status} from {url}: {}{code}", e.message)
        }
        None => format!("HTTP {status} from {url}: {}", excerpt(body)),
    }
}

fn excerpt(text: &str) -> String {
    let t: String = text.trim().chars().take(200).collect();
    if t.is_empty() {
        "(empty body)".into()
    } else {
        t
    }
}

/// The server's `retry-after-ms` or `retry-after` (seconds; an HTTP date is not read).
fn retry_after(resp: &ureq::Response) -> Option<Duration> {
    let ms = resp
        .header("retry-after-ms")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|ms| ms / 1000.0);
    let secs = ms.or_else(|| {
        resp.header("retry-after")
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    secs.filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// The wait before retry `n` (0-based): `min(0.5 · 2ⁿ, 8)` seconds, less a random part of up to a quarter.
pub(crate) fn backoff(n: usize) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let base = (0.5 * 2f64.powi(n.min(16) as i32)).min(8.0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(n);
    let jitter = (h.finish() % 1000) as f64 / 1000.0;
    Duration::from_secs_f64(base * (1.0 - 0.25 * jitter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_statuses_are_retried() {
        for s in [408, 409, 429, 500, 502, 503, 504] {
            assert!(retryable(s), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 422] {
            assert!(!retryable(s), "{s}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_eight_seconds_with_jitter() {
        for (n, base) in [(0, 0.5), (1, 1.0), (2, 2.0), (4, 8.0), (10, 8.0)] {
            let d = backoff(n).as_secs_f64();
            assert!(d <= base && d >= 0.75 * base, "retry {n}: {d}");
        }
    }

    #[test]
    fn error_bodies_become_messages() {
        let nested = r#"{"error": {"message": "too long", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}"#;
        assert_eq!(
            status_message(400, "http://h/v1/chat/completions", nested),
            "HTTP 400 from http://h/v1/chat/completions: too long (context_length_exceeded)"
        );
        let flat = r#"{"object": "error", "message": "bad", "type": "BadRequestError", "param": null, "code": 400}"#;
        assert_eq!(status_message(400, "u", flat), "HTTP 400 from u: bad");
        assert_eq!(
            status_message(502, "u", "<html>bad gateway</html>"),
            "HTTP 502 from u: <html>bad gateway</html>"
        );
        assert_eq!(
            status_message(503, "u", ""),
            "HTTP 503 from u: (empty body)"
        );
    }
}
