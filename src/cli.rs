//! The command line as data: the only module that knows clap. Each subcommand's arguments are a plain struct,
//! its values already typed (devices, dtypes, presets), handed to its entry function in `crate::commands`.

use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, Subcommand};

use crate::hub::DataLocation;
use crate::ops::{CpuGemm, GemmCalibration};
use crate::records::{HistorySource, Procedure};
use crate::settings::RuleName;
use crate::settings::{BenchModel, SystemPrompt};
use crate::settings::{DTypeSpec, DeviceSpec};

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

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The served checkpoint.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to bind. Loopback by default; any other address needs `--api-key-env`.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// Port to listen on (0: any free port; the address is printed on stdout).
    #[arg(long, default_value_t = 8000, value_parser = whole::<u16>, allow_negative_numbers = true)]
    pub port: u16,
    /// Most sequences decoded together.
    #[arg(long, default_value_t = 16, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub batch_size: usize,
    /// Token budget of one batch (prompt + generated tokens); automatic from free memory when absent. Also the
    /// longest prompt plus `max_tokens` a request may ask for.
    #[arg(long, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_batch_tokens: Option<usize>,
    /// Most tokens one request may generate, and the `max_tokens` of a request that gives none (less than the
    /// model's context, `max_position_embeddings`).
    #[arg(long, default_value_t = 1024, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_new_tokens: usize,
    /// Most requests waiting beyond the running batch; more are answered 429 with `Retry-After`.
    #[arg(long, default_value_t = 64, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_queue: usize,
    /// Name of the environment variable holding the API key clients must send (`Authorization: Bearer <key>`).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// The model id of `/v1/models` and of requests (default: `--model` as given).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Most bytes of a request body (413 beyond).
    #[arg(long, default_value_t = 16 << 20, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_body_bytes: usize,
    /// Most bytes of text over a request's messages (413 beyond), checked before anything is tokenised.
    #[arg(long, default_value_t = 1 << 20, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_text_bytes: usize,
    /// Most requests reading and preparing their body at once (the others hold their queue slot and wait).
    #[arg(long, default_value_t = 2, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_preparing: usize,
    /// Most open connections; more wait to be accepted.
    #[arg(long, default_value_t = 256, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_connections: usize,
    /// Seconds a client has to send a whole request head: from the accept on a new connection, from the head's
    /// first byte on a kept-alive one.
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    pub header_timeout: f64,
    /// Seconds a kept-alive connection may stay silent between requests before the server closes it.
    #[arg(long, default_value_t = 15.0, value_parser = seconds)]
    pub keep_alive_timeout: f64,
    /// Seconds a client has to send a whole request body, once the server reads it (408 beyond).
    #[arg(long, default_value_t = 60.0, value_parser = seconds)]
    pub body_timeout: f64,
    /// Seconds from Ctrl-C or SIGTERM to the exit: the requests in flight that are not answered by then get an
    /// error.
    #[arg(long, default_value_t = 60.0, value_parser = seconds)]
    pub shutdown_timeout: f64,
    /// Most pictures in one request.
    #[arg(long, default_value_t = 8, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_images: usize,
    /// Most pixels of one picture as sent (checked from its header before it is decoded).
    #[arg(long, default_value_t = 16_000_000, value_parser = whole::<u64>, allow_negative_numbers = true)]
    pub max_image_pixels: u64,
}

/// Where `eval` sends its prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendKind {
    /// The checkpoint of `--model`, run here.
    #[default]
    Local,
    /// An OpenAI-compatible server (`--endpoint`, `--api-model`).
    Openai,
}

