//! Scoring: per-step judgement under a [`RulePreset`] and aggregation into [`RunMetrics`]. Pure (no I/O).
//!
//! A step is **correct** when the response parses, the type equals the gold type and the arguments match;
//! otherwise it is an **args error** (right type), a **type error** (valid action, wrong type) or a
//! **format error** (no valid action, a missing prediction included).

mod geometry;
mod judge;
mod matching;
mod metrics;
mod semi_online;
mod stats;
mod summaries;

use std::collections::HashMap;

use serde::Serialize;

pub use crate::settings::{
    BoxChoice, BoxGrowth, CoordinateFrame, DirectionSpace, DistanceMetric, PointSpace, Precision,
    Reading, RuleName, SwipeRule, TextRule, ZeroMove,
};
pub use geometry::map_point;
pub use judge::{is_current, judged_steps, score_run, summarize, JudgedSteps};
pub use matching::{in_box, match_args, match_args_in, norm_distance, ArgCheck, Direction, Frames};
pub use metrics::{
    aggregate, ActionStats, Confusion, ExtraFigure, Figure, GroupStats, Predicted, RunMetrics,
};
pub use semi_online::{
    add_semi_online, average_progress, paired_progress_interval, semi_online_summary,
    trajectory_runs, TrajectoryRun, SEMI_ONLINE_INTERVALS,
};
pub use stats::{
    bootstrap_mean, intervals, mcnemar_exact, paired_intervals, percent_interval, Interval,
    Intervals, McNemar, CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED, INTERVAL_METRICS,
};
pub use summaries::{JudgeSummary, SemiOnlineSummary};

use crate::action::{Action, ActionType};
use crate::dataset::{Benchmark, Trajectory};
use crate::parse::ParseFailure;
use crate::predictions::{Prediction, PredictionSet};
use crate::settings::RulePreset;

/// The four exclusive outcomes of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Right type and arguments.
    Correct,
    /// Right type, wrong arguments.
    ArgsError,
    /// Valid action of the wrong type (or an action outside the `mobile_use` space).
    TypeError,
    /// No valid action (unparseable or missing prediction).
    FormatError,
}

/// The judgement of one step (one line of `steps.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepScore {
    /// Trajectory id.
    pub trajectory: String,
    /// 0-based step index.
    pub step: usize,
    /// Index of the trajectory in the benchmark (groups steps in [`aggregate`]).
    pub traj_index: usize,
    /// Whether this is the trajectory's final step.
    pub last: bool,
    /// App name.
    pub app: String,
    /// The gold action.
    pub gold: Action,
    /// The gold type.
    pub gold_type: ActionType,
    /// The raw response; `None` when the prediction is missing.
    pub response: Option<String>,
    /// The prediction's `image_size`.
    pub image_size: Option<[u32; 2]>,
    /// The prediction is missing.
    pub missing: bool,
    /// The parsed action.
    pub predicted: Option<Action>,
    /// Its type.
    pub predicted_type: Option<ActionType>,
    /// Why parsing failed.
    pub parse_error: Option<ParseFailure>,
    /// The response had the full `<think>`/`<action>`/`<tool_call>` format.
    pub full_format: bool,
    /// The types match.
    pub type_match: bool,
    /// The step is correct.
    pub correct: bool,
    /// The outcome.
    pub outcome: Outcome,
    /// The argument test used (when the types match).
    pub check: Option<ArgCheck>,
    /// The frame the predicted coordinates were read in.
    pub coordinate_frame: CoordinateFrame,
    /// A predicted point lies outside that frame (beyond the image, or the grid): likely the wrong frame.
    pub out_of_frame: bool,
    /// The response's valid action outside the `mobile_use` space (`answer`, `ask_user`, …), by canonical name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsupported_action: Option<&'static str>,
}

impl StepScore {
    /// The step's frames: its screen, the image the model saw and the frame of the predicted coordinates.
    pub fn frames(&self, screen: [u32; 2]) -> Frames {
        Frames {
            screen,
            image_size: self.image_size,
            coordinates: self.coordinate_frame,
        }
    }
}

