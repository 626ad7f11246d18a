//! Helpers shared by every area: the binary under test, and what is read from its runs.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// The `mobile-r1-eval` binary built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_mobile-r1-eval");

/// A command running the binary under test.
pub fn bin() -> Command {
    Command::new(BIN)
}

/// Assert that a finished command succeeded (showing its output if not); its stdout.
pub fn ok(o: &Output) -> String {
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "failed:\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// stdout and stderr of a finished command, for assertions and their messages.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A JSON file.
pub fn json_file(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The lines of a JSONL file, each of which must be JSON.
pub fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Cut a run's predictions to their first half (in file order) plus half a line, as a kill leaves them, into a
/// fresh folder with the same manifest.
pub fn killed_copy(full: &Path, cut: &Path) {
    std::fs::create_dir_all(cut).unwrap();
    std::fs::copy(full.join("manifest.json"), cut.join("manifest.json")).unwrap();
    let text = std::fs::read_to_string(full.join("predictions.jsonl")).unwrap();
    let all: Vec<&str> = text.lines().collect();
    let half = all.len() / 2;
    let mut partial = all[..half].join("\n") + "\n";
    partial.push_str(&all[half][..all[half].len() / 2]);
    std::fs::write(cut.join("predictions.jsonl"), partial).unwrap();
}
