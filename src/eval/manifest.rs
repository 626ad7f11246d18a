//! The records of a run's identity and cost: its settings (what a resume must share), its manifest, and
//! `throughput.json`.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::backend::{fingerprint, Backend};
use crate::engine::memory;
use crate::records::{
    JudgeSettings, Manifest, PhaseSummary, RunSettings, Throughput, Versions, LINE_SCHEMA_VERSION,
    MANIFEST_SCHEMA_VERSION,
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
            weights: info.weights.clone(),
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
        weights: info.weights.clone(),
        dtype: info.dtype.clone(),
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
) -> Manifest {
    let info = backend.info();
    let now = now_secs();
    Manifest {
        schema_version: MANIFEST_SCHEMA_VERSION,
        line_schema_version: LINE_SCHEMA_VERSION,
        settings,
        model_path: info.model_path.clone(),
        device: info.device.clone(),
        data: cfg.data.clone(),
        rules: cfg.rules.clone(),
        batch_limits: backend.limits(),
        kv_bytes_per_token: info.kv_bytes_per_token,
        ops: info.ops.clone(),
        versions: Versions::current(),
        started_at_unix: previous.as_ref().map_or(now, |p| p.started_at_unix),
        resumed_at_unix: previous.map(|_| now),
        finished_at_unix: None,
        shard: None,
        screenshots: Default::default(),
        served: cfg.served.as_ref().map(|s| served_record(cfg, s)),
        data_source: cfg.data_source.clone(),
    }
}

/// The manifest's record of the servers (never the key).
pub(super) fn served_record(cfg: &EvalConfig, s: &ServedConfig) -> crate::records::ServedRecord {
    let judge = match &cfg.judge {
        JudgeChoice::Served(j) => Some(j),
        _ => None,
    };
    crate::records::ServedRecord {
        endpoint: s.steps.endpoint.clone(),
        model: s.steps.api_model.clone(),
        judge_endpoint: judge.map(|j| j.endpoint.clone()),
        judge_model: judge.map(|j| j.api_model.clone()),
        concurrency: s.steps.concurrency,
        request_timeout_seconds: s.steps.request_timeout.as_secs_f64(),
        max_retries: s.steps.max_retries,
        busy_wait_seconds: Some(s.steps.busy_wait.as_secs_f64()),
        max_connection_failures: Some(s.steps.max_connection_failures),
        pixel_bounds_from: s.pixel_bounds_from.clone(),
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
