//! Regression tests through the binary of failed starts, refused inputs and resumes that change the phases: a
//! failed start leaves no folder, a benchmark folder or a file is no run folder, a file given as `--data`, another
//! architecture, gold points off the screen and an empty predictions file are each named; a run made without the
//! judge takes it on when resumed with it; `score` of a run's predictions keeps the run's own report.
use std::process::Command;

use crate::reliability_support::*;
use serde_json::Value;

fn fails_with(c: &mut Command, want: &[&str]) -> String {
    let o = c.output().unwrap();
    assert!(!o.status.success(), "succeeded: {}", text(&o));
    let t = text(&o);
    for w in want {
        assert!(t.contains(w), "want `{w}` in {t}");
    }
    t
}

#[test]
fn a_failed_start_leaves_no_folder_and_odd_out_folders_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    // A benchmark that does not load: the run's folder (and its parent) are not left behind.
    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    std::fs::write(broken.join("data.jsonl"), "{not json\n").unwrap();
    let out = dir.path().join("runs").join("r1");
    fails_with(
        &mut eval_cmd(&tiny_b(), &broken, &out, &[]),
        &["malformed JSON"],
    );
    assert!(!dir.path().join("runs").exists(), "nothing left behind");
    // A model folder that is not a checkpoint.
    fails_with(
        &mut eval_cmd(dir.path(), &data, &out, &[]),
        &["config.json"],
    );
    assert!(!out.exists());
    // --out naming the benchmark, or a file.
    fails_with(
        &mut eval_cmd(&tiny_b(), &data, &data, &[]),
        &["--out", "holds a benchmark"],
    );
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    fails_with(
        &mut eval_cmd(&tiny_b(), &data, &file, &[]),
        &["--out", "is a file, not a folder"],
    );
    // --data naming data.jsonl itself.
    fails_with(
        &mut eval_cmd(&tiny_b(), &data.join("data.jsonl"), &out, &[]),
        &["data.jsonl is a file", "the folder holding data.jsonl"],
    );
    assert!(!out.exists());
}

#[test]
fn another_architecture_gold_points_off_screen_and_empty_predictions_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let qwen2 = dir.path().join("qwen2-vl");
    std::fs::create_dir(&qwen2).unwrap();
    for e in std::fs::read_dir(tiny_b()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), qwen2.join(e.file_name())).unwrap();
    }
    let config = std::fs::read_to_string(qwen2.join("config.json")).unwrap();
    let config = config
        .replace(
            "Qwen2_5_VLForConditionalGeneration",
            "Qwen2VLForConditionalGeneration",
        )
        .replace("\"qwen2_5_vl\"", "\"qwen2_vl\"");
    std::fs::write(qwen2.join("config.json"), config).unwrap();
    fails_with(
        &mut eval_cmd(&qwen2, &data, &dir.path().join("run"), &[]),
        &["model_type \"qwen2_vl\"", "qwen2_5_vl"],
    );

    let text_of = std::fs::read_to_string(data.join("data.jsonl")).unwrap();
    let mut first: Value = serde_json::from_str(text_of.lines().next().unwrap()).unwrap();
    let step = first["trajectory"]
        .as_array()
        .unwrap()
        .iter()
        .position(|s| s["action"].to_string().contains("click"))
        .expect("a click step");
    let mut action: Value = match &first["trajectory"][step]["action"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    };
    action["arguments"]["coordinate"] = serde_json::json!([-50, 99999]);
    first["trajectory"][step]["action"] = action;
    let off = dir.path().join("off");
    std::fs::create_dir(&off).unwrap();
    std::fs::write(off.join("data.jsonl"), format!("{first}\n")).unwrap();
    fails_with(
        Command::new(BIN)
            .args(["data", "validate", "--data"])
            .arg(&off),
        &[&format!("trajectory[{step}].action"), "off the"],
    );

    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "\n").unwrap();
    fails_with(
        Command::new(BIN)
            .args(["score", "--predictions"])
            .arg(&empty)
            .arg("--data")
            .arg(&data),
        &["holds no prediction"],
    );
}

#[test]
fn a_run_without_the_judge_takes_it_on_and_score_keeps_the_runs_report() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let run = dir.path().join("run");
    let o = eval_cmd(&tiny_b(), &data, &run, &["--no-judge"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!run.join("judgements.jsonl").exists());
    let o = eval_cmd(&tiny_b(), &data, &run, &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("0 to predict, 30 already done"),
        "{}",
        text(&o)
    );
    let judged = std::fs::read_to_string(run.join("judgements.jsonl")).unwrap();
    assert_eq!(judged.lines().count(), 5);
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["settings"]["judge"].is_object());

    // Scoring the run's own predictions rewrites its report as the run's: its model, not the predictions' path.
    let o = Command::new(BIN)
        .args(["score", "--predictions"])
        .arg(run.join("predictions.jsonl"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(page.contains("tiny-b"), "the run's model is shown");
    assert!(!page.contains("(not recorded)"));
    assert!(!run.join("scored.json").exists(), "a run stays a run");
}
