//! The command line: the only module that knows clap. Each subcommand's arguments are a plain struct handed to
//! its entry function in `commands`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Offline evaluator of Qwen2.5-VL mobile GUI agents on the Mobile-R1 benchmark.
#[derive(Debug, Parser)]
#[command(name = "mobile-r1-eval", version, about)]
pub struct Cli {
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Evaluate a checkpoint on a benchmark: step prompts, aggregation (judge) prompts, metrics.
    Eval(EvalArgs),
    /// Score a predictions file against a benchmark (no model needed).
    Score(ScoreArgs),
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
}

/// Arguments of `self-test`.
#[derive(Debug, Args)]
pub struct SelfTestArgs {
    /// `cpu`, `cuda`, `cuda:N` or `metal`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `data` subcommands.
#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Check a benchmark folder completely (images included) and print a summary.
    Validate(ValidateArgs),
}

/// Arguments of `data validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Benchmark folder holding `data.jsonl`; the embedded sample when absent.
    #[arg(long)]
    pub data: Option<PathBuf>,
}

/// Arguments of `sample`.
#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Folder to write `data.jsonl` and `images/` into.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `score`.
#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Benchmark folder holding `data.jsonl`; the embedded sample when absent.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Predictions JSONL: one `{"trajectory", "step", "response", "image_size"?}` object per line.
    #[arg(long)]
    pub predictions: PathBuf,
    /// Output folder for `metrics.json`, `steps.jsonl` and `summary.md` (default: beside the predictions).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Matching-rule preset.
    #[arg(long, default_value = "mobile-r1")]
    pub rules: String,
}

/// Model-loading arguments shared by `generate` and `eval`.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// Local folder in the Hugging Face layout, or a hub repo id such as `Qwen/Qwen2.5-VL-3B-Instruct`.
    #[arg(long)]
    pub model: String,
    /// `cpu`, `cuda`, `cuda:N` or `metal`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// `f32`, `bf16` or `f16` (default: bf16 on GPU, f32 on CPU).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Override the checkpoint's `min_pixels`.
    #[arg(long)]
    pub min_pixels: Option<u64>,
    /// Override the checkpoint's `max_pixels`.
    #[arg(long)]
    pub max_pixels: Option<u64>,
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
    #[arg(long, default_value_t = 256)]
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
pub struct EvalArgs {
    /// The evaluated model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Benchmark folder holding `data.jsonl`; the embedded sample when absent.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Run folder (created, or resumed when it exists); default: a fresh folder under `runs/`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Most sequences decoded together.
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Token budget of one batch (prompt + generated tokens); automatic from free memory when absent.
    #[arg(long)]
    pub max_batch_tokens: Option<usize>,
    /// Maximum generated tokens per prompt.
    #[arg(long, default_value_t = 256)]
    pub max_new_tokens: usize,
    /// Matching-rule preset used for the metrics.
    #[arg(long, default_value = "mobile-r1")]
    pub rules: String,
    /// `default` (the Qwen2.5-VL mobile_use prompt from `prompts/`) or `data` (each trajectory's `system`).
    #[arg(long, default_value = "default")]
    pub system_prompt: String,
    /// Judge model for the aggregation prompts (default: the evaluated model).
    #[arg(long, conflicts_with = "no_judge")]
    pub judge_model: Option<String>,
    /// Skip the aggregation (judge) phase.
    #[arg(long)]
    pub no_judge: bool,
}

/// Arguments of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// `tiny`, `small` (Qwen2.5-0.5B text + real 3B vision), `3b`, `7b`, or a config.json / model folder.
    #[arg(long, default_value = "tiny")]
    pub config: String,
    /// Build the model with deterministic random weights (the only mode: real checkpoints are measured by `eval`).
    #[arg(long)]
    pub random_weights: bool,
    /// `cpu`, `cuda`, `cuda:N` or `metal`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// `f32`, `bf16` or `f16` (default: bf16 on GPU, f32 on CPU).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Number of step prompts (rounded up to whole 4-step trajectories).
    #[arg(long, default_value_t = 16)]
    pub steps: usize,
    /// Most sequences decoded together.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Token budget of one batch; automatic from free memory when absent.
    #[arg(long)]
    pub max_batch_tokens: Option<usize>,
    /// New tokens per prompt.
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: usize,
    /// Smallest image area in pixels.
    #[arg(long, default_value_t = 3136)]
    pub min_pixels: u64,
    /// Largest image area in pixels (default 1280·28²).
    #[arg(long, default_value_t = 1_003_520)]
    pub max_pixels: u64,
    /// Folder with a Qwen2.5-VL tokenizer.json and chat template (default: a copy built into the binary).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Skip the aggregation (judge) phase.
    #[arg(long)]
    pub no_judge: bool,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1234)]
    pub seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Parse the command line, run the subcommand and turn an error into exit code 1 (printed with its causes).
pub fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Issue 18: a requested stop says what is saved and how to resume, and exits 128 + the signal.
            if let Some(stop) = e.downcast_ref::<crate::interrupt::Interrupted>() {
                eprintln!("{stop}");
                return ExitCode::from(stop.exit_code());
            }
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes joined with `: `, each cause left out when the message before it already ends with it
/// (library errors such as `"{path}: {source}"` print their source themselves).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if msg.is_empty() {
            msg = text;
        } else if !msg.ends_with(&text) {
            msg = format!("{msg}: {text}");
        }
    }
    msg
}

/// Dispatch a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    use crate::commands;
    match cli.command {
        Command::Eval(a) => commands::eval::run(a),
        Command::Score(a) => commands::score::run(a),
        Command::Data(DataCommand::Validate(a)) => commands::data::validate(a),
        Command::Sample(a) => commands::sample::run(a),
        Command::Generate(a) => commands::generate::run(a),
        Command::Bench(a) => commands::bench::run(a),
        Command::SelfTest(a) => commands::selftest::run(a),
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Issue 18: no colour codes in redirected logs.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
