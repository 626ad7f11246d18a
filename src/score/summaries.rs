//! The judge's and the semi-online figures of `metrics.json`: plain data that [`RunMetrics`](super::RunMetrics)
//! holds and that the judge ([`super::score_run`]) and semi-online ([`super::add_semi_online`]) scorers fill in.

use serde::{Deserialize, Serialize};

use crate::records::Procedure;

/// The judge's figures in `metrics.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JudgeSummary {
    /// 100 · trajectories whose current verdict is success / T (every trajectory counts in the denominator).
    pub judge_success: f64,
    /// Current verdict lines without a parseable verdict.
    pub judge_unparseable: usize,
    /// Trajectories without a current verdict (no line, a failed judge prompt, a stale verdict, or left unjudged
    /// for step errors).
    pub judge_missing: usize,
    /// Trajectories with a current verdict line.
    pub judge_judged: usize,
    /// Verdict lines made from other step answers than the saved ones (a step redone since): not counted.
    #[serde(default)]
    pub judge_stale: usize,
    /// Current verdicts whose prompt lacked some steps (failed or absent; judged under `--allow-step-errors`).
    #[serde(default)]
    pub judge_with_missing_steps: usize,
    /// Trajectories without a current verdict that have failed or absent steps: the judge phase leaves them
    /// unjudged unless `--allow-step-errors`.
    #[serde(default)]
    pub judge_skipped_step_errors: usize,
}

/// The semi-online figures of `metrics.json` (`semi_online`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SemiOnlineSummary {
    /// The procedure the run followed.
    pub procedure: Procedure,
    /// Screenshots per prompt, the current one included.
    pub images: usize,
    /// 100 · trajectories whose every step is correct / T: both references' Success Rate (the same trajectories
    /// as `task_success`, named as the references name it).
    pub success_rate: f64,
    /// 100 · mean over trajectories of (correct steps before the first wrong one) / (its steps): UI-S1's Average
    /// Progress and GUIEvalKit's `goal_progress`, an unparsable reply counting as a wrong step.
    pub average_progress: f64,
    /// `uis1-sop` only: [`Self::average_progress`] with a trajectory that stopped at an unparsable reply counted
    /// as 0, as UI-S1's code does when parsing raises.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub average_progress_zeroed: Option<f64>,
    /// Steps with a prediction.
    pub steps_reached: usize,
    /// `uis1-sop` only: steps after a trajectory's stop, never prompted (scored as format errors of kind
    /// `not_reached`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps_not_reached: Option<usize>,
    /// `guievalkit` only: history entries that were the gold action (a wrong step before a trajectory's last).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gold_history_entries: Option<usize>,
    /// Trajectories that stopped at an unparsable reply.
    pub stopped_unparsable: usize,
}
