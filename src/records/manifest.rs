//! `manifest.json` (what a run was made with) and `throughput.json` (how fast it ran).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::backend::BackendRecord;
use super::{History, PhaseSummary, ProfileSnapshot};
use crate::fingerprint::FilesFingerprint;
use crate::preprocess::ImageProcessorConfig;
use crate::settings::{BatchLimits, CoordinateFrame, ModelFamily, RulePreset, SystemPrompt};
use crate::shard::ShardManifestEntry;

/// Version of the manifest format. Version 2 describes the backend in one tagged `backend` field (a local
/// checkpoint or a served model) instead of top-level `model_path`, `device`, `kv_bytes_per_token`, `ops` and
/// `served`; version-1 manifests read into the same shape.
pub const MANIFEST_SCHEMA_VERSION: u32 = 2;
/// Version of the throughput format.
pub const THROUGHPUT_SCHEMA_VERSION: u32 = 1;

fn v1() -> u32 {
    1
}

/// Everything that changes the predictions or verdicts: a resumed run must have the same, field for field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// `--model` as given.
    pub model: String,
    /// Fingerprint of the checkpoint's config and safetensors headers.
    pub model_hash: String,
    /// Content fingerprint of every weight file (a replaced file is refused on resume; empty in manifests that
    /// predate it, which therefore do not resume).
    #[serde(default)]
    pub weights: FilesFingerprint,
    /// Activation and weight dtype of a local checkpoint (`f32`, `bf16`, `f16`); `None` for a served model,
    /// whose server does not say (older manifests wrote `"served"`, read as `None`).
    #[serde(
        default,
        deserialize_with = "served_dtype",
        skip_serializing_if = "Option::is_none"
    )]
    pub dtype: Option<String>,
    /// SHA-256 of the benchmark's `data.jsonl`.
    pub data_hash: String,
    /// SHA-256 of every prompt template, by file name.
    pub prompt_hashes: BTreeMap<String, String>,
    /// Where the step prompt's system message comes from.
    pub system_prompt: SystemPrompt,
    /// The frame the agent's coordinates are read in (image pixels in manifests that predate it).
    #[serde(default)]
    pub coordinate_frame: CoordinateFrame,
    /// The image processor's settings (pixel bounds included).
    pub image_processor: ImageProcessorConfig,
    /// Most generated tokens per prompt.
    pub max_new_tokens: usize,
    /// The judge model, when there is an aggregation phase.
    pub judge: Option<JudgeSettings>,
    /// The program's version.
    pub version: String,
    /// `I/N` when the run is one shard of a sharded run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// The history the step prompts show; absent (the gold history) in runs that do not set it.
    #[serde(default, skip_serializing_if = "History::is_gold")]
    pub history: History,
    /// The model family (Qwen2.5-VL in manifests that predate the field).
    #[serde(default = "default_family")]
    pub family: ModelFamily,
}

/// A dtype as recorded: the placeholder `"served"` of older served runs' manifests is no dtype.
fn served_dtype<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let dtype = Option::<String>::deserialize(d)?;
    Ok(dtype.filter(|t| t != "served"))
}

/// The family of runs whose manifest does not name one: every model was Qwen2.5-VL then.
pub fn default_family() -> ModelFamily {
    ModelFamily::Qwen25Vl
}

/// One setting in which two runs differ, for messages (`name: old → new`, each value as JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingDiff {
    /// The field of [`RunSettings`].
    pub name: &'static str,
    /// Its value in the first settings.
    pub old: String,
    /// Its value in the second.
    pub new: String,
}

impl std::fmt::Display for SettingDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} → {}", self.name, self.old, self.new)
    }
}

impl RunSettings {
    /// Every field in which `new` differs from `self`, in field order (compared as typed values; shown as JSON).
    pub(crate) fn differences(&self, new: &RunSettings) -> Vec<SettingDiff> {
        fn show(v: &impl Serialize) -> String {
            serde_json::to_string(v).unwrap_or_else(|e| format!("({e})"))
        }
        let mut out = Vec::new();
        let mut field = |name: &'static str, differ: bool, old: String, new: String| {
            if differ {
                out.push(SettingDiff { name, old, new });
            }
        };
        // Destructured so that a new field cannot be left out of the comparison.
        macro_rules! compare {
            ($($f:ident),*) => {{
                let RunSettings { $($f),* } = self;
                $(field(stringify!($f), *$f != new.$f, show($f), show(&new.$f));)*
            }};
        }
        compare!(
            model,
            model_hash,
            weights,
            dtype,
            data_hash,
            prompt_hashes,
            system_prompt,
            coordinate_frame,
            image_processor,
            max_new_tokens,
            judge,
            version,
            shard,
            history,
            family
        );
        out
    }
}

