//! The HTTP calls of the OpenAI backend (ureq, blocking, one call per worker thread) under the program's retry
//! policy ([`crate::retry`]): a 429 is waited out within a time budget, a connection error, a timeout, 408, 409 and
//! any 5xx are tried again a bounded number of times, any other status is the request's answer.
//!
//! Every attempt also tells the client's [`Reachability`]: connection failures in a row, across all workers, past
//! a limit mean the server is gone, and every call then stops instead of retrying against it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::throttle::Throttle;
use crate::interrupt::Cancel;
use crate::openai::{parse_error_body, ApiKey};
use crate::retry::{self, Failure, GaveUp, Policy};

/// Most bytes of an answer read.
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// Whether the server still answers: connection failures in a row (any answer, even an error status, ends a
/// row), with their causes, shared by every worker of a client.
#[derive(Debug)]
pub(crate) struct Reachability {
    limit: usize,
    row: Mutex<BTreeMap<String, usize>>,
    gone: AtomicBool,
}

impl Reachability {
    /// The server counts as gone after `limit` connection failures in a row (0: never).
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            row: Mutex::new(BTreeMap::new()),
            gone: AtomicBool::new(false),
        }
    }

    fn failed(&self, cause: &str) {
        let mut row = self.row.lock().unwrap_or_else(|p| p.into_inner());
        *row.entry(cause.to_string()).or_default() += 1;
        if self.limit > 0 && row.values().sum::<usize>() >= self.limit {
            self.gone.store(true, Ordering::Relaxed);
        }
    }

    fn answered(&self) {
        if !self.is_gone() {
            self.row.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }

    /// Whether the limit was reached.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    /// Why the server counts as gone (`10 connection failures in a row: 10 × connection refused`), if it does.
    pub fn why_gone(&self) -> Option<String> {
        if !self.is_gone() {
            return None;
        }
        let row = self.row.lock().unwrap_or_else(|p| p.into_inner());
        let n: usize = row.values().sum();
        Some(format!(
            "{n} connection failures in a row: {}",
            tally_text(&row)
        ))
    }
}

/// `22 × connection refused, 3 × connection reset`, the commonest first.
pub(crate) fn tally_text(counts: &BTreeMap<String, usize>) -> String {
    let mut v: Vec<(&String, &usize)> = counts.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(c, n)| format!("{n} × {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A client of one server.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    agent: ureq::Agent,
    key: Option<ApiKey>,
    policy: Policy,
    cancel: Cancel,
    reach: Arc<Reachability>,
    /// The allowance of chat calls in flight, lowered while the server answers 429.
    throttle: Option<Arc<Throttle>>,
}

/// One call's outcome with the number of calls it took.
#[derive(Debug)]
pub(crate) struct Called {
    /// The answer, or why there is none.
    pub result: Result<Value, String>,
    /// HTTP calls made.
    pub attempts: usize,
    /// Of them, busy answers (429) waited out.
    pub busy: usize,
}

impl Client {
    /// A client sending `key`, each call given at most `timeout`, retried under `policy`, reporting to `reach`.
    pub fn new(
        key: Option<ApiKey>,
        timeout: Duration,
        policy: Policy,
        cancel: Cancel,
        reach: Arc<Reachability>,
    ) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(timeout.min(Duration::from_secs(10)))
            .timeout(timeout)
            .build();
        Self {
            agent,
            key,
            policy,
            cancel,
            reach,
            throttle: None,
        }
    }

    /// This client with its `POST` calls sent within `throttle`'s allowance, and their answers told to it.
    pub fn with_throttle(mut self, throttle: Arc<Throttle>) -> Self {
        self.throttle = Some(throttle);
        self
    }

    /// `GET url`, with retries.
    pub fn get(&self, url: &str) -> Called {
        self.with_retries(|| self.once(self.agent.get(url), None, url))
    }

    /// `POST url` with a JSON body, with retries.
    pub fn post(&self, url: &str, body: &Value) -> Called {
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        self.with_retries(|| {
            let Some(throttle) = &self.throttle else {
                return self.once(self.agent.post(url), Some(&bytes), url);
            };
            let stopped = || self.cancel.is_cancelled() || self.reach.is_gone();
            let Some(_place) = throttle.acquire(&stopped) else {
                return Err(Failure::Cancelled);
            };
            let r = self.once(self.agent.post(url), Some(&bytes), url);
            match &r {
                Ok(_) => throttle.answered(),
                Err(Failure::Busy { .. }) => throttle.busy(),
                Err(_) => {}
            }
            r
        })
    }

    fn with_retries(&self, call: impl FnMut() -> Result<Value, Failure<String>>) -> Called {
        let stopped = || self.cancel.is_cancelled() || self.reach.is_gone();
        let log = |wait: Duration, message: &str| {
            tracing::debug!("retrying in {:.1} s: {message}", wait.as_secs_f64());
        };
        let out = retry::run(self.policy, &stopped, &log, call);
        let attempts = out.attempts;
        let result = out.result.map_err(|e| match e {
            GaveUp::Final(m) => m,
            GaveUp::Retries(m) => format!("gave up after {attempts} attempts: {m}"),
            GaveUp::Busy(m) => format!(
                "the server stayed busy beyond {:.0} s of waiting ({} answers 429): {m}",
                self.policy.busy_budget.as_secs_f64(),
                out.busy
            ),
            GaveUp::Cancelled(Some(m)) => format!("stopped while waiting to retry: {m}"),
            GaveUp::Cancelled(None) => "stopped before the request was sent".into(),
        });
        Called {
            result,
            attempts,
            busy: out.busy,
        }
    }

    fn once(
        &self,
        req: ureq::Request,
        body: Option<&[u8]>,
        url: &str,
    ) -> Result<Value, Failure<String>> {
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
                self.reach.answered();
                let text = read(resp)
                    .map_err(|e| Failure::transient(format!("{url}: reading the answer: {e}")))?;
                serde_json::from_str(&text).map_err(|e| {
                    Failure::Final(format!(
                        "{url}: the answer is not JSON ({e}): {}",
                        excerpt(&text)
                    ))
                })
            }
            Err(ureq::Error::Status(code, resp)) => {
                self.reach.answered();
                let after =
                    retry::retry_after(resp.header("retry-after-ms"), resp.header("retry-after"));
                let text = read(resp).unwrap_or_default();
                let message = status_message(code, url, &text);
                Err(Failure::of_status(code, message.clone(), after)
                    .unwrap_or(Failure::Final(message)))
            }
            Err(ureq::Error::Transport(t)) => {
                let (cause, connection) = transport_cause(&t);
                if connection {
                    self.reach.failed(&cause);
                }
                Err(Failure::transient(format!("{url}: {cause}")))
            }
        }
    }
}

