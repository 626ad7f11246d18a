//! The library's layering, read from its source: every top-level module sits in one layer of [`LAYERS`] and
//! imports (`crate::…`) only modules of lower layers, so there is no import circle and no import back up a
//! layer; and the pure modules (everything below the candle layers) never name candle. Inside a module folder the
//! same holds without layers: its submodules (at every depth) import one another without a circle. Test code
//! inside the library (`#[cfg(test)] mod tests`, `tests.rs`) may reach anywhere and is left out.

use std::collections::{BTreeMap, BTreeSet};
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
    &["merge", "rescore"],
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

/// Whether the module in `path` is declared `#[cfg(test)] mod name;` by its parent (`mod.rs`, `name.rs` beside
/// the folder, or `lib.rs`).
fn declared_for_tests(path: &Path) -> bool {
    let (name, dir) = match path.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs") => match path.parent() {
            Some(d) => (d.file_name(), d.parent()),
            None => return false,
        },
        _ => (path.file_stem(), path.parent()),
    };
    let (Some(name), Some(dir)) = (name.and_then(|n| n.to_str()), dir) else {
        return false;
    };
    let parents = [
        dir.join("mod.rs"),
        dir.with_extension("rs"),
        dir.join("lib.rs"),
    ];
    parents.iter().filter(|p| p.as_path() != path).any(|p| {
        let Ok(text) = std::fs::read_to_string(p) else {
            return false;
        };
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        lines.windows(2).any(|w| {
            w[0] == "#[cfg(test)]"
                && w[1].ends_with(&format!("mod {name};"))
                && w[1].split_whitespace().rev().nth(1) == Some("mod")
        })
    })
}

/// The library code of a file: a `tests.rs` or a module its parent declares under `#[cfg(test)]` (timing runs)
/// has none, and an inline `#[cfg(test)] mod tests` ends it.
fn library_code(path: &Path) -> String {
    if path.file_name().is_some_and(|n| n == "tests.rs") || declared_for_tests(path) {
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

/// A module's path from the crate root (`["serve", "routes"]` for `src/serve/routes.rs`).
type ModPath = Vec<String>;

/// The module path of a source file (`mod.rs` is its folder's module).
fn module_path(file: &Path) -> ModPath {
    let rel = file.strip_prefix(src()).unwrap().with_extension("");
    let mut path: ModPath = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|l| l == "mod") {
        path.pop();
    }
    path
}

/// The paths of the use tree at the start of `code` (`a::b`, `a::{b, c::{d, e as f}}`, `a::*`), each as its
/// segments (an `as` rename and `*` are left out).
fn use_tree(code: &str) -> Vec<Vec<String>> {
    fn tree(code: &[u8], at: &mut usize) -> Vec<Vec<String>> {
        let skip = |at: &mut usize| {
            while *at < code.len() && code[*at].is_ascii_whitespace() {
                *at += 1;
            }
        };
        let mut segments = Vec::new();
        loop {
            skip(at);
            if *at < code.len() && code[*at] == b'{' {
                *at += 1;
                let mut out = Vec::new();
                loop {
                    skip(at);
                    if *at >= code.len() || code[*at] == b'}' {
                        *at += 1;
                        break;
                    }
                    let before = *at;
                    for sub in tree(code, at) {
                        out.push(segments.iter().cloned().chain(sub).collect());
                    }
                    // Past anything that is no path (a glob `*`, a stray character).
                    if *at == before {
                        *at += 1;
                    }
                    skip(at);
                    if *at < code.len() && code[*at] == b',' {
                        *at += 1;
                    }
                }
                return out;
            }
            let start = *at;
            while *at < code.len() && (code[*at].is_ascii_alphanumeric() || code[*at] == b'_') {
                *at += 1;
            }
            if start < *at {
                segments.push(String::from_utf8_lossy(&code[start..*at]).into_owned());
            }
            if code[*at..].starts_with(b"::") {
                *at += 2;
                continue;
            }
            // The end of this path: past a rename, if any.
            skip(at);
            if code[*at..].starts_with(b"as ") {
                *at += 3;
                skip(at);
                while *at < code.len() && (code[*at].is_ascii_alphanumeric() || code[*at] == b'_') {
                    *at += 1;
                }
            }
            return vec![segments];
        }
    }
    tree(code.as_bytes(), &mut 0)
}

/// Every module path a file's library code names through `crate::`, `super::` or `self::` (brace groups
/// expanded), resolved from the root.
fn named_paths(file: &Path, code: &str) -> Vec<ModPath> {
    let here = module_path(file);
    let mut out = Vec::new();
    for (i, _) in code.match_indices("::") {
        let before = &code[..i];
        let word_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |k| k + 1);
        // Only a path's first `::` (the word before it holds no `::`) after a relative keyword.
        let mut base = match &before[word_start..] {
            "crate" => Vec::new(),
            "self" => here.clone(),
            "super" => here.clone(),
            _ => continue,
        };
        let mut rest = &code[i + 2..];
        if &before[word_start..] == "super" {
            base.pop();
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
        }
        for p in use_tree(rest) {
            out.push(base.iter().cloned().chain(p).collect());
        }
    }
    out
}

