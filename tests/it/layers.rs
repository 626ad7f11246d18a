//! The library's layering, read from its source: every top-level module sits in one layer of [`LAYERS`] and
//! imports (`crate::…`) only modules of lower layers, so there is no import circle and no import back up a
//! layer; and the pure modules (everything below the candle layers) never name candle. Test code inside the
//! library (`#[cfg(test)] mod tests`, `tests.rs`) may reach anywhere and is left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// From the bottom: a module imports only modules of the layers before its own.
const LAYERS: &[&[&str]] = &[
    &[
        "action",
        "cpu_estimate",
        "fingerprint",
        "interrupt",
        "openai",
        "preprocess",
        "retry",
        "safe_io",
        "settings",
        "validate",
    ],
    &["chat", "dataset", "parse"],
    &["import", "shard"],
    &["records"],
    &["hub", "ops", "predictions"],
    &["model", "score"],
    &["engine", "pack", "sample"],
    &["backend", "rundir"],
    &["report"],
    &["merge"],
    &["eval", "serve"],
    &["bench"],
    &["cli"],
    &["commands"],
];

/// The layers that hold tensors; everything else is plain Rust.
const CANDLE: &[&str] = &[
    "ops", "model", "engine", "backend", "eval", "serve", "bench", "commands",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file of a top-level module (a file, or a folder).
fn files_of(module: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let file = src().join(format!("{module}.rs"));
    if file.is_file() {
        out.push(file);
    }
    let mut stack = vec![src().join(module)];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out
}

/// The library code of a file: a `tests.rs` has none, and an inline `#[cfg(test)] mod tests` ends it.
fn library_code(path: &Path) -> String {
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Top-level module names of the library (files and folders under `src/` but `lib.rs` and `main.rs`).
fn modules() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(src())
        .unwrap()
        .flatten()
        .map(|e| {
            e.file_name()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .filter(|n| n != "lib" && n != "main")
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn modules_import_only_lower_layers_and_pure_modules_never_candle() {
    let rank: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, layer)| layer.iter().map(move |m| (*m, i)))
        .collect();
    let mut problems = Vec::new();
    for m in modules() {
        let Some(&own) = rank.get(m.as_str()) else {
            problems.push(format!(
                "{m}: not in LAYERS (place it in tests/it/layers.rs)"
            ));
            continue;
        };
        for file in files_of(&m) {
            let code = library_code(&file);
            for (i, _) in code.match_indices("crate::") {
                let target: String = code[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                match rank.get(target.as_str()) {
                    Some(&r) if target != m && r >= own => problems.push(format!(
                        "{}: `{m}` (layer {own}) imports `{target}` (layer {r})",
                        file.display()
                    )),
                    _ => {}
                }
            }
            if !CANDLE.contains(&m.as_str()) && code.contains("candle_") {
                problems.push(format!(
                    "{}: pure module `{m}` names candle",
                    file.display()
                ));
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
