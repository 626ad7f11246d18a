//! Qwen3-VL through the binary: `generate --json` reproduces the transformers greedy tokens of `qwen3-tiny-a`
//! from the picture file, `eval` runs the embedded sample benchmark end to end (the same predictions at every
//! batch size, the family in the manifest), and `bench` builds a random Qwen3-VL from a config.

use std::path::PathBuf;

use serde_json::Value;

use crate::model_support::{fixture, generate_json, golden_meta, json_u64s};
use crate::util::{json_file, json_lines, ok};

fn model_dir() -> PathBuf {
    fixture("models/qwen3-tiny-a")
}

#[test]
fn generate_json_reproduces_the_golden_greedy_tokens() {
    let meta = golden_meta("qwen3-tiny-a");
    let case = &meta["cases"]["p0"];
    let out = crate::util::bin()
        .args(["generate", "--model"])
        .arg(model_dir())
        .arg("--image")
        .arg(fixture(case["images"][0].as_str().unwrap()))
        .args(["--prompt", case["text"].as_str().unwrap()])
        .args(["--max-new-tokens", "16", "--ignore-eos", "--json"])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run the binary");
    let v = generate_json(&out);
    assert_eq!(
        json_u64s(&v["token_ids"]),
        json_u64s(&case["generated_ids"])
    );
    assert_eq!(v["prompt_tokens"], case["n_input_ids"]);
    let top = v["top_logprobs"].as_array().unwrap();
    let want = case["generated_logprobs"].as_array().unwrap();
    for (row, w) in top.iter().zip(want) {
        let lp = row[0][1].as_f64().unwrap();
        assert!((lp - w.as_f64().unwrap()).abs() < 1e-4, "{lp} vs {w}");
    }
}

#[test]
fn eval_runs_the_sample_with_the_same_predictions_at_every_batch_size() {
    let tmp = tempfile::tempdir().unwrap();
    let mut predictions = Vec::new();
    for bs in ["1", "4"] {
        let out = tmp.path().join(format!("bs{bs}"));
        ok(&crate::util::bin()
            .args(["eval", "--model"])
            .arg(model_dir())
            .arg("--out")
            .arg(&out)
            .args([
                "--max-pixels",
                "40000",
                "--max-new-tokens",
                "8",
                "--no-judge",
            ])
            .args(["--batch-size", bs])
            .env("RUST_LOG", "warn")
            .output()
            .unwrap());
        let manifest = json_file(&out.join("manifest.json"));
        assert_eq!(manifest["settings"]["family"], "qwen3_vl");
        let metrics = json_file(&out.join("metrics.json"));
        assert_eq!(metrics["steps"], 30, "{metrics}");
        let mut rows: Vec<(String, u64, String)> = json_lines(&out.join("predictions.jsonl"))
            .into_iter()
            .map(|v: Value| {
                (
                    v["trajectory"].to_string(),
                    v["step"].as_u64().unwrap(),
                    v["response"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        rows.sort();
        assert!(!rows.is_empty());
        predictions.push(rows);
    }
    assert_eq!(predictions[0], predictions[1]);
}

#[test]
fn bench_builds_a_random_qwen3_from_a_config() {
    let o = crate::util::bin()
        .args(["bench", "--config"])
        .arg(model_dir().join("config.json"))
        .args([
            "--steps",
            "2",
            "--no-judge",
            "--json",
            "--max-new-tokens",
            "2",
        ])
        .args(["--max-pixels", "20000", "--device", "cpu"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        r["prefill_tokens_per_second"].as_f64().unwrap() > 0.0,
        "{r}"
    );
}
