//! `scored.json`: what a folder written by `score --out` was scored from, so that `report` and `report --compare`
//! read it exactly as `score` wrote it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{RunSettings, Versions};
use crate::settings::{CoordinateFrame, RulePreset};

/// Version of the scored-folder record. Version 2 added `run_settings`; version-1 records read without it.
pub(crate) const SCORED_SCHEMA_VERSION: u32 = 2;

/// `scored.json`: the inputs of a scored folder. The folder also holds a copy of the predictions
/// (`predictions.jsonl`), so it stays readable when the original file moves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreRecord {
    /// Version of this format.
    pub schema_version: u32,
    /// The predictions file as given to `score --predictions`.
    pub predictions: PathBuf,
    /// SHA-256 of the predictions as scored (the folder's `predictions.jsonl`).
    pub predictions_sha256: String,
    /// The benchmark folder.
    pub data: PathBuf,
    /// SHA-256 of its `data.jsonl`.
    pub data_hash: String,
    /// The matching-rule preset of the metrics.
    pub rules: RulePreset,
    /// The frame the predicted coordinates were read in (image pixels in records that predate it).
    #[serde(default)]
    pub coordinate_frame: CoordinateFrame,
    /// When it was scored (Unix seconds).
    pub scored_at_unix: u64,
    /// The program that scored it.
    pub versions: Versions,
    /// The settings of the run that made the predictions (its manifest's, or those the scored folder they were
    /// taken from recorded): the model, and the history of its prompts (a semi-online procedure), which the
    /// scores and the report depend on. Absent when the predictions came from no run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_settings: Option<RunSettings>,
}
