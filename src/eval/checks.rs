//! Checks around `eval`'s phases: the largest prompt must fit an explicit `--max-batch-tokens`, a real checkpoint
//! on the CPU gets a time estimate, and after Ctrl-C/SIGTERM the run stops between phases with what is saved and
//! how to resume. Prompt lengths are counted through the backend ([`Backend::prompt_tokens`]) from the
//! benchmark's declared screen sizes, without decoding a screenshot; a backend that cannot count (a served model)
//! leaves the check to its server, which refuses a prompt too long as that prompt's error.

use anyhow::Result;

use super::{EvalConfig, JudgeChoice};
use crate::backend::Backend;
use crate::dataset::{Benchmark, Trajectory};

/// After a Ctrl-C or SIGTERM, stop with [`crate::interrupt::Interrupted`] (what is done, how to resume); `unit` is
/// `steps` (counted in `predictions.jsonl`) or `judged trajectories` (in `judgements.jsonl`).
pub(crate) fn stop_if_interrupted(
    cfg: &EvalConfig,
    unit: &'static str,
    total: usize,
) -> Result<()> {
    if !cfg.cancel.is_cancelled() {
        return Ok(());
    }
    let done = if unit == "steps" {
        cfg.out.completed_steps()?.len()
    } else {
        cfg.out.completed_trajectories()?.len()
    }
    .min(total);
    let at = crate::interrupt::StopPoint {
        done,
        total,
        unit,
        out: cfg.out.root(),
        args: &cfg.command_line,
    };
    crate::interrupt::Interrupted::check(&cfg.cancel, at).map_or(Ok(()), |e| Err(e.into()))
}

/// Before the steps phase: with an explicit `--max-batch-tokens`, the longest pending step prompt must fit with
/// `--max-new-tokens` (the error names it); and a real checkpoint on the CPU gets an estimate of the run's time.
pub(crate) fn first_prompt_checks(
    cfg: &EvalConfig,
    bench: &Benchmark,
    backend: &dyn Backend,
    jobs: &[(usize, usize)],
) -> Result<()> {
    let cpu = backend.cpu_facts()?;
    if cfg.max_batch_tokens.is_none() && cpu.is_none() {
        return Ok(());
    }
    let mut lens: Vec<((usize, usize), usize)> = Vec::with_capacity(jobs.len());
    for &j in jobs {
        match step_prompt_tokens(cfg, bench, backend, j) {
            Some(Ok(n)) => lens.push((j, n)),
            // Steps whose prompt cannot be built are recorded as errors by the phase itself.
            Some(Err(_)) => {}
            None => {
                tracing::info!("prompt lengths are not counted here: the server checks them");
                return Ok(());
            }
        }
    }
    if let (Some(limit), Some(&((ti, si), n))) =
        (cfg.max_batch_tokens, lens.iter().max_by_key(|(_, n)| *n))
    {
        let what = format!("trajectory {} step {si}", bench.trajectories[ti].id);
        crate::validate::prompt_fits(&what, n, cfg.max_new_tokens, limit)?;
    }
    if let (Some(cpu), false) = (cpu, lens.is_empty()) {
        warn_cpu_time(cfg, bench, backend, cpu, &lens);
    }
    Ok(())
}

/// Log the estimated time of the run on the CPU and how to use a GPU build (`lens`: pending steps' prompt lengths).
fn warn_cpu_time(
    cfg: &EvalConfig,
    bench: &Benchmark,
    backend: &dyn Backend,
    cpu: crate::backend::CpuFacts,
    lens: &[((usize, usize), usize)],
) {
    let image_tokens: u64 = lens
        .iter()
        .map(|&((ti, _), _)| image_tokens(backend, &bench.trajectories[ti]))
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
        vision_params: cpu.vision_params,
        lm_params: cpu.lm_params,
        vision_patches: (4.0 * image_tokens as f64 * scale) as u64,
        prompt_tokens: (step_tokens as f64 * scale) as u64,
        new_tokens: (cfg.max_new_tokens * prompts) as u64,
    };
    if let Some(w) = crate::cpu_estimate::cpu_warning(&work, prompts, cpu.flops_per_second) {
        tracing::warn!("{w}");
    }
}

/// The smart-resized `[w, h]` of a trajectory's screen at the backend's pixel bounds.
fn resized(backend: &dyn Backend, t: &Trajectory) -> Option<[u32; 2]> {
    let im = backend.image_config();
    let (h, w) = crate::preprocess::smart_resize(
        t.image_height as usize,
        t.image_width as usize,
        im.factor(),
        im.min_pixels,
        im.max_pixels,
    )
    .ok()?;
    Some([w as u32, h as u32])
}

/// Merged image tokens of a trajectory's screenshots at the run's pixel bounds (from the declared image size).
fn image_tokens(backend: &dyn Backend, t: &Trajectory) -> u64 {
    let f = backend.image_config().factor() as u64;
    resized(backend, t).map_or(0, |[w, h]| w as u64 * h as u64 / (f * f))
}

