//! The command line as data: the only module that knows clap. Each subcommand's arguments are a plain struct,
//! its values already typed (devices, dtypes, presets), handed to its entry function in `crate::commands`.

use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, Subcommand};

use crate::hub::DataLocation;
use crate::ops::{CpuGemm, GemmCalibration};
use crate::records::{HistorySource, Procedure};
use crate::settings::RuleName;
use crate::settings::SystemPrompt;
use crate::settings::{DTypeSpec, DeviceSpec};

mod bench;
mod data;
mod serve;
mod values;

pub use bench::BenchArgs;
pub use data::{DataCommand, ImportArgs, SampleArgs, ValidateArgs};
pub use serve::{BackendKind, ServeArgs, ServedArgs};

use values::{at_least_one, hf_true, on_off, whole};

/// Offline evaluator of Qwen2.5-VL mobile GUI agents on the Mobile-R1 benchmark.
#[derive(Debug, Parser)]
#[command(name = "mobile-r1-eval", version, about)]
pub struct Cli {
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands (parsed once per process: their sizes do not matter, so `eval`'s many flags stay unboxed).
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Evaluate a checkpoint on a benchmark: step prompts, aggregation (judge) prompts, metrics.
    Eval(EvalArgs),
    /// Score a predictions file against a benchmark (no model needed).
    Score(ScoreArgs),
    /// Join the shards of a sharded run (`eval --shard`) into the files one unsharded run writes.
    Merge(MergeArgs),
    /// Write the HTML report of a run folder, or compare two runs (`--compare RUN_A RUN_B --out DIR`).
    Report(ReportArgs),
    /// Benchmark data utilities.
    #[command(subcommand)]
    Data(DataCommand),
    /// Write the embedded sample benchmark to a folder.
    Sample(SampleArgs),
    /// Run one prompt with one image through the model and print the greedy answer.
    Generate(GenerateArgs),
    /// Measure throughput with random weights on synthetic step prompts (no checkpoint needed).
    Bench(BenchArgs),
    /// Check this build's fused kernels on a device against their CPU references (exit 1 on a mismatch).
    SelfTest(SelfTestArgs),
    /// Write one folder to carry to a machine without network (model, benchmark, this binary, SHA256SUMS), or
    /// check such a folder (`--verify BUNDLE`).
    Pack(PackArgs),
    /// Serve a checkpoint over an OpenAI-compatible HTTP API (`POST /v1/chat/completions`), batching concurrent
    /// requests with the engine `eval` uses.
    Serve(ServeArgs),
}

/// How to reach the Hugging Face Hub and where its cache is; each flag defaults to the variable Hugging Face's
/// own tools read.
#[derive(Debug, Args, Clone)]
pub struct HubArgs {
    /// The Hub (or a mirror) that hub ids and `hf:` data are fetched from.
    #[arg(long, env = "HF_ENDPOINT", default_value = crate::hub::DEFAULT_ENDPOINT)]
    pub hub_endpoint: String,
    /// Never use the network: hub ids and `hf:` data come from the local cache only (the variable: `1`, `true`,
    /// `yes` or `on`, any case; any other value leaves it off, as Hugging Face's tools read it).
    #[arg(long, env = "HF_HUB_OFFLINE", value_parser = hf_true)]
    pub hub_offline: bool,
    /// Hugging Face's home folder; the cache is its `hub/` (default `~/.cache/huggingface`).
    #[arg(long, env = "HF_HOME")]
    pub hf_home: Option<PathBuf>,
    /// The cache folder itself (overrides `--hf-home`).
    #[arg(long, env = "HF_HUB_CACHE")]
    pub hub_cache: Option<PathBuf>,
    /// Access token for private or gated repos (default: the `token` file in the Hugging Face home).
    #[arg(long, env = "HF_TOKEN", hide_env_values = true)]
    pub hub_token: Option<String>,
    /// Seconds to wait for a connection to the Hub, and for the next bytes of an answer (at least 1).
    #[arg(
        long,
        env = "MOBILE_R1_EVAL_HUB_TIMEOUT",
        default_value_t = crate::hub::DEFAULT_TIMEOUT_SECS,
        value_parser = at_least_one::<u64>,
        allow_negative_numbers = true
    )]
    pub hub_timeout: u64,
    /// Retries of a failed transfer (timeout, dropped connection, HTTP 5xx), with growing pauses; a broken file
    /// resumes where it stopped.
    #[arg(
        long,
        env = "MOBILE_R1_EVAL_HUB_RETRIES",
        default_value_t = crate::hub::DEFAULT_RETRIES,
        value_parser = whole::<u32>,
        allow_negative_numbers = true
    )]
    pub hub_retries: u32,
}

