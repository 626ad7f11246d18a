//! Issue 18's checks around `eval`'s phases, kept out of the engine so that the engine only holds one-line calls:
//! the largest prompt must fit an explicit `--max-batch-tokens`, a real checkpoint on the CPU gets a time
//! estimate, and after Ctrl-C/SIGTERM the run stops between phases with what is saved and how to resume.

use anyhow::Result;
use serde_json::Value;

use crate::dataset::Benchmark;
use crate::engine::rundir::completed_keys;
use crate::engine::{EvalConfig, JudgeChoice, LoadedModel};

/// Issue 18: after a Ctrl-C or SIGTERM, stop with [`crate::interrupt::Interrupted`] (what is done, how to resume).
pub fn stop_if_interrupted(
    cfg: &EvalConfig,
    unit: &'static str,
    total: usize,
    key: fn(&Value) -> Option<String>,
) -> Result<()> {
    if !crate::interrupt::requested() {
        return Ok(());
    }
    let file = if unit == "steps" {
        "predictions.jsonl"
    } else {
        "judgements.jsonl"
    };
    let done = completed_keys(&cfg.out.join(file), key)?.len().min(total);
    crate::interrupt::Interrupted::check(done, total, unit, &cfg.out)
        .map_or(Ok(()), |e| Err(e.into()))
}

/// Issue 18, before the steps phase: with an explicit `--max-batch-tokens`, the first pending step (the largest
/// screenshot with the longest history: `pending_steps` sorts so) must fit with `--max-new-tokens`; and a real
/// checkpoint on the CPU gets an estimate of the run's time.
pub fn first_prompt_checks(
    cfg: &EvalConfig,
    bench: &Benchmark,
    model: &LoadedModel,
    jobs: &[(usize, usize)],
) -> Result<()> {
    let Some(&(ti, si)) = jobs.first() else {
        return Ok(());
    };
    let traj = &bench.trajectories[ti];
    // A step that cannot be prepared is recorded as an error by the phase itself.
    let Ok((input, _)) =
        crate::engine::prepare::step_input(&model.kit, bench, traj, si, cfg.system_prompt)
    else {
        return Ok(());
    };
    if let Some(limit) = cfg.max_batch_tokens {
        let what = format!("trajectory {} step {si}", traj.id);
        crate::validate::prompt_fits(&what, input.input_ids.len(), cfg.max_new_tokens, limit)?;
    }
    if model.model.device().is_cpu() {
        let image_tokens = |t: &crate::dataset::Trajectory| -> u64 {
            let im = &model.kit.image;
            let (w, h) = (t.image_width as usize, t.image_height as usize);
            crate::preprocess::smart_resize(h, w, im.factor(), im.min_pixels, im.max_pixels)
                .map_or(0, |(h, w)| (h * w / (im.factor() * im.factor())) as u64)
        };
        let text = (input.input_ids.len() as u64).saturating_sub(image_tokens(traj));
        let judged = if matches!(cfg.judge, JudgeChoice::None) {
            0
        } else {
            bench.trajectories.len()
        };
        let images: u64 = jobs
            .iter()
            .map(|&(t, _)| image_tokens(&bench.trajectories[t]))
            .sum::<u64>()
            + bench
                .trajectories
                .iter()
                .take(judged)
                .map(image_tokens)
                .sum::<u64>();
        let prompts = jobs.len() + judged;
        let (vision_params, lm_params) = crate::bench::random::param_counts(model.model.config());
        let work = crate::cpu_estimate::Workload {
            vision_params,
            lm_params,
            vision_patches: 4 * images,
            prompt_tokens: images + text * prompts as u64,
            new_tokens: (cfg.max_new_tokens * prompts) as u64,
        };
        if vision_params + lm_params >= crate::cpu_estimate::MIN_PARAMS {
            let (rate, _) =
                crate::bench::matmul_peak(model.model.device(), candle_core::DType::F32, 1024)?;
            if let Some(w) = crate::cpu_estimate::cpu_warning(&work, prompts, rate) {
                tracing::warn!("{w}");
            }
        }
    }
    Ok(())
}
