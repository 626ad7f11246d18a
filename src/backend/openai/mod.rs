//! The OpenAI backend: the phases' chat requests sent to an OpenAI-compatible server (`serve`, vLLM, SGLang, …) as
//! `POST /v1/chat/completions`, at most `concurrency` at a time, each answer handed to the sink as it arrives.
//!
//! Coordinates must map back exactly, so the client resizes every screenshot itself to its smart-resized size
//! under the run's pixel bounds (bit for bit as the local engine would) and sends it as a lossless PNG; a server
//! whose own bounds contain that size leaves it as it is (`docs/openai.md`). A request that keeps failing
//! (connection errors, timeouts, 5xx, after bounded retries; 429 past the time budget) or that the server refuses
//! (a prompt too long, say) is recorded as that prompt's error and redone on resume. A server that stops answering
//! connections, or whose prompt token counts show it prepares prompts otherwise than the run's checkpoint, stops
//! the phase ([`ServedStop`]): what was answered is saved, and the run says how to resume.

mod checks;
mod http;
mod pictures;
mod tally;
mod throttle;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::Value;

use tally::{Reply, Tally};

use super::{
    Backend, BackendInfo, BackendKind, ChatRequest, ChatResult, JobQueue, MakeRequest, Next,
    ServedInfo, Sink, Taker,
};
use crate::interrupt::Cancel;
use crate::openai::{chat_body, ApiKey, ChatCompletion, ClientParams, ModelCard, ModelList};
use crate::preprocess::ImageProcessorConfig;
use crate::records::{FinishReason, PhaseStats};
use crate::settings::{BatchLimits, ModelFamily};

/// How to reach a server and what to send it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiSettings {
    /// Base URL, ending in `/v1` (see [`normalize_endpoint`]).
    pub endpoint: String,
    /// The model id the server serves.
    pub api_model: String,
    /// The key, if the server needs one.
    pub api_key: Option<ApiKey>,
    /// Most requests in flight.
    pub concurrency: usize,
    /// Longest one HTTP call may take.
    pub request_timeout: Duration,
    /// Further tries of a request after a retryable failure.
    pub max_retries: u32,
    /// How screenshots are resized before they are sent (the pixel bounds of the run).
    pub image: ImageProcessorConfig,
    /// The served model's family (`--model-family`); `None`: what the server's model list says, else Qwen2.5-VL.
    pub family: Option<ModelFamily>,
    /// The longest time one request waits out busy answers (429) before it is recorded as failed (`--busy-wait`).
    pub busy_wait: Duration,
    /// Connection failures in a row, across all requests, after which the server counts as gone and the phase
    /// stops (`--max-connection-failures`; 0: never).
    pub max_connection_failures: usize,
    /// A checkpoint folder (`--model DIR`) whose tokenizer and chat template count each prompt's tokens, to compare
    /// with the server's `usage.prompt_tokens`; `None`: not compared.
    pub prompt_check: Option<PathBuf>,
}

/// Why a phase against a server stopped before its end.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServedStop {
    /// The server stopped answering connections.
    #[error("the server at {endpoint} cannot be reached ({why})")]
    Gone {
        /// Its base URL.
        endpoint: String,
        /// The failures in a row and their causes.
        why: String,
    },
    /// The server's prompt token counts differ from the checkpoint's.
    #[error("{0}")]
    Mismatch(String),
}

/// `http(s)://host[:port][/path]` without a trailing slash; a URL without a path gets `/v1` (the API's root, as
/// OpenAI clients' `base_url` has it).
pub(crate) fn normalize_endpoint(url: &str) -> Result<String> {
    let url = url.trim().trim_end_matches('/');
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        bail!("--endpoint {url}: expected an http:// or https:// URL such as http://127.0.0.1:8000/v1");
    };
    if rest.is_empty() || rest.starts_with('/') {
        bail!("--endpoint {url}: no host");
    }
    Ok(if rest.contains('/') {
        url.to_string()
    } else {
        format!("{url}/v1")
    })
}

