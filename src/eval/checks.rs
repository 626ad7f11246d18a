//! Checks around `eval`'s phases: the largest prompt must fit an explicit `--max-batch-tokens`, a real checkpoint
//! on the CPU gets a time estimate, and after Ctrl-C/SIGTERM the run stops between phases with what is saved and
//! how to resume.

use anyhow::Result;

use super::{rundir, EvalConfig, JudgeChoice};
use crate::backend::LoadedModel;
use crate::dataset::Benchmark;

/// After a Ctrl-C or SIGTERM, stop with [`crate::interrupt::Interrupted`] (what is done, how to resume); `unit` is
/// `steps` (counted in `predictions.jsonl`) or `judged trajectories` (in `judgements.jsonl`).
pub fn stop_if_interrupted(cfg: &EvalConfig, unit: &'static str, total: usize) -> Result<()> {
    if !crate::interrupt::requested() {
        return Ok(());
    }
    let done = if unit == "steps" {
        rundir::completed_steps(&cfg.out.join("predictions.jsonl"))?.len()
    } else {
        rundir::completed_trajectories(&cfg.out.join("judgements.jsonl"))?.len()
    }
    .min(total);
    crate::interrupt::Interrupted::check(done, total, unit, &cfg.out)
        .map_or(Ok(()), |e| Err(e.into()))
}

/// Before the steps phase: with an explicit `--max-batch-tokens`, the longest pending step prompt must
/// fit with `--max-new-tokens` (the error names it); and a real checkpoint on the CPU gets an estimate of the run's
/// time. Both use exact prompt lengths computed without decoding a screenshot (see [`step_prompt_tokens`]).
pub fn first_prompt_checks(
    cfg: &EvalConfig,
    bench: &Benchmark,
    model: &LoadedModel,
    jobs: &[(usize, usize)],
) -> Result<()> {
    let (vision_params, lm_params) = crate::model::flops::param_counts(model.model.config());
    let estimate = model.model.device().is_cpu()
        && vision_params + lm_params >= crate::cpu_estimate::MIN_PARAMS;
    if cfg.max_batch_tokens.is_none() && !estimate {
        return Ok(());
    }
    // Steps whose prompt cannot be built are recorded as errors by the phase itself.
    let lens: Vec<((usize, usize), usize)> = jobs
        .iter()
        .filter_map(|&j| step_prompt_tokens(cfg, bench, model, j).map(|n| (j, n)))
        .collect();
    if let (Some(limit), Some(&((ti, si), n))) =
        (cfg.max_batch_tokens, lens.iter().max_by_key(|(_, n)| *n))
    {
        let what = format!("trajectory {} step {si}", bench.trajectories[ti].id);
        crate::validate::prompt_fits(&what, n, cfg.max_new_tokens, limit)?;
    }
    if estimate && !lens.is_empty() {
        warn_cpu_time(cfg, bench, model, &lens)?;
    }
    Ok(())
}

/// Log the estimated time of the run on the CPU and how to use a GPU build (`lens`: pending steps' prompt lengths).
fn warn_cpu_time(
    cfg: &EvalConfig,
    bench: &Benchmark,
    model: &LoadedModel,
    lens: &[((usize, usize), usize)],
) -> Result<()> {
    let (vision_params, lm_params) = crate::model::flops::param_counts(model.model.config());
    let image_tokens: u64 = lens
        .iter()
        .map(|&((ti, _), _)| image_tokens(model, &bench.trajectories[ti]))
        .sum();
    let step_tokens: u64 = lens.iter().map(|&(_, n)| n as u64).sum();
    // Judge prompts (one per trajectory) are counted as average step prompts.
    let judged = if matches!(cfg.judge, JudgeChoice::None) {
        0
    } else {
        bench.trajectories.len()
    };
    let scale = (lens.len() + judged) as f64 / lens.len() as f64;
    let prompts = lens.len() + judged;
    let work = crate::cpu_estimate::Workload {
        vision_params,
        lm_params,
        vision_patches: (4.0 * image_tokens as f64 * scale) as u64,
        prompt_tokens: (step_tokens as f64 * scale) as u64,
        new_tokens: (cfg.max_new_tokens * prompts) as u64,
    };
    // A brief measurement (a few 1024³ GEMMs, well under a second).
    let m = &model.model;
    let (rate, _) =
        crate::ops::matmul_peak(m.device(), candle_core::DType::F32, 1024, m.ops().blas())?;
    if let Some(w) = crate::cpu_estimate::cpu_warning(&work, prompts, rate) {
        tracing::warn!("{w}");
    }
    Ok(())
}

