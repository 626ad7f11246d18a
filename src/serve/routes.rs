//! The HTTP side of `serve`: routes, the API key check, request counting, and the chat-completions handler (parse,
//! take a queue slot or answer 429, prepare on a blocking thread, hand the job to the engine thread, answer whole
//! or as server-sent events).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::Semaphore;

use super::metrics::{Metrics, Ticket};
use super::prepare::{check_counts, prepare, RequestLimits};
use super::stream::sse_body;
use super::worker::{Event, Job, Live};
use crate::backend::LoadedModel;
use crate::engine::Sampling;
use crate::openai::{
    parse_chat_request, ApiError, ApiKey, AssistantMessage, ChatCompletion, ChatCompletionRequest,
    Choice, ChoiceLogprobs, ModelCard, ModelList,
};

/// Everything the handlers share.
pub(crate) struct App {
    /// The checkpoint (its prompt builder prepares requests; the engine thread holds its own reference).
    pub model: Arc<LoadedModel>,
    /// The name clients ask for.
    pub served_name: String,
    /// The request limits.
    pub limits: RequestLimits,
    /// The checkpoint's end-of-sequence tokens.
    pub stop_tokens: Vec<u32>,
    /// Slots of accepted requests (running and waiting): none left means 429.
    pub slots: Arc<Semaphore>,
    /// The engine thread's job queue; taken away at shutdown, so the engine finishes.
    pub jobs: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
    /// The counters.
    pub metrics: Arc<Metrics>,
    /// The key clients must send, if any.
    pub api_key: Option<ApiKey>,
    /// Set once a stop was requested: new requests get 503.
    pub stopping: AtomicBool,
    /// Unix seconds of the start (the model card's `created`).
    pub started: u64,
    /// Ids of the engine's requests.
    pub next_id: AtomicUsize,
}

/// Seconds a client is told to wait when the queue is full.
const RETRY_AFTER_SECONDS: u64 = 1;

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The router: the routes, the key check, the request counter and the body limit.
pub(crate) fn router(app: Arc<App>) -> Router {
    let limit = app.limits.max_body_bytes;
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model_card))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { error_response(&ApiError::not_found("no such path", "not_found")) })
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard))
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .with_state(app)
}

/// The key check (all but `/health`), and the count of every answer by path and status.
async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let limit = app.limits.max_body_bytes;
    let response = match &app.api_key {
        Some(key) if path != "/health" && !authorized(req.headers(), key) => {
            error_response(&ApiError::unauthorized())
        }
        // A body announced over the limit is refused before a byte of it is read.
        _ if declared_length(req.headers()).is_some_and(|n| n > limit as u64) => {
            error_response(&too_large(limit))
        }
        _ => next.run(req).await,
    };
    let known = ["/v1/chat/completions", "/v1/models", "/health", "/metrics"];
    let label = if known.contains(&path.as_str()) {
        path.as_str()
    } else {
        "other"
    };
    app.metrics.request(label, response.status().as_u16());
    response
}

/// Whether the request carries `Authorization: Bearer <key>` (compared in constant time).
fn authorized(headers: &HeaderMap, key: &ApiKey) -> bool {
    let Some(sent) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    key.matches(sent.trim())
}

/// An error in the protocol's shape; 429 says when to retry.
pub(crate) fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, json_body(&e.body())).into_response();
    if e.status == 429 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    }
    r
}

fn json_body(v: &impl serde::Serialize) -> Response {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

async fn health(State(app): State<Arc<App>>) -> Response {
    if app.stopping.load(Ordering::Relaxed) {
        return error_response(&ApiError::unavailable("the server is stopping"));
    }
    json_body(&serde_json::json!({"status": "ok"}))
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

async fn models(State(app): State<Arc<App>>) -> Response {
    json_body(&ModelList {
        object: "list".into(),
        data: vec![card(&app)],
    })
}

/// `GET /v1/models/{id}` (the official client's `models.retrieve`): the card, or 404 for another id.
async fn model_card(
    State(app): State<Arc<App>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if id != app.served_name {
        let message = format!(
            "the model `{id}` is not served here; this server serves `{}`",
            app.served_name
        );
        return error_response(
            &ApiError::not_found(message, "model_not_found").with_param("model"),
        );
    }
    json_body(&card(&app))
}

/// The served model's card, with what a client needs to send pictures this server leaves as they are.
fn card(app: &App) -> ModelCard {
    let family = app.model.model.family();
    let im = &app.model.kit.image;
    ModelCard {
        id: app.served_name.clone(),
        object: "model".into(),
        created: app.started,
        owned_by: "mobile-r1-eval".into(),
        root: Some(app.model.dir.display().to_string()),
        fingerprint: Some(app.model.fingerprint.clone()),
        max_model_len: Some(app.limits.context_tokens),
        family: Some(family.model_type().into()),
        image: Some(crate::openai::ImageSettings {
            min_pixels: im.min_pixels,
            max_pixels: im.max_pixels,
            patch_size: im.patch_size,
            merge_size: im.merge_size,
            factor: im.factor(),
            coordinate_frame: family.default_coordinate_frame().to_string(),
        }),
    }
}

async fn chat(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    match answer(app, body).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

/// The `Content-Length` a request announces.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn too_large(limit: usize) -> ApiError {
    ApiError::too_large(
        None,
        format!("the request body is over this server's limit of {limit} bytes (--max-body-bytes)"),
    )
}

/// A body the server cannot read: over the size limit (413), or not read whole.
fn unreadable(r: BytesRejection, limit: usize) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large(limit)
    } else {
        ApiError::invalid(
            "body",
            format!("the request body could not be read: {}", r.body_text()),
        )
    }
}

