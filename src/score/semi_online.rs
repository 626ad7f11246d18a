//! The metrics of a semi-online run (`eval --history predicted`): where each trajectory's run of correct steps
//! ends, and the two published procedures' figures computed from it. Pure.
//!
//! * UI-S1 (`X-PLUG/MobileAgent`, `UI-S1/evaluation/eval_qwenvl.py`, `main` and `process_line`): **Success
//!   Rate** = trajectories with `final_step_id == num_steps`; **Average Progress** = mean of
//!   `final_step_id / num_steps`, where `final_step_id` is the number of steps before the first wrong one. Its
//!   code sets `final_step_id = 0` when an episode raises (an unparsable reply), which
//!   [`SemiOnlineSummary::average_progress_zeroed`] reproduces; [`SemiOnlineSummary::average_progress`] counts an
//!   unparsable reply as a wrong step like any other.
//! * GUIEvalKit (`xiaomi-research/guievalkit`, `guieval/eval/compute_metric.py`, `compute_episode_metrics`):
//!   `success_rate` = episodes whose every step is an exact match; `goal_progress` = exact matches before the first
//!   miss / episode length: the same two numbers, with every step of the episode predicted.
//!
//! Percentages are 0–100 like every metric of `metrics.json` (UI-S1 prints Average Progress as a fraction).

use std::collections::BTreeMap;

use super::stats::{bootstrap_mean, percent_interval};
use super::{Interval, Outcome, RunMetrics, SemiOnlineSummary, StepScore};
use crate::records::{History, Procedure};

/// Where one trajectory's run of correct steps ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrajectoryRun {
    /// Index of the trajectory in the benchmark.
    pub traj_index: usize,
    /// Its steps.
    pub steps: usize,
    /// Correct steps before the first step that is not (UI-S1's `final_step_id`).
    pub correct_prefix: usize,
    /// Steps with a prediction.
    pub predicted: usize,
    /// The first step that is not correct was an unparsable reply (a format error with a prediction).
    pub stopped_unparsable: bool,
}

impl TrajectoryRun {
    /// Every step correct.
    pub fn success(&self) -> bool {
        self.correct_prefix == self.steps
    }

    /// `correct_prefix / steps`, as a fraction.
    pub fn progress(&self) -> f64 {
        if self.steps == 0 {
            0.0
        } else {
            self.correct_prefix as f64 / self.steps as f64
        }
    }

    /// [`Self::progress`], but 0 when the trajectory stopped at an unparsable reply (UI-S1's exception rule).
    pub(crate) fn progress_zeroed(&self) -> f64 {
        if self.stopped_unparsable {
            0.0
        } else {
            self.progress()
        }
    }
}

/// Each trajectory's run of correct steps, from the step scores (benchmark order, grouped by `traj_index`).
pub fn trajectory_runs(steps: &[StepScore]) -> Vec<TrajectoryRun> {
    let mut by: BTreeMap<usize, TrajectoryRun> = BTreeMap::new();
    for s in steps {
        let t = by.entry(s.traj_index).or_insert(TrajectoryRun {
            traj_index: s.traj_index,
            steps: 0,
            correct_prefix: 0,
            predicted: 0,
            stopped_unparsable: false,
        });
        if s.correct && t.correct_prefix == t.steps {
            t.correct_prefix += 1;
        } else if t.correct_prefix == t.steps {
            // The first step that is not correct: the trajectory's stop.
            t.stopped_unparsable = !s.missing && s.outcome == Outcome::FormatError;
        }
        t.steps += 1;
        t.predicted += usize::from(!s.missing);
    }
    by.into_values().collect()
}

/// The names of the semi-online figures that get a bootstrap interval (in `intervals.metrics`).
pub const SEMI_ONLINE_INTERVALS: &[&str] = &[
    "success_rate",
    "average_progress",
    "average_progress_zeroed",
];

