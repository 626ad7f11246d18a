//! The content of `compare.json`: the types [`super::compare`] computes and both the JSON and the HTML writer
//! (`compare_html`) read, kept apart so the HTML writer depends on the data and not on the module that calls it.

use serde::{Deserialize, Serialize};

use crate::score::McNemar;

/// Version of the `compare.json` layout.
pub(crate) const COMPARE_SCHEMA_VERSION: u32 = 1;

/// One headline metric in both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricDelta {
    /// Metric name (as in `metrics.json`).
    pub metric: String,
    /// Value in run A.
    pub a: f64,
    /// Value in run B.
    pub b: f64,
    /// `b - a`.
    pub delta: f64,
    /// Paired-bootstrap interval of the delta.
    pub low: f64,
    /// Upper bound of that interval.
    pub high: f64,
}

/// A group's (app or gold action) step accuracy in both runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupDelta {
    /// App name or action type.
    pub key: String,
    /// Steps in the group.
    pub steps: usize,
    /// Accuracy % in A.
    pub a: f64,
    /// Accuracy % in B.
    pub b: f64,
    /// `b - a`.
    pub delta: f64,
}

/// A step correct in one run and wrong in the other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flip {
    /// Trajectory id.
    pub trajectory: String,
    /// 0-based step.
    pub step: usize,
    /// `right_to_wrong` (A correct, B wrong) or `wrong_to_right`.
    pub direction: String,
    /// A's response.
    pub response_a: Option<String>,
    /// B's response.
    pub response_b: Option<String>,
}

/// The content of `compare.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// [`COMPARE_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Run A's folder.
    pub run_a: String,
    /// Run B's folder.
    pub run_b: String,
    /// sha256 of the shared `data.jsonl`.
    pub benchmark_hash: String,
    /// The rule preset both were scored with.
    pub rules: String,
    /// Benchmark steps.
    pub steps: usize,
    /// Benchmark trajectories.
    pub trajectories: usize,
    /// How the delta intervals were computed.
    pub interval_method: String,
    /// Their confidence level.
    pub confidence: f64,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// Bootstrap seed.
    pub seed: u64,
    /// Headline metrics.
    pub metrics: Vec<MetricDelta>,
    /// McNemar's exact test on step correctness.
    pub mcnemar: McNemar,
    /// Flipped steps, in benchmark order.
    pub flipped: Vec<Flip>,
    /// Per app.
    pub per_app: Vec<GroupDelta>,
    /// Per gold action type.
    pub per_action: Vec<GroupDelta>,
    /// The settings in which the two runs differ (what was compared), as `dotted.key`.
    #[serde(default)]
    pub settings: Vec<SettingDelta>,
    /// The history of A and B (`gold`, `uis1-sop`, `guievalkit`), when either run showed the model its own
    /// (`average_progress` is then among the metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<[String; 2]>,
}

/// One setting that differs between the compared runs (absent on one side: `None`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingDelta {
    /// The setting, as `dotted.key` of the manifests' settings.
    pub key: String,
    /// Its value in run A.
    pub a: Option<String>,
    /// Its value in run B.
    pub b: Option<String>,
}
