//! A stand-in OpenAI-compatible server on 127.0.0.1 (axum, on its own thread) whose answer to each chat call is
//! scripted by the test: a status with an error body (and `Retry-After`), a delay, or a fixed completion. It
//! serves one model, `stub`, and records when each chat call arrived.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;

/// What the stub does with chat call `n` (0-based).
#[derive(Debug, Clone)]
pub enum Reply {
    /// A completion with [`ANSWER`].
    Answer,
    /// This status, an error body, and `Retry-After` when given.
    Status(u16, Option<&'static str>),
    /// Wait this long, then answer.
    Slow(Duration),
    /// A completion with [`ANSWER`] whose `usage.prompt_tokens` is this count.
    Counted(usize),
}

/// The text of every completion: a valid `mobile_use` tool call.
pub const ANSWER: &str = "<tool_call>{\"name\": \"mobile_use\", \"arguments\": {\"action\": \"wait\", \"time\": 1}}</tool_call>";

type Script = Arc<dyn Fn(usize) -> Reply + Send + Sync>;

/// A running stub.
pub struct Stub {
    /// `http://127.0.0.1:PORT/v1`.
    pub base: String,
    calls: Arc<Mutex<Vec<Instant>>>,
    bodies: Arc<Mutex<Vec<serde_json::Value>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone)]
struct StubState {
    script: Script,
    count: Arc<AtomicUsize>,
    calls: Arc<Mutex<Vec<Instant>>>,
    bodies: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Stub {
    /// Serve until dropped, answering chat call `n` with `script(n)`.
    pub fn start(script: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let calls = Arc::new(Mutex::new(Vec::new()));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let state = StubState {
            script: Arc::new(script),
            count: Arc::new(AtomicUsize::new(0)),
            calls: calls.clone(),
            bodies: bodies.clone(),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = Router::new()
                    .route("/v1/models", get(models))
                    .route("/v1/chat/completions", post(chat))
                    .layer(axum::extract::DefaultBodyLimit::disable())
                    .with_state(state);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        Self {
            base,
            calls,
            bodies,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// When each chat call arrived.
    pub fn calls(&self) -> Vec<Instant> {
        self.calls.lock().unwrap().clone()
    }

    /// The body of each chat call, as JSON.
    pub fn bodies(&self) -> Vec<serde_json::Value> {
        self.bodies.lock().unwrap().clone()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn models() -> impl IntoResponse {
    let body = serde_json::json!({"object": "list", "data": [
        {"id": "stub", "object": "model", "created": 0, "owned_by": "test"}]});
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

/// Each call's body is read whole before the reply: a reply sent while the client still writes a large body
/// would close the connection under it (a broken pipe, and a retry the script did not ask for).
async fn chat(
    axum::extract::State(s): axum::extract::State<StubState>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    let n = s.count.fetch_add(1, Ordering::SeqCst);
    s.calls.lock().unwrap().push(Instant::now());
    let json = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    s.bodies.lock().unwrap().push(json);
    match (s.script)(n) {
        Reply::Status(code, retry_after) => {
            let body = serde_json::json!({"error": {"message": format!("scripted {code}"),
                "type": "server_error", "param": null, "code": null}});
            let mut r = (
                StatusCode::from_u16(code).unwrap(),
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response();
            if let Some(ra) = retry_after {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, ra.parse().unwrap());
            }
            r
        }
        Reply::Slow(d) => {
            tokio::time::sleep(d).await;
            completion(100)
        }
        Reply::Answer => completion(100),
        Reply::Counted(n) => completion(n),
    }
}

fn completion(prompt_tokens: usize) -> axum::response::Response {
    let body = serde_json::json!({"id": "chatcmpl-stub", "object": "chat.completion", "created": 0,
        "model": "stub", "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER},
        "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 10,
            "total_tokens": prompt_tokens + 10}});
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
