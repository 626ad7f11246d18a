//! Aggregation of step scores into benchmark metrics.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};

use super::{
    CoordinateFrame, Intervals, JudgeSummary, Outcome, RulePreset, SemiOnlineSummary, StepScore,
};
use crate::action::ActionType;

/// A predicted type in the confusion table: an action type, or `none` (no valid action); `none` sorts last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Predicted {
    /// A valid action of this type.
    Type(ActionType),
    /// No valid action.
    None,
}

impl Predicted {
    /// The column name (`none` for no valid action).
    pub fn as_str(self) -> &'static str {
        match self {
            Predicted::Type(t) => t.as_str(),
            Predicted::None => "none",
        }
    }
}

impl Serialize for Predicted {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Gold type → predicted type → count, non-zero cells only, in action-type order.
pub type Confusion = BTreeMap<ActionType, BTreeMap<Predicted, usize>>;

/// A figure beyond the headline ones, for the summary and the report: the judge's, and the prediction lines that
/// carry an error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtraFigure {
    /// Its key in `metrics.json`.
    pub key: &'static str,
    /// Its value.
    pub value: Figure,
}

/// The value of an [`ExtraFigure`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Figure {
    /// A percentage; `None` when there is nothing to count it over (no verdict could be read).
    Percent(Option<f64>),
    /// A count.
    Count(usize),
}

/// The layout version of `metrics.json` (a file written without the field has the same layout: version 1).
pub const METRICS_SCHEMA_VERSION: u32 = 1;

/// The benchmark metrics (`metrics.json`). Percentages are numbers in 0–100.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunMetrics {
    /// [`METRICS_SCHEMA_VERSION`].
    pub schema_version: u32,
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
    /// Type errors answered with an action outside the `mobile_use` space, by its name (`answer`, `ask_user`, …).
    pub unsupported_actions: BTreeMap<String, usize>,
    /// The frame predicted coordinates were read in (set by the caller; image pixels otherwise).
    pub coordinate_frame: CoordinateFrame,
    /// Steps with a predicted point outside that frame (a likely wrong `--coordinate-frame` when many).
    pub out_of_frame: usize,
    /// Per gold action type.
    pub per_action: Vec<ActionStats>,
    /// Gold type → predicted type (`none` for format errors) → count; non-zero cells only.
    pub confusion: Confusion,
    /// Per app.
    pub per_app: Vec<GroupStats>,
    /// Per 0-based step index.
    pub per_step_index: Vec<GroupStats>,
    /// The rule preset, with all thresholds.
    pub rules: RulePreset,
    /// 95% bootstrap intervals of the headline metrics (filled by [`super::score_predictions`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intervals: Option<Intervals>,
    /// The judge's figures, when the run had a judge phase (written at the top level).
    #[serde(flatten)]
    pub judge: Option<JudgeSummary>,
    /// Prediction lines that carry an error (steps that could not be prepared), when counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prediction_errors: Option<usize>,
    /// The semi-online figures, when the run's step prompts showed the model's own history.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semi_online: Option<SemiOnlineSummary>,
}

/// Out-of-frame steps below this count never warn, whatever their share.
pub const OUT_OF_FRAME_MIN_STEPS: usize = 3;
/// Out-of-frame steps warn above this share of the steps (percent).
pub const OUT_OF_FRAME_MAX_PERCENT: f64 = 2.0;

impl RunMetrics {
    /// A warning when more than [`OUT_OF_FRAME_MAX_PERCENT`] % of the steps, and at least
    /// [`OUT_OF_FRAME_MIN_STEPS`], answered points outside the coordinate frame: the agent likely answers in
    /// another frame, and the warning names the flag to try.
    pub fn frame_warning(&self) -> Option<String> {
        let share = pct(self.out_of_frame, self.steps);
        if self.out_of_frame < OUT_OF_FRAME_MIN_STEPS || share <= OUT_OF_FRAME_MAX_PERCENT {
            return None;
        }
        let frame = self.coordinate_frame;
        let outside = match frame {
            CoordinateFrame::ImagePixels => "beyond the image the model saw".to_owned(),
            CoordinateFrame::Relative(n) => format!("beyond {n} on the relative grid"),
        };
        Some(format!(
            "{} of {} steps ({share:.1}%) answered points outside the {frame} coordinate frame ({outside}): the \
             agent likely answers in another frame, so these steps are likely mis-scored; try \
             --coordinate-frame {}",
            self.out_of_frame,
            self.steps,
            frame.suggested_alternative()
        ))
    }

