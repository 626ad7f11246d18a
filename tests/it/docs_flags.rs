//! Every command line the documentation shows parses as shown: the README and `docs/*.md` are read at test
//! time, each `mobile-r1-eval` command they show is put through the program's own argument parser
//! (`mobile_r1_eval::cli::Cli`, the one `main` uses; nothing runs, no model is loaded), and a flag or value the
//! parser refuses fails the test with the file and line. New documentation is picked up as it is written.
//!
//! What counts as a command line:
//! * in fenced code blocks, every shell command whose program is `mobile-r1-eval` (any path to it, after
//!   `VAR=value` assignments) or `cargo run … --` (the words after `--`); continuation lines (`\`) are joined,
//!   and pipes, `&&`, `;`, redirections and `#` comments end it;
//! * in a table whose first column is headed `command` (the README's), the code span of each row's first cell,
//!   a synopsis;
//! * in a table whose first column is headed `flag` under a heading `` ### `<command>` `` (docs/configuration.md),
//!   each code span of a row's first cell, as `<command> <span>`: one flag with its value, so the command's other
//!   required arguments may be missing.
//!
//! Synopsis conventions, which the docs follow: `[x]` is optional (the test includes it); `a|b` (no spaces; `\|`
//! in a table) are alternative values and `[x | y]` alternative groups (the test parses one line per
//! alternative); `…` stands for the command's other arguments (such a line may lack a required one, nothing
//! else). Upper-case words are placeholders and become concrete values before parsing (see [`PLACEHOLDERS`]):
//! `M`, `M2` a model, `D` a device and `D[,D…]` a list of them, `T` a dtype, `N` a number, `I/N` a shard, `P` or
//! `PRESET` a rule preset, `S` a system-prompt source, `G` a GEMM choice, `C` a bench config, `FORMAT` an import
//! format, `TEXT` a prompt, `DIR`, `OUT_DIR`, `RUN`, `RUN_DIR`, `RUN_A`, `RUN_B` folders, `FILE` and `PATH` files;
//! also inside a word, between `/`, `,`, `=` and `:` (`auto/N`, `relative:N`).

use std::path::{Path, PathBuf};

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use mobile_r1_eval::cli::Cli;

mod shell;
use shell::{is_assignment, shell_words, Shell};

/// Placeholder words and the concrete values parsed in their place.
const PLACEHOLDERS: &[(&str, &str)] = &[
    ("M", "Qwen/Qwen2.5-VL-3B-Instruct"),
    ("M2", "Qwen/Qwen2.5-VL-7B-Instruct"),
    ("D", "cpu"),
    ("D,D", "cpu,cpu"),
    ("T", "f32"),
    ("N", "2"),
    ("I/N", "0/2"),
    ("I", "0"),
    ("P", "qwen-ac"),
    ("PRESET", "qwen-ac"),
    ("S", "data"),
    ("G", "gemm-crate"),
    ("C", "small"),
    ("FORMAT", "aitz"),
    ("TEXT", "What is on the screen?"),
    ("DIR", "some/dir"),
    ("OUT_DIR", "some/dir"),
    ("RUN", "runs/example"),
    ("RUN_DIR", "runs/example"),
    ("RUN_A", "runs/a"),
    ("RUN_B", "runs/b"),
    ("FILE", "some/file.jsonl"),
    ("PATH", "some/path"),
];

/// One command line found in the docs.
#[derive(Debug, Clone)]
struct Example {
    /// `file:line`.
    place: String,
    /// The arguments after the program name, placeholders replaced.
    args: Vec<String>,
    /// Abbreviated (`…`, or one flag of a flag table): a missing required argument is not an error.
    partial: bool,
}

/// The documentation files: `README.md` and every `docs/*.md`.
fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    files.insert(0, root.join("README.md"));
    files
}

