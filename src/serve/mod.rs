//! `serve`: the checkpoint behind an OpenAI-compatible HTTP API (axum on tokio). Every request goes into the same
//! continuous batcher `eval` uses: one engine loop on its own thread owns the model and is fed by a channel
//! ([`worker`]); pictures are decoded, resized, templated and tokenised on blocking threads first ([`prepare`]), so
//! concurrent clients are batched together, and a greedy answer is the one `eval` gets for the same prompt.
//!
//! Made for a shared machine: it binds to the loopback interface unless told otherwise, and then refuses to start
//! without an API key; the queue is bounded (beyond it, 429 with a `Retry-After` from the queue and the recent
//! answers); a body is read only once its request holds a queue slot and one of the few preparing places; bodies,
//! text, pictures per request and pixels per picture are capped, and a prompt that cannot fit the context is
//! refused from the text's length and the pictures' headers, before anything is tokenised or decoded; connections
//! are capped, each request head has a deadline and an idle kept-alive connection is closed ([`listen`](mod@listen)); a bad request gets a 4xx in OpenAI's error shape.
//! Ctrl-C or SIGTERM answers new requests 503, lets the requests in flight finish within a deadline, then returns
//! (a second one exits at once).

mod body;
mod idle;
mod listen;
mod meta;
mod metrics;
mod prepare;
mod routes;
mod stream;
mod text;
mod worker;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};

pub use listen::ConnLimits;
pub use metrics::Metrics;
pub(crate) use prepare::RequestLimits;

use crate::backend::{LoadedModel, ModelSpec};
use crate::openai::ApiKey;
use crate::settings::BatchLimits;

/// Everything `serve` needs, checked by the command layer.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The checkpoint and how to load it.
    pub model: ModelSpec,
    /// The name clients ask for (`--served-model-name`; default `--model` as given).
    pub served_name: String,
    /// The address to bind.
    pub host: IpAddr,
    /// The port (0: one the system picks; the address is printed).
    pub port: u16,
    /// Most sequences in the batch (`--batch-size`).
    pub batch_size: usize,
    /// Token budget of the batch; from free memory when `None`.
    pub max_batch_tokens: Option<usize>,
    /// Most requests waiting beyond the running batch (`--max-queue`); more get 429.
    pub max_queue: usize,
    /// What one request may hold.
    pub limits: RequestLimits,
    /// Most requests reading or preparing their body at once (`--max-preparing`).
    pub max_preparing: usize,
    /// The connection bounds.
    pub conn: ConnLimits,
    /// The key clients must send.
    pub api_key: Option<ApiKey>,
}

impl ServeConfig {
    /// Refuse a configuration unsafe on a shared machine: a host other than loopback without an API key.
    pub fn check(&self) -> Result<()> {
        if !self.host.is_loopback() && self.api_key.is_none() {
            bail!(
                "--host {} is reachable from other machines: set an API key with --api-key-env VAR (the name of an \
                 environment variable holding it), or bind to 127.0.0.1",
                self.host
            );
        }
        Ok(())
    }
}

/// Image tokens of the largest picture `serve` takes without `--max-pixels`: `max_pixels` is this many merged
/// patches (1280 · 28² = 1,003,520 pixels for Qwen2.5-VL, 1280 · 32² for Qwen3-VL), or the checkpoint's own when
/// smaller. A picture then costs at most 1280 prompt tokens, a twelfth of the 16384 the checkpoints' own bounds
/// allow, so one large screenshot's prefill (the engine prefills a prompt whole) does not stall the batch for long.
pub const SERVE_IMAGE_TOKENS: u64 = 1280;

/// The checkpoint's `max_pixels` capped at [`SERVE_IMAGE_TOKENS`], unless `--max-pixels` set it.
fn serve_pixel_default(model: &mut LoadedModel, spec: &ModelSpec) {
    if spec.max_pixels.is_some() {
        return;
    }
    let im = &model.kit.image;
    let factor = im.factor() as u64;
    let max = im
        .max_pixels
        .min(SERVE_IMAGE_TOKENS * factor * factor)
        .max(im.min_pixels);
    model.kit.image = im.clone().with_pixel_bounds(im.min_pixels, max);
}

