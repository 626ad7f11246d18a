//! The records of a run's identity and cost: its settings (what a resume must share), its manifest, and
//! `throughput.json`.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::backend::openai::public_endpoint;
use crate::backend::{fingerprint, Backend, BackendInfo, BackendKind, ModelSource, ServedInfo};
use crate::engine::memory;
use crate::records::{
    BackendRecord, JudgeSettings, LocalRecord, Manifest, PhaseSummary, RunSettings, ServedRecord,
    Throughput, Versions, LINE_SCHEMA_VERSION, MANIFEST_SCHEMA_VERSION,
};
use crate::settings::BatchLimits;

use super::backends::{connect, judge_spec};
use super::config::{EvalConfig, JudgeChoice, ServedConfig};
use super::prompts;

pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Everything that changes the predictions or verdicts: a resumed run must have the same.
pub(super) fn settings(cfg: &EvalConfig, backend: &dyn Backend) -> Result<RunSettings> {
    let data = cfg.data.join(crate::dataset::DATA_FILE);
    let bytes = std::fs::read(&data).with_context(|| format!("reading {}", data.display()))?;
    let info = backend.info();
    // A served model is named by its id on the server; a checkpoint as `--model` gave it.
    let model = match &cfg.served {
        Some(_) => info.model.clone(),
        None => cfg.model.model.clone(),
    };
    let judge = match (&cfg.judge, judge_spec(cfg)) {
        (JudgeChoice::SameModel, _) => Some(JudgeSettings {
            model: model.clone(),
            hash: info.fingerprint.clone(),
            weights: info.weights(),
        }),
        (JudgeChoice::Served(s), _) => Some(JudgeSettings {
            model: s.api_model.clone(),
            hash: connect(cfg, s)?.info().fingerprint.clone(),
            weights: Default::default(),
        }),
        (_, Some(spec)) => {
            let files = crate::model::ModelFiles::resolve(&spec.model, &spec.hub)
                .with_context(|| format!("--judge-model {}", spec.model))?;
            Some(JudgeSettings {
                model: spec.model,
                hash: fingerprint(&files)?,
                weights: crate::fingerprint::of_files(&files.weights)?,
            })
        }
        (_, None) => None,
    };
    Ok(RunSettings {
        model,
        model_hash: info.fingerprint.clone(),
        weights: info.weights(),
        dtype: info.dtype().map(str::to_string),
        data_hash: crate::fingerprint::sha256_hex(&bytes),
        prompt_hashes: prompts::template_hashes()
            .into_iter()
            .chain(
                cfg.semi_online
                    .map(prompts::procedure_template_hashes)
                    .unwrap_or_default(),
            )
            .chain(prompts::family_template_hashes(cfg.family))
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        system_prompt: cfg.system_prompt,
        coordinate_frame: cfg.frame(),
        image_processor: backend.image_config().clone(),
        max_new_tokens: cfg.max_new_tokens,
        judge,
        version: env!("CARGO_PKG_VERSION").into(),
        shard: None,
        history: cfg.history(),
        family: info.family,
    })
}

/// The manifest of a run starting (or resuming) now.
pub(super) fn manifest(
    cfg: &EvalConfig,
    backend: &dyn Backend,
    settings: RunSettings,
    previous: Option<Manifest>,
) -> Result<Manifest> {
    let now = now_secs();
    Ok(Manifest {
        schema_version: MANIFEST_SCHEMA_VERSION,
        line_schema_version: LINE_SCHEMA_VERSION,
        settings,
        backend: backend_record(cfg, backend.info())?,
        data: cfg.data.clone(),
        rules: cfg.rules.clone(),
        batch_limits: backend.limits(),
        versions: Versions::current(),
        started_at_unix: previous.as_ref().map_or(now, |p| p.started_at_unix),
        resumed_at_unix: previous.map(|_| now),
        finished_at_unix: None,
        shard: None,
        screenshots: Default::default(),
        data_source: cfg.data_source.clone(),
    })
}

/// The manifest's record of what answered the step prompts: the checkpoint, or the servers (never the key).
fn backend_record(cfg: &EvalConfig, info: &BackendInfo) -> Result<BackendRecord> {
    match (&info.kind, &cfg.served) {
        (BackendKind::Local(local), None) => {
            let ModelSource::Checkpoint { dir, .. } = &local.source else {
                anyhow::bail!("model {}: a run's model is a checkpoint", info.model);
            };
            Ok(BackendRecord::Local(LocalRecord {
                model_path: dir.clone(),
                device: local.device.clone(),
                kv_bytes_per_token: local.kv_bytes_per_token,
                ops: local.ops.clone(),
            }))
        }
        (BackendKind::Served(served), Some(s)) => {
            Ok(BackendRecord::Served(served_record(cfg, s, info, served)))
        }
        _ => anyhow::bail!(
            "model {}: the backend is not the one configured",
            info.model
        ),
    }
}

/// The manifest's record of the servers (never the key).
fn served_record(
    cfg: &EvalConfig,
    s: &ServedConfig,
    info: &BackendInfo,
    served: &ServedInfo,
) -> ServedRecord {
    let judge = match &cfg.judge {
        JudgeChoice::Served(j) => Some(j),
        _ => None,
    };
    ServedRecord {
        endpoint: served.endpoint.clone(),
        model: info.model.clone(),
        judge_endpoint: judge.map(|j| public_endpoint(&j.endpoint)),
        judge_model: judge.map(|j| j.api_model.clone()),
        concurrency: s.steps.concurrency,
        request_timeout_seconds: s.steps.request_timeout.as_secs_f64(),
        max_retries: s.steps.max_retries,
        busy_wait_seconds: Some(s.steps.busy_wait.as_secs_f64()),
        max_connection_failures: Some(s.steps.max_connection_failures),
        pixel_bounds_from: s.pixel_bounds_from.clone(),
        published: served.published.clone(),
    }
}

/// `throughput.json` of a run: its phases, peak memory, and the step model's profile when one was taken.
pub(super) fn throughput(
    phases: Vec<PhaseSummary>,
    limits: BatchLimits,
    profile: Option<crate::ops::ProfileSnapshot>,
) -> Throughput {
    let mut t = Throughput::new(phases, limits);
    t.peak_rss_bytes = memory::peak_rss_bytes();
    t.peak_device_bytes = t
        .phases
        .iter()
        .filter_map(|p| p.stats.peak_device_bytes)
        .max();
    t.profile = profile;
    t
}