/// Arguments of `pack`.
#[derive(Debug, Args)]
pub struct PackArgs {
    /// The model to carry: a local folder or a hub id (fetched first).
    #[arg(long, required_unless_present = "verify", conflicts_with = "verify")]
    pub model: Option<String>,
    /// A separate judge model to carry as well.
    #[arg(long, conflicts_with = "verify")]
    pub judge_model: Option<String>,
    /// The benchmark to carry: a folder holding `data.jsonl`, or `hf:OWNER/NAME[@REVISION]`.
    #[arg(long, required_unless_present = "verify", conflicts_with = "verify")]
    pub data: Option<DataLocation>,
    /// The bundle folder to write (must not exist, or be empty).
    #[arg(long, required_unless_present = "verify", conflicts_with = "verify")]
    pub out: Option<PathBuf>,
    /// Check a bundle against its `SHA256SUMS` instead, naming every missing or damaged file.
    #[arg(long, value_name = "BUNDLE")]
    pub verify: Option<PathBuf>,
    /// The Hub.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// Arguments of `self-test`.
#[derive(Debug, Args)]
pub struct SelfTestArgs {
    /// How the ops run (`--kernels off` checks the references against themselves).
    #[command(flatten)]
    pub ops: OpsArgs,
    /// `cpu`, `cuda`, `cuda:N`, `metal` or `auto` (a GPU when this build has one).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `score`.
#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Benchmark folder holding `data.jsonl`, or `hf:OWNER/NAME[@REVISION]`; for a run's predictions, the run's
    /// own benchmark when absent, else the embedded sample.
    #[arg(long)]
    pub data: Option<DataLocation>,
    /// The Hub, for `hf:` data.
    #[command(flatten)]
    pub hub: HubArgs,
    /// Predictions JSONL: one `{"trajectory", "step", "response", "image_size"?}` object per line.
    #[arg(long)]
    pub predictions: PathBuf,
    /// Output folder for `metrics.json`, `steps.jsonl` and `summary.md` (default: beside the predictions).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Matching-rule preset (default: the run's own for a run's predictions, else the one the benchmark's
    /// `benchmark.json` suggests, else mobile-r1).
    #[arg(long)]
    pub rules: Option<RuleName>,
    /// Read every response with this program's lenient reader, not as the preset's reference reads it (recorded
    /// with the preset as `reading: lenient`).
    #[arg(long)]
    pub lenient_reading: bool,
    /// The frame of the predicted coordinates: `image-pixels`, `relative-999`, `relative-1000` or `relative:N`
    /// (default: the run's own for a run's predictions, else image pixels).
    #[arg(long, value_name = "FRAME")]
    pub coordinate_frame: Option<crate::settings::CoordinateFrame>,
}

/// How the model's ops run; each flag takes its environment variable as its default.
#[derive(Debug, Args, Clone)]
pub struct OpsArgs {
    /// `on`: the fused ops (CUDA kernels, fused CPU attention and elementwise passes); `off`: their composed
    /// candle references (to measure what the fused ops bring). Takes a value (`--kernels off`), so the
    /// flag and its environment variable read the same words.
    #[arg(
        long,
        env = "MOBILE_R1_EVAL_KERNELS",
        default_value = "on",
        value_name = "on|off",
        value_parser = on_off,
        action = ArgAction::Set
    )]
    pub kernels: bool,
    /// `on`: bf16/f16 varlen attention on CUDA on tensor cores (`varlen_mma_*`); `off`: on CUDA cores (the
    /// kernel before it, to compare). No effect on the CPU or in f32. A bare `--tensor-core-attention` means `on`.
    #[arg(
        long,
        env = "MOBILE_R1_EVAL_MMA",
        default_value = "on",
        value_name = "on|off",
        value_parser = on_off,
        num_args = 0..=1,
        default_missing_value = "on",
        action = ArgAction::Set
    )]
    pub tensor_core_attention: bool,
    /// The CPU's f32 GEMMs: `auto` (OpenBLAS where it is installed, fits the CPU and is not slower than the
    /// built-in GEMM), `off` (the built-in GEMM: a packed AVX2 kernel for large segments on CPUs without AVX-512,
    /// the `gemm` crate otherwise), `gemm-crate` (the `gemm` crate for all), `on` (OpenBLAS, required), or the path
    /// of a library exporting `cblas_sgemm`.
    #[arg(long, env = "MOBILE_R1_EVAL_BLAS", default_value = "auto")]
    pub cpu_gemm: CpuGemm,
    /// The file that keeps the calibration deciding `--cpu-gemm auto` (the library against the built-in GEMM,
    /// measured once per machine so that every run on it makes the same choice); `none`: measured at each start.
    /// Default: `mobile-r1-eval/cpu-gemm.json` under `$XDG_CACHE_HOME` (else `~/.cache`).
    #[arg(
        long,
        env = "MOBILE_R1_EVAL_CPU_GEMM_CALIBRATION",
        value_name = "FILE|none",
        default_value = "",
        hide_default_value = true
    )]
    pub cpu_gemm_calibration: CalibrationFlag,
    /// Time each model section, waiting for the device around each (slower; the table goes into
    /// `throughput.json` / `bench --json` under `profile`).
    #[arg(long, env = "MOBILE_R1_EVAL_PROFILE", value_parser = BoolishValueParser::new())]
    pub profile: bool,
    /// Compute threads of the CPU kernels, one pool shared by the fused ops, the `gemm` crate and a CBLAS library
    /// (default: `RAYON_NUM_THREADS`, else every CPU this process may run on).
    #[arg(long, env = "MOBILE_R1_EVAL_THREADS", value_parser = at_least_one::<usize>)]
    pub threads: Option<usize>,
}