/// A server that answers chat requests.
pub(crate) struct OpenAiBackend {
    settings: OpenAiSettings,
    client: http::Client,
    info: BackendInfo,
    limits: BatchLimits,
    cancel: Cancel,
    reach: Arc<http::Reachability>,
    throttle: Arc<throttle::Throttle>,
    count: Option<checks::PromptCount>,
    mismatch: Mutex<Option<String>>,
}

impl OpenAiBackend {
    /// Ask the server which models it serves (with retries, so a server still starting is waited for) and check
    /// that it serves `settings.api_model`; answers of up to `max_new_tokens` tokens will be asked for.
    pub fn connect(
        settings: OpenAiSettings,
        max_new_tokens: usize,
        cancel: Cancel,
    ) -> Result<Self> {
        let reach = Arc::new(http::Reachability::new(settings.max_connection_failures));
        let policy = crate::retry::Policy {
            retries: settings.max_retries,
            busy_budget: settings.busy_wait,
        };
        let client = http::Client::new(
            settings.api_key.clone(),
            settings.request_timeout,
            policy,
            cancel.clone(),
            reach.clone(),
        );
        let url = format!("{}/models", settings.endpoint);
        let listed = client.get(&url).result.map_err(anyhow::Error::msg)?;
        let models: ModelList = serde_json::from_value(listed)
            .map_err(|e| anyhow::anyhow!("{url}: not a model list: {e}"))?;
        let Some(card) = models.data.iter().find(|m| m.id == settings.api_model) else {
            let ids: Vec<&str> = models.data.iter().map(|m| m.id.as_str()).collect();
            bail!(
                "--api-model {}: the server at {} serves {ids:?}, not this model",
                settings.api_model,
                settings.endpoint
            );
        };
        // What identifies the served model: its id and, where the server tells, its checkpoint.
        let identity = format!(
            "openai-model\0{}\0{}",
            card.id,
            card.published
                .fingerprint
                .as_deref()
                .or(card.published.root.as_deref())
                .unwrap_or("")
        );
        let family = served_family(settings.family, card);
        let checked = checks::check_card(
            card,
            &settings.endpoint,
            &settings.image,
            family,
            max_new_tokens,
        )
        .map_err(anyhow::Error::msg)?;
        if let Some(w) = checked {
            tracing::warn!("{w}");
        }
        let count = settings
            .prompt_check
            .as_deref()
            .map(|dir| checks::PromptCount::new(dir, &settings.image))
            .transpose()
            .map_err(anyhow::Error::msg)?;
        let info = BackendInfo {
            model: settings.api_model.clone(),
            fingerprint: crate::fingerprint::sha256_hex(identity.as_bytes()),
            family,
            kind: BackendKind::Served(ServedInfo {
                endpoint: public_endpoint(&settings.endpoint),
                published: card.published.clone(),
            }),
        };
        let limits = BatchLimits {
            max_seqs: settings.concurrency.max(1),
            max_batch_tokens: 0,
            max_new_tokens,
        };
        let throttle = Arc::new(throttle::Throttle::new(settings.concurrency));
        let client = client.with_throttle(throttle.clone());
        Ok(Self {
            settings,
            client,
            info,
            limits,
            cancel,
            reach,
            throttle,
            count,
            mismatch: Mutex::new(None),
        })
    }

    /// Why the phase must stop, if it must: the server is gone, or its prompt counts differ from the checkpoint's.
    fn stop_reason(&self) -> Option<ServedStop> {
        if let Some(why) = self.reach.why_gone() {
            let endpoint = self.settings.endpoint.clone();
            return Some(ServedStop::Gone { endpoint, why });
        }
        let m = self.mismatch.lock().unwrap_or_else(|p| p.into_inner());
        m.clone().map(ServedStop::Mismatch)
    }

