//! `--model org/name` through the binary. Fetched over HTTP into the Hugging Face cache, against a stand-in for
//! the Hub on the loopback interface (`HF_ENDPOINT`; no network): a single-file and a sharded checkpoint download
//! and reproduce the golden tokens, a dropped connection resumes where it stopped, a missing optional file is
//! skipped, the cached copy then serves `HF_HUB_OFFLINE=1` runs without a request, and an unknown repo or a
//! missing shard is a clear error. Offline: a cache laid out by Python's `huggingface_hub` (no blobs), and a
//! clear error for a repo that is not cached.
use std::collections::HashMap;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::hub_support::{hub_env, Faults, MockHub, Refusing, Repos, Silent, COMMIT};
use crate::model_support::{fixture, generate_json, golden_case, json_u64s};

/// The tiny-a checkpoint as a repo's files (symlinked tokenizer files read through).
pub(crate) fn tiny_a_files() -> HashMap<String, Vec<u8>> {
    std::fs::read_dir(fixture("models/tiny-a"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// tiny-a with its weights as one shard behind a `model.safetensors.index.json`, and no generation config.
fn tiny_a_sharded() -> HashMap<String, Vec<u8>> {
    let mut files = tiny_a_files();
    let weights = files.remove("model.safetensors").unwrap();
    files.remove("generation_config.json");
    let shard = "model-00001-of-00001.safetensors";
    let (_, meta) = safetensors::SafeTensors::read_metadata(&weights).unwrap();
    let map: serde_json::Map<String, serde_json::Value> = meta
        .tensors()
        .into_keys()
        .map(|name| (name, serde_json::Value::from(shard)))
        .collect();
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    files.insert(
        "model.safetensors.index.json".into(),
        serde_json::to_vec(&index).unwrap(),
    );
    files.insert(shard.into(), weights);
    files
}

/// `generate --model {repo}` with the golden prompt, against `hub` (or offline, with `HF_ENDPOINT` at a listener
/// that counts connections, when `hub` is `None`).
fn generate(repo: &str, home: &Path, hub: Option<&MockHub>) -> Output {
    generate_with(repo, home, hub, &[])
}

fn generate_with(repo: &str, home: &Path, hub: Option<&MockHub>, extra: &[&str]) -> Output {
    let g = golden_case("tiny-a", None);
    let mut cmd = crate::util::bin();
    cmd.arg("generate")
        .args(["--model", repo, "--prompt", &g.text, "--image"])
        .arg(&g.image)
        .args(["--max-new-tokens", "8", "--ignore-eos", "--json"])
        .args(extra);
    hub_env(&mut cmd, home);
    let refusing = Refusing::start();
    match hub {
        Some(h) => cmd.env("HF_ENDPOINT", &h.url),
        None => cmd
            .env("HF_ENDPOINT", &refusing.url)
            .env("HF_HUB_OFFLINE", "1"),
    };
    let out = cmd.output().expect("run binary");
    assert_eq!(
        refusing.count(),
        0,
        "an offline run connected to HF_ENDPOINT"
    );
    out
}

fn assert_golden(out: &Output) {
    let v = generate_json(out);
    assert_eq!(
        json_u64s(&v["token_ids"]),
        golden_case("tiny-a", None).ids[..8]
    );
}

#[test]
fn hub_repos_download_into_the_cache_and_then_serve_offline_runs() {
    let repos: Repos = [
        ("test-org/tiny-a".to_string(), tiny_a_files()),
        ("test-org/tiny-a-sharded".to_string(), tiny_a_sharded()),
    ]
    .into_iter()
    .collect();
    let hub = MockHub::start(
        repos,
        Faults {
            cut: vec!["model.safetensors".into()],
            ..Faults::default()
        },
    );
    let home = tempfile::tempdir().unwrap();

    assert_golden(&generate("test-org/tiny-a", home.path(), Some(&hub)));
    let snapshot = home
        .path()
        .join("hub/models--test-org--tiny-a/snapshots")
        .join(COMMIT);
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        assert!(snapshot.join(f).is_file(), "{f} not in the cache");
    }
    let got = hub.fetched("test-org/tiny-a");
    assert!(
        !got.iter().any(|f| f.ends_with(".index.json")),
        "single-file weights need no index: {got:?}"
    );
    let half = std::fs::metadata(snapshot.join("model.safetensors"))
        .unwrap()
        .len()
        / 2;
    let resumed = format!("/test-org/tiny-a/resolve/{COMMIT}/model.safetensors {half}-");
    assert!(
        hub.requests().contains(&resumed),
        "the dropped download did not resume at byte {half}: {:?}",
        hub.requests()
    );

    assert_golden(&generate(
        "test-org/tiny-a-sharded",
        home.path(),
        Some(&hub),
    ));
    let got = hub.fetched("test-org/tiny-a-sharded");
    for f in [
        "generation_config.json",
        "model-00001-of-00001.safetensors",
        "model.safetensors",
        "model.safetensors.index.json",
    ] {
        assert!(got.iter().any(|g| g == f), "{f} not requested: {got:?}");
    }

    let before = hub.requests().len();
    assert_golden(&generate("test-org/tiny-a", home.path(), None));
    assert_golden(&generate("test-org/tiny-a-sharded", home.path(), None));
    assert_eq!(hub.requests().len(), before, "offline runs made requests");
}

#[test]
fn hub_errors_name_the_repo_and_the_file() {
    let mut broken = tiny_a_sharded();
    broken.remove("model-00001-of-00001.safetensors");
    let hub = MockHub::start(
        [("test-org/broken".to_string(), broken)]
            .into_iter()
            .collect(),
        Faults::default(),
    );
    let home = tempfile::tempdir().unwrap();
    let cases = [
        (
            "test-org/absent",
            "test-org/absent: cannot fetch config.json",
        ),
        (
            "test-org/broken",
            "test-org/broken: cannot fetch model-00001-of-00001.safetensors",
        ),
    ];
    for (repo, want) in cases {
        let out = generate(repo, home.path(), Some(&hub));
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "want `{want}` in: {err}");
    }
}

#[test]
fn hub_ids_resolve_from_a_python_made_offline_cache() {
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
    assert_golden(&generate("test/tiny", home.path(), None));

    let out = generate("test/absent", home.path(), None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("test/absent") && err.contains("HF_HUB_OFFLINE"),
        "{err}"
    );
}

/// `eval --model {repo}` on the sample, as a child process, against `endpoint`.
fn eval_child(repo: &str, home: &Path, endpoint: &str, extra: &[&str]) -> std::process::Child {
    let out = home.join("run");
    let mut cmd = crate::util::bin();
    cmd.args(["eval", "--model", repo, "--no-judge", "--out"])
        .arg(&out)
        .args(extra)
        .env("HF_ENDPOINT", endpoint)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    hub_env(&mut cmd, home);
    cmd.spawn().expect("start the binary")
}

/// Wait for `child` at most `limit` (killing it past that, failing the test).
fn wait_bounded(mut child: std::process::Child, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), start.elapsed());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_hub_that_never_answers_times_out_with_the_next_steps() {
    let silent = Silent::start();
    let home = tempfile::tempdir().unwrap();
    let child = eval_child(
        "test-org/tiny",
        home.path(),
        &silent.url,
        &["--hub-timeout", "1", "--hub-retries", "1"],
    );
    let (out, took) = wait_bounded(child, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for want in [
        "test-org/tiny: cannot fetch config.json",
        silent.url.as_str(),
        "2 attempts",
        "no answer within 1 s",
        "HF_ENDPOINT",
        "HF_HUB_OFFLINE=1",
    ] {
        assert!(err.contains(want), "want `{want}` in: {err}");
    }
    // Two attempts of one second each and a half-second pause.
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(silent.accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    assert!(
        !home.path().join("run").exists(),
        "a failed fetch left a run folder"
    );
}

#[cfg(unix)]
#[test]
fn a_signal_stops_a_download_that_hangs() {
    for (signal, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let silent = Silent::start();
        let home = tempfile::tempdir().unwrap();
        // The default timeout (30 s) would wait long: the signal must not.
        let child = eval_child("test-org/tiny", home.path(), &silent.url, &[]);
        let start = Instant::now();
        while silent.accepted.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(start.elapsed() < Duration::from_secs(30), "no connection");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, signal) };
        let sent = Instant::now();
        let (out, _) = wait_bounded(child, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{err}");
        assert!(
            sent.elapsed() < Duration::from_secs(3),
            "took {:?}",
            sent.elapsed()
        );
        assert!(err.contains("stopped while fetching config.json"), "{err}");
    }
}

#[test]
fn server_errors_are_retried_and_wrong_bytes_are_refused() {
    let mut damaged = tiny_a_files();
    damaged.remove("generation_config.json");
    let hub = MockHub::start(
        [
            ("test-org/tiny-a".to_string(), tiny_a_files()),
            ("test-org/damaged".to_string(), damaged),
        ]
        .into_iter()
        .collect(),
        Faults {
            fail: [
                ("test-org/tiny-a/config.json".to_string(), 1),
                ("test-org/tiny-a/model.safetensors".to_string(), 2),
            ]
            .into(),
            wrong_sha: [(
                "test-org/damaged/tokenizer_config.json".to_string(),
                "ab".repeat(32),
            )]
            .into(),
            ..Faults::default()
        },
    );
    let home = tempfile::tempdir().unwrap();
    // `test-org/tiny-a` gets HTTP 500 for its config once and for its weights twice, then the files.
    let out = generate_with(
        "test-org/damaged",
        home.path(),
        Some(&hub),
        &["--hub-retries", "1"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("test-org/damaged: cannot fetch tokenizer_config.json")
            && err.contains("SHA-256"),
        "{err}"
    );
    assert_golden(&generate("test-org/tiny-a", home.path(), Some(&hub)));
    let weights = hub
        .requests()
        .iter()
        .filter(|r| r.starts_with("/test-org/tiny-a/") && r.contains("/model.safetensors 0-"))
        .count();
    assert!(weights >= 3, "{:?}", hub.requests());
}