async fn answer(app: Arc<App>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let body = body.map_err(|r| unreadable(r, app.limits.max_body_bytes))?;
    let req = parse_chat_request(&body)?;
    if let Some(m) = req.model.as_deref().filter(|m| *m != app.served_name) {
        return Err(ApiError::not_found(
            format!(
                "the model `{m}` is not served here; this server serves `{}`",
                app.served_name
            ),
            "model_not_found",
        )
        .with_param("model"));
    }
    check_counts(&req, &app.limits)?;
    if app.stopping.load(Ordering::Relaxed) {
        return Err(ApiError::unavailable("the server is stopping"));
    }
    let slot = app.slots.clone().try_acquire_owned().map_err(|_| {
        ApiError::overloaded("the server's queue is full; retry later (see Retry-After)")
    })?;
    let ticket = Ticket::new(app.metrics.clone(), slot);
    let req = Arc::new(req);
    let prepared = {
        let (app, req) = (app.clone(), req.clone());
        tokio::task::spawn_blocking(move || prepare(&app.model.kit, &req, &app.limits))
            .await
            .map_err(|e| ApiError::internal(format!("preparing the request failed: {e}")))??
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let job = Job {
        request: crate::engine::Request {
            id: app.next_id.fetch_add(1, Ordering::Relaxed),
            input: prepared.input,
            prefix_len: prepared.prefix_len,
            max_new_tokens: prepared.max_new_tokens,
            stop_tokens: if req.ignore_eos {
                Vec::new()
            } else {
                app.stop_tokens.clone()
            },
            top_logprobs: if req.logprobs {
                req.top_logprobs.max(1)
            } else {
                0
            },
            sampling: sampling(&req),
        },
        live: Live {
            events: tx,
            stops: req.stop.clone(),
            stream: req.stream,
            logprobs: req.logprobs.then_some(req.top_logprobs),
            ticket,
        },
    };
    let sent = app
        .jobs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|jobs| jobs.send(job).is_ok());
    if sent != Some(true) {
        return Err(ApiError::unavailable("the server is stopping"));
    }
    let meta = Meta::new(&app);
    if req.stream {
        let body = sse_body(rx, meta, req.include_usage, req.logprobs);
        return Ok((
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            Body::from_stream(body),
        )
            .into_response());
    }
    let completion = collect(rx, meta, &req).await?;
    if let Some(u) = completion.usage {
        tracing::info!(
            "answered in {:.2} s: {} prompt tokens, {} generated",
            t0.elapsed().as_secs_f64(),
            u.prompt_tokens,
            u.completion_tokens
        );
    }
    Ok(json_body(&completion))
}

/// Greedy for temperature 0 or absent (the evaluation's setting); else sampled, seeded by `seed` when given.
fn sampling(req: &ChatCompletionRequest) -> Sampling {
    match req.temperature {
        Some(t) if t > 0.0 => Sampling::Random {
            temperature: t,
            top_p: req.top_p,
            seed: req.seed.unwrap_or_else(random_seed),
        },
        _ => Sampling::Greedy,
    }
}

/// A seed for a request that gave none.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

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
    fn new(app: &App) -> Self {
        Self {
            id: format!("chatcmpl-{:016x}", random_seed()),
            created: now_unix(),
            model: app.served_name.clone(),
            fingerprint: format!(
                "fp_{}",
                app.model.fingerprint.chars().take(12).collect::<String>()
            ),
        }
    }
}

/// Wait for the whole answer.
async fn collect(
    mut rx: UnboundedReceiver<Event>,
    meta: Meta,
    req: &ChatCompletionRequest,
) -> Result<ChatCompletion, ApiError> {
    loop {
        match rx.recv().await {
            Some(Event::Piece { .. }) => {}
            Some(Event::Done(f)) => {
                return Ok(ChatCompletion {
                    id: meta.id,
                    object: "chat.completion".into(),
                    created: meta.created,
                    model: meta.model,
                    choices: vec![Choice {
                        index: 0,
                        message: AssistantMessage {
                            role: "assistant".into(),
                            content: Some(f.text),
                        },
                        logprobs: req.logprobs.then_some(ChoiceLogprobs {
                            content: f.logprobs,
                        }),
                        finish_reason: Some(f.finish.as_str().into()),
                    }],
                    usage: Some(f.usage),
                    system_fingerprint: Some(meta.fingerprint),
                })
            }
            Some(Event::Failed(msg)) => return Err(ApiError::internal(msg)),
            None => return Err(ApiError::internal("the engine dropped the request")),
        }
    }
}
