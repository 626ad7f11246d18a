//! The arguments of `bench`.

use std::path::PathBuf;

use clap::Args;

use super::values::{at_least_one, positive_gflops, whole};
use super::OpsArgs;
use crate::records::{HistorySource, Procedure};
use crate::settings::{BenchModel, DTypeSpec, DeviceSpec};

/// Arguments of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// `tiny`, `small` (Qwen2.5-0.5B text + real 3B vision), `3b`, `7b`, `qwen3-2b`, `qwen3-4b`, `qwen3-8b`, or a config.json / model folder.
    #[arg(long, default_value = "tiny")]
    pub config: BenchModel,
    /// Accepted for older command lines: random weights are `bench`'s only mode (a real checkpoint's throughput
    /// is in `eval`'s `throughput.json`).
    #[arg(long, hide = true)]
    pub random_weights: bool,
    /// `auto` (the first GPU of a CUDA or Metal build, else the CPU), `cpu`, `cuda`, `cuda:N` or `metal`; a
    /// comma-separated list (`cuda:0,cuda:1`) runs one copy of the model per device, sharing the prompts as `eval`.
    #[arg(long, default_value = "auto", value_delimiter = ',', num_args = 1)]
    pub device: Vec<DeviceSpec>,
    /// `f32`, `bf16` or `f16` (default: bf16 on GPU, f32 on CPU).
    #[arg(long)]
    pub dtype: Option<DTypeSpec>,
    /// Number of step prompts (at least 1; rounded up to whole 4-step trajectories).
    #[arg(long, default_value_t = 16, value_parser = at_least_one::<usize>, allow_negative_numbers = true)]
    pub steps: usize,
    /// Most sequences decoded together.
    #[arg(long, default_value_t = 8, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub batch_size: usize,
    /// Token budget of one batch; automatic from free memory when absent.
    #[arg(long, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_batch_tokens: Option<usize>,
    /// New tokens per prompt.
    #[arg(long, default_value_t = 32, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_new_tokens: usize,
    /// Smallest image area in pixels.
    #[arg(long, default_value_t = 3136, value_parser = whole::<u64>, allow_negative_numbers = true)]
    pub min_pixels: u64,
    /// Largest image area in pixels (default 1280·28²).
    #[arg(long, default_value_t = 1_003_520, value_parser = whole::<u64>, allow_negative_numbers = true)]
    pub max_pixels: u64,
    /// Folder with a Qwen2.5-VL tokenizer.json and chat template (default: a copy built into the binary).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Skip the aggregation (judge) phase.
    #[arg(long)]
    pub no_judge: bool,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1234, value_parser = whole::<u64>, allow_negative_numbers = true)]
    pub seed: u64,
    /// `predicted`: run the same trajectories with the gold history, then with the model's own (each step
    /// chained to the previous one's answer) and report both (`history` in the JSON).
    #[arg(long, default_value = "gold")]
    pub history: HistorySource,
    /// The procedure of `--history predicted` (`uis1-sop` or `guievalkit`; default `uis1-sop`).
    #[arg(long)]
    pub semi_online: Option<Procedure>,
    /// How the ops run.
    #[command(flatten)]
    pub ops: OpsArgs,
    /// torch's matmul rate on this machine in the run's dtype, GFLOP/s (`compare.py` prints it): one more rate
    /// the MFU figures are held against, besides the ones measured in the run.
    #[arg(long, value_name = "GFLOPS", value_parser = positive_gflops)]
    pub torch_gflops: Option<f64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}