impl Command {
    /// The ops flags of a command that runs a model.
    pub fn ops(&self) -> Option<&OpsArgs> {
        match self {
            Command::Eval(a) => Some(&a.model.ops),
            Command::Generate(a) => Some(&a.model.ops),
            Command::Serve(a) => Some(&a.model.ops),
            Command::Bench(a) => Some(&a.ops),
            Command::SelfTest(a) => Some(&a.ops),
            _ => None,
        }
    }
}

/// `--cpu-gemm-calibration` as read: unset (or empty), or a value for the ops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CalibrationFlag {
    /// Unset or empty: the default file under the user's cache folder, which the command layer finds.
    CacheDefault,
    /// A file, or `none`.
    Set(GemmCalibration),
}

impl std::str::FromStr for CalibrationFlag {
    type Err = String;

    /// Empty: [`CalibrationFlag::CacheDefault`]; else `none` or a file ([`GemmCalibration`]).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().is_empty() {
            Ok(Self::CacheDefault)
        } else {
            s.parse().map(Self::Set)
        }
    }
}

/// Arguments of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run folder (from `eval`, or any folder with `predictions.jsonl`); `report.html` is written into it.
    #[arg(required_unless_present = "compare", conflicts_with = "compare")]
    pub run: Option<PathBuf>,
    /// Compare two runs on the same benchmark: writes `compare.html` and `compare.json` into `--out`.
    #[arg(long, num_args = 2, value_names = ["RUN_A", "RUN_B"], requires = "out")]
    pub compare: Option<Vec<PathBuf>>,
    /// Output folder of `--compare`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Benchmark folder, or `hf:OWNER/NAME[@REVISION]` (default: `data` in the run's `manifest.json`).
    #[arg(long)]
    pub data: Option<DataLocation>,
    /// Matching-rule preset (default: `rules` in the run's `manifest.json`, else the one the benchmark's
    /// `benchmark.json` suggests, else mobile-r1).
    #[arg(long)]
    pub rules: Option<RuleName>,
    /// The Hub, for `hf:` data.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// Model-loading arguments shared by `generate` and `eval`.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// Local folder in the Hugging Face layout, or a hub repo id such as `Qwen/Qwen2.5-VL-3B-Instruct`.
    #[arg(long)]
    pub model: String,
    /// `auto` (the first GPU of a CUDA or Metal build, else the CPU), `cpu`, `cuda`, `cuda:N` or `metal`; for
    /// `eval`, a comma-separated list (`cuda:0,cuda:1`) runs one copy of the model per device.
    #[arg(long, default_value = "auto", value_delimiter = ',', num_args = 1)]
    pub device: Vec<DeviceSpec>,
    /// `f32`, `bf16` or `f16` (default: bf16 on GPU, f32 on CPU).
    #[arg(long)]
    pub dtype: Option<DTypeSpec>,
    /// Override the checkpoint's `min_pixels`.
    #[arg(long, value_parser = whole::<u64>, allow_negative_numbers = true)]
    pub min_pixels: Option<u64>,
    /// Override the checkpoint's `max_pixels`.
    #[arg(long, value_parser = whole::<u64>, allow_negative_numbers = true)]
    pub max_pixels: Option<u64>,
    /// How the ops run.
    #[command(flatten)]
    pub ops: OpsArgs,
    /// The Hub, for hub ids.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// Arguments of `generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The model to load.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The image shown to the model.
    #[arg(long)]
    pub image: PathBuf,
    /// The user's text, after the image.
    #[arg(long)]
    pub prompt: String,
    /// Maximum number of generated tokens.
    #[arg(long, default_value_t = 256, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_new_tokens: usize,
    /// Do not stop at the end-of-sequence tokens (generate exactly `--max-new-tokens`).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON object (text, token_ids, prompt_tokens, top_logprobs) instead of the text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `eval`.
