//! The binary end to end: `sample`, `data validate`, `score` (with and without `--data`).
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{text, BIN};

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("binary runs")
}

/// `score --data DATA --predictions PREDS` plus `extra`.
fn score(data: &Path, preds: &Path, extra: &[&str]) -> Output {
    let (data, preds) = (data.to_str().unwrap(), preds.to_str().unwrap());
    let mut args = vec!["score", "--data", data, "--predictions", preds];
    args.extend_from_slice(extra);
    run(&args)
}

fn small() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/small")
}

fn metrics(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("metrics.json")).unwrap()).unwrap()
}

#[test]
fn score_small_fixture_end_to_end() {
    let out = tempfile::tempdir().unwrap();
    let data = small();
    let preds = data.join("predictions.jsonl");
    let o = score(&data, &preds, &["--out", out.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("line 7"),
        "malformed line reported with its number: {t}"
    );
    assert!(t.contains("(zzz, 0)"), "unknown prediction reported: {t}");
    assert!(t.contains("| accuracy % | 28.57 |"), "{t}");
    let m = metrics(out.path());
    assert_eq!(m["steps"], 7);
    assert_eq!(m["args_errors"], 3);
    assert_eq!(m["format_errors"], 1);
    assert_eq!(m["type_errors"], 1);
    assert_eq!(m["unknown_predictions"], 1);
    assert_eq!(m["malformed_prediction_lines"], 1);
    assert_eq!(m["rules"]["name"], "mobile-r1");
    let steps = std::fs::read_to_string(out.path().join("steps.jsonl")).unwrap();
    assert_eq!(steps.lines().count(), 7);
    assert!(out.path().join("summary.md").is_file());

    let o = score(
        &data,
        &preds,
        &["--out", out.path().to_str().unwrap(), "--rules", "qwen-ac"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(metrics(out.path())["args_errors"], 2);
}

#[test]
fn unknown_rules_and_bad_data_fail_clearly() {
    let data = small();
    let preds = data.join("predictions.jsonl");
    let o = score(&data, &preds, &["--rules", "strict"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("qwen-ac"), "{}", text(&o));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.jsonl"), "{\"app_name\": 1}\n").unwrap();
    let o = run(&["data", "validate", "--data", dir.path().to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(text(&o).contains("data.jsonl:1:"), "{}", text(&o));
    // The fixture has no screenshots: score works, validate reports them.
    let o = run(&["data", "validate", "--data", data.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(text(&o).contains("file not found"), "{}", text(&o));
    // A missing folder: the path and the OS's reason, said once.
    let o = run(&["data", "validate", "--data", "/nonexistent-mre"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("/nonexistent-mre/data.jsonl"), "{t}");
    assert_eq!(t.matches("(os error").count(), 1, "{t}");
}

#[test]
fn sample_validate_and_score_gold_responses() {
    let dir = tempfile::tempdir().unwrap();
    let bench = dir.path().join("bench");
    let o = run(&["sample", "--out", bench.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["data", "validate", "--data", bench.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("terminate: 5"), "{}", text(&o));
    // The gold responses as predictions score 100%.
    let data = std::fs::read_to_string(bench.join("data.jsonl")).unwrap();
    let mut preds = String::new();
    for (ti, l) in data.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        for (si, s) in v["trajectory"].as_array().unwrap().iter().enumerate() {
            let p = serde_json::json!({"trajectory": ti, "step": si, "response": s["response"], "image_size": [360, 800]});
            // Halve the coordinates in the response, as if the model saw a 360x800 image.
            let mut p = p;
            let resp = p["response"].as_str().unwrap().to_owned();
            p["response"] = halve_coordinates(&resp).into();
            preds.push_str(&p.to_string());
            preds.push('\n');
        }
    }
    let pf = dir.path().join("preds.jsonl");
    std::fs::write(&pf, preds).unwrap();
    let out = dir.path().join("out");
    let o = score(&bench, &pf, &["--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let m = metrics(&out);
    assert_eq!(m["accuracy"], 100.0, "{m}");
    assert_eq!(m["task_success"], 100.0);
    assert_eq!(m["full_format"], m["steps"]);
}

/// Replace every `[x, y]` pair of integers inside the tool call by `[x/2, y/2]`.
fn halve_coordinates(s: &str) -> String {
    let Some(start) = s.find("<tool_call>") else {
        return s.to_owned();
    };
    let (head, tail) = s.split_at(start);
    let mut call: serde_json::Value = {
        let body = tail
            .trim_start_matches("<tool_call>")
            .trim_end()
            .trim_end_matches("</tool_call>");
        serde_json::from_str(body.trim()).unwrap()
    };
    for key in ["coordinate", "coordinate2"] {
        if let Some(arr) = call["arguments"]
            .get_mut(key)
            .and_then(|v| v.as_array_mut())
        {
            for x in arr.iter_mut() {
                *x = (x.as_f64().unwrap() / 2.0).into();
            }
        }
    }
    format!("{head}<tool_call>\n{call}\n</tool_call>")
}

#[test]
fn score_without_data_uses_embedded_sample() {
    let dir = tempfile::tempdir().unwrap();
    let pf = dir.path().join("preds.jsonl");
    std::fs::write(&pf, "{\"trajectory\": 0, \"step\": 0, \"response\": \"<tool_call>{\\\"name\\\": \\\"mobile_use\\\", \\\"arguments\\\": {\\\"action\\\": \\\"open\\\", \\\"text\\\": \\\"淘宝\\\"}}</tool_call>\"}\n").unwrap();
    let o = run(&["score", "--predictions", pf.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let m = metrics(dir.path());
    assert_eq!(m["steps"], 30);
    assert_eq!(m["correct"], 1);
    assert_eq!(m["missing_predictions"], 29);
}

#[test]
fn validate_real_standin_screenshots() {
    // Real 1080x2400 Chinese-app screenshots from the shared stand-ins (`../shared` beside the repository);
    // skipped when that folder is absent.
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/standins/standin_cn_mai-ui_139mail_trajectory");
    if !src.is_dir() {
        eprintln!(
            "skipped: {} not present (the shared stand-in data beside the repository)",
            src.display()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("images")).unwrap();
    let mut steps = Vec::new();
    for n in ["002", "003", "004"] {
        let name = format!("step_{n}.png");
        std::fs::copy(src.join(&name), dir.path().join("images").join(&name)).unwrap();
        steps.push(serde_json::json!({"image": format!("images/{name}"), "thought": "", "subtask": "", "response": "",
            "action": {"name": "mobile_use", "arguments": {"action": "click", "coordinate": [669, 1196]}}}));
    }
    let line = serde_json::json!({"app_name": "139邮箱", "trajectory_length": 3, "instruction": "打开移动云盘",
        "image_width": 1080, "image_height": 2400, "trajectory": steps});
    std::fs::write(dir.path().join("data.jsonl"), format!("{line}\n")).unwrap();
    let o = run(&["data", "validate", "--data", dir.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("screenshots checked: 3"), "{}", text(&o));
}
