//! `bench`: throughput with random weights (see `crate::bench`).

use anyhow::{bail, Result};

use crate::bench::{run_bench, BenchConfig};
use crate::cli::BenchArgs;

/// Entry point of `bench`.
pub fn run(a: BenchArgs) -> Result<()> {
    if !a.random_weights {
        bail!("bench needs --random-weights (a real checkpoint's throughput is in `eval`'s throughput.json)");
    }
    // Issue 18: the same value checks as `eval`, before any work.
    crate::validate::counts(a.max_new_tokens, a.batch_size, a.max_batch_tokens)?;
    crate::validate::pixel_bounds(
        Some(a.min_pixels),
        Some(a.max_pixels),
        crate::validate::PATCH_SIDE,
    )?;
    // Holds the embedded tokenizer's folder (when used) until the run ends.
    let mut embedded = None;
    let cfg = BenchConfig {
        config: a.config,
        device: a.device,
        dtype: a.dtype,
        steps: a.steps.max(1),
        batch_size: a.batch_size,
        max_batch_tokens: a.max_batch_tokens,
        max_new_tokens: a.max_new_tokens,
        min_pixels: a.min_pixels,
        max_pixels: a.max_pixels,
        tokenizer: match a.tokenizer {
            Some(dir) => dir,
            None => embedded.insert(embedded_tokenizer()?).path().to_path_buf(),
        },
        judge: !a.no_judge,
        seed: a.seed,
        ops: super::ops_config(&a.ops),
    };
    let r = run_bench(&cfg)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("{}", render(&r));
    }
    Ok(())
}

/// The Qwen2.5-VL tokenizer and chat template of the test fixtures (tests/fixtures/tokenizer, ≈6 MB), embedded so
/// that `bench` works from any installed binary: a path fixed at build time breaks once the source tree is moved
/// or deleted, and requiring `--tokenizer` would make the "no checkpoint needed" benchmark need a download.
const TOKENIZER_FILES: [(&str, &[u8]); 2] = [
    (
        "tokenizer.json",
        include_bytes!("../../tests/fixtures/tokenizer/tokenizer.json"),
    ),
    (
        "tokenizer_config.json",
        include_bytes!("../../tests/fixtures/tokenizer/tokenizer_config.json"),
    ),
];

/// Write the embedded tokenizer files into a fresh temporary folder (removed when the returned value drops).
fn embedded_tokenizer() -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (name, bytes) in TOKENIZER_FILES {
        std::fs::write(dir.path().join(name), bytes)?;
    }
    Ok(dir)
}

fn render(r: &serde_json::Value) -> String {
    let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
    let split = &r["time_split_seconds"];
    let s = |k: &str| split[k].as_f64().unwrap_or(0.0);
    format!(
        "bench {} on {} ({}), {} steps\n\
         steps/s {:.3}   images/s {:.3}   prefill tok/s {:.1}   decode tok/s {:.1}\n\
         time: wall {:.2}s = prefill {:.2}s (vision alone {:.2}s) + decode {:.2}s; preprocessing {:.2}s CPU, {:.2}s waited\n\
         MFU {:.1}% (prefill {:.1}%, vision alone {:.1}%) of a measured matmul peak of {:.1} GFLOP/s ({}); peak RSS {:.0} MiB\n\
         the full benchmark ({} trajectories, ≈{} steps{}) would take ≈{:.0} s at these rates",
        r["config"].as_str().unwrap_or(""),
        r["device"].as_str().unwrap_or(""),
        r["dtype"].as_str().unwrap_or(""),
        r["steps"],
        f("steps_per_second"),
        f("images_per_second"),
        f("prefill_tokens_per_second"),
        f("decode_tokens_per_second"),
        s("wall"),
        s("prefill_including_vision"),
        s("vision_separate_pass"),
        s("decode"),
        s("preprocess_cpu"),
        s("preprocess_wait"),
        100.0 * f("mfu"),
        100.0 * f("mfu_prefill"),
        100.0 * f("mfu_vision"),
        f("matmul_peak_flops") / 1e9,
        r["matmul_peak_source"].as_str().unwrap_or(""),
        f("peak_memory_bytes") / 1048576.0,
        r["benchmark_estimate"]["trajectories"],
        r["benchmark_estimate"]["steps"],
        if r["benchmark_estimate"]["judge_included"] == true {
            ", judge prompts included"
        } else {
            ", judge not measured"
        },
        r["benchmark_estimate"]["seconds"].as_f64().unwrap_or(0.0),
    )
}
