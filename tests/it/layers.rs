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

/// The layers as `docs/architecture.md` shows them: one line per layer, from the bottom.
fn diagram() -> String {
    LAYERS
        .iter()
        .enumerate()
        .map(|(i, layer)| format!("{i:>2}  {}\n", layer.join(" ")))
        .collect()
}

fn architecture_doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn the_documented_layer_diagram_is_the_checked_one() {
    let doc = architecture_doc();
    let marker = "<!-- layers -->\n```text\n";
    let start = doc
        .find(marker)
        .expect("docs/architecture.md marks its layer diagram")
        + marker.len();
    let end = start + doc[start..].find("```").unwrap();
    assert_eq!(
        &doc[start..end],
        diagram(),
        "docs/architecture.md: replace the diagram under `<!-- layers -->` with the block above (right)"
    );
}

#[test]
fn every_module_and_file_the_architecture_document_names_exists() {
    let doc = architecture_doc();
    let known = modules();
    let mut missing = Vec::new();
    // The module map: the first cell of each row names top-level modules in backticks.
    let map = &doc[doc.find("## Module map").unwrap()..doc.find("## Dependency rules").unwrap()];
    for row in map.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split('|').nth(1).unwrap();
        for name in first.split('`').skip(1).step_by(2) {
            if !known.iter().any(|m| m == name) {
                missing.push(format!("module `{name}`"));
            }
        }
    }
    // Every source path (`src/…`) the document cites.
    for (i, _) in doc.match_indices("src/") {
        let path: String = doc[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "_/.".contains(*c))
            .collect();
        let path = path.trim_end_matches('.');
        if !Path::new(env!("CARGO_MANIFEST_DIR")).join(path).exists() {
            missing.push(format!("file {path}"));
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names what does not exist: {missing:?}"
    );
}
