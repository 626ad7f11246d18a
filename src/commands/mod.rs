//! One entry function per subcommand, each taking its arguments from `crate::cli`; [`main`] parses the command
//! line, dispatches, and turns an error into exit code 1 (printed with its causes).

pub mod bench;
pub mod data;
pub mod eval;
pub mod generate;
pub mod merge;
pub mod pack;
pub mod report;
pub mod sample;
pub mod score;
pub mod selftest;
pub mod serve;
mod setup;

use std::process::ExitCode;

use clap::Parser;

use crate::backend::ModelSpec;
use crate::cli::{Cli, Command, DataCommand, ModelArgs};

/// Parse the command line, run the subcommand and turn an error into exit code 1.
pub fn main() -> ExitCode {
    init_tracing();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A requested stop says what is saved and how to resume, and exits 128 + the signal.
            if let Some(stop) = e.downcast_ref::<crate::interrupt::Interrupted>() {
                eprintln!("{stop}");
                return ExitCode::from(stop.exit_code());
            }
            // A download stopped on request: what was fetched stays in the cache for the next run.
            let stopped = e.chain().any(|c| {
                c.downcast_ref::<crate::hub::HubError>()
                    .is_some_and(|h| h.is_cancelled())
                    || matches!(
                        c.downcast_ref::<crate::pack::PackError>(),
                        Some(crate::pack::PackError::Cancelled)
                    )
            });
            if stopped {
                eprintln!("error: {}", error_chain(&e));
                return ExitCode::from(setup::stop_exit_code());
            }
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// Dispatch a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    if let Some(ops) = cli.command.ops() {
        crate::ops::threads::use_threads(ops.threads)?;
    }
    match cli.command {
        Command::Eval(a) => eval::run(a, &crate::shard::SchedulerEnv::from_process()),
        Command::Merge(a) => merge::run(a),
        Command::Report(a) => report::run(a),
        Command::Score(a) => score::run(a),
        Command::Data(DataCommand::Validate(a)) => data::validate(a),
        Command::Data(DataCommand::Import(a)) => data::import(a),
        Command::Sample(a) => sample::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Bench(a) => bench::run(a),
        Command::SelfTest(a) => selftest::run(a),
        Command::Pack(a) => pack::run(a),
        Command::Serve(a) => serve::run(a),
    }
}

/// An error and its causes joined with `: `, each cause left out when the message before it already ends with it
/// (library errors such as `"{path}: {source}"` print their source themselves).
pub(crate) fn error_chain(e: &anyhow::Error) -> String {
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

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // No colour codes in redirected logs.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// The rule preset for a benchmark folder: `--rules` when given, else the preset its `benchmark.json` suggests
/// (an unknown name is an error naming the file), else the default (`mobile-r1`).
pub(crate) fn rules_for(
    flag: Option<crate::settings::RuleName>,
    data: &std::path::Path,
) -> anyhow::Result<crate::settings::RulePreset> {
    Ok(match flag {
        Some(r) => r.preset(),
        None => crate::dataset::BenchmarkInfo::suggested_rules(data)?,
    })
}

/// The model-loading arguments as a model spec (on the first device of `--device`).
pub(crate) fn model_spec(a: &ModelArgs) -> ModelSpec {
    ModelSpec {
        model: a.model.clone(),
        device: a.device.first().copied().unwrap_or_default(),
        dtype: a.dtype,
        min_pixels: a.min_pixels,
        max_pixels: a.max_pixels,
        ops: ops_config(&a.ops),
        hub: setup::hub(&a.hub, crate::interrupt::Cancel::on_signals()),
    }
}

/// The ops flags as the ops' settings value.
pub(crate) fn ops_config(a: &crate::cli::OpsArgs) -> crate::ops::OpsConfig {
    crate::ops::OpsConfig {
        fused_kernels: a.kernels,
        tensor_core_attention: a.tensor_core_attention,
        cpu_gemm: a.cpu_gemm.clone(),
        cpu_gemm_calibration: calibration(&a.cpu_gemm_calibration),
        profile: a.profile,
    }
}

/// `--cpu-gemm-calibration`: `none`, a file, or the default under the user's cache folder (no file without one).
fn calibration(flag: &crate::cli::CalibrationFlag) -> crate::ops::GemmCalibration {
    use crate::ops::GemmCalibration;
    match flag {
        crate::cli::CalibrationFlag::Set(c) => c.clone(),
        crate::cli::CalibrationFlag::CacheDefault => std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache")))
            .map_or(GemmCalibration::EachStart, |cache| {
                GemmCalibration::File(cache.join("mobile-r1-eval").join("cpu-gemm.json"))
            }),
    }
}
