//! What `eval` is given: the run's settings as the command line chose them, and what a finished run returns.

use std::path::PathBuf;

use crate::backend::{ModelSpec, OpenAiSettings};
use crate::interrupt::Cancel;
use crate::records::{History, Procedure, SemiOnlineSettings};
use crate::rundir::RunDir;
use crate::score::RunMetrics;
use crate::settings::RulePreset;
use crate::settings::{CoordinateFrame, DeviceSpec, ModelFamily};

use crate::settings::SystemPrompt;

use super::prompts;

/// Which model answers the aggregation prompts.
#[derive(Debug, Clone, PartialEq)]
pub enum JudgeChoice {
    /// The evaluated model.
    SameModel,
    /// Another checkpoint (folder or hub id).
    Other(String),
    /// No aggregation phase.
    None,
    /// A model on an OpenAI-compatible server (`--judge-endpoint`, `--judge-api-model`).
    Served(Box<OpenAiSettings>),
}

/// The server that answers a run's prompts instead of a local checkpoint (`eval --backend openai`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServedConfig {
    /// The step prompts' server (and the judge's, unless [`JudgeChoice::Served`] names another).
    pub steps: OpenAiSettings,
    /// Where the pixel bounds came from, for the manifest.
    pub pixel_bounds_from: String,
}

/// Everything `eval` needs, validated by the CLI.
#[derive(Debug, Clone)]
pub struct EvalConfig {
    /// The evaluated model and how to load it (with `served`, only its pixel bounds count).
    pub model: ModelSpec,
    /// An OpenAI-compatible server that answers the prompts instead of `model`.
    pub served: Option<ServedConfig>,
    /// The devices to run it on: one copy of the model per device (`model.device` is ignored).
    pub devices: Vec<DeviceSpec>,
    /// Benchmark folder (already resolved: the sample benchmark when the user gave none).
    pub data: PathBuf,
    /// Run folder (taken by the caller, who holds its lock).
    pub out: RunDir,
    /// `--batch-size`.
    pub batch_size: usize,
    /// `--max-batch-tokens`; automatic when `None`.
    pub max_batch_tokens: Option<usize>,
    /// `--max-new-tokens`.
    pub max_new_tokens: usize,
    /// Rule preset for the metrics.
    pub rules: RulePreset,
    /// System prompt source.
    pub system_prompt: SystemPrompt,
    /// The evaluated model's family: its default system prompt and coordinate frame (the loaded backend's,
    /// set by [`run_eval_with`](super::run_eval_with)).
    pub family: ModelFamily,
    /// `--coordinate-frame`; the family's default when `None`.
    pub coordinate_frame: Option<CoordinateFrame>,
    /// Judge model.
    pub judge: JudgeChoice,
    /// `--shard`: evaluate only this shard's trajectories (`out` is then the shard's own folder).
    pub shard: Option<crate::shard::ShardSpec>,
    /// A stop request (Ctrl-C, SIGTERM): nothing more is admitted, what runs finishes and is saved.
    pub cancel: Cancel,
    /// The command line the run was started with (for the command that resumes it).
    pub command_line: Vec<String>,
    /// The Hub dataset the benchmark was fetched from, for the manifest.
    pub data_source: Option<crate::records::DataSource>,
    /// `--history predicted --semi-online P`: the step prompts show the model's own earlier outputs under this
    /// procedure; `None`: the gold history.
    pub semi_online: Option<Procedure>,
    /// `--dump-prompts`: write every step prompt built into this file.
    pub dump_prompts: Option<PathBuf>,
    /// `--allow-step-errors`: judge a trajectory even when some of its steps failed (without those steps); else
    /// such a trajectory is left unjudged until its steps are redone.
    pub allow_step_errors: bool,
}

impl EvalConfig {
    /// The frame the agent's coordinates are read in: the flag's, else the family's default.
    pub fn frame(&self) -> CoordinateFrame {
        self.coordinate_frame
            .unwrap_or_else(|| self.family.default_coordinate_frame())
    }

    /// What the step prompts' system turn is made from.
    pub fn prompt_style(&self) -> prompts::PromptStyle {
        prompts::PromptStyle {
            source: self.system_prompt,
            family: self.family,
            frame: self.frame(),
        }
    }

    /// The history of the run's step prompts, as its manifest records it.
    pub fn history(&self) -> History {
        match self.semi_online {
            None => History::Gold,
            Some(p) => History::Predicted(Box::new(SemiOnlineSettings::new(p, self.rules.clone()))),
        }
    }
}

/// What a finished `eval` produced.
#[derive(Debug)]
pub struct EvalOutcome {
    /// `metrics.json` as written.
    pub metrics: RunMetrics,
    /// The readable summary table.
    pub summary: String,
}