/// The token length of a step's prompt, from the benchmark's declared screen size; `None` when the backend
/// cannot count.
fn step_prompt_tokens(
    cfg: &EvalConfig,
    bench: &Benchmark,
    backend: &dyn Backend,
    (ti, si): (usize, usize),
) -> Option<Result<usize>> {
    let t = &bench.trajectories[ti];
    let Some(size) = resized(backend, t) else {
        return Some(Err(anyhow::anyhow!("the screen size cannot be resized")));
    };
    match super::prompts::step_messages(t, si, size, cfg.prompt_style()) {
        Ok(messages) => backend.prompt_tokens(&messages, &[[t.image_width, t.image_height]]),
        Err(e) => Some(Err(e.into())),
    }
}

/// Before the judge phase: with an explicit `--max-batch-tokens`, the judge prompt of the pending trajectory with
/// the largest screen and the most steps must fit with `--max-new-tokens`.
pub(crate) fn largest_judge_prompt_fits(
    cfg: &EvalConfig,
    bench: &Benchmark,
    judge: &dyn Backend,
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
    let Some(t) = largest.map(|ti| &bench.trajectories[ti]) else {
        return Ok(());
    };
    let empty = crate::parse::parse_response("");
    let steps = super::judge::predicted_steps(t, preds, &empty);
    let messages = super::prompts::judge_messages(t, &steps)?;
    match judge.prompt_tokens(&messages, &[[t.image_width, t.image_height]]) {
        Some(n) => {
            let what = format!("the judge prompt of trajectory {}", t.id);
            crate::validate::prompt_fits(&what, n?, cfg.max_new_tokens, limit)?;
        }
        None => tracing::info!("judge prompt lengths are not counted here: the server checks them"),
    }
    Ok(())
}

/// A phase a server stopped ([`crate::backend::ServedStop`]: the server is gone, or it prepares prompts otherwise
/// than the checkpoint): stopped as after Ctrl-C, with what is saved, what could not be answered and why, and
/// the command that resumes the run. Any other error is returned as it is.
pub(crate) fn served_stop(
    cfg: &EvalConfig,
    unit: &'static str,
    total: usize,
    e: anyhow::Error,
) -> anyhow::Error {
    let Some(stop) = e.downcast_ref::<crate::backend::ServedStop>() else {
        return e;
    };
    let steps = unit == "steps";
    let (done, errors) = match (
        steps,
        cfg.out.completed_steps(),
        cfg.out.completed_trajectories(),
    ) {
        (true, Ok(d), _) => (d.len(), step_errors(&cfg.out)),
        (false, _, Ok(d)) => (d.len(), judge_errors(&cfg.out)),
        _ => (0, Vec::new()),
    };
    let failed = if errors.is_empty() {
        String::new()
    } else {
        format!(
            "; {} {unit} could not be answered: {}",
            errors.len(),
            error_causes(&errors)
        )
    };
    let resume = crate::interrupt::resume_command(cfg.command_line.clone(), cfg.out.root());
    anyhow::anyhow!(
        "stopped: {stop}. {} of {total} {unit} done and saved in {}{failed}. Resume with:\n  {resume}",
        done.min(total),
        cfg.out.root().display()
    )
}

/// The errors of the steps whose latest line in `predictions.jsonl` carries one.
pub(crate) fn step_errors(out: &crate::rundir::RunDir) -> Vec<String> {
    let lines: Vec<crate::records::PredictionLine> = out
        .read_lines(crate::rundir::PREDICTIONS)
        .unwrap_or_default();
    let latest: std::collections::BTreeMap<(String, usize), Option<String>> = lines
        .into_iter()
        .map(|l| ((l.trajectory, l.step), l.error))
        .collect();
    latest.into_values().flatten().collect()
}

/// The errors of the trajectories whose latest verdict carries one.
fn judge_errors(out: &crate::rundir::RunDir) -> Vec<String> {
    let latest: std::collections::BTreeMap<String, Option<String>> = out
        .judgements()
        .unwrap_or_default()
        .into_iter()
        .map(|l| (l.trajectory, l.error))
        .collect();
    latest.into_values().flatten().collect()
}

/// `22 × connection refused, 1 × No such file or directory`: the errors grouped by their last part (the
/// cause, after the file, URL and attempt count that lead up to it), the commonest first.
pub(crate) fn error_causes(errors: &[String]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for e in errors {
        let last = e.rsplit(": ").next().unwrap_or(e).trim();
        let cause = match last.find(" (os error") {
            Some(i) => &last[..i],
            None => last,
        };
        *counts.entry(cause).or_default() += 1;
    }
    let mut v: Vec<(&str, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(c, n)| format!("{n} × {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::error_causes;

    #[test]
    fn errors_are_grouped_by_their_cause() {
        let e = |s: &str| s.to_string();
        let errors = [
            e("gave up after 6 attempts: http://h/v1/chat/completions: connection refused"),
            e("stopped while waiting to retry: http://h/v1/chat/completions: connection refused"),
            e("images/a.png: No such file or directory (os error 2)"),
        ];
        assert_eq!(
            error_causes(&errors),
            "2 × connection refused, 1 × No such file or directory"
        );
    }
}
