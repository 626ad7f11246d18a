//! `eval` of Qwen3-VL (`qwen3-tiny-a`) through the binary: the manifest records the family, the relative-999
//! coordinate frame and the Qwen3-VL system prompt's hash; the dumped prompts hold that prompt with its 999x999
//! screen; `--coordinate-frame image-pixels` overrides the frame (prompt and manifest); `score` and `report` of
//! the run read its frame back; the semi-online history (`--history predicted`) and the judge phase run.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::coordinate_frames::drawn_points;
use crate::model_support::fixture;
use crate::util::{bin, json_file, json_lines, ok};

/// The sample's screens are all 720×1600.
const SCREEN: [f64; 2] = [720.0, 1600.0];

/// Every answer of a doctored run: a click at (50, 100) of whatever frame the run reads it in.
const CLICK: &str =
    "<tool_call>\n{\"name\": \"mobile_use\", \"arguments\": {\"action\": \"click\", \
                     \"coordinate\": [50, 100]}}\n</tool_call>";

/// `eval` of the sample on `qwen3-tiny-a` into `out` with the judge and the predicted history, dumping the
/// prompts into `dump`, with `extra` flags.
fn eval(out: &Path, dump: &Path, extra: &[&str]) -> String {
    ok(&bin()
        .args(["eval", "--model"])
        .arg(fixture("models/qwen3-tiny-a"))
        .arg("--out")
        .arg(out)
        .arg("--dump-prompts")
        .arg(dump)
        .args(["--max-pixels", "40000", "--max-new-tokens", "8"])
        .args(["--history", "predicted"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap())
}

/// The system message of every dumped step prompt.
fn system_prompts(dump: &Path) -> Vec<String> {
    json_lines(dump)
        .into_iter()
        .filter(|v| v["kind"] == "step_prompt")
        .map(|v| v["messages"][0]["content"].as_str().unwrap().to_string())
        .collect()
}

/// A copy of `run` whose every answer is [`CLICK`].
fn doctored(run: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).unwrap();
    std::fs::copy(run.join("manifest.json"), to.join("manifest.json")).unwrap();
    let lines: String = json_lines(&run.join("predictions.jsonl"))
        .into_iter()
        .map(|mut v| {
            v["response"] = Value::from(CLICK);
            format!("{v}\n")
        })
        .collect();
    std::fs::write(to.join("predictions.jsonl"), lines).unwrap();
    to.to_path_buf()
}

/// The frame `score` of the run's predictions reads them in, as its `metrics.json` records it.
fn scored_frame(run: &Path, out: &Path) -> Value {
    ok(&bin()
        .args(["score", "--predictions"])
        .arg(run.join("predictions.jsonl"))
        .arg("--out")
        .arg(out)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap());
    json_file(&out.join("metrics.json"))["coordinate_frame"].clone()
}

/// The points `report` of `run` draws, rounded to 1/100 pixel and sorted.
fn reported_points(run: &Path) -> Vec<[i64; 2]> {
    ok(&bin()
        .arg("report")
        .arg(run)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap());
    let mut points: Vec<[i64; 2]> = drawn_points(&run.join("report.html"))
        .iter()
        .map(|p| [0, 1].map(|i| (p[i].as_f64().unwrap() * 100.0).round() as i64))
        .collect();
    points.sort();
    points
}

/// [`CLICK`] on the screen, for each prediction of `run`, when read in a grid of `grid` (else in the pixels of
/// the picture the model saw).
fn expected_points(run: &Path, grid: Option<f64>) -> Vec<[i64; 2]> {
    let mut points: Vec<[i64; 2]> = json_lines(&run.join("predictions.jsonl"))
        .iter()
        .map(|v| {
            let extent = |i: usize| grid.unwrap_or_else(|| v["image_size"][i].as_f64().unwrap());
            let p = [50.0 * SCREEN[0] / extent(0), 100.0 * SCREEN[1] / extent(1)];
            p.map(|x| (x * 100.0).round() as i64)
        })
        .collect();
    points.sort();
    points
}

#[test]
fn a_qwen3_run_records_its_family_frame_and_prompt_and_score_and_report_read_the_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, dump) = (tmp.path().join("run"), tmp.path().join("prompts.jsonl"));
    eval(&run, &dump, &[]);

    let manifest = json_file(&run.join("manifest.json"));
    let settings = &manifest["settings"];
    assert_eq!(settings["family"], "qwen3_vl");
    assert_eq!(
        settings["coordinate_frame"],
        json!({"kind": "relative", "max": 999})
    );
    let template = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts/system_mobile_use_qwen3.jinja"),
    )
    .unwrap();
    assert_eq!(
        settings["prompt_hashes"]["system_mobile_use_qwen3.jinja"],
        mobile_r1_eval::fingerprint::sha256_hex(&template)
    );
    // The semi-online history ran, and so did the judge: one verdict per trajectory.
    assert_eq!(settings["history"]["source"], "predicted");
    assert_eq!(json_lines(&run.join("judgements.jsonl")).len(), 5);
    assert!(settings["judge"]["model"]
        .as_str()
        .unwrap()
        .ends_with("qwen3-tiny-a"));

    let systems = system_prompts(&dump);
    assert!(!systems.is_empty());
    for s in &systems {
        assert!(
            s.contains("The screen's resolution is 999x999.")
                && s.contains("# Response format")
                && s.contains("`answer`: Output the answer."),
            "{s}"
        );
        assert!(!s.starts_with("You are a helpful assistant."), "{s}");
    }

    assert_eq!(
        scored_frame(&run, &tmp.path().join("scored")),
        json!({"kind": "relative", "max": 999})
    );
    let clicks = doctored(&run, &tmp.path().join("doctored"));
    let drawn = reported_points(&clicks);
    assert_eq!(drawn.len(), 5, "{drawn:?}");
    assert_eq!(drawn, expected_points(&clicks, Some(999.0)));
}

#[test]
fn image_pixels_overrides_the_family_frame_in_prompt_manifest_score_and_report() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, dump) = (tmp.path().join("run"), tmp.path().join("prompts.jsonl"));
    eval(
        &run,
        &dump,
        &["--coordinate-frame", "image-pixels", "--no-judge"],
    );
    let manifest = json_file(&run.join("manifest.json"));
    assert_eq!(manifest["settings"]["family"], "qwen3_vl");
    assert_eq!(
        manifest["settings"]["coordinate_frame"],
        json!({"kind": "image_pixels"})
    );
    // The prompt names the size of the picture the model saw, not the grid.
    let sizes: Vec<Value> = json_lines(&run.join("predictions.jsonl"))
        .iter()
        .map(|v| v["image_size"].clone())
        .collect();
    for s in system_prompts(&dump) {
        assert!(!s.contains("999x999"), "{s}");
        assert!(
            sizes
                .iter()
                .any(|z| s.contains(&format!("The screen's resolution is {}x{}.", z[0], z[1]))),
            "{s}"
        );
    }
    assert_eq!(
        scored_frame(&run, &tmp.path().join("scored")),
        json!({"kind": "image_pixels"})
    );
    let clicks = doctored(&run, &tmp.path().join("doctored"));
    let drawn = reported_points(&clicks);
    assert_eq!(drawn.len(), 5, "{drawn:?}");
    assert_eq!(drawn, expected_points(&clicks, None));
}
