//! Helpers of the issue-18 regression tests (`tests/reliability*.rs`): the binary, a copy of the sample,
//! the brief's `eval` command, bounded waits and signals.
#![allow(dead_code)] // each test binary uses a part

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test.
pub use crate::util::BIN;

/// The tiny-b checkpoint (random weights, Hub layout).
pub fn tiny_b() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b")
}

/// The embedded sample written to `dir/data` (a copy each test owns).
pub fn sample(dir: &Path) -> PathBuf {
    let data = dir.join("data");
    let o = Command::new(BIN)
        .args(["sample", "--out"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    data
}

/// `eval` of `model` on `data` into `out` (the brief's command), plus `extra`.
pub fn eval_cmd(model: &Path, data: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("eval")
        .arg("--model")
        .arg(model)
        .arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("RUST_LOG", "info");
    for (flag, default) in [("--max-pixels", "200704"), ("--max-new-tokens", "8")] {
        if !extra.contains(&flag) {
            c.args([flag, default]);
        }
    }
    c
}

/// stdout and stderr of a finished command, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Start `c` with its output captured.
pub fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The JSON lines of `path`, keyed by `key`, each with how often it occurs.
pub fn key_counts(path: &Path, key: impl Fn(&Value) -> String) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let v: Value = serde_json::from_str(line).expect("only whole lines stay in the file");
        *counts.entry(key(&v)).or_insert(0) += 1;
    }
    counts
}

/// `"<trajectory>#<step>"` of a predictions line.
pub fn step_key(v: &Value) -> String {
    format!("{}#{}", v["trajectory"], v["step"])
}

/// Wait (bounded) until `cond` holds.
pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pseudo-random fraction in [0, 1) from the clock (no dependency needed for a few kill moments).
pub fn random_fraction(round: u64) -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let x = (nanos ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0x2545_f491_4f6c_dd1d);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Send `sig` (`-INT`, `-TERM`) to `child` with kill(1).
pub fn send_signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// Start a run, wait until some steps are saved, send `signals` 100 ms apart, and return its output.
pub fn interrupted_run(run: &Path, data: &Path, signals: &[&str]) -> Output {
    // Four at a time, so that most steps are still waiting when the signal arrives.
    let child = spawn(eval_cmd(&tiny_b(), data, run, &["--batch-size", "4"]));
    let preds = run.join("predictions.jsonl");
    wait_for("a first saved step", Duration::from_secs(60), || {
        std::fs::read_to_string(&preds).is_ok_and(|t| !t.is_empty())
    });
    for s in signals {
        send_signal(&child, s);
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}