/// The judge model of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeSettings {
    /// `--judge-model` (or the evaluated model).
    pub model: String,
    /// Its fingerprint.
    pub hash: String,
    /// Content fingerprint of its weight files.
    pub weights: FilesFingerprint,
}

/// Where a benchmark fetched from the Hub came from (`--data hf:OWNER/NAME[@REVISION]`); its content is
/// [`RunSettings::data_hash`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataSource {
    /// The dataset repository, `OWNER/NAME`.
    pub repo: String,
    /// The revision asked for (a branch, tag or commit).
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
}

/// Versions of the program and its engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Versions {
    /// This program.
    #[serde(rename = "mobile-r1-eval")]
    pub program: String,
    /// candle.
    pub candle: String,
    /// `git describe` of the source, when built from a checkout.
    pub git_revision: String,
}

impl Versions {
    /// The versions of this build.
    pub fn current() -> Self {
        Self {
            program: env!("CARGO_PKG_VERSION").into(),
            candle: env!("MOBILE_R1_EVAL_CANDLE_VERSION").into(),
            git_revision: env!("MOBILE_R1_EVAL_GIT_REV").into(),
        }
    }
}

/// `manifest.json`: the settings a run was made with, and the ones that may change between resumes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Version of this format.
    #[serde(default = "v1")]
    pub schema_version: u32,
    /// Version of the lines of `predictions.jsonl` and `judgements.jsonl` ([`super::LINE_SCHEMA_VERSION`]).
    #[serde(default = "v1")]
    pub line_schema_version: u32,
    /// What must not change on resume.
    pub settings: RunSettings,
    /// What answered the prompts (read from the top-level fields of version-1 manifests too).
    #[serde(
        flatten,
        serialize_with = "super::backend::write_backend",
        deserialize_with = "super::backend::read_backend"
    )]
    pub backend: BackendRecord,
    /// The benchmark folder.
    pub data: PathBuf,
    /// The matching-rule preset of the metrics.
    pub rules: RulePreset,
    /// Batch limits.
    pub batch_limits: BatchLimits,
    /// Versions of the program.
    pub versions: Versions,
    /// When the run was first started (Unix seconds).
    pub started_at_unix: u64,
    /// When it was last resumed, if ever.
    pub resumed_at_unix: Option<u64>,
    /// When it last finished, if ever.
    pub finished_at_unix: Option<u64>,
    /// The shard this run folder holds, for a sharded run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardManifestEntry>,
    /// Fingerprint of every screenshot of the benchmark (a changed one with saved answers is refused on resume;
    /// empty in manifests that predate it, which resume unchecked).
    #[serde(default)]
    pub screenshots: FilesFingerprint,
    /// The Hub dataset the benchmark was fetched from (absent for a local folder, and in older manifests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_source: Option<DataSource>,
}

/// The part of `manifest.json` that every run folder's manifest has — a run's or a shard's ([`Manifest`]) and a
/// merged run's (`merge::MergedManifest`) — and that `score`, `report`, `merge` and the resume check read: what
/// the predictions were made with, on which benchmark, scored by which rules, and whether the run finished.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ManifestHeader {
    /// Version of the manifest's format.
    #[serde(default = "v1")]
    pub schema_version: u32,
    /// What the predictions and verdicts were made with.
    pub settings: RunSettings,
    /// The benchmark folder.
    pub data: PathBuf,
    /// The matching-rule preset of the metrics.
    pub rules: RulePreset,
    /// When the run last finished, if ever.
    #[serde(default)]
    pub finished_at_unix: Option<u64>,
}

impl Manifest {
    /// The fields every manifest kind starts with.
    pub fn header(&self) -> ManifestHeader {
        ManifestHeader {
            schema_version: self.schema_version,
            settings: self.settings.clone(),
            data: self.data.clone(),
            rules: self.rules.clone(),
            finished_at_unix: self.finished_at_unix,
        }
    }
}

/// `throughput.json`: each phase's counters and rates, and the run's peak memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Version of this format.
    pub schema_version: u32,
    /// Steps, then judge.
    pub phases: Vec<PhaseSummary>,
    /// Peak resident memory of the process (bytes).
    pub peak_rss_bytes: Option<u64>,
    /// Peak device memory in use (bytes), on CUDA.
    pub peak_device_bytes: Option<u64>,
    /// The batch limits the phases ran under.
    pub batch_limits: BatchLimits,
    /// Per-section model timings when profiling was on.
    pub profile: Option<ProfileSnapshot>,
}

impl Throughput {
    /// A record of the current format.
    pub fn new(phases: Vec<PhaseSummary>, batch_limits: BatchLimits) -> Self {
        Self {
            schema_version: THROUGHPUT_SCHEMA_VERSION,
            phases,
            peak_rss_bytes: None,
            peak_device_bytes: None,
            batch_limits,
            profile: None,
        }
    }
}
