//! The `generate` command through the binary: tiny-b golden ids with the real preprocessing, the hub-id path
//! from an offline cache, and a clear error when the repo is not cached.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

fn golden_case(model: &str, case: Option<&str>) -> (String, String, Vec<u64>, u64) {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(&format!("goldens/{model}.json"))).unwrap(),
    )
    .unwrap();
    let c = match case {
        Some(c) => &meta["cases"][c],
        None => &meta,
    };
    let ids = c["generated_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    (
        c["image"].as_str().unwrap().to_string(),
        c["text"].as_str().unwrap().to_string(),
        ids,
        c["n_input_ids"].as_u64().unwrap(),
    )
}

fn run(args: &[&str], envs: &[(&str, &Path)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mobile-r1-eval"));
    cmd.arg("generate")
        .args(args)
        .env_remove("HF_HUB_OFFLINE")
        .env("RUST_LOG", "warn");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("run binary")
}

fn check_json(out: &std::process::Output, want_ids: &[u64], prompt_tokens: u64) {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let got: Vec<u64> = v["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(got, want_ids);
    assert_eq!(v["prompt_tokens"].as_u64().unwrap(), prompt_tokens);
    assert!(v["text"].is_string());
    let top = v["top_logprobs"].as_array().unwrap();
    assert_eq!(top.len(), want_ids.len());
    for (row, &id) in top.iter().zip(want_ids) {
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
fn generate_json_matches_tiny_b_golden_p0() {
    let (image, text, ids, n) = golden_case("tiny-b", Some("p0"));
    let model = fixture("models/tiny-b");
    let img = fixture(&image);
    let out = run(
        &[
            "--model",
            model.to_str().unwrap(),
            "--image",
            img.to_str().unwrap(),
            "--prompt",
            &text,
            "--max-new-tokens",
            "10",
            "--ignore-eos",
            "--json",
        ],
        &[],
    );
    check_json(&out, &ids, n);
}

#[test]
fn generate_plain_text_stops_at_max_tokens() {
    let (image, text, _, _) = golden_case("tiny-b", Some("p1"));
    let model = fixture("models/tiny-b");
    let img = fixture(&image);
    let out = run(
        &[
            "--model",
            model.to_str().unwrap(),
            "--image",
            img.to_str().unwrap(),
            "--prompt",
            &text,
            "--max-new-tokens",
            "3",
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(!s.trim().is_empty() && !s.trim_start().starts_with('{'));
}

#[test]
fn hub_id_resolves_from_offline_cache() {
    let home = tempfile::tempdir().unwrap();
    let repo = home.path().join("hub/models--test--tiny");
    let rev = "0123456789abcdef0123456789abcdef01234567";
    let snap = repo.join("snapshots").join(rev);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), rev).unwrap();
    for e in std::fs::read_dir(fixture("models/tiny-a")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, snap.join(p.file_name().unwrap())).unwrap();
    }
    let (image, text, ids, n) = golden_case("tiny-a", None);
    let img = fixture(&image);
    let args = [
        "--model",
        "test/tiny",
        "--image",
        img.to_str().unwrap(),
        "--prompt",
        &text,
        "--max-new-tokens",
        "8",
        "--ignore-eos",
        "--json",
    ];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mobile-r1-eval"));
    let out = cmd
        .arg("generate")
        .args(args)
        .env("HF_HOME", home.path())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    check_json(&out, &ids, n);

    let out = Command::new(env!("CARGO_BIN_EXE_mobile-r1-eval"))
        .arg("generate")
        .args([
            "--model",
            "test/absent",
            "--image",
            img.to_str().unwrap(),
            "--prompt",
            "x",
        ])
        .env("HF_HOME", home.path())
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("test/absent") && err.contains("HF_HUB_OFFLINE"),
        "{err}"
    );
}
