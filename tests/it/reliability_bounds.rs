//! Bounds and inputs through the binary: `--max-new-tokens` against the model's context, numeric flags given a
//! negative or out-of-range value, `sample --out` and `eval --dump-prompts` never replacing what they do not own,
//! and `score` refusing predictions of another benchmark.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::reliability_support::*;
use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// A failed command whose output holds `want`.
fn refused(o: &Output, want: &str) {
    assert!(!o.status.success(), "{}", text(o));
    assert!(text(o).contains(want), "want `{want}` in {}", text(o));
}

/// A copy of tiny-b in `dir` whose context (`max_position_embeddings`) is `context` tokens.
fn tiny_b_with_context(dir: &Path, context: u64) -> PathBuf {
    let model = dir.join(format!("tiny-b-{context}"));
    std::fs::create_dir_all(&model).unwrap();
    for e in std::fs::read_dir(tiny_b()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), model.join(e.file_name())).unwrap();
    }
    let file = model.join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    cfg["max_position_embeddings"] = context.into();
    if cfg.get("text_config").is_some() {
        cfg["text_config"]["max_position_embeddings"] = context.into();
    }
    std::fs::write(&file, cfg.to_string()).unwrap();
    model
}

/// `generate --json` of tiny-b-like `model` on the sample's first screenshot (small), plus `extra`.
fn generate(model: &Path, data: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg("generate")
        .arg("--model")
        .arg(model)
        .arg("--image")
        .arg(data.join("images/t0_s0.png"))
        .args([
            "--prompt",
            "Open the app.",
            "--max-pixels",
            "50176",
            "--json",
        ])
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

#[test]
fn max_new_tokens_beyond_the_models_context_is_refused_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let huge = ["--max-new-tokens", "99999999999"];
    let want = "--max-new-tokens 99999999999: exceeds the model's context of 32768 tokens";
    let out = dir.path().join("run");
    let o = eval_cmd(&tiny_b(), &data, &out, &huge).output().unwrap();
    refused(&o, want);
    assert!(text(&o).contains("give at most 32767"), "{}", text(&o));
    assert!(!out.join("predictions.jsonl").exists());
    refused(&generate(&tiny_b(), &data, &huge), want);
    let b = tiny_b();
    let serve = ["serve", "--model", b.to_str().unwrap(), "--port", "0"];
    refused(&run(&[&serve[..], &huge[..]].concat()), want);
    let bench = [
        "bench",
        "--config",
        "tiny",
        "--steps",
        "4",
        "--max-pixels",
        "50176",
    ];
    refused(
        &run(&[&bench[..], &huge[..]].concat()),
        "--max-new-tokens 99999999999: exceeds the model's context of",
    );
}

#[test]
fn a_prompt_longer_than_the_room_left_stops_at_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let o = generate(&tiny_b(), &data, &["--max-new-tokens", "1"]);
    let first: Value = serde_json::from_str(&ok_stdout(&o)).unwrap();
    let prompt = first["prompt_tokens"].as_u64().unwrap();
    // Room for 3 generated tokens after this prompt; 10 are asked for.
    let model = tiny_b_with_context(dir.path(), prompt + 3);
    let o = generate(&model, &data, &["--max-new-tokens", "10", "--ignore-eos"]);
    let capped: Value = serde_json::from_str(&ok_stdout(&o)).unwrap();
    assert_eq!(capped["prompt_tokens"], prompt);
    assert_eq!(capped["token_ids"].as_array().unwrap().len(), 3, "{capped}");
    assert_eq!(capped["finish_reason"], "length");
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(
        log.contains(&format!("exceeds the model's context of {}", prompt + 3))
            && log.contains("it generates at most 3"),
        "{log}"
    );
    // A value no prompt can leave room for is refused with the limit.
    let all = (prompt + 3).to_string();
    let o = generate(&model, &data, &["--max-new-tokens", &all]);
    refused(&o, &format!("give at most {}", prompt + 2));
}

fn ok_stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", text(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn negative_and_out_of_range_numbers_name_their_flag_and_range() {
    let b = tiny_b();
    let model = b.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["data", "validate", "--hub-retries", "-1"],
            "invalid value '-1' for '--hub-retries <HUB_RETRIES>': expected a whole number (0, 1, 2, …; accepted: \
             0 to 4294967295)",
        ),
        (
            &["data", "validate", "--hub-timeout", "-1"],
            "invalid value '-1' for '--hub-timeout <HUB_TIMEOUT>'",
        ),
        (
            &["data", "validate", "--hub-timeout", "0"],
            "invalid value '0' for '--hub-timeout <HUB_TIMEOUT>': must be at least 1",
        ),
        (
            &["eval", "--backend", "openai", "--request-timeout", "-1"],
            "invalid value '-1' for '--request-timeout <S>': expected a positive number of seconds",
        ),
        (
            &["serve", "--model", model, "--header-timeout", "1e300"],
            "invalid value '1e300' for '--header-timeout <HEADER_TIMEOUT>': expected a positive number of seconds \
             up to 2592000 (30 days",
        ),
        (
            &["eval", "--model", model, "--max-retries", "-1"],
            "invalid value '-1' for '--max-retries <MAX_RETRIES>'",
        ),
        (
            &["data", "import", "--format", "aitz", "--source", "x", "--out", "y", "--limit", "-1"],
            "invalid value '-1' for '--limit <LIMIT>'",
        ),
        (
            &["serve", "--model", model, "--port", "-1"],
            "invalid value '-1' for '--port <PORT>': expected a whole number (0, 1, 2, …; accepted: 0 to 65535)",
        ),
        (
            &["serve", "--model", model, "--port", "70000"],
            "invalid value '70000' for '--port <PORT>': 70000 is beyond the accepted range (0 to 65535)",
        ),
        (
            &["bench", "--steps", "0"],
            "invalid value '0' for '--steps <STEPS>': must be at least 1",
        ),
    ];
    for (args, want) in cases {
        let o = run(args);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            text(&o).contains(want),
            "{args:?}: want `{want}` in {}",
            text(&o)
        );
        assert!(!text(&o).contains("unexpected argument"), "{args:?}");
    }
    // The variable reads as the flag does.
    let o = Command::new(BIN)
        .args(["data", "validate"])
        .env("MOBILE_R1_EVAL_HUB_TIMEOUT", "0")
        .output()
        .unwrap();
    refused(&o, "'--hub-timeout <HUB_TIMEOUT>': must be at least 1");
}