/// Load the checkpoint, serve until Ctrl-C or SIGTERM, finish what is in flight, and return.
pub fn run(cfg: ServeConfig) -> Result<()> {
    cfg.check()?;
    let mut loaded = LoadedModel::load(&cfg.model)?;
    serve_pixel_default(&mut loaded, &cfg.model);
    let model = Arc::new(loaded);
    let context = model.model.config().text.max_position_embeddings;
    crate::validate::new_tokens_fit_context(cfg.limits.max_new_tokens, context)?;
    let limits = BatchLimits::auto(
        &model.model,
        cfg.batch_size,
        cfg.limits.max_new_tokens,
        cfg.max_batch_tokens,
    );
    let mut request_limits = cfg.limits;
    // A request must fit the model's positions and, when the budget was set by hand, the batch's token budget.
    request_limits.context_tokens = request_limits
        .context_tokens
        .min(model.model.config().text.max_position_embeddings)
        .min(cfg.max_batch_tokens.unwrap_or(usize::MAX));
    request_limits.longest_token_bytes = text::longest_token_bytes(&model.kit.tokenizer);
    let mut stop_tokens = model.model.config().eos_token_ids.clone();
    if stop_tokens.is_empty() {
        stop_tokens = model.kit.tokenizer.stop_ids();
    }
    let metrics = Arc::new(Metrics::default());
    let (jobs, rx) = std::sync::mpsc::channel();
    let engine = {
        let (model, metrics) = (model.clone(), metrics.clone());
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || worker::run(model, limits, rx, metrics))
            .context("starting the engine thread")?
    };
    let total_slots = cfg.batch_size.max(1) + cfg.max_queue;
    let app = Arc::new(routes::App {
        model,
        served_name: cfg.served_name.clone(),
        limits: request_limits,
        stop_tokens,
        slots: Arc::new(tokio::sync::Semaphore::new(total_slots)),
        total_slots,
        preparing: tokio::sync::Semaphore::new(cfg.max_preparing.max(1)),
        body_timeout: cfg.conn.body_timeout,
        abort: tokio::sync::watch::channel(false).0,
        jobs: Mutex::new(Some(jobs)),
        metrics,
        api_key: cfg.api_key.clone(),
        stopping: AtomicBool::new(false),
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        next_id: AtomicUsize::new(0),
    });
    let im = &app.model.kit.image;
    tracing::info!(
        "batch limits {limits:?}; request limits {request_limits:?}; pictures resized within {}..={} pixels; \
         {} preparing at once; connections {:?}",
        im.min_pixels,
        im.max_pixels,
        cfg.max_preparing,
        cfg.conn
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(listen(&cfg, app.clone()));
    // No new job can come: the engine finishes what it holds and its thread ends.
    app.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
    // A preparation still running (its client gone) is not waited for long.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    // Past the shutdown deadline the engine is not waited for: the process ends with it.
    if served.is_ok() {
        engine
            .join()
            .map_err(|_| anyhow::anyhow!("the engine thread panicked"))?;
    }
    served
}

/// Bind, say where, and serve until a stop signal; the requests in flight are answered before it returns.
async fn listen(cfg: &ServeConfig, app: Arc<routes::App>) -> Result<()> {
    let addr = SocketAddr::new(cfg.host, cfg.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr} (--host, --port)"))?;
    let local = listener.local_addr()?;
    // The one line on stdout: scripts (and the tests) read the address from it.
    println!(
        "mobile-r1-eval serve: listening on http://{local}/v1 (model `{}`)",
        cfg.served_name
    );
    let auth = if cfg.api_key.is_some() {
        "an API key is required"
    } else {
        "no API key"
    };
    tracing::info!("serving {} on http://{local}/v1; {auth}", cfg.model.model);
    listen::serve(listener, app, cfg.conn).await
}

/// The next Ctrl-C or SIGTERM (its name).
pub(crate) async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return "Ctrl-C";
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => "Ctrl-C",
            _ = term.recv() => "SIGTERM",
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}
