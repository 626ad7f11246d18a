//! The local backend: a checkpoint on this machine. Requests are built and prepared ahead on the rayon pool
//! (screenshot decode, smart-resize, patchify, chat template, tokenisation), generated with continuous batching by
//! the engine, and every outcome is handed to the sink as soon as it is known.

use std::cell::RefCell;

use anyhow::Result;

use super::{
    Backend, BackendInfo, ChatRequest, ChatResult, DeviceBackend, Jobs, LoadedModel, MakeRequest,
    Sink,
};
use crate::engine::{prefetch, BatchLimits, Engine, Generation, Request};
use crate::preprocess::{self, ImageProcessorConfig};
use crate::records::PhaseStats;

/// A loaded checkpoint with its batch limits.
pub struct LocalBackend {
    loaded: LoadedModel,
    limits: BatchLimits,
    info: BackendInfo,
    stop_tokens: Vec<u32>,
}

/// A request prepared for the engine, or why it could not be.
struct Prepared {
    index: usize,
    request: Result<Request, String>,
    image_sizes: Vec<[u32; 2]>,
    seconds: f64,
}

impl LocalBackend {
    /// Serve `loaded` under `limits`; `model` is the name the user gave it.
    pub fn new(model: &str, loaded: LoadedModel, limits: BatchLimits) -> Self {
        let m = &loaded.model;
        let info = BackendInfo {
            model: model.to_string(),
            model_path: loaded.dir.clone(),
            fingerprint: loaded.fingerprint.clone(),
            weights: loaded.weights.clone(),
            dtype: loaded.dtype_name(),
            device: loaded.device.to_string(),
            kv_bytes_per_token: m.kv_bytes_per_token(),
            ops: ops_record(m),
        };
        let mut stop_tokens = m.config().eos_token_ids.clone();
        if stop_tokens.is_empty() {
            stop_tokens = loaded.kit.tokenizer.stop_ids();
        }
        Self {
            loaded,
            limits,
            info,
            stop_tokens,
        }
    }

    /// The loaded checkpoint.
    pub fn loaded(&self) -> &LoadedModel {
        &self.loaded
    }

    /// Build and prepare request `index` (on a worker thread).
    fn prepare(&self, index: usize, make: &MakeRequest<'_>) -> Prepared {
        let t0 = std::time::Instant::now();
        let mut image_sizes = Vec::new();
        let request = make(index).and_then(|r| {
            let images = r
                .images
                .iter()
                .map(|p| preprocess::load_and_prepare(p, &self.loaded.kit.image))
                .collect::<Result<Vec<_>, _>>()?;
            image_sizes = images.iter().map(|i| i.resized_wh).collect();
            let (input, prefix_len) = self.loaded.kit.build_with_prefix(&r.messages, images)?;
            Ok(self.engine_request(index, &r, input, prefix_len))
        });
        Prepared {
            index,
            request: request.map_err(|e| format!("{e:#}")),
            image_sizes,
            seconds: t0.elapsed().as_secs_f64(),
        }
    }

    fn engine_request(
        &self,
        id: usize,
        r: &ChatRequest,
        input: crate::preprocess::ModelInput,
        prefix_len: usize,
    ) -> Request {
        Request {
            id,
            input,
            prefix_len,
            max_new_tokens: r.max_new_tokens,
            stop_tokens: if r.ignore_eos {
                Vec::new()
            } else {
                self.stop_tokens.clone()
            },
            top_logprobs: r.top_logprobs,
        }
    }

    fn result(&self, g: Generation, image_sizes: Vec<[u32; 2]>) -> Result<ChatResult> {
        Ok(ChatResult {
            text: self.loaded.kit.tokenizer.decode(&g.token_ids, true)?,
            token_ids: g.token_ids,
            stop_token: g.stop_token,
            prompt_tokens: g.prompt_tokens,
            finish: g.finish,
            top_logprobs: g.top_logprobs,
            image_sizes,
        })
    }
}

/// The ops record of the manifest: the fused ops and GEMM library, the decode attention mode and whether the
/// model sections are profiled.
fn ops_record(model: &crate::model::Qwen25VL) -> crate::records::OpsRecord {
    crate::records::OpsRecord {
        ops: model.ops_manifest(),
        decode_attention: model.decode_attention(),
        profiled: model.ops().config().profile,
    }
}

impl Backend for LocalBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn image_config(&self) -> &ImageProcessorConfig {
        &self.loaded.kit.image
    }

    fn limits(&self) -> BatchLimits {
        self.limits
    }

    fn local_model(&self) -> Option<&LoadedModel> {
        Some(&self.loaded)
    }

    fn profile_snapshot(&self) -> Option<crate::ops::ProfileSnapshot> {
        self.loaded.model.profile_snapshot()
    }

    fn run(&self, jobs: &Jobs, make: &MakeRequest<'_>, sink: &mut Sink<'_>) -> Result<PhaseStats> {
        let lookahead = self.limits.max_seqs.max(1) * 2;
        self.run_indices(&mut (0..jobs.count), jobs.count, lookahead, make, sink)
    }
}

impl DeviceBackend for LocalBackend {
    fn run_indices(
        &self,
        indices: &mut (dyn Iterator<Item = usize> + Send),
        count: usize,
        chunk: usize,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats> {
        let lookahead = self.limits.max_seqs.max(1) * 2;
        let sizes = RefCell::new(vec![Vec::new(); count]);
        let failure: RefCell<Option<anyhow::Error>> = RefCell::new(None);
        let sink = RefCell::new(sink);
        let mut stats = PhaseStats::default();
        std::thread::scope(|scope| -> Result<()> {
            let rx = prefetch(scope, indices, chunk, lookahead, |&i| self.prepare(i, make));
            let errors_seen = RefCell::new(0usize);
            let prep_seconds = RefCell::new(0f64);
            let requests = rx
                .into_iter()
                .inspect(|p| *prep_seconds.borrow_mut() += p.seconds)
                .map_while(|p| match p.request {
                    Ok(r) => {
                        sizes.borrow_mut()[p.index] = p.image_sizes;
                        Some(Some(r))
                    }
                    Err(msg) => {
                        *errors_seen.borrow_mut() += 1;
                        let snapshot = PhaseStats::default();
                        match (sink.borrow_mut())(p.index, Err(msg), &snapshot) {
                            Ok(()) => Some(None),
                            Err(e) => {
                                *failure.borrow_mut() = Some(e);
                                None
                            }
                        }
                    }
                });
            let mut engine = Engine::new(&self.loaded.model, self.limits);
            engine.run(requests.flatten(), &mut stats, |g, st| {
                let (id, image_sizes) = (g.id, std::mem::take(&mut sizes.borrow_mut()[g.id]));
                let result = self.result(g, image_sizes)?;
                (sink.borrow_mut())(id, Ok(result), st)
            })?;
            stats.errors += *errors_seen.borrow();
            stats.prepare_seconds += *prep_seconds.borrow();
            failure.borrow_mut().take().map_or(Ok(()), Err)
        })?;
        Ok(stats)
    }
}
