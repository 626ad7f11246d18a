//! Regression tests of bad inputs (values, `score`, smaller items) through the binary: one test per reported
//! problem, named after it. Run-folder tests are in `reliability.rs`.
use std::process::Command;

use crate::reliability_support::*;
use serde_json::Value;

#[test]
fn score_keeps_a_runs_judge_results_and_refuses_another_benchmark() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let run = dir.path().join("run");
    let o = eval_cmd(&tiny_b(), &data, &run, &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let metrics = || -> Value {
        serde_json::from_str(&std::fs::read_to_string(run.join("metrics.json")).unwrap()).unwrap()
    };
    let before = metrics();
    assert!(before.get("judge_success").is_some());
    // No --data: the run's own benchmark is used, and eval's judge results stay.
    let preds = run.join("predictions.jsonl");
    let o = Command::new(BIN)
        .args(["score", "--predictions"])
        .arg(&preds)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(metrics(), before);
    // Another benchmark: an error, and the run's files are untouched.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let lines = std::fs::read_to_string(data.join("data.jsonl")).unwrap();
    std::fs::write(other.join("data.jsonl"), lines.lines().next().unwrap()).unwrap();
    let o = Command::new(BIN)
        .args(["score", "--predictions"])
        .arg(&preds)
        .arg("--data")
        .arg(&other)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("was made on another benchmark"),
        "{}",
        text(&o)
    );
    assert_eq!(metrics(), before);
    // A manifest that cannot tell which benchmark it was made on: only with --out.
    let manifest = run.join("manifest.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["settings"].as_object_mut().unwrap().remove("data_hash");
    std::fs::write(&manifest, m.to_string()).unwrap();
    let o = Command::new(BIN)
        .args(["score", "--predictions"])
        .arg(&preds)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("pass --out"), "{}", text(&o));
    assert_eq!(metrics(), before);
}

#[test]
fn score_warns_in_one_line_when_most_predictions_match_no_step() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let preds = dir.path().join("p.jsonl");
    // One prediction of a step of the benchmark: predictions matching no step at all are refused instead.
    let lines: String = (0..40)
        .map(|i| format!("{{\"trajectory\": \"nope-{i}\", \"step\": 0, \"response\": \"\"}}\n"))
        .chain(["{\"trajectory\": 0, \"step\": 0, \"response\": \"\"}\n".to_string()])
        .collect();
    std::fs::write(&preds, lines).unwrap();
    let o = Command::new(BIN)
        .args(["score", "--data"])
        .arg(&data)
        .arg("--predictions")
        .arg(&preds)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("match no benchmark step"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("40 of 41") && warnings[0].contains("--data"),
        "{err}"
    );
}

