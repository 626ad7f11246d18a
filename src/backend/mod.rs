//! What the evaluation drives: a [`Backend`] answers chat requests (messages with image slots, plus the
//! screenshots that fill them) and hands each answer to a sink as soon as it is ready. [`LocalBackend`] runs a
//! checkpoint on this machine through the engine, [`MultiBackend`] several devices, [`OpenAiBackend`] an
//! OpenAI-compatible server over HTTP, all behind the same trait.

mod jobs;
mod local;
mod model;
mod multi;
pub mod openai;
mod prefetch;

use std::path::PathBuf;

use anyhow::Result;

pub use jobs::{JobQueue, Taker};
pub use local::LocalBackend;
pub use model::{choose_device, fingerprint, LoadedModel, ModelSource, ModelSpec};
pub use multi::MultiBackend;
pub(crate) use openai::{OpenAiBackend, OpenAiSettings, ServedStop};

use crate::engine::Next;
use crate::settings::BatchLimits;

use crate::preprocess::ImageProcessorConfig;
use crate::records::{FinishReason, OpsRecord, PhaseStats, PublishedModel};

/// One chat prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// Chat messages in the Hugging Face format; `{"type": "image"}` parts are filled by `images` in order.
    pub messages: serde_json::Value,
    /// The pictures of the image parts.
    pub images: Vec<PathBuf>,
    /// Most generated tokens.
    pub max_new_tokens: usize,
    /// Most likely (token, log-probability) pairs to report per generated position (0 = none).
    pub top_logprobs: usize,
    /// Generate exactly `max_new_tokens`, past end-of-sequence tokens.
    pub ignore_eos: bool,
}

/// The answer to one [`ChatRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResult {
    /// The generated text, special tokens removed.
    pub text: String,
    /// Generated token ids, the stop token excluded (empty from a served model, which reports counts only).
    pub token_ids: Vec<u32>,
    /// Generated tokens: `token_ids.len()` locally, the server's `completion_tokens` from a served model (which
    /// counts an end-of-sequence token).
    pub generated_tokens: usize,
    /// The stop token that ended generation, if one did.
    pub stop_token: Option<u32>,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Why generation stopped.
    pub finish: FinishReason,
    /// Per generated position, the most likely (id, log-probability), best first.
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
    /// `[w, h]` of each picture as the model saw it.
    pub image_sizes: Vec<[u32; 2]>,
}

/// What a backend is, for the run manifest: the model it answers with and, by kind, where it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendInfo {
    /// The model as named by the user (a served model: its id on the server).
    pub model: String,
    /// What identifies the model: a fingerprint of a checkpoint's config and safetensors headers, of random
    /// weights' seed, or of a served model's id and the checkpoint its server names.
    pub fingerprint: String,
    /// The model family (from the checkpoint's `config.json`; for a served model, `--model-family` or the server's
    /// model list, else Qwen2.5-VL).
    pub family: crate::settings::ModelFamily,
    /// A checkpoint on this machine or a served model.
    pub kind: BackendKind,
}

/// The kinds of backend.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendKind {
    /// A model on this machine, through the engine (boxed: its ops record is large).
    Local(Box<LocalInfo>),
    /// A model served over an OpenAI-compatible API.
    Served(ServedInfo),
}

/// A model on this machine.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalInfo {
    /// Where its weights came from.
    pub source: ModelSource,
    /// Activation dtype (`f32`, `bf16`, `f16`).
    pub dtype: String,
    /// The device it runs on (several joined by commas).
    pub device: String,
    /// KV-cache bytes per cached token.
    pub kv_bytes_per_token: usize,
    /// The fused ops and GEMM library it runs with.
    pub ops: OpsRecord,
}

/// A model served over an OpenAI-compatible API.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedInfo {
    /// The server's base URL (`…/v1`), without credentials or query.
    pub endpoint: String,
    /// What the server's model list publishes about the model.
    pub published: PublishedModel,
}

impl BackendInfo {
    /// Content fingerprint of the checkpoint's weight files; empty for random weights and a served model, whose
    /// files this program does not read.
    pub fn weights(&self) -> crate::fingerprint::FilesFingerprint {
        match &self.kind {
            BackendKind::Local(local) => match &local.source {
                ModelSource::Checkpoint { weights, .. } => weights.clone(),
                ModelSource::Random { .. } => Default::default(),
            },
            BackendKind::Served(_) => Default::default(),
        }
    }

    /// Where it runs: the local device(s), or the server's base URL.
    pub fn place(&self) -> &str {
        match &self.kind {
            BackendKind::Local(l) => &l.device,
            BackendKind::Served(s) => &s.endpoint,
        }
    }