/// Every command line of one Markdown text (`name` for the messages).
fn examples(name: &str, text: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let (mut fence, mut logical, mut start) = (false, String::new(), 0);
    let (mut heading, mut table) = (None::<String>, None::<String>);
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with("```") || t.starts_with("~~~") {
            fence = !fence;
        } else if fence {
            if logical.is_empty() {
                start = i + 1;
            }
            match t.strip_suffix('\\') {
                Some(head) => logical.push_str(&format!("{head} ")),
                None => {
                    logical.push_str(t);
                    out.extend(shell_examples(&logical, &format!("{name}:{start}")));
                    logical.clear();
                }
            }
        } else if !t.starts_with('|') {
            if let Some(h) = t.strip_prefix("### `").and_then(|h| h.strip_suffix('`')) {
                heading = Some(h.to_owned());
            } else if t.starts_with('#') {
                heading = None;
            }
            table = None;
        } else if let Some(kind) = &table {
            let place = format!("{name}:{}", i + 1);
            out.extend(row_examples(
                kind,
                heading.as_deref(),
                &table_cells(t)[0],
                &place,
            ));
        } else {
            // The header row: its first cell says what the table lists.
            table = Some(table_cells(t).swap_remove(0));
        }
    }
    out
}

/// The command lines of a table row whose first cell is `cell`, in a table whose first column is headed
/// `kind`, under the `### \`command\`` heading `heading`.
fn row_examples(kind: &str, heading: Option<&str>, cell: &str, place: &str) -> Vec<Example> {
    let spans = code_spans(cell);
    match (kind, heading) {
        ("command", _) => spans
            .iter()
            .flat_map(|s| synopsis_examples(s, place, false))
            .collect(),
        ("flag", Some(cmd)) => spans
            .iter()
            .flat_map(|s| synopsis_examples(&format!("{cmd} {s}"), place, true))
            .collect(),
        _ => Vec::new(),
    }
}

/// The cells of a table row, `\|` read as `|`.
fn table_cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cells.last_mut().unwrap().push(chars.next().unwrap())
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().unwrap().push(c),
        }
    }
    cells.iter().map(|c| c.trim().to_owned()).collect()
}

/// The contents of the code spans (`` `…` ``) of a cell.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// A word with its placeholders made concrete: the whole word, else each part between `/`, `,`, `=` and `:`
/// (`auto/N` → `auto/2`, `relative:N` → `relative:2`).
fn concrete(word: &str) -> String {
    let value = |w: &str| PLACEHOLDERS.iter().find(|(p, _)| *p == w).map(|(_, v)| *v);
    if let Some(v) = value(word) {
        return v.to_owned();
    }
    let mut out = String::new();
    for part in word.split_inclusive(['/', ',', '=', ':']) {
        let (name, sep) = match part.char_indices().last() {
            Some((i, c)) if "/,=:".contains(c) => part.split_at(i),
            _ => (part, ""),
        };
        out.push_str(value(name).unwrap_or(name));
        out.push_str(sep);
    }
    out
}

/// The `mobile-r1-eval` commands of one shell line of a code block.
fn shell_examples(line: &str, place: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let words = shell_words(line);
    for command in words.split(|w| *w == Shell::End) {
        let mut words = command.iter().map(|w| match w {
            Shell::Word(s) => s.as_str(),
            Shell::End => unreachable!(),
        });
        let mut program = words.next();
        while program.is_some_and(is_assignment) {
            program = words.next();
        }
        let rest: Vec<&str> = words.collect();
        let args: Vec<&str> = match program {
            Some(p) if p.rsplit('/').next() == Some("mobile-r1-eval") => rest,
            Some("cargo") if rest.first() == Some(&"run") => {
                match rest.iter().position(|w| *w == "--") {
                    Some(dash) => rest[dash + 1..].to_vec(),
                    None => continue,
                }
            }
            _ => continue,
        };
        out.push(Example {
            place: place.to_owned(),
            args: args.into_iter().map(concrete).collect(),
            partial: false,
        });
    }
    out
}

