//! `--data hf:OWNER/NAME[@REVISION]` through the binary, against the stand-in Hub: a dataset laid out like the
//! Mobile-R1 release (`data.jsonl` with bare screenshot names, sizes as strings, actions as objects or JSON text;
//! the screenshots under `images/`) is fetched into the cache, a dropped screenshot download resumes, the cached
//! copy serves `HF_HUB_OFFLINE=1` runs without a connection, and `eval` records the repository, the commit and the
//! data hash in its manifest.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::hub_support::{hub_env, Faults, MockHub, Refusing, COMMIT};
use crate::util::ok;

/// The dataset's key in the stand-in Hub.
const REPO: &str = "datasets/test-org/mobile-r1";

/// The embedded sample benchmark rewritten in the release's layout, as a dataset repo's files.
pub fn release_like_repo() -> HashMap<String, Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::util::bin()
        .arg("sample")
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = std::fs::read_to_string(dir.path().join("data.jsonl")).unwrap();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        if i % 2 == 0 {
            v["image_width"] = Value::from(v["image_width"].to_string());
            v["trajectory_length"] = Value::from(v["trajectory_length"].to_string());
        }
        for step in v["trajectory"].as_array_mut().unwrap() {
            let bare = step["image"]
                .as_str()
                .unwrap()
                .trim_start_matches("images/")
                .to_string();
            step["image"] = Value::from(bare);
            if i % 2 == 1 {
                let action: Value = serde_json::from_str(step["action"].as_str().unwrap()).unwrap();
                step["action"] = action;
            }
        }
        lines.push(v.to_string());
    }
    let mut files: HashMap<String, Vec<u8>> = HashMap::new();
    files.insert("data.jsonl".into(), (lines.join("\n") + "\n").into_bytes());
    files.insert("README.md".into(), b"# stand-in\n".to_vec());
    for e in std::fs::read_dir(dir.path().join("images")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        files.insert(format!("images/{name}"), std::fs::read(&p).unwrap());
    }
    files
}

/// Run the binary with `args` against `hub` (offline, with `HF_ENDPOINT` at a counting listener, when `None`).
pub fn run_hub(args: &[&str], home: &Path, hub: Option<&MockHub>) -> Output {
    let refusing = Refusing::start();
    let mut cmd = crate::util::bin();
    cmd.args(args);
    hub_env(&mut cmd, home);
    match hub {
        Some(h) => cmd.env("HF_ENDPOINT", &h.url),
        None => cmd
            .env("HF_ENDPOINT", &refusing.url)
            .env("HF_HUB_OFFLINE", "1"),
    };
    let out = cmd.output().unwrap();
    assert_eq!(
        refusing.count(),
        0,
        "an offline run connected to HF_ENDPOINT"
    );
    out
}

fn snapshot(home: &Path) -> PathBuf {
    home.join("hub/datasets--test-org--mobile-r1/snapshots")
        .join(COMMIT)
}

