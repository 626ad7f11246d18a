//! The files a run writes, as serde types shared by their writer and reader: prediction and judgement lines
//! (`predictions.jsonl`, `judgements.jsonl`), the run manifest (`manifest.json`) and the throughput record
//! (`throughput.json`), with what they say about the ops, and the one policy by which their JSONL lines are read.
//! Pure: no candle; the only I/O is reading a file whole.
//!
//! JSON files carry their `schema_version`; the two JSONL files are versioned by the manifest of their run
//! (`Manifest::line_schema_version`), so every line stays a plain record that any JSONL tool can write.

mod backend;
mod history;
mod jsonl;
mod manifest;
mod ops;
mod phase;
mod scored;

use serde::{Deserialize, Deserializer, Serialize};

pub use backend::{BackendRecord, LocalRecord, OpsRecord, PublishedModel, ServedRecord};
pub(crate) use history::{History, HistorySource, Procedure, SemiOnlineSettings};
pub(crate) use jsonl::{parse_lines, read_lines, whole_lines, BadLine};
pub use manifest::{
    default_family, DataSource, JudgeSettings, Manifest, ManifestHeader, RunSettings, SettingDiff,
    Throughput, Versions, MANIFEST_SCHEMA_VERSION, THROUGHPUT_SCHEMA_VERSION,
};
pub use ops::{BlasChoice, DecodeAttention, MatmulRate, OpsManifest, ProfileSnapshot, SectionTime};
pub use phase::{DeviceShare, LatencySummary, PhaseStats, PhaseSummary, RequestStats};
pub(crate) use scored::{ScoreRecord, SCORED_SCHEMA_VERSION};

/// Version of the prediction and judgement line formats (bumped when a field changes meaning or is added).
/// Version 2 added `steps_sha256` and `missing_steps` to judgement lines; version-1 lines read with them absent.
pub(crate) const LINE_SCHEMA_VERSION: u32 = 2;

/// Why a generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It produced a stop token (kept out of the generated ids).
    Eos,
    /// It reached its token limit.
    Length,
    /// Its caller ended it (a stop string appeared in its text).
    Stopped,
}

/// A trajectory id as written in JSONL files: a string, read from a string or an integer.
pub(crate) fn trajectory_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Int(i64),
    }
    match Id::deserialize(d)
        .map_err(|_| serde::de::Error::custom("`trajectory` must be a string or an integer"))?
    {
        Id::Text(s) => Ok(s),
        Id::Int(n) => Ok(n.to_string()),
    }
}

/// A 0-based step index, read from a non-negative integer or a string holding one.
fn step_index<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Step {
        Int(u64),
        Text(String),
        Other(serde_json::Value),
    }
    let bad = |v: &dyn std::fmt::Display| {
        serde::de::Error::custom(format!("`step` must be a non-negative integer, found {v}"))
    };
    match Step::deserialize(d)? {
        Step::Int(n) => usize::try_from(n).map_err(|_| bad(&n)),
        Step::Text(s) => s.trim().parse().map_err(|_| bad(&format!("{s:?}"))),
        Step::Other(v) => Err(bad(&v)),
    }
}

/// `[w, h]` with both positive, or null.
fn image_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u32; 2]>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let size = v.as_array().filter(|a| a.len() == 2).and_then(|a| {
        let w = u32::try_from(a[0].as_u64()?).ok()?;
        let h = u32::try_from(a[1].as_u64()?).ok()?;
        (w > 0 && h > 0).then_some([w, h])
    });
    size.map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "`image_size` must be [w, h] positive integers, found {v}"
        ))
    })
}

/// One line of `predictions.jsonl`: the model's raw answer for one benchmark step. `score --predictions` reads
/// the same format, so only `trajectory`, `step` and `response` are required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionLine {
    /// Trajectory id (a string or an integer on input).
    #[serde(deserialize_with = "trajectory_id")]
    pub trajectory: String,
    /// 0-based step index.
    #[serde(deserialize_with = "step_index")]
    pub step: usize,
    /// The raw model text (empty when the step could not be prepared).
    pub response: String,
    /// `[w, h]` of the image the model saw; null means predicted points are screen pixels.
    #[serde(default, deserialize_with = "image_size")]
    pub image_size: Option<[u32; 2]>,
    /// Prompt length in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<usize>,
    /// Generated tokens (a stop token excluded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_tokens: Option<usize>,
    /// Why generation stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<FinishReason>,
    /// Why the step could not be run (e.g. an unreadable screenshot); such a step is redone on resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The benchmark position a line of `predictions.jsonl` or `judgements.jsonl` stands for: its trajectory and, for
/// a prediction, its step (what `merge` orders lines by, leaving each line's text as written).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct LineKey {
    /// Trajectory id.
    #[serde(deserialize_with = "trajectory_id")]
    pub trajectory: String,
    /// 0-based step index; absent in judgement lines.
    #[serde(default, deserialize_with = "some_step_index")]
    pub step: Option<usize>,
}

fn some_step_index<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    step_index(d).map(Some)
}

/// One line of `judgements.jsonl`: the aggregation (judge) prompt's verdict on one trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgementLine {
    /// Trajectory id.
    #[serde(deserialize_with = "trajectory_id")]
    pub trajectory: String,
    /// The verdict; null when the answer had none (or the prompt failed).
    pub success: Option<bool>,
    /// The judge's reason, when given.
    pub reason: Option<String>,
    /// The judge's raw answer.
    pub response: String,
    /// Prompt length in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<usize>,
    /// Generated tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated_tokens: Option<usize>,
    /// Why the prompt could not be run; such a trajectory is redone on resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// SHA-256 of the step answers the prompt was built from (`crate::score::judged_steps`): a verdict whose
    /// steps were redone since is stale, redone on resume and not counted. Absent in version-1 lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_sha256: Option<String>,
    /// Steps the prompt lacked (failed or absent: judged so under `--allow-step-errors`). Absent in version-1
    /// lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_steps: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prediction_lines_keep_their_field_order_and_read_back() {
        let p = PredictionLine {
            trajectory: "7".into(),
            step: 2,
            response: "x".into(),
            image_size: Some([28, 56]),
            prompt_tokens: Some(40),
            generated_tokens: Some(3),
            finish: Some(FinishReason::Eos),
            error: None,
        };
        let line = serde_json::to_string(&p).unwrap();
        assert_eq!(
            line,
            r#"{"trajectory":"7","step":2,"response":"x","image_size":[28,56],"prompt_tokens":40,"generated_tokens":3,"finish":"eos"}"#
        );
        assert_eq!(serde_json::from_str::<PredictionLine>(&line).unwrap(), p);
        let failed =
            r#"{"trajectory":"a","step":0,"response":"","image_size":null,"error":"bad png"}"#;
        let f: PredictionLine = serde_json::from_str(failed).unwrap();
        assert_eq!(serde_json::to_string(&f).unwrap(), failed);
    }

    #[test]
    fn lenient_ids_and_clear_errors() {
        let p: PredictionLine =
            serde_json::from_str(r#"{"trajectory": 3, "step": "1", "response": "r"}"#).unwrap();
        assert_eq!((p.trajectory.as_str(), p.step), ("3", 1));
        let err = serde_json::from_str::<PredictionLine>(
            r#"{"trajectory": 1, "step": -1, "response": ""}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`step` must be a non-negative integer"),
            "{err}"
        );
        let err = serde_json::from_str::<PredictionLine>(
            r#"{"trajectory": 1, "step": 0, "response": "", "image_size": [0, 3]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("`image_size` must be [w, h]"), "{err}");
    }
}