/// The names a folder module's `mod.rs` re-exports from its submodules (`pub use jobs::{JobQueue, Taker}`):
/// `folder/name` → `folder/submodule`.
fn reexports(files: &[(PathBuf, String)]) -> BTreeMap<ModPath, ModPath> {
    let mut out = BTreeMap::new();
    for (file, code) in files.iter().filter(|(f, _)| f.ends_with("mod.rs")) {
        let here = module_path(file);
        for line in code.lines().map(str::trim_start) {
            let Some(rest) = line.strip_prefix("pub") else {
                continue;
            };
            let rest = rest.trim_start_matches(|c| c != ' ').trim_start();
            let Some(tree) = rest.strip_prefix("use ") else {
                continue;
            };
            let tree = tree.strip_prefix("self::").unwrap_or(tree);
            if tree.starts_with("crate::") || tree.starts_with("super::") {
                continue;
            }
            // Lines of a multi-line group are read from the statement's start in the whole file.
            let at = code.find(tree).unwrap();
            for p in use_tree(&code[at..]) {
                if let (Some(child), Some(name)) = (p.first(), p.last()) {
                    let mut from = here.clone();
                    from.push(name.clone());
                    let mut to = here.clone();
                    to.push(child.clone());
                    out.insert(from, to);
                }
            }
        }
    }
    out
}

/// Within each folder module, the imports between its submodules: (folder, from, to).
fn inner_imports(files: &[(PathBuf, String)]) -> BTreeSet<(ModPath, String, String)> {
    let reexported = reexports(files);
    let mut edges = BTreeSet::new();
    for (file, code) in files {
        let from = module_path(file);
        for named in named_paths(file, code) {
            // A name re-exported by a folder stands for the submodule that defines it.
            let named = (1..=named.len())
                .rev()
                .find_map(|k| {
                    reexported.get(&named[..k]).map(|to| {
                        to.iter()
                            .cloned()
                            .chain(named[k..].iter().cloned())
                            .collect::<ModPath>()
                    })
                })
                .unwrap_or(named);
            let common = from.iter().zip(&named).take_while(|(a, b)| a == b).count();
            // Two different submodules of the folder `from[..common]` (not the folder's own mod.rs).
            if common > 0 && from.len() > common && named.len() > common {
                let folder = from[..common].to_vec();
                edges.insert((folder, from[common].clone(), named[common].clone()));
            }
        }
    }
    edges
}

/// The import circles among the submodules of each folder, each as `folder: a → b → … → a`.
fn circles(edges: &BTreeSet<(ModPath, String, String)>) -> Vec<String> {
    let mut graphs: BTreeMap<&ModPath, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for (folder, a, b) in edges {
        graphs
            .entry(folder)
            .or_default()
            .entry(a.as_str())
            .or_default()
            .push(b.as_str());
    }
    let mut found = Vec::new();
    for (folder, graph) in &graphs {
        // Depth-first from each node; a path that comes back to a node on it is a circle.
        fn walk<'a>(
            graph: &BTreeMap<&'a str, Vec<&'a str>>,
            path: &mut Vec<&'a str>,
            seen: &mut BTreeSet<Vec<&'a str>>,
        ) {
            let last = *path.last().unwrap();
            for &next in graph.get(last).into_iter().flatten() {
                if let Some(k) = path.iter().position(|&n| n == next) {
                    let mut circle = path[k..].to_vec();
                    let min = (0..circle.len()).min_by_key(|&i| circle[i]).unwrap();
                    circle.rotate_left(min);
                    seen.insert(circle);
                } else if path.len() < 16 {
                    path.push(next);
                    walk(graph, path, seen);
                    path.pop();
                }
            }
        }
        let mut seen = BTreeSet::new();
        for &start in graph.keys() {
            walk(graph, &mut vec![start], &mut seen);
        }
        for c in seen {
            found.push(format!(
                "{}: {} → {}",
                folder.join("::"),
                c.join(" → "),
                c[0]
            ));
        }
    }
    found
}

#[test]
fn submodules_import_one_another_without_a_circle() {
    let files: Vec<(PathBuf, String)> = modules()
        .iter()
        .flat_map(|m| files_of(m))
        .map(|f| {
            let code = library_code(&f);
            (f, code)
        })
        .collect();
    let edges = inner_imports(&files);
    // The check sees the imports it is about: the evaluation's run uses its manifest records.
    assert!(
        edges.contains(&(vec!["eval".into()], "run".into(), "manifest".into())),
        "{edges:?}"
    );
    let found = circles(&edges);
    assert!(found.is_empty(), "import circles: {found:#?}");
}

#[test]
fn a_circle_between_submodules_through_a_reexport_is_caught() {
    let file = |rel: &str, code: &str| (src().join(rel), code.to_string());
    let files = vec![
        file(
            "x/mod.rs",
            "mod a;\nmod b;\npub(crate) use b::{Meta, Other as O};\n",
        ),
        file("x/a.rs", "use super::{b::{self, sse_body}, c::*};\n"),
        file("x/b.rs", "use super::Meta;\nuse crate::x::a::helper;\n"),
        file("x/c/d.rs", "use super::super::a::thing;\n"),
    ];
    let edges = inner_imports(&files);
    let expected: BTreeSet<(ModPath, String, String)> =
        [("a", "b"), ("a", "c"), ("b", "a"), ("c", "a")]
            .iter()
            .map(|(f, t)| (vec!["x".to_string()], f.to_string(), t.to_string()))
            .collect();
    assert_eq!(edges, expected);
    assert_eq!(
        circles(&edges),
        vec!["x: a → b → a".to_string(), "x: a → c → a".to_string()]
    );
}