#[test]
fn bad_values_are_refused_before_any_work_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let cases: &[(&[&str], &str)] = &[
        (
            &["--max-pixels", "0"],
            "--max-pixels 0: must be at least 784",
        ),
        (
            &["--max-pixels", "10"],
            "--max-pixels 10: must be at least 784",
        ),
        (
            &["--min-pixels", "5000", "--max-pixels", "4000"],
            "--min-pixels 5000: must not exceed --max-pixels (4000)",
        ),
        (
            &["--max-new-tokens", "0"],
            "--max-new-tokens 0: must be at least 1",
        ),
        (&["--batch-size", "0"], "--batch-size 0: must be at least 1"),
        (
            &["--max-batch-tokens", "0"],
            "--max-batch-tokens 0: must exceed",
        ),
        (
            &["--max-batch-tokens", "8"],
            "--max-batch-tokens 8: must exceed --max-new-tokens (8)",
        ),
        (
            &["--judge-model", "/nope"],
            "--judge-model /nope: no such folder",
        ),
        (
            &["--device", "cuda:abc"],
            "`cuda:abc` is not a device (auto, cpu",
        ),
        (
            &["--max-new-tokens", "-1"],
            "invalid value '-1' for '--max-new-tokens <MAX_NEW_TOKENS>': expected a whole number",
        ),
    ];
    for (i, (args, want)) in cases.iter().enumerate() {
        let run = dir.path().join(format!("run{i}"));
        let o = eval_cmd(&tiny_b(), &data, &run, args).output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        assert!(
            text(&o).contains(want),
            "{args:?}: want `{want}` in {}",
            text(&o)
        );
        assert!(!run.exists(), "{args:?}: nothing may be written");
    }
    // A bound that conflicts with the checkpoint's other bound (tiny-b: min_pixels 3136) names both.
    let o = eval_cmd(
        &tiny_b(),
        &data,
        &dir.path().join("ckpt"),
        &["--max-pixels", "1000"],
    )
    .output()
    .unwrap();
    assert!(!o.status.success());
    let want = "--max-pixels 1000: is below the checkpoint's min_pixels (3136";
    assert!(text(&o).contains(want), "{}", text(&o));
    // A well-formed device this build cannot open is named as `--device` too.
    if !cfg!(feature = "cuda") {
        let o = eval_cmd(
            &tiny_b(),
            &data,
            &dir.path().join("nocuda"),
            &["--device", "cuda"],
        )
        .output()
        .unwrap();
        assert!(!o.status.success());
        assert!(
            text(&o).contains("error: --device cuda:0 (this build has no CUDA support")
                && text(&o).contains("--features cuda"),
            "{}",
            text(&o)
        );
    }
    // `bench` checks the same values.
    let o = Command::new(BIN)
        .args(["bench", "--max-pixels", "10"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--max-pixels 10: must be at least 784"),
        "{}",
        text(&o)
    );
    // The prompt check needs the prompts: it names the step that does not fit.
    let run = dir.path().join("too-long");
    let o = eval_cmd(&tiny_b(), &data, &run, &["--max-batch-tokens", "10"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = text(&o);
    assert!(err.contains("--max-batch-tokens 10: trajectory"), "{err}");
    assert!(
        err.contains("prompt tokens, which with --max-new-tokens 8 need"),
        "{err}"
    );
    assert!(!run.join("predictions.jsonl").exists(), "{err}");
    // The bound is exact: one token less than it asks for fails, what it asks for runs, and it is the longest
    // prompt of the run plus --max-new-tokens.
    let need: usize = err
        .split("give --max-batch-tokens at least ")
        .nth(1)
        .and_then(|t| t.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no bound in {err}"));
    let below = (need - 1).to_string();
    let o = eval_cmd(
        &tiny_b(),
        &data,
        &dir.path().join("below"),
        &["--max-batch-tokens", &below],
    )
    .output()
    .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    let ok = dir.path().join("exact");
    let at = need.to_string();
    let o = eval_cmd(
        &tiny_b(),
        &data,
        &ok,
        &["--max-batch-tokens", &at, "--no-judge"],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let longest = std::fs::read_to_string(ok.join("predictions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["prompt_tokens"]
                .as_u64()
                .unwrap()
        })
        .max()
        .unwrap();
    assert_eq!(longest as usize + 8, need);
}
#[test]
fn a_utf8_bom_in_data_jsonl_and_in_predictions_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let file = data.join("data.jsonl");
    let body = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("\u{feff}{body}")).unwrap();
    let o = Command::new(BIN)
        .args(["data", "validate", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // The first trajectory's id: its `id`, else its 0-based line index.
    let first: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    let id = if first["id"].is_null() {
        Value::from(0)
    } else {
        first["id"].clone()
    };
    let preds = dir.path().join("p.jsonl");
    let line = serde_json::json!({"trajectory": id, "step": 0, "response": "x"});
    std::fs::write(&preds, format!("\u{feff}{line}\n")).unwrap();
    let o = Command::new(BIN)
        .args(["score", "--data"])
        .arg(&data)
        .arg("--predictions")
        .arg(&preds)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("malformed JSON"), "{}", text(&o));
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("metrics.json")).unwrap())
            .unwrap();
    assert_eq!(m["missing_predictions"], 29, "the first line counts");
}

#[test]
fn failed_writes_leave_no_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let out = dir.path().join("out");
    // A non-empty folder where steps.jsonl should go: the final rename fails.
    std::fs::create_dir_all(out.join("steps.jsonl/x")).unwrap();
    let preds = dir.path().join("p.jsonl");
    std::fs::write(&preds, "").unwrap();
    let o = Command::new(BIN)
        .args(["score", "--data"])
        .arg(&data)
        .arg("--predictions")
        .arg(&preds)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn redirected_logs_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let o = eval_cmd(
        &tiny_b(),
        &data,
        &dir.path().join("run"),
        &["--no-judge", "--max-new-tokens", "1"],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("INFO"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err}");
}

#[test]
fn an_unreachable_hub_error_gives_next_steps() {
    let home = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args([
            "generate",
            "--model",
            "test-org/absent",
            "--image",
            "x.png",
            "--prompt",
            "hi",
        ])
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = text(&o);
    for want in ["pass a local folder", "HF_HUB_OFFLINE=1", "HF_ENDPOINT"] {
        assert!(err.contains(want), "want `{want}` in {err}");
    }
}

#[test]
fn bench_default_tokenizer_is_not_a_build_time_path() {
    let binary = std::fs::read(BIN).unwrap();
    let fixed = format!("{}/tests/fixtures/tokenizer", env!("CARGO_MANIFEST_DIR"));
    assert!(
        !binary.windows(fixed.len()).any(|w| w == fixed.as_bytes()),
        "the binary refers to {fixed}"
    );
    let cwd = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .current_dir(cwd.path())
        .args(["bench", "--config", "tiny", "--steps", "4", "--no-judge"])
        .args(["--max-new-tokens", "2", "--max-pixels", "50176", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn tiny_b_tokenizer_files_survive_a_copy() {
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        let p = tiny_b().join(f);
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert!(
            meta.file_type().is_file(),
            "{} must be a real file",
            p.display()
        );
    }
}
