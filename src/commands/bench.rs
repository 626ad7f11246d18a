//! `bench`: throughput with random weights (see `crate::bench`).

use anyhow::Result;

use crate::bench::{run_bench, BenchConfig};
use crate::cli::BenchArgs;

/// Entry point of `bench`.
pub fn run(a: BenchArgs) -> Result<()> {
    // The same value checks as `eval`, before any work.
    crate::validate::counts(a.max_new_tokens, a.batch_size, a.max_batch_tokens)?;
    crate::validate::pixel_bounds(
        Some(a.min_pixels),
        Some(a.max_pixels),
        crate::validate::PATCH_SIDE,
    )?;
    let semi_online = super::setup::semi_online(a.history, a.semi_online)?;
    // Holds the embedded tokenizer's folder (when used) until the run ends.
    let mut embedded = None;
    let cfg = BenchConfig {
        config: a.config,
        devices: a.device,
        dtype: a.dtype,
        steps: a.steps,
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
        semi_online,
        torch_flops: a.torch_gflops.map(|g| g * 1e9),
    };
    let r = run_bench(&cfg)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("{}", r.render());
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