    /// Compare the server's prompt count with the checkpoint's (with `--model DIR`); a difference fails this
    /// request and stops the phase.
    fn check_count(
        &self,
        req: &ChatRequest,
        sizes: &[[u32; 2]],
        r: ChatResult,
    ) -> Result<ChatResult, String> {
        let Some(count) = &self.count else {
            return Ok(r);
        };
        if let Err(e) = count.check(&req.messages, sizes, r.prompt_tokens) {
            let mut m = self.mismatch.lock().unwrap_or_else(|p| p.into_inner());
            m.get_or_insert_with(|| e.clone());
            return Err(e);
        }
        Ok(r)
    }

    /// One request, from its pictures to its answer.
    fn ask(&self, req: &ChatRequest) -> (Result<ChatResult, String>, usize, usize) {
        let mut urls = Vec::with_capacity(req.images.len());
        let mut image_sizes = Vec::with_capacity(req.images.len());
        for path in &req.images {
            match pictures::png_at_model_size(path, &self.settings.image) {
                Ok((url, size)) => {
                    urls.push(url);
                    image_sizes.push(size);
                }
                Err(e) => return (Err(e), 0, 0),
            }
        }
        let params = ClientParams {
            model: &self.settings.api_model,
            max_tokens: req.max_new_tokens,
            temperature: 0.0,
            top_logprobs: (req.top_logprobs > 0).then_some(req.top_logprobs),
            ignore_eos: req.ignore_eos,
        };
        let body = match chat_body(&req.messages, &urls, &params) {
            Ok(b) => greedy(b),
            Err(e) => return (Err(format!("building the request: {e}")), 0, 0),
        };
        let url = format!("{}/chat/completions", self.settings.endpoint);
        let called = self.client.post(&url, &body);
        let sizes = image_sizes.clone();
        let result = called
            .result
            .and_then(|v| answer(&url, v, image_sizes))
            .and_then(|r| self.check_count(req, &sizes, r));
        (result, called.attempts, called.busy)
    }
}

/// `body` with every sampling setting of greedy decoding stated: a server fills the ones left out from the
/// checkpoint's `generation_config.json` (vLLM does; Qwen2.5-VL's sets `repetition_penalty` 1.05, `top_k` and
/// `top_p`), and a repetition penalty changes even a greedy answer. `top_k` -1 is "no limit" to vLLM and SGLang.
fn greedy(mut body: Value) -> Value {
    if let Some(map) = body.as_object_mut() {
        map.insert("top_p".into(), serde_json::json!(1.0));
        map.insert("top_k".into(), serde_json::json!(-1));
        map.insert("repetition_penalty".into(), serde_json::json!(1.0));
    }
    body
}

/// The family a served model is prompted as: `--model-family`, else the one the server's model card names, else
/// Qwen2.5-VL; the log says which and why.
fn served_family(flag: Option<ModelFamily>, card: &ModelCard) -> ModelFamily {
    if let Some(f) = flag {
        tracing::info!("model family {f}: from --model-family");
        return f;
    }
    let published = card.family.as_deref();
    match published.and_then(|t| ModelFamily::ALL.into_iter().find(|f| f.model_type() == t)) {
        Some(f) => {
            tracing::info!("model family {f}: as the server's /v1/models says");
            f
        }
        None => {
            let why = match published {
                Some(t) => format!("the server names an unknown family {t:?}"),
                None => "the server does not name one".into(),
            };
            let f = ModelFamily::Qwen25Vl;
            tracing::info!("model family {f}: the default ({why}; set --model-family otherwise)");
            f
        }
    }
}

/// A base URL as it may be recorded: without the credentials of `user:password@` and without a query.
pub(crate) fn public_endpoint(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{scheme}://{host}{path}")
}

