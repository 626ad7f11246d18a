//! Helpers of the semi-online tests (`semi_online`, `semi_online_scripted`): running `eval` on the sample with the
//! tiny checkpoint, and reading predictions and dumped prompts keyed by `(trajectory, step)`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use mobile_r1_eval::dataset::Benchmark;
use serde_json::Value;

pub use crate::util::{json_file, json_lines, killed_copy, ok};

/// The tiny random checkpoint of the tests.
pub fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b")
}

/// Small screenshots and short answers keep every run to a few seconds.
pub const SMALL: [&str; 4] = ["--max-pixels", "40000", "--max-new-tokens", "10"];

/// Run the binary with `args` (warnings only in its log).
pub fn run(args: &[&str]) -> Output {
    crate::util::bin()
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run the binary")
}

/// `eval` of the tiny checkpoint into `out` with small screenshots and answers, plus `extra`.
pub fn eval(out: &Path, extra: &[&str]) -> Output {
    let model = model_dir();
    let mut args = vec!["eval", "--model", model.to_str().unwrap()];
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend(SMALL);
    args.extend(extra);
    run(&args)
}

/// `(trajectory, step)`.
pub type Key = (String, u64);

/// The `(trajectory, step)` of a prediction or dumped prompt.
pub fn key(v: &Value) -> Key {
    (
        v["trajectory"].as_str().unwrap().to_string(),
        v["step"].as_u64().unwrap(),
    )
}

/// `(trajectory, step) → line` of a predictions file, asserting that no step appears twice.
pub fn predictions(run: &Path) -> BTreeMap<Key, Value> {
    let mut map = BTreeMap::new();
    for v in json_lines(&run.join("predictions.jsonl")) {
        let k = key(&v);
        assert!(
            map.insert(k.clone(), v).is_none(),
            "step {k:?} written twice"
        );
    }
    map
}

/// `(trajectory, step) → prompt` of a `--dump-prompts` file, asserting each step was built once.
pub fn prompts(path: &Path) -> BTreeMap<Key, Value> {
    let mut map = BTreeMap::new();
    for v in json_lines(path) {
        let k = key(&v);
        assert!(
            map.insert(k.clone(), v).is_none(),
            "prompt {k:?} built twice"
        );
    }
    map
}

/// The text of a prompt's last user turn.
pub fn user_text(prompt: &Value) -> String {
    let turns = prompt["messages"].as_array().unwrap();
    turns.last().unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The embedded sample benchmark.
pub fn sample() -> Benchmark {
    let dir = mobile_r1_eval::sample::materialize_default().unwrap();
    Benchmark::load(&dir).unwrap()
}