/// `eval`'s flags for `--backend openai`.
#[derive(Debug, Args, Clone)]
pub struct ServedArgs {
    /// `local` (the checkpoint of `--model`, run here) or `openai` (an OpenAI-compatible server).
    #[arg(long, value_enum, default_value = "local")]
    pub backend: BackendKind,
    /// The server's base URL, e.g. `http://127.0.0.1:8000/v1` (`/v1` is added to a URL without a path).
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// The model id the server serves (as `GET /v1/models` lists it).
    #[arg(long, value_name = "NAME")]
    pub api_model: Option<String>,
    /// Name of the environment variable holding the server's API key.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Most requests in flight at once.
    #[arg(long, default_value_t = 8, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub concurrency: usize,
    /// Seconds one HTTP call may take before it is retried (more than 0).
    #[arg(long, value_name = "S", default_value_t = 600.0, value_parser = seconds, allow_negative_numbers = true)]
    pub request_timeout: f64,
    /// Retries of a request after a connection error, a timeout, a 408, 409 or a 5xx; then it is recorded as an
    /// error.
    #[arg(long, default_value_t = 5, value_parser = whole::<u32>, allow_negative_numbers = true)]
    pub max_retries: u32,
    /// Seconds one request may spend waiting out busy answers (HTTP 429, after each `Retry-After`) before it is
    /// recorded as an error; a 429 costs no retry.
    #[arg(long, value_name = "S", default_value_t = 600.0, value_parser = seconds, allow_negative_numbers = true)]
    pub busy_wait: f64,
    /// Connection failures in a row, over all requests, after which the server counts as gone and the run stops
    /// as on Ctrl-C, saying how to resume (0: never).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_connection_failures: usize,
    /// The judge prompts' server (default: `--endpoint`).
    #[arg(long, value_name = "URL")]
    pub judge_endpoint: Option<String>,
    /// The judge's model id there (default: `--api-model`).
    #[arg(long, value_name = "NAME")]
    pub judge_api_model: Option<String>,
    /// The served model's family, for its system prompt and coordinate frame: `qwen2.5-vl` or `qwen3-vl`
    /// (default: the family the server's `/v1/models` names, as `serve` does, else qwen2.5-vl).
    #[arg(long, value_name = "FAMILY", value_parser = model_family)]
    pub model_family: Option<crate::settings::ModelFamily>,
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

/// `data` subcommands.
#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Check a benchmark folder completely (images included) and print a summary.
    Validate(ValidateArgs),
    /// Turn another mobile-agent benchmark (AndroidControl, AITZ, GUI-Odyssey, CAGUI) into a benchmark folder.
    Import(ImportArgs),
}

/// Arguments of `data import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// `androidcontrol`, `androidcontrol-mobile-use`, `aitz`, `gui-odyssey` or `cagui`.
    #[arg(long)]
    pub format: crate::import::ImportFormat,
    /// The source as published: AndroidControl's TFRecord folder (or one file), the mobile_use JSONL file, the AITZ
    /// or CAGUI folder the episodes' `image_path` values are relative to, the GUI-Odyssey folder.
    #[arg(long)]
    pub source: PathBuf,
    /// The benchmark folder to write: new, empty, or an earlier import of the same source (replaced).
    #[arg(long)]
    pub out: PathBuf,
    /// AndroidControl: a key of `splits.json` (`train`, `validation`, `test`) or `test_subsplits.json`;
    /// GUI-Odyssey: a split file, `NAME[:train|test]` (e.g. `random`, test part by default).
    #[arg(long)]
    pub split: Option<String>,
    /// `high` (the goal only, default) or `low` (the goal and each step's instruction), where the source has
    /// step instructions.
    #[arg(long)]
    pub level: Option<crate::import::Level>,
    /// Import at most N episodes.
    #[arg(long, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub limit: Option<usize>,
    /// Fail on the first source step or episode that cannot be imported (default: count it in the summary).
    #[arg(long)]
    pub strict: bool,
    /// `androidcontrol-mobile-use`: the folder holding the screenshots, found by file name (default: the JSONL's
    /// folder, then its `images/`).
    #[arg(long)]
    pub images: Option<PathBuf>,
}

/// Arguments of `data validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Benchmark folder holding `data.jsonl`, or `hf:OWNER/NAME[@REVISION]`; the embedded sample when absent.
    #[arg(long)]
    pub data: Option<DataLocation>,
    /// The Hub, for `hf:` data.
    #[command(flatten)]
    pub hub: HubArgs,
}

