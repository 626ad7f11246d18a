//! Aggregation of step scores into benchmark metrics.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::{Map, Value};

use super::{Intervals, Outcome, RulePreset, StepScore};
use crate::action::ActionType;

/// The benchmark metrics (`metrics.json`). Percentages are numbers in 0–100.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    /// N: benchmark steps.
    pub steps: usize,
    /// T: benchmark trajectories.
    pub trajectories: usize,
    /// 100·correct/N.
    pub accuracy: f64,
    /// 100·(trajectories whose every step is correct)/T.
    pub task_success: f64,
    /// 100·(trajectories whose final step is correct)/T.
    pub tail_success: f64,
    /// Steps with the right type but wrong arguments (the paper's "Avg Err" / "Args Error").
    pub args_errors: usize,
    /// args_errors / T.
    pub avg_args_errors: f64,
    /// Steps with no valid action (missing predictions included).
    pub format_errors: usize,
    /// Steps with a valid action of the wrong type.
    pub type_errors: usize,
    /// Correct steps.
    pub correct: usize,
    /// 100·(steps whose predicted type equals the gold type)/N.
    pub type_accuracy: f64,
    /// Trajectories whose every step is correct.
    pub successful_trajectories: usize,
    /// Trajectories whose final step is correct.
    pub tail_successful_trajectories: usize,
    /// Steps whose response had the full `<think>`/`<action>`/`<tool_call>` format.
    pub full_format: usize,
    /// 100·full_format/N.
    pub full_format_rate: f64,
    /// Benchmark steps without a prediction (counted as format errors).
    pub missing_predictions: usize,
    /// Predictions that match no benchmark step (set by the caller).
    pub unknown_predictions: usize,
    /// Unreadable prediction lines (set by the caller).
    pub malformed_prediction_lines: usize,
    /// Format errors by kind (`missing`, `no_tool_call`, `invalid_json`, …).
    pub format_error_kinds: BTreeMap<String, usize>,
    /// Per gold action type.
    pub per_action: Vec<ActionStats>,
    /// Gold type → predicted type (`none` for format errors) → count; non-zero cells only.
    pub confusion: Map<String, Value>,
    /// Per app.
    pub per_app: Vec<GroupStats>,
    /// Per 0-based step index.
    pub per_step_index: Vec<GroupStats>,
    /// The rule preset, with all thresholds.
    pub rules: RulePreset,
    /// 95% bootstrap intervals of the headline metrics (filled by [`super::score_predictions`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intervals: Option<Intervals>,
    /// Keys added by callers (e.g. `judge_success`), written at the top level.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Statistics of one gold action type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionStats {
    /// The gold type.
    pub action: ActionType,
    /// Steps of this gold type.
    pub count: usize,
    /// Of which predicted with the right type.
    pub type_correct: usize,
    /// Of which fully correct.
    pub correct: usize,
    /// 100·type_correct/count.
    pub type_accuracy: f64,
    /// 100·correct/count.
    pub exact_accuracy: f64,
}

/// Statistics of a group of steps (an app, or a step index).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupStats {
    /// The app name or the step index.
    pub key: String,
    /// Trajectories with a step in the group.
    pub trajectories: usize,
    /// Steps.
    pub steps: usize,
    /// Correct steps.
    pub correct: usize,
    /// 100·correct/steps.
    pub accuracy: f64,
    /// Args errors.
    pub args_errors: usize,
    /// Format errors.
    pub format_errors: usize,
    /// Type errors.
    pub type_errors: usize,
    /// For apps: 100·(trajectories fully correct)/trajectories.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_success: Option<f64>,
    /// For apps: 100·(trajectories with a correct final step)/trajectories.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_success: Option<f64>,
}

fn pct(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

#[derive(Default)]
struct Acc {
    steps: usize,
    outcomes: [usize; 4],
    trajs: usize,
    success: usize,
    tail: usize,
}

impl Acc {
    fn add(&mut self, o: Outcome) {
        self.steps += 1;
        self.outcomes[o as usize] += 1;
    }

    fn stats(&self, key: String, with_tasks: bool) -> GroupStats {
        GroupStats {
            key,
            trajectories: self.trajs,
            steps: self.steps,
            correct: self.outcomes[Outcome::Correct as usize],
            accuracy: pct(self.outcomes[Outcome::Correct as usize], self.steps),
            args_errors: self.outcomes[Outcome::ArgsError as usize],
            format_errors: self.outcomes[Outcome::FormatError as usize],
            type_errors: self.outcomes[Outcome::TypeError as usize],
            task_success: with_tasks.then(|| pct(self.success, self.trajs)),
            tail_success: with_tasks.then(|| pct(self.tail, self.trajs)),
        }
    }
}

/// Per-trajectory flags.
struct TrajFlags<'a> {
    app: &'a str,
    all_correct: bool,
    last_correct: bool,
}

