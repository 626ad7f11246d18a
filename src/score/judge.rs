//! What a run's judgements add to its metrics: the judge summary and the bootstrap interval of judge success; and
//! which steps a trajectory's judge prompt shows ([`judged_steps`]), with a digest of their answers that each
//! judgement records, so that a verdict made from other answers than the current ones is known to be stale.
//! Pure; shared by the judge phase and every writer and reader of `metrics.json` through [`score_run`].
//!
//! `judge_success` is 100 · the trajectories whose current verdict is "accomplished" / all T trajectories: a
//! trajectory without a current verdict (never judged, judged from other step answers than the saved ones, or
//! left unjudged because some of its steps failed) counts in the denominator as not accomplished.

use std::collections::HashMap;

use super::{percent_interval, score_predictions, JudgeSummary, RulePreset, RunMetrics, StepScore};
use crate::dataset::{Benchmark, Trajectory};
use crate::predictions::PredictionSet;
use crate::records::{History, JudgementLine};

/// The steps a trajectory's judge prompt shows and what the predictions hold for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgedSteps {
    /// The prompt shows steps `0..count` (the final screenshot is step `count - 1`'s).
    pub count: usize,
    /// Of those, the steps without an answer (no line, or a line with an `error`).
    pub missing: usize,
    /// SHA-256 of those steps' answers (index, state and raw response of each): what a judgement records.
    pub sha256: String,
}

impl JudgedSteps {
    /// A judgement line on these steps for `trajectory`, without an answer yet (the judge phase fills it in).
    pub fn blank_line(&self, trajectory: String) -> JudgementLine {
        JudgementLine {
            trajectory,
            success: None,
            reason: None,
            response: String::new(),
            prompt_tokens: None,
            generated_tokens: None,
            error: None,
            steps_sha256: Some(self.sha256.clone()),
            missing_steps: Some(self.missing),
        }
    }
}

/// The steps of `t` its judge prompt shows: every step, or with `reached_only` (a semi-online run, whose
/// trajectory stops early) those up to the first step without a line (at least one); with their digest.
pub fn judged_steps(t: &Trajectory, preds: &PredictionSet, reached_only: bool) -> JudgedSteps {
    let count = if reached_only {
        let reached = (0..t.steps.len())
            .take_while(|&si| preds.get(&t.id, si).is_some())
            .count();
        reached.max(1).min(t.steps.len())
    } else {
        t.steps.len()
    };
    let answers: Vec<(usize, &str, &str)> = (0..count)
        .map(|si| match preds.get(&t.id, si) {
            None => (si, "absent", ""),
            Some(p) if p.failed => (si, "failed", ""),
            Some(p) => (si, "answered", p.response.as_str()),
        })
        .collect();
    let missing = answers.iter().filter(|a| a.1 != "answered").count();
    let text = serde_json::to_string(&answers).expect("serialising strings cannot fail");
    JudgedSteps {
        count,
        missing,
        sha256: crate::fingerprint::sha256_hex(text.as_bytes()),
    }
}

/// Whether `line` is a verdict on the answers `steps` digests: its digest matches, or it has none (a line written
/// before judgements recorded one, taken as it is).
pub fn is_current(line: &JudgementLine, steps: &JudgedSteps) -> bool {
    line.steps_sha256
        .as_deref()
        .is_none_or(|h| h == steps.sha256)
}

/// Trajectory id → its latest judgement line (later lines win).
fn latest(judgements: &[JudgementLine]) -> HashMap<&str, &JudgementLine> {
    judgements
        .iter()
        .map(|j| (j.trajectory.as_str(), j))
        .collect()
}

/// What one trajectory's judgement lines say now.
struct Verdict<'a> {
    /// Its current verdict line (`None`: no line, a failed prompt, or a stale verdict).
    line: Option<&'a JudgementLine>,
    /// Its latest line is stale.
    stale: bool,
    /// The steps its judge prompt shows now.
    steps: JudgedSteps,
}

impl Verdict<'_> {
    fn success(&self) -> bool {
        self.line.is_some_and(|l| l.success == Some(true))
    }
}

/// Per trajectory of `bench`, what its judgement lines say now.
fn current_verdicts<'a>(
    bench: &Benchmark,
    preds: &PredictionSet,
    judgements: &'a [JudgementLine],
    reached_only: bool,
) -> Vec<Verdict<'a>> {
    let latest = latest(judgements);
    bench
        .trajectories
        .iter()
        .map(|t| {
            let steps = judged_steps(t, preds, reached_only);
            // A prompt that failed gave no verdict (it is judged again on resume).
            let line = latest
                .get(t.id.as_str())
                .copied()
                .filter(|l| l.error.is_none());
            let stale = line.is_some_and(|l| !is_current(l, &steps));
            Verdict {
                line: line.filter(|_| !stale),
                stale,
                steps,
            }
        })
        .collect()
}

/// The judge summary of `judgements` on the predictions `preds` (`reached_only`: a semi-online run).
pub fn summarize(
    bench: &Benchmark,
    preds: &PredictionSet,
    judgements: &[JudgementLine],
    reached_only: bool,
) -> JudgeSummary {
    let verdicts = current_verdicts(bench, preds, judgements, reached_only);
    let n = bench.trajectories.len();
    let count = |f: &dyn Fn(&Verdict) -> bool| verdicts.iter().filter(|v| f(v)).count();
    let success = count(&|v| v.success());
    let missing = count(&|v| v.line.is_none());
    JudgeSummary {
        judge_success: if n > 0 {
            100.0 * success as f64 / n as f64
        } else {
            0.0
        },
        judge_unparseable: count(&|v| v.line.is_some_and(|l| l.success.is_none())),
        judge_missing: missing,
        judge_judged: n - missing,
        judge_stale: count(&|v| v.stale),
        judge_with_missing_steps: count(&|v| {
            v.line.is_some_and(|l| l.missing_steps.unwrap_or(0) > 0)
        }),
        judge_skipped_step_errors: count(&|v| v.line.is_none() && v.steps.missing > 0),
    }
}