#[derive(Debug, Args)]
// `--model` is optional here: `--backend openai` needs none (with one, its pixel bounds are used).
#[command(mut_arg("model", |a| a.required(false).default_value("")))]
pub struct EvalArgs {
    /// The evaluated model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where the prompts go: this machine, or an OpenAI-compatible server.
    #[command(flatten)]
    pub served: ServedArgs,
    /// Benchmark folder holding `data.jsonl`, or `hf:OWNER/NAME[@REVISION]` (a dataset repo on the Hub, e.g.
    /// `hf:PG23/Mobile-R1`); the embedded sample when absent.
    #[arg(long)]
    pub data: Option<DataLocation>,
    /// Run folder (created, or resumed when it exists); default: a fresh folder under `runs/`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Most sequences decoded together.
    #[arg(long, default_value_t = 16, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub batch_size: usize,
    /// Token budget of one batch (prompt + generated tokens); automatic from free memory when absent.
    #[arg(long, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_batch_tokens: Option<usize>,
    /// Maximum generated tokens per prompt.
    #[arg(long, default_value_t = 256, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_new_tokens: usize,
    /// Matching-rule preset used for the metrics (default: the one the benchmark's `benchmark.json` suggests, else
    /// mobile-r1).
    #[arg(long)]
    pub rules: Option<RuleName>,
    /// Read every response with this program's lenient reader, not as the preset's reference reads it (recorded
    /// with the preset as `reading: lenient`).
    #[arg(long)]
    pub lenient_reading: bool,
    /// `default` (the Qwen2.5-VL mobile_use prompt from `prompts/`) or `data` (each trajectory's `system`).
    #[arg(long, default_value = "default")]
    pub system_prompt: SystemPrompt,
    /// The frame of the agent's coordinates: `image-pixels`, `relative-999`, `relative-1000` or `relative:N`
    /// (default: the model family's, image pixels for Qwen2.5-VL, relative-999 for Qwen3-VL).
    #[arg(long, value_name = "FRAME")]
    pub coordinate_frame: Option<crate::settings::CoordinateFrame>,
    /// Judge model for the aggregation prompts (default: the evaluated model).
    #[arg(long, conflicts_with = "no_judge")]
    pub judge_model: Option<String>,
    /// Skip the aggregation (judge) phase.
    #[arg(long)]
    pub no_judge: bool,
    /// Evaluate one part of the benchmark: `I/N` (0-based), or `auto` / `auto/N` from the scheduler's
    /// environment (Slurm job array, torchrun `RANK`/`WORLD_SIZE`, Kubernetes `JOB_COMPLETION_INDEX`).
    /// Needs `--out RUN`; the shard writes into `RUN/shards/I-of-N/`, and `merge RUN` joins the shards.
    #[arg(long)]
    pub shard: Option<crate::shard::ShardArg>,
    /// Exit 0 even when some steps could not be prepared (an unreadable screenshot): they are recorded with an
    /// `error` and redone on resume either way. Without it such a run ends with exit status 1 and a summary line.
    #[arg(long)]
    pub allow_step_errors: bool,
    /// Whose actions fill a step prompt's history: `gold` (the benchmark's sub-goals; every step independent)
    /// or `predicted` (the model's own earlier outputs: semi-online evaluation, see `--semi-online`).
    #[arg(long, default_value = "gold")]
    pub history: HistorySource,
    /// The semi-online procedure of `--history predicted`: `uis1-sop` (UI-S1: a conversation with the model's
    /// replies, stop at the first wrong step; the default) or `guievalkit` (the gold action after a wrong step,
    /// every step scored).
    #[arg(long)]
    pub semi_online: Option<Procedure>,
    /// Write every step prompt built (its trajectory, step, chat messages and screenshots) into FILE, one JSON
    /// line each.
    #[arg(long, value_name = "FILE")]
    pub dump_prompts: Option<PathBuf>,
}