/// Merged image tokens of a trajectory's screenshots at the run's pixel bounds (from the declared image size).
fn image_tokens(model: &LoadedModel, t: &crate::dataset::Trajectory) -> u64 {
    let im = &model.kit.image;
    let (w, h) = (t.image_width as usize, t.image_height as usize);
    crate::preprocess::smart_resize(h, w, im.factor(), im.min_pixels, im.max_pixels)
        .map_or(0, |(h, w)| (h * w / (im.factor() * im.factor())) as u64)
}

/// The exact token length of a step's prompt, without decoding its screenshot: the image's token count depends
/// only on its smart-resized size, computed from the benchmark's declared `image_width`/`image_height`, so the
/// prompt is built with an image of that grid and no pixels.
pub fn step_prompt_tokens(
    cfg: &EvalConfig,
    bench: &Benchmark,
    model: &LoadedModel,
    (ti, si): (usize, usize),
) -> Option<usize> {
    let t = &bench.trajectories[ti];
    let im = &model.kit.image;
    let (h, w) = crate::preprocess::smart_resize(
        t.image_height as usize,
        t.image_width as usize,
        im.factor(),
        im.min_pixels,
        im.max_pixels,
    )
    .ok()?;
    let grid_only = crate::preprocess::PreparedImage {
        patches: Vec::new(),
        grid_thw: [1, h / im.patch_size, w / im.patch_size],
        resized_wh: [w as u32, h as u32],
        original_wh: [t.image_width, t.image_height],
    };
    let messages =
        super::prompts::step_messages(t, si, grid_only.resized_wh, cfg.system_prompt).ok()?;
    let input = model.kit.build(&messages, vec![grid_only]).ok()?;
    Some(input.input_ids.len())
}

/// Before the judge phase: with an explicit `--max-batch-tokens`, the judge prompt of the pending
/// trajectory with the largest last screenshot and the most steps must fit with `--max-new-tokens`.
pub fn largest_judge_prompt_fits(
    cfg: &EvalConfig,
    bench: &Benchmark,
    judge: &LoadedModel,
    preds: &crate::predictions::PredictionSet,
    jobs: &[usize],
) -> Result<()> {
    let Some(limit) = cfg.max_batch_tokens else {
        return Ok(());
    };
    let largest = jobs.iter().copied().max_by_key(|&ti| {
        let t = &bench.trajectories[ti];
        (t.image_width as u64 * t.image_height as u64, t.steps.len())
    });
    let Some(ti) = largest else {
        return Ok(());
    };
    let t = &bench.trajectories[ti];
    let Some(last) = t.steps.last() else {
        return Ok(());
    };
    let kit = &judge.kit;
    // A prompt that cannot be prepared is recorded as an error by the phase itself.
    let Ok(image) = crate::preprocess::load_and_prepare(&bench.root.join(&last.image), &kit.image)
    else {
        return Ok(());
    };
    let empty = crate::parse::parse_response("");
    let steps = super::judge::predicted_steps(t, preds, &empty);
    let messages = super::prompts::judge_messages(t, &steps)?;
    let (input, _) = kit.build_with_prefix(&messages, vec![image])?;
    let what = format!("the judge prompt of trajectory {}", t.id);
    crate::validate::prompt_fits(&what, input.input_ids.len(), cfg.max_new_tokens, limit)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::bench::random::load_config;
    use crate::cpu_estimate::MIN_PARAMS;
    use crate::model::flops::param_counts;

    #[test]
    fn real_checkpoints_get_the_cpu_estimate_and_the_test_ones_do_not() {
        for real in ["3b", "7b", "small"] {
            let (v, l) = param_counts(&load_config(real).unwrap());
            assert!(v + l >= MIN_PARAMS, "{real}: {}", v + l);
        }
        let tiny = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/models/tiny-b");
        let (v, l) = param_counts(&load_config(tiny).unwrap());
        assert!(v + l < MIN_PARAMS / 10, "tiny-b: {}", v + l);
    }
}