    /// The activation dtype of a local model; `None` for a served one (its server does not say).
    pub fn dtype(&self) -> Option<&str> {
        match &self.kind {
            BackendKind::Local(l) => Some(&l.dtype),
            BackendKind::Served(_) => None,
        }
    }
}

/// A model on this machine's CPU, for the estimate of a run's time ([`Backend::cpu_facts`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuFacts {
    /// Parameters of the vision tower.
    pub vision_params: u64,
    /// Parameters of the language model.
    pub lm_params: u64,
    /// f32 matmul rate measured on this CPU (FLOP/s).
    pub flops_per_second: f64,
}

/// Receives each request's outcome: its index, the answer or why the request could not run (an unreadable
/// screenshot, say: recorded, not fatal), and the phase's counters so far.
pub type Sink<'a> = dyn FnMut(usize, Result<ChatResult, String>, &PhaseStats) -> Result<()> + 'a;

/// Builds request `i` of a phase (on a worker thread); an error is that request's outcome.
pub type MakeRequest<'a> = dyn Fn(usize) -> Result<ChatRequest> + Sync + 'a;

/// Something that answers chat requests.
///
/// A shared reference to a backend is a backend too, so a caller can lend its backends (e.g. to a
/// [`MultiBackend`]) and keep them.
pub trait Backend: Sync {
    /// What it is.
    fn info(&self) -> &BackendInfo;
    /// How it resizes pictures: the step prompt states the size the model sees.
    fn image_config(&self) -> &ImageProcessorConfig;
    /// The batch limits it runs under.
    fn limits(&self) -> BatchLimits;
    /// The token length of a prompt of `messages` whose pictures have the screen sizes `image_sizes` (`[w, h]`),
    /// counted without reading a picture (each is resized as the backend would resize it): for the checks before
    /// a phase. `None` when the backend cannot count (a served model: the server refuses a prompt too long, and
    /// that refusal is the prompt's recorded error).
    fn prompt_tokens(
        &self,
        messages: &serde_json::Value,
        image_sizes: &[[u32; 2]],
    ) -> Option<Result<usize>> {
        let _ = (messages, image_sizes);
        None
    }

    /// The size of a model that runs on this machine's CPU and an f32 matmul rate measured now (a brief
    /// measurement), for the estimate of a run's time; `None` elsewhere, and for models too small to need it
    /// (below [`crate::cpu_estimate::MIN_PARAMS`]).
    fn cpu_facts(&self) -> Result<Option<CpuFacts>> {
        Ok(None)
    }
    /// The model sections' timings so far, when profiling is on.
    fn profile_snapshot(&self) -> Option<crate::ops::ProfileSnapshot> {
        None
    }
    /// Answer every request of `jobs` as it becomes ready (built by `make`), calling `sink` with each outcome as
    /// soon as it is known (a sink may release further requests of `jobs`). Returns the phase's counters (wall time
    /// excluded).
    fn run(
        &self,
        jobs: &JobQueue,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats>;
}

impl<B: Backend + ?Sized> Backend for &B {
    fn info(&self) -> &BackendInfo {
        (**self).info()
    }
    fn image_config(&self) -> &ImageProcessorConfig {
        (**self).image_config()
    }
    fn limits(&self) -> BatchLimits {
        (**self).limits()
    }
    fn prompt_tokens(
        &self,
        messages: &serde_json::Value,
        image_sizes: &[[u32; 2]],
    ) -> Option<Result<usize>> {
        (**self).prompt_tokens(messages, image_sizes)
    }
    fn cpu_facts(&self) -> Result<Option<CpuFacts>> {
        (**self).cpu_facts()
    }
    fn profile_snapshot(&self) -> Option<crate::ops::ProfileSnapshot> {
        (**self).profile_snapshot()
    }
    fn run(
        &self,
        jobs: &JobQueue,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats> {
        (**self).run(jobs, make, sink)
    }
}

/// One device as a [`MultiBackend`] drives it: a [`Backend`] that can also answer requests pulled from a queue
/// shared with other devices. [`LocalBackend`] is one; anything that runs on (or stands in for) one device can be.
pub trait DeviceBackend: Backend {
    /// Answer the requests `taker` takes from a queue shared with other devices (indices below `count`), taking
    /// at most `chunk` at a time as they are prepared (so the queue is shared fairly), and calling `sink` with
    /// each outcome as soon as it is known. An error stops this device only: requests it took and did not answer
    /// are left for a resume.
    fn run_taking(
        &self,
        taker: Taker<'_>,
        count: usize,
        chunk: usize,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats>;
}

impl<D: DeviceBackend + ?Sized> DeviceBackend for &D {
    fn run_taking(
        &self,
        taker: Taker<'_>,
        count: usize,
        chunk: usize,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats> {
        (**self).run_taking(taker, count, chunk, make, sink)
    }
}
