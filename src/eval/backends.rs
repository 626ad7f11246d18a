//! The backends of a run: the step prompts' (a checkpoint on the run's devices, or a server) and the judge's.

use anyhow::{Context, Result};

use crate::backend::{
    Backend, LoadedModel, LocalBackend, ModelSpec, MultiBackend, OpenAiBackend, OpenAiSettings,
};
use crate::settings::BatchLimits;

use super::config::{EvalConfig, JudgeChoice};

/// The judge model's spec, if there is an aggregation phase.
pub(super) fn judge_spec(cfg: &EvalConfig) -> Option<ModelSpec> {
    match &cfg.judge {
        JudgeChoice::SameModel => Some(cfg.model.clone()),
        JudgeChoice::Other(m) => Some(ModelSpec {
            model: m.clone(),
            ..cfg.model.clone()
        }),
        JudgeChoice::None | JudgeChoice::Served(_) => None,
    }
}

/// The backend of the step prompts: the server of `--backend openai`, else the checkpoint on the run's devices.
pub(crate) fn step_backend(cfg: &EvalConfig) -> Result<Box<dyn Backend>> {
    match &cfg.served {
        Some(s) => Ok(Box::new(connect(cfg, &s.steps)?)),
        None => load_backend(cfg, &cfg.model),
    }
}

/// A server's backend for this run.
pub(super) fn connect(cfg: &EvalConfig, s: &OpenAiSettings) -> Result<OpenAiBackend> {
    OpenAiBackend::connect(s.clone(), cfg.max_new_tokens, cfg.cancel.clone())
        .with_context(|| format!("connecting to {}", s.endpoint))
}

/// The judge phase's backend (`None` without a judge phase): the step backend itself, or another model loaded or
/// reached once the step backend is dropped (one model in memory at a time).
pub(super) fn judge_backend(
    cfg: &EvalConfig,
    steps: Box<dyn Backend>,
) -> Result<Option<Box<dyn Backend>>> {
    Ok(match &cfg.judge {
        JudgeChoice::None => None,
        JudgeChoice::SameModel => Some(steps),
        JudgeChoice::Other(m) => {
            drop(steps);
            let spec = ModelSpec {
                model: m.clone(),
                ..cfg.model.clone()
            };
            Some(load_backend(cfg, &spec)?)
        }
        JudgeChoice::Served(s) => {
            drop(steps);
            Some(Box::new(connect(cfg, s)?))
        }
    })
}

/// Load a checkpoint of `spec` on each of the run's devices, each under its own batch limits (budget from its own
/// free memory).
pub fn load_devices(cfg: &EvalConfig, spec: &ModelSpec) -> Result<Vec<LocalBackend>> {
    cfg.devices
        .iter()
        .map(|&device| {
            let spec = ModelSpec {
                device,
                ..spec.clone()
            };
            let loaded = LoadedModel::load(&spec)?;
            let context = loaded.model.config().text.max_position_embeddings;
            crate::validate::new_tokens_fit_context(cfg.max_new_tokens, context)
                .with_context(|| format!("model {}", spec.model))?;
            let limits = BatchLimits::auto(
                &loaded.model,
                cfg.batch_size,
                cfg.max_new_tokens,
                cfg.max_batch_tokens,
            );
            Ok(LocalBackend::new(&spec.model, loaded, limits).with_cancel(cfg.cancel.clone()))
        })
        .collect()
}

/// The run's backend for `spec`: one device's checkpoint, or several sharing the work through a
/// [`MultiBackend`].
pub(crate) fn load_backend(cfg: &EvalConfig, spec: &ModelSpec) -> Result<Box<dyn Backend>> {
    let mut devices = load_devices(cfg, spec)?;
    if devices.len() == 1 {
        Ok(Box::new(devices.remove(0)))
    } else {
        Ok(Box::new(MultiBackend::local(devices)?))
    }
}