/// A completion as the phase's result: the first choice's text, its finish reason and the server's token counts.
fn answer(url: &str, v: Value, image_sizes: Vec<[u32; 2]>) -> Result<ChatResult, String> {
    let c: ChatCompletion =
        serde_json::from_value(v).map_err(|e| format!("{url}: not a chat completion: {e}"))?;
    let Some(choice) = c.choices.into_iter().next() else {
        return Err(format!("{url}: the answer has no choice"));
    };
    let finish = match choice.finish_reason.as_deref() {
        Some("length") => FinishReason::Length,
        Some("stop") | None => FinishReason::Eos,
        Some(_) => FinishReason::Stopped,
    };
    let usage = c.usage.unwrap_or_default();
    Ok(ChatResult {
        text: choice.message.content.unwrap_or_default(),
        token_ids: Vec::new(),
        generated_tokens: usage.completion_tokens,
        stop_token: None,
        prompt_tokens: usage.prompt_tokens,
        finish,
        top_logprobs: Vec::new(),
        image_sizes,
    })
}

impl OpenAiBackend {
    /// A worker: take ready requests until none is left, a stop is requested or the run failed.
    fn work(
        &self,
        taker: &Mutex<Taker<'_>>,
        make: &MakeRequest<'_>,
        tx: mpsc::Sender<Reply>,
        halt: &AtomicBool,
    ) {
        let stop = || {
            halt.load(Ordering::Relaxed)
                || self.cancel.is_cancelled()
                || self.stop_reason().is_some()
        };
        while !stop() {
            let next = taker.lock().unwrap_or_else(|p| p.into_inner()).next(true);
            let index = match next {
                Next::Ready(i) => i,
                Next::Pending => continue,
                Next::Done => return,
            };
            let t0 = Instant::now();
            let (outcome, attempts, busy, images) = match make(index) {
                Ok(req) => {
                    let (o, a, b) = self.ask(&req);
                    (o, a, b, req.images.len())
                }
                Err(e) => (Err(format!("{e:#}")), 0, 0, 0),
            };
            let seconds = t0.elapsed().as_secs_f64();
            let reply = Reply {
                index,
                outcome,
                attempts,
                busy,
                seconds,
                images,
            };
            if tx.send(reply).is_err() {
                return;
            }
        }
    }
}

impl Backend for OpenAiBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn image_config(&self) -> &ImageProcessorConfig {
        &self.settings.image
    }

    fn limits(&self) -> BatchLimits {
        self.limits
    }

    /// Send up to `concurrency` requests at once from worker threads; the calling thread alone calls the sink (a
    /// sink may release further requests of `jobs`). A sink error stops taking requests; the ones in flight end.
    fn run(
        &self,
        jobs: &JobQueue,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats> {
        let t0 = Instant::now();
        let taker = Mutex::new(Taker::new(jobs));
        let halt = AtomicBool::new(false);
        let workers = self.settings.concurrency.max(1).min(jobs.count().max(1));
        let mut tally = Tally::default();
        let mut failure = None;
        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::channel();
            for _ in 0..workers {
                let tx = tx.clone();
                let (taker, halt) = (&taker, &halt);
                scope.spawn(move || self.work(taker, make, tx, halt));
            }
            drop(tx);
            for reply in rx {
                tally.add(&reply);
                if failure.is_some() {
                    continue;
                }
                if let Err(e) = sink(reply.index, reply.outcome, &tally.stats) {
                    halt.store(true, Ordering::Relaxed);
                    failure = Some(e);
                }
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        if let Some(stop) = self.stop_reason() {
            return Err(stop.into());
        }
        let lowest = self.throttle.lowest();
        if lowest < self.settings.concurrency {
            tracing::info!(
                "the server answered 429: as few as {lowest} of --concurrency {} requests were in flight at times",
                self.settings.concurrency
            );
        }
        let seconds = t0.elapsed().as_secs_f64();
        Ok(tally.finish(self.settings.concurrency, lowest, seconds))
    }
}

#[cfg(test)]
mod tests;
