//! Qwen3-VL (`qwen3-tiny-a`) served and packed, through the binary: `serve` publishes the family in `/v1/models`
//! and answers a chat request with a picture; `eval --backend openai` against it takes that family (its prompt
//! and frame) and gives the local run's predictions, and `--model-family` overrides it; a bundle from `pack`
//! verifies and its own binary evaluates the same predictions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::model_support::fixture;
use crate::openai_support::{get, post, sample_png, Server};
use crate::util::{bin, json_file, json_lines, ok, text};

const MAX_PIXELS: &str = "40000";
const MAX_NEW: &str = "8";

fn model_dir() -> PathBuf {
    fixture("models/qwen3-tiny-a")
}

/// The flags every run here shares: the sample, small pictures, short answers, no judge.
fn run_flags(out: &Path) -> Vec<String> {
    let out = out.to_str().unwrap();
    ["--out", out, "--max-pixels", MAX_PIXELS]
        .into_iter()
        .chain(["--max-new-tokens", MAX_NEW, "--no-judge"])
        .map(str::to_string)
        .collect()
}

/// A local run of the sample, made once for the tests that compare with it.
fn local_reference() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep().join("local");
        ok(&bin()
            .args(["eval", "--model"])
            .arg(model_dir())
            .args(run_flags(&dir))
            .env("RUST_LOG", "warn")
            .output()
            .unwrap());
        dir
    })
}

/// `(trajectory, step) → (response, picture size)` of a run.
fn predictions(run: &Path) -> BTreeMap<(String, u64), Value> {
    json_lines(&run.join("predictions.jsonl"))
        .into_iter()
        .map(|v| {
            let key = (v["trajectory"].to_string(), v["step"].as_u64().unwrap());
            (key, json!([v["response"], v["image_size"]]))
        })
        .collect()
}

/// `eval --backend openai` of the sample against `server`'s model `q3`, with `extra` flags.
fn served_eval(server: &Server, out: &Path, extra: &[&str]) -> std::process::Output {
    bin()
        .args(["eval", "--backend", "openai", "--endpoint", &server.base])
        .args(["--api-model", "q3", "--model"])
        .arg(model_dir())
        .args(run_flags(out))
        .args(extra)
        .env("RUST_LOG", "info")
        .output()
        .unwrap()
}

#[test]
fn serve_publishes_the_family_and_a_served_eval_prompts_as_it_says() {
    let server = Server::start_model(
        &model_dir(),
        &["--served-model-name", "q3", "--max-new-tokens", "64"],
        &[],
    );
    let models = get(&format!("{}/models", server.base), &[]).json();
    assert_eq!(models["data"][0]["family"], "qwen3_vl", "{models}");

    let tmp = tempfile::tempdir().unwrap();
    let png = std::fs::read(sample_png(tmp.path())).unwrap();
    let url = mobile_r1_eval::openai::png_data_url(&png);
    let body = json!({"model": "q3", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Describe this image."}]}]});
    let answer = post(
        &format!("{}/chat/completions", server.base),
        body.to_string().as_bytes(),
        &[],
    );
    assert_eq!(answer.status, 200, "{}", answer.body);
    let reply = answer.json();
    assert!(reply["choices"][0]["message"]["content"].is_string());
    assert!(
        reply["usage"]["prompt_tokens"].as_u64().unwrap() > 10,
        "{reply}"
    );

    // The family comes from the server: the Qwen3-VL prompt and frame, so the local run's answers.
    let served = tmp.path().join("served");
    let (family, frame) = served_family(
        &server,
        &served,
        &["--concurrency", "4"],
        "Qwen3-VL: as the server's",
    );
    assert_eq!(family, "qwen3_vl");
    assert_eq!(frame, json!({"kind": "relative", "max": 999}));
    assert_eq!(predictions(&served), predictions(local_reference()));

    // `--model-family` overrides what the server says, and the run records it.
    let told = tmp.path().join("told");
    let flags = ["--model-family", "qwen2.5-vl"];
    let (family, frame) = served_family(&server, &told, &flags, "Qwen2.5-VL: from --model-family");
    assert_eq!(family, "qwen2_5_vl");
    assert_eq!(frame, json!({"kind": "image_pixels"}));
}

/// A served eval into `out` that logs `model family {logged}`; the family and frame its manifest records.
fn served_family(server: &Server, out: &Path, extra: &[&str], logged: &str) -> (Value, Value) {
    let o = served_eval(server, out, extra);
    ok(&o);
    let log = text(&o);
    assert!(log.contains(&format!("model family {logged}")), "{log}");
    let settings = json_file(&out.join("manifest.json"))["settings"].clone();
    (
        settings["family"].clone(),
        settings["coordinate_frame"].clone(),
    )
}

#[test]
fn a_bad_or_misplaced_model_family_is_refused_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let bad = bin()
        .args([
            "eval",
            "--backend",
            "openai",
            "--endpoint",
            "http://127.0.0.1:9/v1",
        ])
        .args(["--api-model", "q3", "--model-family", "qwen4-vl"])
        .args(run_flags(&out))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let t = text(&bad);
    assert!(
        t.contains("--model-family") && t.contains("qwen4-vl"),
        "{t}"
    );
    let local = bin()
        .args(["eval", "--model"])
        .arg(model_dir())
        .args(["--model-family", "qwen3-vl"])
        .args(run_flags(&out))
        .output()
        .unwrap();
    assert!(!local.status.success());
    let t = text(&local);
    assert!(t.contains("--model-family needs --backend openai"), "{t}");
    assert!(!out.exists(), "nothing written: {t}");
}

#[test]
fn a_packed_qwen3_verifies_and_its_bundle_evaluates_the_same_predictions() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    ok(&bin().args(["sample", "--out"]).arg(&data).output().unwrap());
    let bundle = tmp.path().join("bundle");
    let home = tmp.path().join("home");
    ok(&crate::pack::pack_local(
        &home,
        &model_dir(),
        None,
        &data,
        &bundle,
    ));
    let own = bundle.join("bin/mobile-r1-eval");
    let verified = ok(&std::process::Command::new(&own)
        .args(["pack", "--verify"])
        .arg(&bundle)
        .output()
        .unwrap());
    assert!(verified.starts_with("OK:"), "{verified}");

    let run = tmp.path().join("run");
    ok(&std::process::Command::new(&own)
        .arg("eval")
        .arg("--model")
        .arg(bundle.join("model"))
        .arg("--data")
        .arg(bundle.join("data"))
        .args(run_flags(&run))
        .env("HF_HUB_OFFLINE", "1")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap());
    let manifest = json_file(&run.join("manifest.json"));
    assert_eq!(manifest["settings"]["family"], "qwen3_vl");
    assert_eq!(predictions(&run), predictions(local_reference()));
}