/// A synopsis: words (each with its alternative values) and bracketed groups (with their alternatives).
#[derive(Debug)]
enum Node {
    Word(Vec<String>),
    Group(Vec<Vec<Node>>),
}

/// Parse synopsis tokens up to the `]` closing the current group (or the end); alternatives split at `|`.
fn parse_group(tokens: &mut std::iter::Peekable<std::vec::IntoIter<String>>) -> Vec<Vec<Node>> {
    let mut alts = vec![Vec::new()];
    while let Some(t) = tokens.next() {
        match t.as_str() {
            "]" => break,
            "[" => alts
                .last_mut()
                .unwrap()
                .push(Node::Group(parse_group(tokens))),
            "|" => alts.push(Vec::new()),
            w => alts
                .last_mut()
                .unwrap()
                .push(Node::Word(w.split('|').map(str::to_owned).collect())),
        }
    }
    alts
}

/// The synopsis as tokens: brackets and spaced `|` on their own, `D[,D…]` as the placeholder `D,D`.
fn synopsis_tokens(synopsis: &str) -> Vec<String> {
    let text = synopsis.replace("D[,D…]", "D,D");
    let mut tokens = Vec::new();
    for w in text.split_whitespace() {
        let body = w.trim_start_matches('[');
        tokens.extend(std::iter::repeat_n("[".to_owned(), w.len() - body.len()));
        let core = body.trim_end_matches(']');
        if !core.is_empty() {
            tokens.push(core.to_owned());
        }
        tokens.extend(std::iter::repeat_n("]".to_owned(), body.len() - core.len()));
    }
    tokens
}

/// Render `alts` with alternative `target.1` at choice point `target.0` (when it has that many) and the first
/// everywhere else; `next` numbers the choice points (groups and words) in order.
fn render(alts: &[Vec<Node>], target: (usize, usize), next: &mut usize, out: &mut Vec<String>) {
    fn pick(next: &mut usize, target: (usize, usize), n: usize) -> usize {
        *next += 1;
        if target.0 == *next - 1 && target.1 < n {
            target.1
        } else {
            0
        }
    }
    let chosen = pick(next, target, alts.len());
    for node in &alts[chosen] {
        match node {
            Node::Group(inner) => render(inner, target, next, out),
            Node::Word(values) => out.push(concrete(&values[pick(next, target, values.len())])),
        }
    }
}

/// One argument list per alternative of a synopsis (every optional part included).
fn synopsis_examples(synopsis: &str, place: &str, partial: bool) -> Vec<Example> {
    let elided = |t: &String| t == "…" || t == "...";
    let mut tokens = synopsis_tokens(synopsis);
    let partial = partial || tokens.iter().any(elided);
    tokens.retain(|t| !elided(t));
    let tree = parse_group(&mut tokens.into_iter().peekable());
    let (mut points, mut first) = (0, Vec::new());
    render(&tree, (usize::MAX, 0), &mut points, &mut first);
    let mut variants = vec![first];
    for point in 0..points {
        for pick in 1..16 {
            let mut args = Vec::new();
            render(&tree, (point, pick), &mut 0, &mut args);
            if !variants.contains(&args) {
                variants.push(args);
            }
        }
    }
    variants
        .into_iter()
        .map(|args| Example {
            place: place.to_owned(),
            args,
            partial,
        })
        .collect()
}

/// Why the parser refused `e`, or `None` when it accepts it as shown.
fn refusal(e: &Example) -> Option<String> {
    let argv = std::iter::once("mobile-r1-eval".to_owned()).chain(e.args.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(_) => None,
        Err(err) => match err.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => None,
            ErrorKind::MissingRequiredArgument if e.partial => None,
            _ => Some(format!(
                "{}: `mobile-r1-eval {}`:\n{err}",
                e.place,
                e.args.join(" ")
            )),
        },
    }
}

/// Every command line of the README and `docs/*.md`.
fn all_examples() -> Vec<Example> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    doc_files()
        .iter()
        .flat_map(|f| {
            let text =
                std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let name = f.strip_prefix(root).unwrap_or(f).display().to_string();
            examples(&name, &text)
        })
        .collect()
}