    /// The judge's figures and the prediction errors, in `metrics.json` order, for tables.
    pub(crate) fn extra_figures(&self) -> Vec<ExtraFigure> {
        let mut out = Vec::new();
        if let Some(j) = &self.judge {
            let read = j.judge_judged.saturating_sub(j.judge_unparseable);
            let figure = |key, value| ExtraFigure { key, value };
            out.extend([
                figure(
                    "judge_success",
                    Figure::Percent((read > 0).then_some(j.judge_success)),
                ),
                figure("judge_unparseable", Figure::Count(j.judge_unparseable)),
                figure("judge_missing", Figure::Count(j.judge_missing)),
                figure("judge_judged", Figure::Count(j.judge_judged)),
                figure("judge_stale", Figure::Count(j.judge_stale)),
                figure(
                    "judge_with_missing_steps",
                    Figure::Count(j.judge_with_missing_steps),
                ),
                figure(
                    "judge_skipped_step_errors",
                    Figure::Count(j.judge_skipped_step_errors),
                ),
            ]);
        }
        if let Some(n) = self.prediction_errors {
            out.push(ExtraFigure {
                key: "prediction_errors",
                value: Figure::Count(n),
            });
        }
        out
    }
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

fn confusion(steps: &[StepScore]) -> Confusion {
    let mut out = Confusion::new();
    for s in steps {
        let predicted = s.predicted_type.map_or(Predicted::None, Predicted::Type);
        *out.entry(s.gold_type)
            .or_default()
            .entry(predicted)
            .or_default() += 1;
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
    unsupported: BTreeMap<String, usize>,
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
        if let Some(name) = s.unsupported_action {
            *self.unsupported.entry(name.into()).or_default() += 1;
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
pub fn aggregate(steps: &[StepScore], rules: &RulePreset) -> RunMetrics {
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
        unsupported,
        ..
    } = tally;
    let (n, t) = (total.steps, total.trajs);
    let correct = total.outcomes[Outcome::Correct as usize];
    let args = total.outcomes[Outcome::ArgsError as usize];
    let full_format = steps.iter().filter(|s| s.full_format).count();
    RunMetrics {
        schema_version: METRICS_SCHEMA_VERSION,
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
        unsupported_actions: unsupported,
        coordinate_frame: CoordinateFrame::default(),
        out_of_frame: steps.iter().filter(|s| s.out_of_frame).count(),
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
        judge: None,
        prediction_errors: None,
        semi_online: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_success_is_not_a_figure_when_no_verdict_was_read() {
        let mut m = aggregate(&[], &RulePreset::default());
        m.judge = Some(JudgeSummary {
            judge_success: 0.0,
            judge_unparseable: 5,
            judge_missing: 0,
            judge_judged: 5,
            ..JudgeSummary::default()
        });
        assert_eq!(m.extra_figures()[0].value, Figure::Percent(None));
        m.judge.as_mut().unwrap().judge_unparseable = 4;
        assert_eq!(m.extra_figures()[0].value, Figure::Percent(Some(0.0)));
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["judge_success"], 0.0, "metrics.json keeps the number");
    }

    #[test]
    fn the_frame_warning_needs_a_few_steps_and_a_share() {
        let mut m = aggregate(&[], &RulePreset::default());
        m.steps = 200;
        m.out_of_frame = 4;
        assert_eq!(m.frame_warning(), None, "2% is not more than 2%");
        m.out_of_frame = 5;
        let w = m.frame_warning().expect("2.5% warns");
        assert!(w.contains("--coordinate-frame relative-999"), "{w}");
        m.steps = 50;
        m.out_of_frame = 2;
        assert_eq!(m.frame_warning(), None, "fewer than three steps never warn");
        m.out_of_frame = 3;
        m.coordinate_frame = CoordinateFrame::Relative(999);
        let w = m.frame_warning().expect("6% warns");
        assert!(
            w.contains("beyond 999") && w.contains("image-pixels"),
            "{w}"
        );
    }
}
