//! The judge's verdicts follow the step answers they were made from, through the binary with the tiny random
//! checkpoint: a trajectory with a failed step is left unjudged (or judged without it under
//! `--allow-step-errors`, the verdict saying so), and once the step is redone on resume the trajectory is judged
//! again, its verdict's digest changing; a scored folder of a semi-online run keeps its history and model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::util::{json_file, json_lines, ok};

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b")
}

/// Run the binary with `args`, logging at `log`.
fn run(args: &[&str], log: &str) -> Output {
    crate::util::bin()
        .args(args)
        .env("RUST_LOG", log)
        .output()
        .expect("run the binary")
}

/// `eval` of the tiny checkpoint on `data` into `out`, small screenshots and answers, plus `extra`.
fn eval(out: &Path, data: Option<&Path>, extra: &[&str]) -> Output {
    let model = model_dir();
    let mut args = vec!["eval", "--model", model.to_str().unwrap()];
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend(["--max-pixels", "40000", "--max-new-tokens", "10"]);
    if let Some(d) = data {
        args.extend(["--data", d.to_str().unwrap()]);
    }
    args.extend(extra);
    run(&args, "info")
}

/// Trajectory id → its latest judgement line.
fn verdicts(run: &Path) -> BTreeMap<String, Value> {
    json_lines(&run.join("judgements.jsonl"))
        .into_iter()
        .map(|v| (v["trajectory"].as_str().unwrap().to_string(), v))
        .collect()
}

/// The sample benchmark in `dir` with the first step's screenshot of its first trajectory made unreadable:
/// returns that trajectory's id, the screenshot's path and its good bytes.
fn sample_with_a_broken_screenshot(dir: &Path) -> (String, PathBuf, Vec<u8>) {
    ok(&run(&["sample", "--out", dir.to_str().unwrap()], "warn"));
    let text = std::fs::read_to_string(dir.join("data.jsonl")).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let image = dir.join(first["trajectory"][0]["image"].as_str().unwrap());
    let good = std::fs::read(&image).unwrap();
    std::fs::write(&image, b"not a png").unwrap();
    (first["id"].as_str().unwrap_or("0").to_string(), image, good)
}

#[test]
fn a_trajectory_with_a_failed_step_is_judged_when_allowed_and_again_once_the_step_is_redone() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (broken, image, good) = sample_with_a_broken_screenshot(&data);
    let out = tmp.path().join("run");

    // Without --allow-step-errors: the trajectory with the failed step is not judged, and the metrics say so.
    let o = eval(&out, Some(&data), &[]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("1 trajectories not judged because some of their steps failed"),
        "{err}"
    );
    let first = verdicts(&out);
    assert_eq!(first.len(), 4, "{first:?}");
    assert!(!first.contains_key(&broken));
    assert!(first.values().all(|v| v["missing_steps"] == 0));
    let m = json_file(&out.join("metrics.json"));
    assert_eq!(
        (m["judge_judged"].as_u64(), m["judge_missing"].as_u64()),
        (Some(4), Some(1))
    );
    assert_eq!(m["judge_skipped_step_errors"], 1);
    assert_eq!(m["judge_with_missing_steps"], 0);
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("judge_skipped_step_errors"), "{summary}");

    // With it: judged without that step, the verdict saying so; the others are not judged again.
    let o = eval(&out, Some(&data), &["--allow-step-errors"]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "judge: 1 to judge (0 whose steps changed since their verdict), 4 already judged"
        ),
        "{err}"
    );
    let allowed = verdicts(&out);
    let partial = &allowed[&broken];
    assert_eq!(partial["missing_steps"], 1);
    let m = json_file(&out.join("metrics.json"));
    assert_eq!(
        (
            m["judge_judged"].as_u64(),
            m["judge_with_missing_steps"].as_u64()
        ),
        (Some(5), Some(1))
    );
    assert_eq!(m["judge_skipped_step_errors"], 0);

    // Fixed: the step is redone, so its trajectory's verdict is stale and judged again from the new answers.
    std::fs::write(&image, &good).unwrap();
    let o = eval(&out, Some(&data), &[]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("steps: 1 to predict, 29 already done"),
        "{err}"
    );
    assert!(
        err.contains(
            "judge: 1 to judge (1 whose steps changed since their verdict), 4 already judged"
        ),
        "{err}"
    );
    let redone = verdicts(&out);
    let fresh = &redone[&broken];
    assert_eq!(fresh["missing_steps"], 0);
    let (old_hash, new_hash) = (&partial["steps_sha256"], &fresh["steps_sha256"]);
    assert!(new_hash.is_string() && old_hash.is_string());
    assert_ne!(
        new_hash, old_hash,
        "the verdict's digest follows the redone step"
    );
    for (id, v) in &first {
        assert_eq!(&redone[id], v, "trajectory {id} was judged again");
    }
    let m = json_file(&out.join("metrics.json"));
    assert_eq!(
        (
            m["judge_judged"].as_u64(),
            m["judge_with_missing_steps"].as_u64()
        ),
        (Some(5), Some(0))
    );
    assert_eq!(m["judge_stale"], 0);
    let manifest = json_file(&out.join("manifest.json"));
    assert_eq!(manifest["line_schema_version"], 2);
}

/// A verdict written before the step answers changed is not counted by `score` (it is stale), and a resume
/// judges it again.
#[test]
fn a_stale_verdict_is_not_counted_and_is_judged_again() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    ok(&eval(&out, None, &[]));
    let before = verdicts(&out);
    // Another answer to one step of the first trajectory, as a redone step leaves it.
    let preds = out.join("predictions.jsonl");
    let mut lines: Vec<Value> = json_lines(&preds);
    let id = lines[0]["trajectory"].as_str().unwrap().to_string();
    let mut changed = lines[0].clone();
    changed["response"] = Value::String("another answer".into());
    lines.push(changed);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&preds, text).unwrap();
    ok(&run(
        &["score", "--predictions", preds.to_str().unwrap()],
        "warn",
    ));
    let m = json_file(&out.join("metrics.json"));
    assert_eq!(
        (m["judge_stale"].as_u64(), m["judge_judged"].as_u64()),
        (Some(1), Some(4))
    );
    let o = eval(&out, None, &[]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("judge: 1 to judge (1 whose steps changed since their verdict)"),
        "{err}"
    );
    let after = verdicts(&out);
    assert_ne!(after[&id]["steps_sha256"], before[&id]["steps_sha256"]);
    let m = json_file(&out.join("metrics.json"));
    assert_eq!(
        (m["judge_stale"].as_u64(), m["judge_judged"].as_u64()),
        (Some(0), Some(5))
    );
}