fn confusion(steps: &[StepScore]) -> Map<String, Value> {
    let mut counts: HashMap<(ActionType, Option<ActionType>), usize> = HashMap::new();
    for s in steps {
        *counts.entry((s.gold_type, s.predicted_type)).or_default() += 1;
    }
    let mut out = Map::new();
    for &g in ActionType::ALL {
        let mut row = Map::new();
        for p in ActionType::ALL.iter().map(|&p| Some(p)).chain([None]) {
            if let Some(&n) = counts.get(&(g, p)) {
                row.insert(p.map_or("none", ActionType::as_str).to_owned(), n.into());
            }
        }
        if !row.is_empty() {
            out.insert(g.as_str().to_owned(), Value::Object(row));
        }
    }
    out
}

fn per_action(steps: &[StepScore]) -> Vec<ActionStats> {
    let mut acc: BTreeMap<ActionType, (usize, usize, usize)> = BTreeMap::new();
    for s in steps {
        let e = acc.entry(s.gold_type).or_default();
        e.0 += 1;
        e.1 += s.type_match as usize;
        e.2 += s.correct as usize;
    }
    acc.into_iter()
        .map(|(action, (count, type_correct, correct))| ActionStats {
            action,
            count,
            type_correct,
            correct,
            type_accuracy: pct(type_correct, count),
            exact_accuracy: pct(correct, count),
        })
        .collect()
}

/// Running totals over all steps: overall, per app, per step index, per trajectory, format-error kinds.
#[derive(Default)]
struct Tally<'a> {
    total: Acc,
    trajs: BTreeMap<usize, TrajFlags<'a>>,
    by_index: BTreeMap<usize, Acc>,
    by_app: BTreeMap<&'a str, Acc>,
    kinds: BTreeMap<String, usize>,
}

impl<'a> Tally<'a> {
    fn step(&mut self, s: &'a StepScore) {
        self.total.add(s.outcome);
        self.by_app.entry(&s.app).or_default().add(s.outcome);
        let idx = self.by_index.entry(s.step).or_default();
        idx.add(s.outcome);
        idx.trajs += 1;
        let t = self.trajs.entry(s.traj_index).or_insert_with(|| TrajFlags {
            app: &s.app,
            all_correct: true,
            last_correct: false,
        });
        t.all_correct &= s.correct;
        if s.last {
            t.last_correct = s.correct;
        }
        if s.missing {
            *self.kinds.entry("missing".into()).or_default() += 1;
        } else if let Some(e) = &s.parse_error {
            *self.kinds.entry(e.kind().into()).or_default() += 1;
        }
    }

    fn finish_trajectories(&mut self) {
        for t in self.trajs.values() {
            for acc in [self.by_app.entry(t.app).or_default(), &mut self.total] {
                acc.trajs += 1;
                acc.success += t.all_correct as usize;
                acc.tail += t.last_correct as usize;
            }
        }
    }
}

/// Aggregate step scores (every step of every trajectory, grouped by `traj_index`) into metrics.
///
/// `unknown_predictions` and `malformed_prediction_lines` start at 0; the caller sets them.
pub fn aggregate(steps: &[StepScore], rules: &RulePreset) -> Metrics {
    let mut tally = Tally::default();
    for s in steps {
        tally.step(s);
    }
    tally.finish_trajectories();
    let Tally {
        total,
        by_index,
        by_app,
        kinds,
        ..
    } = tally;
    let (n, t) = (total.steps, total.trajs);
    let correct = total.outcomes[Outcome::Correct as usize];
    let args = total.outcomes[Outcome::ArgsError as usize];
    let full_format = steps.iter().filter(|s| s.full_format).count();
    Metrics {
        steps: n,
        trajectories: t,
        accuracy: pct(correct, n),
        task_success: pct(total.success, t),
        tail_success: pct(total.tail, t),
        args_errors: args,
        avg_args_errors: if t == 0 { 0.0 } else { args as f64 / t as f64 },
        format_errors: total.outcomes[Outcome::FormatError as usize],
        type_errors: total.outcomes[Outcome::TypeError as usize],
        correct,
        type_accuracy: pct(steps.iter().filter(|s| s.type_match).count(), n),
        successful_trajectories: total.success,
        tail_successful_trajectories: total.tail,
        full_format,
        full_format_rate: pct(full_format, n),
        missing_predictions: steps.iter().filter(|s| s.missing).count(),
        unknown_predictions: 0,
        malformed_prediction_lines: 0,
        format_error_kinds: kinds,
        per_action: per_action(steps),
        confusion: confusion(steps),
        per_app: by_app
            .into_iter()
            .map(|(k, a)| a.stats(k.to_owned(), true))
            .collect(),
        per_step_index: by_index
            .into_iter()
            .map(|(k, a)| a.stats(k.to_string(), false))
            .collect(),
        rules: rules.clone(),
        intervals: None,
        extra: Map::new(),
    }
}