/// A short cause of a transport failure (`connection refused`, `timed out`, …) and whether it is a failure to
/// reach the server at all (not a timeout of a server that is there but slow).
fn transport_cause(t: &ureq::Transport) -> (String, bool) {
    use std::error::Error;
    use std::io::ErrorKind as Io;
    let io = t
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    match (t.kind(), io) {
        (_, Some(Io::TimedOut | Io::WouldBlock)) => ("timed out".into(), false),
        (_, Some(Io::ConnectionRefused)) => ("connection refused".into(), true),
        (_, Some(Io::ConnectionReset | Io::ConnectionAborted | Io::BrokenPipe)) => {
            ("connection reset".into(), true)
        }
        (_, Some(Io::UnexpectedEof)) => ("connection closed without an answer".into(), true),
        (ureq::ErrorKind::Dns, _) => ("the host name does not resolve".into(), true),
        (ureq::ErrorKind::ConnectionFailed, _) => ("connection failed".into(), true),
        _ if t.to_string().contains("timed out") => ("timed out".into(), false),
        _ => (t.to_string(), false),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_failures_in_a_row_mean_the_server_is_gone() {
        let r = Reachability::new(3);
        r.failed("connection refused");
        r.failed("connection reset");
        r.answered();
        r.failed("connection refused");
        r.failed("connection refused");
        assert!(!r.is_gone() && r.why_gone().is_none());
        r.failed("connection reset");
        assert_eq!(
            r.why_gone().unwrap(),
            "3 connection failures in a row: 2 × connection refused, 1 × connection reset"
        );
        // Once gone, it stays gone.
        r.answered();
        assert!(r.is_gone());
        let never = Reachability::new(0);
        (0..100).for_each(|_| never.failed("connection refused"));
        assert!(!never.is_gone());
    }

    #[test]
    fn a_refused_connection_is_a_connection_failure_and_names_its_cause() {
        // A port that was just free: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let reach = Arc::new(Reachability::new(2));
        let policy = Policy {
            retries: 5,
            busy_budget: Duration::ZERO,
        };
        let client = Client::new(
            None,
            Duration::from_secs(5),
            policy,
            Cancel::new(),
            reach.clone(),
        );
        let t0 = std::time::Instant::now();
        let called = client.get(&format!("http://127.0.0.1:{port}/v1/models"));
        // The second refusal makes the server gone, which ends the retries at once.
        assert_eq!(called.attempts, 2);
        let err = called.result.unwrap_err();
        assert!(err.contains("connection refused"), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(3));
        assert!(reach.why_gone().unwrap().contains("2 × connection refused"));
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
