//! The local backend: a checkpoint on this machine. Requests are built and prepared ahead on the rayon pool
//! (screenshot decode, smart-resize, patchify, chat template, tokenisation), generated with continuous batching by
//! the engine, and every outcome is handed to the sink as soon as it is known.

use std::cell::RefCell;

use anyhow::Result;

use super::prefetch::{prefetch, Feed};
use super::{
    Backend, BackendInfo, BackendKind, ChatRequest, ChatResult, DeviceBackend, JobQueue,
    LoadedModel, LocalInfo, MakeRequest, Sink, Taker,
};
use crate::engine::{Engine, Generation, Next, Request, RequestSource};
use crate::interrupt::Cancel;
use crate::preprocess::{self, ImageProcessorConfig};
use crate::records::PhaseStats;
use crate::settings::BatchLimits;

/// A loaded checkpoint with its batch limits.
pub struct LocalBackend {
    loaded: LoadedModel,
    limits: BatchLimits,
    info: BackendInfo,
    stop_tokens: Vec<u32>,
    cancel: Cancel,
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
            fingerprint: loaded.source.fingerprint(),
            family: m.family(),
            kind: BackendKind::Local(Box::new(LocalInfo {
                source: loaded.source.clone(),
                dtype: loaded.dtype_name(),
                device: loaded.device.to_string(),
                kv_bytes_per_token: m.kv_bytes_per_token(),
                ops: ops_record(m),
            })),
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
            cancel: Cancel::new(),
        }
    }

    /// Stop admitting requests once `cancel` is set (the running ones finish and are handed over).
    pub(crate) fn with_cancel(mut self, cancel: Cancel) -> Self {
        self.cancel = cancel;
        self
    }

    /// The loaded checkpoint.
    pub fn loaded(&self) -> &LoadedModel {
        &self.loaded
    }

    /// The exact token length of a prompt whose pictures have the screen sizes `image_sizes`, without decoding a
    /// picture: an image's token count depends only on its smart-resized size, so the prompt is built with images
    /// of that grid and no pixels.
    fn count_prompt_tokens(
        &self,
        messages: &serde_json::Value,
        image_sizes: &[[u32; 2]],
    ) -> Result<usize> {
        let im = &self.loaded.kit.image;
        let grids = image_sizes
            .iter()
            .map(|&[w, h]| {
                let (rh, rw) = crate::preprocess::smart_resize(
                    h as usize,
                    w as usize,
                    im.factor(),
                    im.min_pixels,
                    im.max_pixels,
                )?;
                Ok(crate::preprocess::PreparedImage {
                    patches: Vec::new(),
                    grid_thw: [1, rh / im.patch_size, rw / im.patch_size],
                    resized_wh: [rw as u32, rh as u32],
                    original_wh: [w, h],
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.loaded.kit.build(messages, grids)?.input_ids.len())
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
            sampling: crate::engine::Sampling::Greedy,
        }
    }

    fn result(&self, g: Generation, image_sizes: Vec<[u32; 2]>) -> Result<ChatResult> {
        Ok(ChatResult {
            text: self.loaded.kit.tokenizer.decode(&g.token_ids, true)?,
            generated_tokens: g.token_ids.len(),
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
fn ops_record(model: &crate::model::VlModel) -> crate::records::OpsRecord {
    crate::records::OpsRecord {
        ops: model.ops_manifest(),
        decode_attention: Some(model.decode_attention()),
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

    fn prompt_tokens(
        &self,
        messages: &serde_json::Value,
        image_sizes: &[[u32; 2]],
    ) -> Option<Result<usize>> {
        Some(self.count_prompt_tokens(messages, image_sizes))
    }

    fn cpu_facts(&self) -> Result<Option<super::CpuFacts>> {
        let m = &self.loaded.model;
        if !m.device().is_cpu() {
            return Ok(None);
        }
        let (vision_params, lm_params) = crate::model::flops::param_counts(m.config());
        if vision_params + lm_params < crate::cpu_estimate::MIN_PARAMS {
            return Ok(None);
        }
        // A brief measurement (a few 1024³ GEMMs, well under a second).
        let (rate, _) =
            crate::ops::matmul_peak(m.device(), candle_core::DType::F32, 1024, m.ops().blas())?;
        Ok(Some(super::CpuFacts {
            vision_params,
            lm_params,
            flops_per_second: rate,
        }))
    }

    fn profile_snapshot(&self) -> Option<crate::ops::ProfileSnapshot> {
        self.loaded.model.profile_snapshot()
    }

    fn run(
        &self,
        jobs: &JobQueue,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats> {
        let lookahead = self.limits.max_seqs.max(1) * 2;
        self.run_taking(Taker::sole(jobs), jobs.count(), lookahead, make, sink)
    }
}

/// The engine's source of one device: prepared requests in the order taken; a request that could not be prepared
/// is handed to the sink at once as that request's outcome.
struct DeviceSource<'a, 'b, 'c> {
    rx: std::sync::mpsc::Receiver<Prepared>,
    feed: &'a Feed<'a>,
    sizes: &'a RefCell<Vec<Vec<[u32; 2]>>>,
    sink: &'a RefCell<&'b mut Sink<'c>>,
    failure: &'a RefCell<Option<anyhow::Error>>,
    errors: usize,
    prepare_seconds: f64,
}

impl RequestSource for DeviceSource<'_, '_, '_> {
    fn next(&mut self, wait: bool) -> Next<Request> {
        loop {
            let received = if wait || self.feed.coming() {
                self.rx.recv().ok()
            } else {
                match self.rx.try_recv() {
                    Ok(p) => Some(p),
                    Err(std::sync::mpsc::TryRecvError::Empty) => return Next::Pending,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => None,
                }
            };
            let Some(p) = received else {
                return Next::Done;
            };
            self.feed.received();
            self.prepare_seconds += p.seconds;
            match p.request {
                Ok(r) => {
                    self.sizes.borrow_mut()[p.index] = p.image_sizes;
                    return Next::Ready(r);
                }
                Err(msg) => {
                    self.errors += 1;
                    let snapshot = PhaseStats::default();
                    if let Err(e) = (self.sink.borrow_mut())(p.index, Err(msg), &snapshot) {
                        *self.failure.borrow_mut() = Some(e);
                        return Next::Done;
                    }
                }
            }
        }
    }
}

impl DeviceBackend for LocalBackend {
    fn run_taking(
        &self,
        taker: Taker<'_>,
        count: usize,
        chunk: usize,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats> {
        let lookahead = self.limits.max_seqs.max(1) * 2;
        let sizes = RefCell::new(vec![Vec::new(); count]);
        let failure: RefCell<Option<anyhow::Error>> = RefCell::new(None);
        let sink = RefCell::new(sink);
        let feed = Feed::new(taker);
        let mut stats = PhaseStats::default();
        std::thread::scope(|scope| -> Result<()> {
            let rx = prefetch(scope, &feed, chunk, lookahead, |&i| self.prepare(i, make));
            let mut source = DeviceSource {
                rx,
                feed: &feed,
                sizes: &sizes,
                sink: &sink,
                failure: &failure,
                errors: 0,
                prepare_seconds: 0.0,
            };
            let mut engine = Engine::new(&self.loaded.model, self.limits, self.cancel.clone());
            let mut on_done = |g: Generation, st: &PhaseStats| {
                let (id, image_sizes) = (g.id, std::mem::take(&mut sizes.borrow_mut()[g.id]));
                let result = self.result(g, image_sizes)?;
                (sink.borrow_mut())(id, Ok(result), st)
            };
            let ran = engine.run(&mut source, &mut stats, &mut on_done);
            // The preparing thread stops waiting for releases, and the scope can end.
            feed.stop();
            drop(source.rx);
            ran?;
            stats.errors += source.errors;
            stats.prepare_seconds += source.prepare_seconds;
            failure.borrow_mut().take().map_or(Ok(()), Err)
        })?;
        Ok(stats)
    }
}