/// The semi-online figures of `steps` under `procedure`, with their bootstrap intervals (`resamples`, `seed`).
pub fn semi_online_summary(
    steps: &[StepScore],
    procedure: Procedure,
    resamples: usize,
    seed: u64,
) -> (SemiOnlineSummary, Vec<(&'static str, Interval)>) {
    let runs = trajectory_runs(steps);
    let n = runs.len().max(1) as f64;
    let mean = |f: fn(&TrajectoryRun) -> f64| 100.0 * runs.iter().map(f).sum::<f64>() / n;
    let sop = procedure.stops_at_first_error();
    let reached: usize = runs.iter().map(|r| r.predicted).sum();
    let gold_entries = steps.iter().filter(|s| !s.correct && !s.last).count();
    let summary = SemiOnlineSummary {
        procedure,
        images: procedure.images(),
        success_rate: if runs.is_empty() {
            0.0
        } else {
            mean(|r| f64::from(u8::from(r.success())))
        },
        average_progress: mean(TrajectoryRun::progress),
        average_progress_zeroed: sop.then(|| mean(TrajectoryRun::progress_zeroed)),
        steps_reached: reached,
        steps_not_reached: sop.then(|| steps.len() - reached),
        gold_history_entries: (!sop).then_some(gold_entries),
        stopped_unparsable: runs.iter().filter(|r| r.stopped_unparsable).count(),
    };
    let flags: Vec<bool> = runs.iter().map(TrajectoryRun::success).collect();
    let percent =
        |f: fn(&TrajectoryRun) -> f64| -> Vec<f64> { runs.iter().map(|r| 100.0 * f(r)).collect() };
    let mut intervals = vec![
        ("success_rate", percent_interval(&flags, resamples, seed)),
        (
            "average_progress",
            bootstrap_mean(&percent(TrajectoryRun::progress), resamples, seed),
        ),
    ];
    if sop {
        let zeroed = percent(TrajectoryRun::progress_zeroed);
        intervals.push((
            "average_progress_zeroed",
            bootstrap_mean(&zeroed, resamples, seed),
        ));
    }
    (summary, intervals)
}

/// Add the semi-online figures of a run made with `history` to `metrics` (nothing for the gold history): the
/// summary, its intervals beside the others (when there are intervals), and, for `uis1-sop`, the steps after a
/// trajectory's stop counted under the format-error kind `not_reached` instead of `missing`.
pub fn add_semi_online(metrics: &mut RunMetrics, steps: &[StepScore], history: &History) {
    let Some(settings) = history.semi_online() else {
        return;
    };
    let (resamples, seed) = metrics
        .intervals
        .as_ref()
        .map_or((super::DEFAULT_RESAMPLES, super::DEFAULT_SEED), |iv| {
            (iv.resamples, iv.seed)
        });
    let (summary, intervals) = semi_online_summary(steps, settings.procedure, resamples, seed);
    if let Some(iv) = metrics.intervals.as_mut() {
        for (name, i) in intervals {
            iv.metrics.insert(name.to_string(), i);
        }
    }
    if let Some(not_reached) = summary.steps_not_reached.filter(|&n| n > 0) {
        let kinds = &mut metrics.format_error_kinds;
        if let Some(missing) = kinds.get_mut("missing") {
            *missing = missing.saturating_sub(not_reached);
            if *missing == 0 {
                kinds.remove("missing");
            }
        }
        kinds.insert("not_reached".into(), not_reached);
    }
    metrics.semi_online = Some(summary);
}

/// The mean of the trajectories' [`TrajectoryRun::progress`] in percent (0 without trajectories): what
/// `report --compare` shows for runs of either history.
pub fn average_progress(steps: &[StepScore]) -> f64 {
    let runs = trajectory_runs(steps);
    if runs.is_empty() {
        return 0.0;
    }
    100.0 * runs.iter().map(TrajectoryRun::progress).sum::<f64>() / runs.len() as f64
}

/// Paired bootstrap interval of the difference B − A of [`average_progress`] (the same trajectories drawn for
/// both).
pub fn paired_progress_interval(
    a: &[StepScore],
    b: &[StepScore],
    resamples: usize,
    seed: u64,
) -> Interval {
    let (ra, rb) = (trajectory_runs(a), trajectory_runs(b));
    let diffs: Vec<f64> = ra
        .iter()
        .zip(&rb)
        .map(|(x, y)| 100.0 * (y.progress() - x.progress()))
        .collect();
    bootstrap_mean(&diffs, resamples, seed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Action, Status};
    use crate::dataset::testing::{step, trajectory};
    use crate::dataset::Benchmark;
    use crate::predictions::{Prediction, PredictionSet};
    use crate::records::{History, PredictionLine, SemiOnlineSettings};
    use crate::score::score_predictions;
    use crate::settings::RulePreset;

    fn click() -> Action {
        Action::Click {
            coordinate: [100.0, 200.0],
        }
    }

    fn typed() -> Action {
        Action::Type { text: "x".into() }
    }

    fn done() -> Action {
        Action::Terminate {
            status: Status::Success,
        }
    }

    /// A: click, type, wait, terminate; B: click, terminate; C: click, type, terminate (1000×2000 screens).
    fn bench() -> Benchmark {
        let traj = |id: &str, actions: Vec<Action>| {
            let steps = actions.into_iter().map(|a| step("", a)).collect();
            trajectory(id, [1000, 2000], steps)
        };
        Benchmark {
            root: "/nonexistent".into(),
            info: None,
            trajectories: vec![
                traj(
                    "A",
                    vec![click(), typed(), Action::Wait { time: None }, done()],
                ),
                traj("B", vec![click(), done()]),
                traj("C", vec![click(), typed(), done()]),
            ],
        }
    }

    fn answer(a: &Action) -> String {
        format!("<tool_call>{}</tool_call>", a.to_tool_call())
    }

    fn preds(lines: &[(&str, usize, String)]) -> PredictionSet {
        let mut set = PredictionSet::default();
        for (t, s, r) in lines {
            set.insert(Prediction::from_line(PredictionLine {
                trajectory: t.to_string(),
                step: *s,
                response: r.clone(),
                image_size: None,
                prompt_tokens: None,
                generated_tokens: None,
                finish: None,
                error: None,
            }));
        }
        set
    }

    fn history(p: Procedure) -> History {
        History::Predicted(Box::new(SemiOnlineSettings::new(p, RulePreset::default())))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn uis1_sop_figures_match_hand_counts() {
        // A stops at step 2 (a valid action of the wrong type), B completes, C stops at step 1 (unparsable).
        let p = preds(&[
            ("A", 0, answer(&click())),
            ("A", 1, answer(&typed())),
            ("A", 2, answer(&click())),
            ("B", 0, answer(&click())),
            ("B", 1, answer(&done())),
            ("C", 0, answer(&click())),
            ("C", 1, "I will type x".into()),
        ]);
        let b = bench();
        let rules = RulePreset::default();
        let (mut m, scored) = score_predictions(&rules, &b, &p);
        add_semi_online(&mut m, &scored.steps, &history(Procedure::Uis1Sop));
        let s = m.semi_online.clone().unwrap();
        assert_eq!(s.procedure, Procedure::Uis1Sop);
        assert_eq!(s.images, 2);
        // Success: B only, 1 of 3.
        assert!(close(s.success_rate, 100.0 / 3.0), "{}", s.success_rate);
        assert!(close(s.success_rate, m.task_success));
        // Progress: A 2/4, B 2/2, C 1/3; zeroed: C counts 0 (it stopped at an unparsable reply).
        assert!(close(
            s.average_progress,
            100.0 * (0.5 + 1.0 + 1.0 / 3.0) / 3.0
        ));
        assert!(close(s.average_progress_zeroed.unwrap(), 100.0 * 1.5 / 3.0));
        assert_eq!(s.steps_reached, 7);
        assert_eq!(s.steps_not_reached, Some(2));
        assert_eq!(s.gold_history_entries, None);
        assert_eq!(s.stopped_unparsable, 1);
        // Tail success: only B reached its final step and got it right.
        assert!(close(m.tail_success, 100.0 / 3.0));
        // Accuracy counts the 5 correct steps of the 9.
        assert!(close(m.accuracy, 500.0 / 9.0));
        // The two steps after a stop are format errors of kind `not_reached`, not `missing`.
        assert_eq!(m.format_error_kinds.get("not_reached"), Some(&2));
        assert_eq!(m.format_error_kinds.get("missing"), None);
        assert_eq!(m.format_error_kinds.get("no_tool_call"), Some(&1));
        let iv = m.intervals.as_ref().unwrap();
        for name in SEMI_ONLINE_INTERVALS {
            let i = iv.metrics[*name];
            assert!(i.low <= i.high, "{name}: {i:?}");
        }
        // The bootstrap of success draws the same trajectories as task success's.
        assert_eq!(iv.metrics["success_rate"], iv.metrics["task_success"]);
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["semi_online"]["procedure"], "uis1-sop");
        assert!(json["semi_online"].get("gold_history_entries").is_none());
    }

    #[test]
    fn guievalkit_figures_match_hand_counts() {
        // Every step predicted. A: right, right, wrong, right (its final step right, yet not a success);
        // B: right, right; C: right, wrong, wrong.
        let p = preds(&[
            ("A", 0, answer(&click())),
            ("A", 1, answer(&typed())),
            ("A", 2, answer(&typed())),
            ("A", 3, answer(&done())),
            ("B", 0, answer(&click())),
            ("B", 1, answer(&done())),
            ("C", 0, answer(&click())),
            ("C", 1, answer(&Action::Type { text: "y".into() })),
            ("C", 2, answer(&click())),
        ]);
        let b = bench();
        let rules = RulePreset::default();
        let (mut m, scored) = score_predictions(&rules, &b, &p);
        add_semi_online(&mut m, &scored.steps, &history(Procedure::GuiEvalKit));
        let s = m.semi_online.clone().unwrap();
        assert_eq!(s.images, 1);
        assert!(close(s.success_rate, 100.0 / 3.0));
        // goal_progress: A 2/4, B 2/2, C 1/3.
        assert!(close(
            s.average_progress,
            100.0 * (0.5 + 1.0 + 1.0 / 3.0) / 3.0
        ));
        assert_eq!(s.average_progress_zeroed, None);
        assert_eq!(s.steps_reached, 9);
        assert_eq!(s.steps_not_reached, None);
        // Gold entries: A's step 2 and C's step 1 (C's step 2 is its last, never in a history).
        assert_eq!(s.gold_history_entries, Some(2));
        assert_eq!(s.stopped_unparsable, 0);
        // Tail success: A and B end right.
        assert!(close(m.tail_success, 200.0 / 3.0));
        assert!(close(average_progress(&scored.steps), s.average_progress));
        // A gold-history run gets no semi-online figures.
        let (mut gold, _) = score_predictions(&rules, &b, &p);
        add_semi_online(&mut gold, &scored.steps, &History::Gold);
        assert!(gold.semi_online.is_none());
    }

    #[test]
    fn paired_progress_interval_of_identical_runs_is_zero() {
        let b = bench();
        let p = preds(&[("A", 0, answer(&click())), ("B", 0, answer(&click()))]);
        let (_, scored) = score_predictions(&RulePreset::default(), &b, &p);
        let i = paired_progress_interval(&scored.steps, &scored.steps, 200, 1);
        assert_eq!((i.low, i.high), (0.0, 0.0));
    }
}