/// Arguments of `sample`.
#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Folder to write `data.jsonl`, `images/` and `benchmark.json` into: new, empty, or an earlier `sample` output
    /// (replaced); any other folder is refused.
    #[arg(long)]
    pub out: PathBuf,
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
    /// bf16/f16 varlen attention on CUDA on tensor cores (`varlen_mma_*`) instead of CUDA cores.
    #[arg(long, env = "MOBILE_R1_EVAL_MMA", value_parser = BoolishValueParser::new())]
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

/// A Hugging Face switch: `1`, `true`, `yes` or `on` (any case) is on; anything else, empty included, is off.
fn hf_true(s: &str) -> Result<bool, String> {
    Ok(matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    ))
}

/// `on`/`off` (also `1`/`0`, `true`/`false`, `yes`/`no`), case-insensitive.
fn on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        other => Err(format!("`{other}` is neither on nor off")),
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

/// A positive, finite rate in GFLOP/s.
fn positive_gflops(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("expected a positive rate in GFLOP/s, found {s:?}")),
    }
}

/// A whole number (`--max-new-tokens 32`); a negative or fractional value, or one beyond the type's range, is
/// refused with the accepted range, rather than taken for a flag (clap names the flag).
fn whole<T: Whole>(s: &str) -> Result<T, String> {
    let t = s.trim();
    if let Ok(v) = t.parse() {
        return Ok(v);
    }
    let range = format!("0 to {}", T::MAX);
    match t.parse::<i128>() {
        Ok(v) if v >= 0 => Err(format!("{v} is beyond the accepted range ({range})")),
        _ => Err(format!(
            "expected a whole number (0, 1, 2, …; accepted: {range}), found {s:?}"
        )),
    }
}

/// A whole number of at least 1 (`--hub-timeout`, `bench --steps`), refused below with the accepted range.
fn at_least_one<T: Whole>(s: &str) -> Result<T, String> {
    let v: T = whole(s)?;
    if v == T::ZERO {
        return Err(format!("must be at least 1 (accepted: 1 to {})", T::MAX));
    }
    Ok(v)
}

/// `qwen2.5-vl` or `qwen3-vl` (case-insensitive; the `config.json` spellings `qwen2_5_vl` and `qwen3_vl` too).
fn model_family(s: &str) -> Result<crate::settings::ModelFamily, String> {
    use crate::settings::ModelFamily;
    let key = s.trim().to_ascii_lowercase();
    ModelFamily::ALL
        .into_iter()
        .find(|f| key == f.display_name().to_ascii_lowercase() || key == f.model_type())
        .ok_or_else(|| format!("unknown model family {s:?}: expected qwen2.5-vl or qwen3-vl"))
}

/// The longest time a duration flag takes: 30 days (larger values would overflow the clock's arithmetic).
const LONGEST_SECONDS: f64 = 30.0 * 86_400.0;

/// A positive number of seconds up to 30 days (`--request-timeout 2.5`).
fn seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= LONGEST_SECONDS => Ok(v),
        _ => Err(format!(
            "expected a positive number of seconds up to {LONGEST_SECONDS} (30 days; e.g. 30 or 2.5), found {s:?}"
        )),
    }
}

/// The unsigned integer types a flag takes, with their range for the error messages.
trait Whole: std::str::FromStr + std::fmt::Display + PartialEq + Copy {
    const ZERO: Self;
    const MAX: Self;
}

macro_rules! whole_types {
    ($($t:ty),*) => {$(
        impl Whole for $t {
            const ZERO: Self = 0;
            const MAX: Self = <$t>::MAX;
        }
    )*};
}
whole_types!(u16, u32, u64, usize);

#[cfg(test)]
mod tests {
    use super::*;

    fn calibration(flag: &[&str]) -> CalibrationFlag {
        let argv = ["mobile-r1-eval", "self-test"].iter().chain(flag);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::SelfTest(a) => a.ops.cpu_gemm_calibration,
            other => panic!("{other:?}"),
        }
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
