//! Phase 2: one aggregation prompt per trajectory — the instruction, the predicted steps with their thoughts
//! and the final screenshot — answered by the judge model with a JSON verdict, appended to `judgements.jsonl`.

use std::collections::HashSet;

use anyhow::Result;
use serde_json::json;

use super::pipeline::{Outcome, Runner};
use super::progress::{PhaseStats, Progress};
use super::prompts::{judge_messages, parse_verdict};
use super::rundir::JsonlAppender;
use crate::dataset::Benchmark;
use crate::parse::{parse_response, ParsedOutput};
use crate::predictions::PredictionSet;

/// Indices of the trajectories whose id is not in `done`.
pub fn pending_trajectories(bench: &Benchmark, done: &HashSet<String>) -> Vec<usize> {
    (0..bench.trajectories.len())
        .filter(|&i| !done.contains(&bench.trajectories[i].id))
        .collect()
}

/// The predicted steps of trajectory `ti`, parsed (a missing prediction parses as an empty response).
pub fn predicted_steps(bench: &Benchmark, preds: &PredictionSet, ti: usize) -> Vec<ParsedOutput> {
    let t = &bench.trajectories[ti];
    (0..t.steps.len())
        .map(|si| parse_response(preds.get(&t.id, si).map_or("", |p| p.response.as_str())))
        .collect()
}

/// Judge every trajectory in `jobs`, appending each verdict (or its preparation error) to `out`.
pub fn judge_trajectories(
    runner: &Runner<'_>,
    bench: &Benchmark,
    preds: &PredictionSet,
    jobs: &[usize],
    out: &mut JsonlAppender,
    stats: &mut PhaseStats,
    progress: &mut Progress,
) -> Result<()> {
    let kit = runner.kit;
    let prepare = |&ti: &usize| {
        let t = &bench.trajectories[ti];
        let last = t
            .steps
            .last()
            .ok_or_else(|| anyhow::anyhow!("trajectory {} has no steps", t.id))?;
        let image = crate::preprocess::load_and_prepare(&bench.root.join(&last.image), &kit.image)?;
        let messages = judge_messages(t, &predicted_steps(bench, preds, ti))?;
        Ok(kit.build_with_prefix(&messages, vec![image])?)
    };
    runner.run(jobs, prepare, stats, |&ti, outcome, st| {
        let traj = &bench.trajectories[ti].id;
        let line = match outcome {
            Outcome::Generated(r, _) => {
                let answer = kit.tokenizer.decode(&r.token_ids, true)?;
                let v = parse_verdict(&answer);
                json!({"trajectory": traj, "success": v.success, "reason": v.reason, "response": answer,
                       "prompt_tokens": r.prompt_tokens, "generated_tokens": r.token_ids.len()})
            }
            Outcome::Failed(msg) => {
                tracing::warn!("judging trajectory {traj}: {msg}");
                json!({"trajectory": traj, "success": null, "reason": null, "response": "", "error": msg})
            }
        };
        out.append(&line)?;
        progress.advance(1, st);
        Ok(())
    })
}

/// Judge summary for `metrics.json`: `judge_success` (percent of trajectories judged successful), and the counts
/// of judged, unparseable and missing verdicts, from the lines of `judgements.jsonl` (later lines win).
pub fn summarize(bench: &Benchmark, judgements: &str) -> serde_json::Value {
    let mut latest = std::collections::HashMap::new();
    for line in judgements.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let Some(k) = super::rundir::trajectory_key_of(&v) {
            latest.insert(k, v.get("success").and_then(serde_json::Value::as_bool));
        }
    }
    let n = bench.trajectories.len();
    let verdicts: Vec<Option<&Option<bool>>> = bench
        .trajectories
        .iter()
        .map(|t| latest.get(&t.id))
        .collect();
    let success = verdicts
        .iter()
        .filter(|v| matches!(v, Some(Some(true))))
        .count();
    let unparseable = verdicts.iter().filter(|v| matches!(v, Some(None))).count();
    let missing = verdicts.iter().filter(|v| v.is_none()).count();
    json!({
        "judge_success": if n > 0 { 100.0 * success as f64 / n as f64 } else { 0.0 },
        "judge_unparseable": unparseable,
        "judge_missing": missing,
        "judge_judged": n - missing,
    })
}