#[test]
fn every_command_line_in_the_docs_parses_as_shown() {
    let found = all_examples();
    let refused: Vec<String> = found.iter().filter_map(refusal).collect();
    assert!(
        refused.is_empty(),
        "the parser refuses {} documented command line(s):\n\n{}",
        refused.len(),
        refused.join("\n\n")
    );
    // The extraction finds the documentation's commands: every subcommand appears, complete, at least once.
    let cli = Cli::command();
    for sub in cli.get_subcommands().map(|s| s.get_name()) {
        assert!(
            found
                .iter()
                .any(|e| !e.partial && e.args.first().is_some_and(|a| a == sub)),
            "no complete `mobile-r1-eval {sub} …` command line found in README.md or docs/*.md"
        );
    }
    eprintln!("{} documented command lines parse as shown", found.len());
}

/// The checker itself: the forms it reads are found, a refused flag or value fails, placeholders and
/// alternatives expand.
#[test]
fn the_docs_checker_finds_commands_and_refuses_bad_flags() {
    let doc = "```bash\n# a comment\nRUST_LOG=info ./target/release/mobile-r1-eval eval --model M \\\n    \
               --kernels maybe 2>&1 | tee log   # trailing\ncargo run --release -- sample --out DIR\n\
               mobile-r1-eval eval --model M --shard auto/N --out RUN && echo done\n```\n\n\
               | command | what |\n|---|---|\n| `score --predictions FILE [--rules mobile-r1\\|nonsense]` | x |\n\n\
               ### `report`\n\n| flag | default |\n|---|---|\n| `--compare RUN_A RUN_B` | none |\n| `--bogus N` | x |\n";
    let found = examples("t.md", doc);
    let shown: Vec<String> = found.iter().map(|e| e.args.join(" ")).collect();
    assert_eq!(
        shown,
        [
            "eval --model Qwen/Qwen2.5-VL-3B-Instruct --kernels maybe",
            "sample --out some/dir",
            "eval --model Qwen/Qwen2.5-VL-3B-Instruct --shard auto/2 --out runs/example",
            "score --predictions some/file.jsonl --rules mobile-r1",
            "score --predictions some/file.jsonl --rules nonsense",
            "report --compare runs/a runs/b",
            "report --bogus 2",
        ]
    );
    let refused: Vec<&str> = found
        .iter()
        .filter(|e| refusal(e).is_some())
        .map(|e| e.place.as_str())
        .collect();
    assert_eq!(refused, ["t.md:3", "t.md:11", "t.md:18"]);
    // `--kernels` takes the words of its environment variable.
    for ok in ["on", "off", "OFF", "1", "no"] {
        let e = Example {
            place: ok.into(),
            args: vec!["self-test".into(), "--kernels".into(), ok.into()],
            partial: false,
        };
        assert_eq!(refusal(&e), None);
    }
}

/// `--kernels on|off` through the binary: the flag as documented, its environment variable as the default, the
/// flag winning over it, and a bad value named.
#[test]
fn kernels_flag_takes_on_and_off_and_wins_over_its_environment_variable() {
    let run = |args: &[&str], env: Option<&str>| {
        let mut c = crate::util::bin();
        c.args(["self-test", "--device", "cpu", "--json"])
            .args(args)
            .env_remove("MOBILE_R1_EVAL_KERNELS");
        if let Some(v) = env {
            c.env("MOBILE_R1_EVAL_KERNELS", v);
        }
        c.output().unwrap()
    };
    let enabled = |o: &std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["kernels_enabled"].as_bool().unwrap()
    };
    assert!(!enabled(&run(&["--kernels", "off"], None)));
    assert!(!enabled(&run(&[], Some("off"))));
    assert!(enabled(&run(&["--kernels", "on"], Some("off"))));
    let bad = run(&["--kernels", "maybe"], None);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--kernels") && err.contains("maybe"), "{err}");
}
