//! The HTTP side of `serve`: routes, the API key check, request counting, and the chat-completions handler (take a
//! queue slot or answer 429, then one of the few preparing places: read the body, parse, prepare on a blocking
//! thread; hand the job to the engine thread, answer whole or as server-sent events). No body is read before its
//! request holds a slot and a preparing place, so the memory bodies and preparation take is bounded by those counts.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{watch, Semaphore};

use super::body::{discard_body, read_body, BodyError};
use super::meta::{cut_off, next_event, random_seed, Meta};
use super::metrics::{Metrics, Ticket};
use super::prepare::{check_counts, prepare, RequestLimits};
use super::stream::sse_body;
use super::worker::{Event, Job, Live};
use crate::backend::LoadedModel;
use crate::engine::Sampling;
use crate::openai::{
    parse_chat_request, ApiError, ApiKey, AssistantMessage, ChatCompletion, ChatCompletionRequest,
    Choice, ChoiceLogprobs, ModelCard, ModelList, PublishedModel,
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
    /// How many slots there are.
    pub total_slots: usize,
    /// Places for reading and preparing a request's body (`--max-preparing`); a request waits for one.
    pub preparing: Semaphore,
    /// Time to send a whole body.
    pub body_timeout: Duration,
    /// Set at the shutdown deadline: the requests still waiting for their answer get an error.
    pub abort: watch::Sender<bool>,
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

impl App {
    /// Requests holding a slot (accepted and not yet answered).
    pub(crate) fn in_flight(&self) -> usize {
        self.total_slots
            .saturating_sub(self.slots.available_permits())
    }
}

/// The router: the routes, the key check and the request counter.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model_card))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { error_response(&ApiError::not_found("no such path", "not_found")) })
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard))
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
    let response = if response.status() == StatusCode::METHOD_NOT_ALLOWED {
        method_not_allowed(response)
    } else {
        response
    };
    app.metrics
        .request(route_label(&path), response.status().as_u16());
    response
}

/// The route a path is counted under in `/metrics` (a model id is not a label of its own).
fn route_label(path: &str) -> &str {
    let known = ["/v1/chat/completions", "/v1/models", "/health", "/metrics"];
    match path.strip_prefix("/v1/models/") {
        Some(id) if !id.is_empty() && !id.contains('/') => "/v1/models/{id}",
        _ if known.contains(&path) => path,
        _ => "other",
    }
}

/// A 405 (the router's, with no body) in the protocol's shape, keeping its `Allow` header.
fn method_not_allowed(r: Response) -> Response {
    let allow = r.headers().get(header::ALLOW).cloned();
    let e = ApiError::invalid(
        "method",
        "this path does not take this method (see the Allow header)",
    );
    let mut out = error_response(&ApiError {
        status: 405,
        code: Some("method_not_allowed"),
        param: None,
        ..e
    });
    if let Some(a) = allow {
        out.headers_mut().insert(header::ALLOW, a);
    }
    out
}

/// Whether the request carries `Authorization: Bearer <key>` (the scheme in any case; the key compared in
/// constant time).
fn authorized(headers: &HeaderMap, key: &ApiKey) -> bool {
    let Some((scheme, sent)) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(' '))
    else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer") && key.matches(sent.trim())
}

/// An error in the protocol's shape.
pub(crate) fn error_response(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, json_body(&e.body())).into_response()
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
        published: PublishedModel {
            owned_by: Some("mobile-r1-eval".into()),
            root: app.model.source.dir().map(|d| d.display().to_string()),
            fingerprint: Some(app.model.source.fingerprint()),
            max_model_len: Some(app.limits.context_tokens),
        },
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

async fn chat(State(app): State<Arc<App>>, req: Request) -> Response {
    match answer(app.clone(), req.into_body()).await {
        Ok(r) => r,
        Err(e) => {
            let mut r = error_response(&e);
            // A full queue says when a slot is likely free, from the queue and the recent answers.
            if e.status == 429 {
                let secs = app.metrics.retry_after(app.total_slots);
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            r
        }
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

/// A body the server cannot read: over the size limit (413), too slow (408), or not read whole.
fn unreadable(e: BodyError, app: &App) -> ApiError {
    match e {
        BodyError::TooLarge => too_large(app.limits.max_body_bytes),
        BodyError::Slow => ApiError {
            status: 408,
            ..ApiError::invalid(
                "body",
                format!(
                    "the request body was not sent whole within {} s (--body-timeout)",
                    app.body_timeout.as_secs_f64()
                ),
            )
        },
        BodyError::Broken(msg) => {
            ApiError::invalid("body", format!("the request body could not be read: {msg}"))
        }
    }
}

/// Read, parse and prepare a request that holds a slot, in one of the preparing places.
async fn read_and_prepare(
    app: &Arc<App>,
    body: Body,
) -> Result<(ChatCompletionRequest, super::prepare::PreparedPrompt), ApiError> {
    let _place = app
        .preparing
        .acquire()
        .await
        .map_err(|_| ApiError::unavailable("the server is stopping"))?;
    let body = read_body(body, app.limits.max_body_bytes, app.body_timeout)
        .await
        .map_err(|e| unreadable(e, app))?;
    let req = parse_chat_request(&body)?;
    drop(body);
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
    let req = Arc::new(req);
    let prepared = {
        let (app, req) = (app.clone(), req.clone());
        tokio::task::spawn_blocking(move || prepare(&app.model.kit, &req, &app.limits))
            .await
            .map_err(|e| ApiError::internal(format!("preparing the request failed: {e}")))??
    };
    let req = Arc::try_unwrap(req).unwrap_or_else(|a| (*a).clone());
    Ok((req, prepared))
}

async fn answer(app: Arc<App>, body: Body) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let stopping = app.stopping.load(Ordering::Relaxed);
    let slot = match app.slots.clone().try_acquire_owned() {
        Ok(slot) if !stopping => slot,
        refused => {
            drop(refused);
            discard_body(body, app.limits.max_body_bytes, app.body_timeout).await;
            return Err(if stopping {
                ApiError::unavailable("the server is stopping")
            } else {
                ApiError::overloaded("the server's queue is full; retry later (see Retry-After)")
            });
        }
    };
    let ticket = Ticket::new(app.metrics.clone(), slot);
    let (req, prepared) = read_and_prepare(&app, body).await?;
    let id = app.next_id.fetch_add(1, Ordering::Relaxed);
    tracing::info!(
        "request {id}: {} prompt tokens ({} for pictures), prepared in {:.2} s",
        prepared.input.input_ids.len(),
        prepared.image_tokens,
        t0.elapsed().as_secs_f64()
    );
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let job = Job {
        request: crate::engine::Request {
            id,
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
    let meta = Meta::new(&app.served_name, &app.model.source.fingerprint());
    let abort = app.abort.subscribe();
    if req.stream {
        let body = sse_body(rx, meta, abort, req.include_usage, req.logprobs);
        return Ok((
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            Body::from_stream(body),
        )
            .into_response());
    }
    let completion = collect(rx, meta, abort, &req).await?;
    if let Some(u) = completion.usage {
        tracing::info!(
            "request {id}: answered in {:.2} s: {} prompt tokens, {} generated",
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

/// Wait for the whole answer.
async fn collect(
    mut rx: UnboundedReceiver<Event>,
    meta: Meta,
    mut abort: watch::Receiver<bool>,
    req: &ChatCompletionRequest,
) -> Result<ChatCompletion, ApiError> {
    loop {
        let Some(event) = next_event(&mut rx, &mut abort).await else {
            return Err(cut_off());
        };
        match event {
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