/// The metrics of a run: the predictions scored, the judge summary added when the run had a judge (`judged`) or
/// judgements exist, the number of prediction lines that carry an error, and the semi-online figures when the
/// run's `history` was the model's own. What `eval`, `merge` and `score` write and `report` shows.
pub fn score_run(
    rules: &RulePreset,
    bench: &Benchmark,
    preds: &PredictionSet,
    judgements: &[JudgementLine],
    judged: bool,
    history: &History,
) -> (RunMetrics, Vec<StepScore>) {
    let (mut metrics, scored) = score_predictions(rules, bench, preds);
    if judged || !judgements.is_empty() {
        let reached_only = !history.is_gold();
        metrics.judge = Some(summarize(bench, preds, judgements, reached_only));
        let flags: Vec<bool> = current_verdicts(bench, preds, judgements, reached_only)
            .iter()
            .map(Verdict::success)
            .collect();
        add_judge_interval(&mut metrics, &flags);
    }
    metrics.prediction_errors = Some(preds.errors);
    super::add_semi_online(&mut metrics, &scored.steps, history);
    (metrics, scored.steps)
}

/// Judge success's bootstrap interval (over each trajectory's "judged accomplished" flag), beside the other
/// metrics' (when there are intervals).
fn add_judge_interval(metrics: &mut RunMetrics, flags: &[bool]) {
    if let Some(iv) = metrics.intervals.as_mut() {
        let interval = percent_interval(flags, iv.resamples, iv.seed);
        iv.metrics.insert("judge_success".into(), interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;
    use crate::dataset::testing::{step, trajectory};

    /// Trajectories `A` (three steps) and `B` (two steps).
    fn bench() -> Benchmark {
        let traj = |id: &str, n: usize| {
            let steps = (0..n)
                .map(|_| step("", Action::Wait { time: None }))
                .collect();
            trajectory(id, [1000, 2000], steps)
        };
        Benchmark {
            root: "/nonexistent".into(),
            info: None,
            trajectories: vec![traj("A", 3), traj("B", 2)],
        }
    }

    /// Prediction lines `(trajectory, step, response, failed)`.
    fn preds(lines: &[(&str, usize, &str, bool)]) -> PredictionSet {
        let text: String = lines
            .iter()
            .map(|(t, s, r, failed)| {
                let error = failed.then_some("bad png");
                let v =
                    serde_json::json!({"trajectory": t, "step": s, "response": r, "error": error});
                format!("{v}\n")
            })
            .collect();
        PredictionSet::parse(&text)
    }

    fn verdict(t: &str, success: bool, steps: &JudgedSteps) -> JudgementLine {
        JudgementLine {
            success: Some(success),
            ..steps.blank_line(t.into())
        }
    }

    #[test]
    fn the_digest_follows_the_answers_and_counts_the_missing_steps() {
        let b = bench();
        let a = &b.trajectories[0];
        let failed = preds(&[("A", 0, "x", false), ("A", 1, "", true)]);
        let s = judged_steps(a, &failed, false);
        assert_eq!((s.count, s.missing), (3, 2));
        let redone = preds(&[("A", 0, "x", false), ("A", 1, "y", false)]);
        let r = judged_steps(a, &redone, false);
        assert_eq!((r.count, r.missing), (3, 1));
        assert_ne!(r.sha256, s.sha256);
        assert_eq!(
            judged_steps(a, &redone, false),
            r,
            "the same answers, the same digest"
        );
        // A semi-online trajectory is judged up to its first step without a line.
        let reached = judged_steps(a, &redone, true);
        assert_eq!((reached.count, reached.missing), (2, 0));
        assert_eq!(judged_steps(a, &preds(&[]), true).count, 1);
    }

    #[test]
    fn only_current_verdicts_count_and_every_trajectory_is_in_the_denominator() {
        let b = bench();
        let (a, bb) = (&b.trajectories[0], &b.trajectories[1]);
        let old = preds(&[
            ("A", 0, "x", false),
            ("A", 1, "", true),
            ("A", 2, "z", false),
        ]);
        let now = preds(&[
            ("A", 0, "x", false),
            ("A", 1, "y", false),
            ("A", 2, "z", false),
        ]);
        let stale = verdict("A", true, &judged_steps(a, &old, false));
        // A's verdict is stale; B has no answer at all: not judged because of its missing steps.
        let want = JudgeSummary {
            judge_missing: 2,
            judge_stale: 1,
            judge_skipped_step_errors: 1,
            ..JudgeSummary::default()
        };
        let got = summarize(&b, &now, std::slice::from_ref(&stale), false);
        assert_eq!(got, want);
        let current = verdict("A", true, &judged_steps(a, &now, false));
        let partial = verdict("B", false, &judged_steps(bb, &now, false));
        let want = JudgeSummary {
            judge_success: 50.0,
            judge_judged: 2,
            judge_with_missing_steps: 1,
            ..JudgeSummary::default()
        };
        assert_eq!(summarize(&b, &now, &[stale, current, partial], false), want);
        // A line without a digest (line schema 1) is taken as it is.
        let mut v1 = verdict("A", true, &judged_steps(a, &old, false));
        (v1.steps_sha256, v1.missing_steps) = (None, None);
        let s = summarize(&b, &now, &[v1], false);
        assert_eq!(
            (s.judge_judged, s.judge_stale, s.judge_success),
            (1, 0, 50.0)
        );
    }
}