/// Arguments of `merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The run folder the shards shared (`--out` of `eval --shard`).
    pub run: PathBuf,
    /// Score what exists when shards are missing or unfinished (their steps count as missing predictions).
    #[arg(long)]
    pub allow_partial: bool,
    /// Benchmark folder (default: the one in the shards' manifests).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Matching-rule preset (default: the shards').
    #[arg(long)]
    pub rules: Option<RuleName>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(flag: &[&str]) -> OpsArgs {
        let argv = ["mobile-r1-eval", "self-test"].iter().chain(flag);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::SelfTest(a) => a.ops,
            other => panic!("{other:?}"),
        }
    }

    fn calibration(flag: &[&str]) -> CalibrationFlag {
        ops(flag).cpu_gemm_calibration
    }

    #[test]
    fn tensor_core_attention_is_on_unless_turned_off() {
        if std::env::var_os("MOBILE_R1_EVAL_MMA").is_some() {
            eprintln!("skipped: MOBILE_R1_EVAL_MMA is set");
            return;
        }
        let flag = "--tensor-core-attention";
        assert!(ops(&[]).tensor_core_attention);
        assert!(ops(&[flag]).tensor_core_attention);
        assert!(ops(&[flag, "on", "--device", "cpu"]).tensor_core_attention);
        assert!(!ops(&[flag, "off"]).tensor_core_attention);
        assert!(!ops(&[flag, "0", "--kernels", "on"]).tensor_core_attention);
        let argv = ["mobile-r1-eval", "self-test", flag, "maybe"];
        assert!(Cli::try_parse_from(argv).is_err());
    }

    #[test]
    fn the_calibration_flag_is_read_once_into_a_typed_value() {
        if std::env::var_os("MOBILE_R1_EVAL_CPU_GEMM_CALIBRATION").is_some() {
            eprintln!("skipped: MOBILE_R1_EVAL_CPU_GEMM_CALIBRATION is set");
            return;
        }
        let flag = "--cpu-gemm-calibration";
        assert_eq!(calibration(&[]), CalibrationFlag::CacheDefault);
        assert_eq!(calibration(&[flag, ""]), CalibrationFlag::CacheDefault);
        assert_eq!(
            calibration(&[flag, "none"]),
            CalibrationFlag::Set(GemmCalibration::EachStart)
        );
        assert_eq!(
            calibration(&[flag, "/x/cpu-gemm.json"]),
            CalibrationFlag::Set(GemmCalibration::File("/x/cpu-gemm.json".into()))
        );
    }
}