/// Judge step `step` of `traj` (index `traj_index` in its benchmark) against an optional prediction.
///
/// # Panics
/// When `step` is out of range for `traj`.
pub(crate) fn score_step(
    rules: &RulePreset,
    traj: &Trajectory,
    traj_index: usize,
    step: usize,
    pred: Option<&Prediction>,
) -> StepScore {
    let gold = &traj.steps[step];
    let mut s = StepScore {
        trajectory: traj.id.clone(),
        step,
        traj_index,
        last: step + 1 == traj.steps.len(),
        app: traj.app_name.clone(),
        gold: gold.action.clone(),
        gold_type: gold.action.action_type(),
        response: pred.map(|p| p.response.clone()),
        image_size: pred.and_then(|p| p.image_size),
        missing: pred.is_none(),
        predicted: None,
        predicted_type: None,
        parse_error: None,
        full_format: false,
        type_match: false,
        correct: false,
        outcome: Outcome::FormatError,
        check: None,
        coordinate_frame: pred.map_or_else(CoordinateFrame::default, |p| p.frame),
        out_of_frame: false,
        unsupported_action: None,
    };
    let Some(pred) = pred else { return s };
    let parsed = &pred.parsed;
    s.full_format = parsed.full_format;
    // A preset that reproduces a reference reads the response as that reference does.
    let read = crate::parse::read_as(rules.reading, &pred.response);
    let action = match read.as_ref().unwrap_or(&parsed.action) {
        Ok(a) => a.clone(),
        Err(e) if read.is_some() && unread_swipe_points(rules, e) => {
            // The reference never reads a swipe's points where any swipe matches (UI-S1): the answer is a swipe.
            s.predicted_type = Some(ActionType::Swipe);
            s.type_match = gold.action.action_type() == ActionType::Swipe;
            s.correct = s.type_match;
            s.check = s.type_match.then_some(ArgCheck::TypeOnly);
            s.outcome = if s.correct {
                Outcome::Correct
            } else {
                Outcome::TypeError
            };
            return s;
        }
        Err(e) => {
            // An action of an extended space is a valid answer of another type; anything else is a format error.
            match e.unsupported_action() {
                Some(name) => {
                    s.unsupported_action = Some(name);
                    s.outcome = Outcome::TypeError;
                }
                None => s.parse_error = Some(e.clone()),
            }
            return s;
        }
    };
    s.predicted_type = Some(action.action_type());
    let frames = s.frames([traj.image_width, traj.image_height]);
    s.out_of_frame = action_points(&action).iter().any(|p| {
        !frames
            .coordinates
            .contains(*p, frames.image_size, frames.screen)
    });
    match match_args_in(rules, &gold.action, &gold.bboxes, &action, frames) {
        None => s.outcome = Outcome::TypeError,
        Some((ok, check)) => {
            s.type_match = true;
            s.correct = ok;
            s.check = Some(check);
            s.outcome = if ok {
                Outcome::Correct
            } else {
                Outcome::ArgsError
            };
        }
    }
    s.predicted = Some(action);
    s
}

/// Whether `e` is a swipe without its points under a rule that never reads them (any swipe matches a swipe).
fn unread_swipe_points(rules: &RulePreset, e: &ParseFailure) -> bool {
    let missing = matches!(
        e,
        ParseFailure::Action(crate::action::ActionError::MissingArg {
            action: ActionType::Swipe,
            ..
        })
    );
    missing && rules.swipe == SwipeRule::TypeOnly
}

/// The points of a click, long press or swipe (both ends).
fn action_points(a: &Action) -> Vec<[f64; 2]> {
    match a {
        Action::Swipe {
            coordinate,
            coordinate2,
        } => vec![*coordinate, *coordinate2],
        other => other.point().into_iter().collect(),
    }
}

/// Every step of a benchmark judged, plus the predictions that match no step.
#[derive(Debug, Clone)]
pub struct ScoredRun {
    /// One score per benchmark step, in benchmark order.
    pub steps: Vec<StepScore>,
    /// `(trajectory, step)` of predictions that match no benchmark step, sorted.
    pub unknown: Vec<(String, usize)>,
}

/// Score `preds` against `bench` and aggregate, with the unknown and malformed prediction counts and the
/// bootstrap intervals ([`DEFAULT_RESAMPLES`], [`DEFAULT_SEED`]) filled in.
pub(crate) fn score_predictions(
    rules: &RulePreset,
    bench: &Benchmark,
    preds: &PredictionSet,
) -> (RunMetrics, ScoredRun) {
    let scored = score_benchmark(rules, bench, preds);
    let mut metrics = aggregate(&scored.steps, rules);
    metrics.coordinate_frame = preds.frame;
    metrics.unknown_predictions = scored.unknown.len();
    metrics.malformed_prediction_lines = preds.malformed.len();
    metrics.intervals = Some(intervals(&scored.steps, DEFAULT_RESAMPLES, DEFAULT_SEED));
    (metrics, scored)
}

/// `(trajectory, step)` of the predictions that match no step of `bench`, sorted.
pub fn unknown_predictions(bench: &Benchmark, preds: &PredictionSet) -> Vec<(String, usize)> {
    let lengths: HashMap<&str, usize> = bench
        .trajectories
        .iter()
        .map(|t| (t.id.as_str(), t.steps.len()))
        .collect();
    let mut unknown: Vec<(String, usize)> = preds
        .iter()
        .filter(|p| {
            lengths
                .get(p.trajectory.as_str())
                .is_none_or(|&n| p.step >= n)
        })
        .map(|p| (p.trajectory.clone(), p.step))
        .collect();
    unknown.sort();
    unknown
}

/// Judge every step of `bench` against `preds`.
pub fn score_benchmark(rules: &RulePreset, bench: &Benchmark, preds: &PredictionSet) -> ScoredRun {
    let mut steps = Vec::with_capacity(bench.num_steps());
    for (ti, t) in bench.trajectories.iter().enumerate() {
        for si in 0..t.steps.len() {
            steps.push(score_step(rules, t, ti, si, preds.get(&t.id, si)));
        }
    }
    let unknown = unknown_predictions(bench, preds);
    ScoredRun { steps, unknown }
}
