//! The `generate` command through the binary on a local checkpoint: tiny-b golden ids with the real
//! preprocessing, top log-probabilities, plain-text output. The hub-id paths are in `hub_download.rs`.
use std::process::Output;

use crate::model_support::{fixture, generate_json, golden_case, json_u64s, GoldenCase};

/// `generate --model tiny-b` on the golden prompt `case`, plus `extra` arguments.
fn run(case: &GoldenCase, extra: &[&str]) -> Output {
    crate::util::bin()
        .arg("generate")
        .arg("--model")
        .arg(fixture("models/tiny-b"))
        .arg("--image")
        .arg(&case.image)
        .args(["--prompt", &case.text])
        .args(extra)
        .env_remove("HF_HUB_OFFLINE")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run binary")
}

#[test]
fn generate_json_matches_tiny_b_golden_p0() {
    let case = golden_case("tiny-b", Some("p0"));
    let out = run(&case, &["--max-new-tokens", "10", "--ignore-eos", "--json"]);
    let v = generate_json(&out);
    assert_eq!(json_u64s(&v["token_ids"]), case.ids);
    assert_eq!(v["prompt_tokens"].as_u64().unwrap(), case.n_input_ids);
    assert!(v["text"].is_string());
    let top = v["top_logprobs"].as_array().unwrap();
    assert_eq!(top.len(), case.ids.len());
    for (row, &id) in top.iter().zip(&case.ids) {
        let row = row.as_array().unwrap();
        assert_eq!(row.len(), 5);
        assert_eq!(
            row[0][0].as_u64().unwrap(),
            id,
            "the greedy token is the most likely"
        );
        let lps: Vec<f64> = row.iter().map(|p| p[1].as_f64().unwrap()).collect();
        assert!(lps.windows(2).all(|w| w[0] >= w[1]) && lps[0] <= 0.0);
    }
}

#[test]
fn generate_plain_text_stops_at_max_tokens() {
    let out = run(
        &golden_case("tiny-b", Some("p1")),
        &["--max-new-tokens", "3"],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(!s.trim().is_empty() && !s.trim_start().starts_with('{'));
}