/// Every file under `dir` with its bytes, for "left untouched".
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn sample_writes_only_a_new_an_empty_or_an_earlier_sample_folder() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("benchmark.json")).unwrap())
            .unwrap();
    assert_eq!(info["source"]["format"], "sample");
    // An earlier sample is replaced; an empty folder is written.
    let again = run(&["sample", "--out", data.to_str().unwrap()]);
    assert!(again.status.success(), "{}", text(&again));
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(run(&["sample", "--out", empty.to_str().unwrap()])
        .status
        .success());
    // An imported benchmark: refused, every file as it was.
    let imported = dir.path().join("odyssey");
    std::fs::create_dir_all(imported.join("images")).unwrap();
    std::fs::write(imported.join("data.jsonl"), "{\"imported\": true}\n").unwrap();
    std::fs::write(imported.join("images/a.png"), "png").unwrap();
    let source = serde_json::json!({"schema_version": 1, "rules": "guiodyssey",
        "source": {"format": "gui-odyssey", "path": "/src/GUI-Odyssey"}});
    std::fs::write(imported.join("benchmark.json"), source.to_string()).unwrap();
    let before = contents(&imported);
    let o = run(&["sample", "--out", imported.to_str().unwrap()]);
    refused(&o, "holds an import of gui-odyssey /src/GUI-Odyssey");
    assert_eq!(contents(&imported), before);
    // A folder that is no benchmark this program wrote: refused, untouched.
    let mine = dir.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("data.jsonl"), "mine\n").unwrap();
    let o = run(&["sample", "--out", mine.to_str().unwrap()]);
    refused(&o, "is not empty and holds no benchmark.json");
    assert_eq!(std::fs::read(mine.join("data.jsonl")).unwrap(), b"mine\n");
    // An earlier sample with a file of the user's in it: refused too.
    std::fs::write(data.join("notes.txt"), "mine").unwrap();
    let o = run(&["sample", "--out", data.to_str().unwrap()]);
    refused(&o, "also notes.txt");
}

#[test]
fn dump_prompts_never_replaces_an_input_an_output_or_a_foreign_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let model = tiny_b_with_context(dir.path(), 32768);
    let bench = std::fs::read(data.join("data.jsonl")).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&data, &link).unwrap();
    let run_dir = dir.path().join("run");
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "keep").unwrap();
    let cases: Vec<(PathBuf, String)> = vec![
        (
            data.join("data.jsonl"),
            format!("is inside the benchmark {}", data.display()),
        ),
        (link.join("data.jsonl"), "is inside the benchmark".into()),
        (
            run_dir.join("predictions.jsonl"),
            "is inside the run folder".into(),
        ),
        (
            model.join("prompts.jsonl"),
            "is inside the model folder".into(),
        ),
        (notes.clone(), "exists and is not a prompt dump".into()),
    ];
    for (dump, want) in &cases {
        let args = ["--no-judge", "--dump-prompts", dump.to_str().unwrap()];
        let o = eval_cmd(&model, &data, &run_dir, &args).output().unwrap();
        refused(&o, want);
        assert!(!run_dir.exists(), "{dump:?}: nothing may be written");
    }
    assert_eq!(std::fs::read(data.join("data.jsonl")).unwrap(), bench);
    assert!(!model.join("prompts.jsonl").exists());
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "keep");
    // A new file is written, and an earlier dump is replaced by the next run's.
    let dump = dir.path().join("prompts.jsonl");
    for n in 0..2 {
        let out = dir.path().join(format!("ok{n}"));
        let args = [
            "--no-judge",
            "--max-new-tokens",
            "1",
            "--dump-prompts",
            dump.to_str().unwrap(),
        ];
        let o = eval_cmd(&model, &data, &out, &args).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let lines = crate::util::json_lines(&dump);
        assert_eq!(lines.len(), 30);
        assert!(lines
            .iter()
            .all(|l| l["kind"] == "step_prompt" && l["schema_version"] == 1));
    }
}

#[test]
fn score_refuses_predictions_that_match_no_step_of_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let preds = dir.path().join("other.jsonl");
    let lines: String = (0..12)
        .map(|i| format!("{{\"trajectory\": \"odyssey-{i}\", \"step\": 0, \"response\": \"\"}}\n"))
        .collect();
    std::fs::write(&preds, lines).unwrap();
    let out = dir.path().join("scored");
    let o = run(&[
        "score",
        "--data",
        data.to_str().unwrap(),
        "--predictions",
        preds.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    refused(
        &o,
        &format!(
            "{}: none of its 12 predictions is a step of the benchmark {}",
            preds.display(),
            data.display()
        ),
    );
    assert!(text(&o).contains("\"odyssey-0\""), "{}", text(&o));
    assert!(text(&o).contains("(12 in all)"), "{}", text(&o));
    assert!(!out.join("metrics.json").exists());
}
