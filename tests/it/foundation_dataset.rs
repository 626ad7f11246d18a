//! Dataset loading: both action forms, ids, and errors naming file, line and field.
use std::path::Path;

use mobile_r1_eval::action::ActionType;
use mobile_r1_eval::dataset::{Benchmark, DatasetError};

const GOOD_STEP: &str = r#"{"image": "images/x.png", "thought": "t", "subtask": "s", "action": "{\"name\": \"mobile_use\", \"arguments\": {\"action\": \"click\", \"coordinate\": [10, 20]}}", "response": "r"}"#;

fn line(steps: &str, len: usize, extra: &str) -> String {
    format!(
        r#"{{"app_name": "淘宝", "trajectory_length": {len}, "instruction": "买东西", "image_width": 720, "image_height": 1600{extra}, "trajectory": [{steps}]}}"#
    )
}

fn good() -> String {
    line(GOOD_STEP, 1, "")
}

/// Write `lines` as data.jsonl in a fresh folder and load it.
fn load(lines: &[String]) -> (tempfile::TempDir, Result<Benchmark, DatasetError>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.jsonl"), lines.join("\n")).unwrap();
    let r = Benchmark::load(dir.path());
    (dir, r)
}

/// The second line is bad: the error names data.jsonl, line 2 and `field`.
fn assert_line2(bad: String, field: &str, needle: &str) {
    let (_dir, r) = load(&[good(), bad]);
    let e = r.expect_err("must fail");
    let msg = e.to_string();
    assert!(msg.contains("data.jsonl:2:"), "{msg}");
    assert_eq!(e.line(), Some(2), "{msg}");
    if !field.is_empty() {
        assert_eq!(e.field(), Some(field), "{msg}");
        assert!(msg.contains(field), "{msg}");
    }
    assert!(msg.contains(needle), "expected {needle:?} in {msg}");
}

#[test]
fn loads_both_action_forms_and_ids() {
    let obj_step = r#"{"image": "images/y.png", "thought": "", "subtask": "", "response": "", "action": {"name": "mobile_use", "arguments": {"action": "System_Button", "button": "home"}}, "bbox": [[1, 2, 3, 4], [5, 6, 7, 8]]}"#;
    let lines = [
        good(),
        line(obj_step, 1, r#", "id": 42"#),
        line(GOOD_STEP, 1, r#", "id": "x-1", "system": "sys""#),
    ];
    let (_d, r) = load(&lines);
    let b = r.unwrap();
    let ids: Vec<&str> = b.trajectories.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["0", "42", "x-1"]);
    assert_eq!(
        b.trajectories[1].steps[0].action.action_type(),
        ActionType::SystemButton
    );
    assert_eq!(b.trajectories[1].steps[0].bboxes.len(), 2);
    assert_eq!(b.trajectories[2].system.as_deref(), Some("sys"));
    assert_eq!(b.trajectories[1].line, 2);
    assert!(b.image_path(1, 0).ends_with("images/y.png"));
    // Loading never opens images; validating does.
    let report = b.validate_images();
    assert_eq!(report.checked, 3);
    assert_eq!(report.problems.len(), 3);
    assert!(report.problems[0].message.contains("not found"));
}

#[test]
fn malformed_json() {
    assert_line2("{\"app_name\": ".into(), "", "malformed JSON");
    assert_line2("[1, 2]".into(), "", "JSON object");
}

#[test]
fn missing_fields() {
    assert_line2(
        good().replace(r#""instruction": "买东西", "#, ""),
        "instruction",
        "missing",
    );
    assert_line2(
        good().replace(r#""image_width": 720, "#, ""),
        "image_width",
        "missing",
    );
    assert_line2(
        good().replace(r#""image": "images/x.png", "#, ""),
        "trajectory[0].image",
        "missing",
    );
    assert_line2(
        line(r#"{"image": "a.png"}"#, 1, ""),
        "trajectory[0].action",
        "missing",
    );
    assert_line2(
        good().replace(r#""trajectory_length": 1, "#, ""),
        "trajectory_length",
        "missing",
    );
}

#[test]
fn unknown_action_and_wrong_argument_types() {
    let bad = |args: &str| {
        line(
            &format!(
                r#"{{"image": "a.png", "action": {{"name": "mobile_use", "arguments": {args}}}}}"#
            ),
            1,
            "",
        )
    };
    assert_line2(
        bad(r#"{"action": "scroll", "direction": "up"}"#),
        "trajectory[0].action",
        "unknown action",
    );
    assert_line2(
        bad(r#"{"action": "click", "coordinate": "10,20"}"#),
        "trajectory[0].action",
        "coordinate",
    );
    assert_line2(
        bad(r#"{"action": "type", "text": 3}"#),
        "trajectory[0].action",
        "text",
    );
    assert_line2(
        bad(r#"{"action": "terminate", "status": "ok"}"#),
        "trajectory[0].action",
        "status",
    );
    assert_line2(
        line(r#"{"image": "a.png", "action": "{not json"}"#, 1, ""),
        "trajectory[0].action",
        "not valid JSON",
    );
    // Sizes written as strings of digits (as some releases store them) are read; other strings are not.
    let (_dir, r) = load(&[good().replace("720", "\"720\"")]);
    assert_eq!(r.unwrap().trajectories[0].image_width, 720);
    assert_line2(
        good().replace("720", "\"wide\""),
        "image_width",
        "positive integer",
    );
}

#[test]
fn length_mismatch_and_empty() {
    assert_line2(line(GOOD_STEP, 2, ""), "trajectory_length", "has 1 steps");
    assert_line2(line("", 0, ""), "trajectory", "empty");
}

#[test]
fn bad_boxes() {
    let with_box = |b: &str| {
        line(
            &GOOD_STEP.replace(
                r#""response": "r""#,
                &format!(r#""response": "r", "bbox": {b}"#),
            ),
            1,
            "",
        )
    };
    assert_line2(
        with_box("[-1, 0, 10, 10]"),
        "trajectory[0].bbox",
        "negative",
    );
    assert_line2(with_box("[0, 0, 800, 10]"), "trajectory[0].bbox", "outside");
    assert_line2(
        with_box("[[0, 0, 10, 10], [0, 0, 10, 1700]]"),
        "trajectory[0].bbox",
        "outside",
    );
    assert_line2(with_box("[10, 10, 5, 5]"), "trajectory[0].bbox", "x1 > x2");
    assert_line2(
        with_box("[1, 2, 3]"),
        "trajectory[0].bbox",
        "[x1, y1, x2, y2]",
    );
}

#[test]
fn image_paths_refused() {
    assert_line2(
        good().replace("images/x.png", "/etc/passwd"),
        "trajectory[0].image",
        "absolute",
    );
    assert_line2(
        good().replace("images/x.png", "images/../../secret.png"),
        "trajectory[0].image",
        "escapes",
    );
}

#[test]
fn duplicate_ids_and_empty_file() {
    // An explicit id colliding with the line-number id of line 1.
    assert_line2(line(GOOD_STEP, 1, r#", "id": 0"#), "id", "duplicate");
    let l = line(GOOD_STEP, 1, r#", "id": "same""#);
    let (_d, r) = load(&[l.clone(), l]);
    assert!(r.unwrap_err().to_string().contains("first on line 1"));
    let (_d, r) = load(&["".into()]);
    assert!(matches!(r, Err(DatasetError::Empty { .. })));
    let r = Benchmark::load(Path::new("/nonexistent/bench"));
    assert!(r
        .unwrap_err()
        .to_string()
        .contains("/nonexistent/bench/data.jsonl"));
}
