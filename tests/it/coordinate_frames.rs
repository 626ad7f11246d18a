//! The coordinate frame of predicted points through the binary: `score --coordinate-frame` in each frame, the
//! out-of-frame warning and counts, an action outside the `mobile_use` space, and `report` reading the frame back.
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::util::{bin, json_file, ok, text};

/// A 1080×2400 screen whose four clicks hit a box around its centre, then a `terminate`.
fn benchmark(dir: &Path) {
    let click =
        json!({"name": "mobile_use", "arguments": {"action": "click", "coordinate": [540, 1200]}});
    let mut steps: Vec<Value> = (0..4)
        .map(|i| {
            json!({"image": format!("images/{i}.png"), "thought": "t", "subtask": "s", "action": click,
                   "response": "r", "bbox": [490, 1150, 590, 1250]})
        })
        .collect();
    let done =
        json!({"name": "mobile_use", "arguments": {"action": "terminate", "status": "success"}});
    steps.push(json!({"image": "images/4.png", "thought": "t", "subtask": "s", "action": done, "response": "r"}));
    let line = json!({"id": "t", "app_name": "设置", "trajectory_length": 5, "instruction": "打开中间的开关",
                      "image_width": 1080, "image_height": 2400, "trajectory": steps});
    std::fs::write(dir.join("data.jsonl"), format!("{line}\n")).unwrap();
}

/// Every click answered at (500, 500), as a run writes it (the model saw a 280×644 picture); the last step
/// answered by a Qwen3-VL Thinking model (no opening `<think>`) with MAI-UI's `answer`.
fn predictions(path: &Path) {
    let mut lines = String::new();
    for step in 0..4 {
        let response =
            "<tool_call>\n{\"name\": \"mobile_use\", \"arguments\": {\"action\": \"click\", \
                        \"coordinate\": [500, 500]}}\n</tool_call>";
        let line = json!({"trajectory": "t", "step": step, "response": response, "image_size": [280, 644]});
        lines.push_str(&format!("{line}\n"));
    }
    let answer =
        "The switch is on.\n</think>\n\n<tool_call>\n{\"name\": \"mobile_use\", \"arguments\": \
                  {\"action\": \"answer\", \"text\": \"done\"}}\n</tool_call>";
    let line = json!({"trajectory": "t", "step": 4, "response": answer, "image_size": [280, 644]});
    lines.push_str(&format!("{line}\n"));
    std::fs::write(path, lines).unwrap();
}

/// A temporary folder holding the benchmark (`bench/`) and the predictions (`preds.jsonl`).
fn inputs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (data, preds) = (dir.path().join("bench"), dir.path().join("preds.jsonl"));
    std::fs::create_dir_all(&data).unwrap();
    benchmark(&data);
    predictions(&preds);
    (dir, data, preds)
}

fn score(data: &Path, preds: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    bin()
        .args(["score", "--data", data.to_str().unwrap(), "--predictions"])
        .arg(preds)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .expect("binary runs")
}

/// Every predicted point the report draws, from its JSON data block.
pub(crate) fn drawn_points(report: &Path) -> Vec<Value> {
    let html = std::fs::read_to_string(report).unwrap();
    let start = html.find("id=\"report-data\">").unwrap() + "id=\"report-data\">".len();
    let end = start + html[start..].find("</script>").unwrap();
    let data: Value = serde_json::from_str(&html[start..end]).unwrap();
    let mut points = Vec::new();
    collect_points(&data, &mut points);
    points
}

fn collect_points(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(m) => {
            if let Some(p) = m.get("pred").and_then(|p| p.get("point")) {
                out.push(p.clone());
            }
            m.values().for_each(|x| collect_points(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_points(x, out)),
        _ => {}
    }
}

#[test]
fn a_relative_answer_scores_as_the_screen_centre_only_in_its_frame() {
    let (dir, data, preds) = inputs();

    let grid = dir.path().join("grid");
    let o = score(
        &data,
        &preds,
        &grid,
        &["--coordinate-frame", "relative-999"],
    );
    ok(&o);
    assert!(!text(&o).contains("coordinate frame"), "{}", text(&o));
    let m = json_file(&grid.join("metrics.json"));
    assert_eq!(
        m["coordinate_frame"],
        json!({"kind": "relative", "max": 999})
    );
    assert_eq!(
        m["correct"], 4,
        "(500, 500) of 999 is the centre of 1080×2400: {m}"
    );
    assert_eq!(m["out_of_frame"], 0);
    // The answer outside the action space is a wrong type, counted by name, never a format error.
    assert_eq!(m["type_errors"], 1);
    assert_eq!(m["format_errors"], 0);
    assert_eq!(m["unsupported_actions"], json!({"answer": 1}));
    let sum = ["correct", "args_errors", "format_errors", "type_errors"]
        .iter()
        .map(|k| m[*k].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(sum, m["steps"].as_u64().unwrap());
    let record = json_file(&grid.join("scored.json"));
    assert_eq!(
        record["coordinate_frame"],
        json!({"kind": "relative", "max": 999})
    );

    // `report` reads the frame back from the folder: the points are drawn at the centre.
    ok(&bin().arg("report").arg(&grid).output().unwrap());
    let page = std::fs::read_to_string(grid.join("report.html")).unwrap();
    assert!(page.contains(r#"action \"answer\" is outside the mobile_use action space"#));
    let points = drawn_points(&grid.join("report.html"));
    assert_eq!(points.len(), 4, "{points:?}");
    for p in points {
        let (x, y) = (p[0].as_f64().unwrap(), p[1].as_f64().unwrap());
        assert!(
            (x - 540.54).abs() < 0.01 && (y - 1201.2).abs() < 0.01,
            "{p}"
        );
    }

    // The same answers read as pixels of the 280×644 picture fall off it: wrong, counted, and a warning names
    // the flag to try.
    let pixels = dir.path().join("pixels");
    let o = score(&data, &preds, &pixels, &[]);
    ok(&o);
    let warning = text(&o);
    assert!(
        warning.contains("4 of 5 steps")
            && warning.contains("image-pixels coordinate frame")
            && warning.contains("--coordinate-frame relative-999"),
        "{warning}"
    );
    let m = json_file(&pixels.join("metrics.json"));
    assert_eq!(m["coordinate_frame"], json!({"kind": "image_pixels"}));
    assert_eq!(m["correct"], 0);
    assert_eq!(m["args_errors"], 4);
    assert_eq!(m["out_of_frame"], 4);
    let steps = crate::util::json_lines(&pixels.join("steps.jsonl"));
    assert_eq!(steps[0]["out_of_frame"], true);
    assert_eq!(steps[4]["unsupported_action"], "answer");
}

#[test]
fn a_bad_frame_is_refused_naming_the_flag() {
    let (dir, data, preds) = inputs();
    let o = score(
        &data,
        &preds,
        &dir.path().join("out"),
        &["--coordinate-frame", "relative:0"],
    );
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("--coordinate-frame") && t.contains("relative:N"),
        "{t}"
    );
    assert!(!dir.path().join("out").exists(), "nothing written: {t}");
}