#[test]
fn a_hub_dataset_is_fetched_resumed_and_then_read_offline() {
    let files = release_like_repo();
    let images = files.keys().filter(|k| k.starts_with("images/")).count();
    // A screenshot whose bytes no other one has (identical screens share one blob, and so one download).
    let mut names: Vec<&String> = files.keys().filter(|k| k.starts_with("images/")).collect();
    names.sort();
    let cut = names
        .iter()
        .find(|n| files.values().filter(|v| **v == files[**n]).count() == 1)
        .expect("a screenshot with its own bytes")
        .to_string();
    let half = files[&cut].len() / 2;
    let hub = MockHub::start(
        [(REPO.to_string(), files)].into_iter().collect(),
        Faults {
            cut: vec![cut.clone()],
            ..Faults::default()
        },
    );
    let home = tempfile::tempdir().unwrap();
    let validate = ["data", "validate", "--data", "hf:test-org/mobile-r1"];
    let out = ok(&run_hub(&validate, home.path(), Some(&hub)));
    assert!(out.contains(&format!("commit {COMMIT}")), "{out}");
    assert!(
        out.contains("trajectories: 5") && out.contains("OK"),
        "{out}"
    );
    assert!(out.contains("screenshots checked: 30"), "{out}");
    let resumed = format!("/{REPO}/resolve/{COMMIT}/{cut} {half}-");
    assert!(hub.requests().contains(&resumed), "{:?}", hub.requests());
    // Only what the benchmark reads: data.jsonl and its screenshots, not the card.
    let got = hub.fetched(REPO);
    assert_eq!(got.len(), images + 1, "{got:?}");
    let refs = home
        .path()
        .join("hub/datasets--test-org--mobile-r1/refs/main");
    assert_eq!(std::fs::read_to_string(refs).unwrap(), COMMIT);

    // Offline, the cache serves it (by branch and by commit), without a connection.
    let before = hub.requests().len();
    ok(&run_hub(&validate, home.path(), None));
    let pinned = format!("hf:test-org/mobile-r1@{COMMIT}");
    ok(&run_hub(
        &["data", "validate", "--data", &pinned],
        home.path(),
        None,
    ));
    assert_eq!(hub.requests().len(), before, "offline runs made requests");

    // Online again, a whole cached snapshot needs no request either.
    ok(&run_hub(&validate, home.path(), Some(&hub)));
    assert_eq!(hub.requests().len(), before);

    // Offline with a screenshot gone from the cache, or a dataset never fetched: the error names the file.
    std::fs::remove_file(snapshot(home.path()).join("images/t0_s3.png")).unwrap();
    let out = run_hub(&validate, home.path(), None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("t0_s3.png") && err.contains("HF_HUB_OFFLINE"),
        "{err}"
    );
    let out = run_hub(
        &["data", "validate", "--data", "hf:test-org/absent"],
        home.path(),
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("test-org/absent: data.jsonl is not in the local"),
        "{err}"
    );
    // Online, the missing screenshot is fetched again.
    ok(&run_hub(&validate, home.path(), Some(&hub)));
}

#[test]
fn eval_records_the_hub_dataset_and_score_and_report_read_it() {
    let files = release_like_repo();
    let data_hash = mobile_r1_eval::fingerprint::sha256_hex(&files["data.jsonl"]);
    let hub = MockHub::start(
        [(REPO.to_string(), files)].into_iter().collect(),
        Faults::default(),
    );
    let home = tempfile::tempdir().unwrap();
    let run = home.path().join("run");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b");
    let args = [
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--data",
        "hf:test-org/mobile-r1",
        "--out",
        run.to_str().unwrap(),
        "--no-judge",
        "--max-pixels",
        "40000",
        "--max-new-tokens",
        "4",
    ];
    ok(&run_hub(&args, home.path(), Some(&hub)));
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        manifest["data_source"],
        serde_json::json!({"repo": "test-org/mobile-r1", "revision": "main", "commit": COMMIT})
    );
    assert_eq!(manifest["settings"]["data_hash"], Value::from(data_hash));
    assert_eq!(
        Path::new(manifest["data"].as_str().unwrap()),
        snapshot(home.path())
    );

    // score and report take the same `hf:` benchmark, from the cache.
    let scored = home.path().join("scored");
    let predictions = run.join("predictions.jsonl");
    let score = [
        "score",
        "--predictions",
        predictions.to_str().unwrap(),
        "--data",
        "hf:test-org/mobile-r1",
        "--out",
        scored.to_str().unwrap(),
    ];
    ok(&run_hub(&score, home.path(), None));
    assert!(scored.join("metrics.json").is_file());
    let report = [
        "report",
        run.to_str().unwrap(),
        "--data",
        "hf:test-org/mobile-r1",
    ];
    ok(&run_hub(&report, home.path(), None));
    assert!(run.join("report.html").is_file());
}
