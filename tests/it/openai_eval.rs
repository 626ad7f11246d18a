//! `eval --backend openai` through the binary: against `serve` on the tiny checkpoint it gives the local run's
//! predictions and verdicts; a server killed mid-run stops the run, which a resume completes; 429 and 5xx are
//! retried (honouring `Retry-After`), a slow server times out into recorded errors, and a prompt the server refuses
//! is recorded without retries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use crate::openai_support::stub::{Reply, Stub, ANSWER};
use crate::openai_support::{signal, tiny, wait_exit, wait_for, Server, MAX_PIXELS};
use crate::util::{json_file, ok};

const MAX_NEW: &str = "10";

pub(crate) fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Run `cmd` for at most 300 s.
pub(crate) fn run(mut cmd: Command) -> Output {
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if wait_exit(&mut child, Duration::from_secs(300)).is_none() {
        let _ = child.kill();
    }
    child.wait_with_output().unwrap()
}

/// `eval --backend openai` of `data` (the sample when `None`) into `out`.
pub(crate) fn served_eval(
    endpoint: &str,
    model: &str,
    out: &Path,
    data: Option<&Path>,
    extra: &[&str],
) -> Command {
    let mut cmd = crate::util::bin();
    cmd.args([
        "eval",
        "--backend",
        "openai",
        "--endpoint",
        endpoint,
        "--api-model",
        model,
        "--out",
    ])
    .arg(out)
    .args(["--max-pixels", MAX_PIXELS, "--max-new-tokens", MAX_NEW]);
    if let Some(d) = data {
        cmd.arg("--data").arg(d);
    }
    cmd.args(extra);
    cmd
}

/// A local run of the sample with the judge, made once for the tests that compare with it.
fn local_reference() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep().join("local");
        let mut cmd = crate::util::bin();
        cmd.args(["eval", "--model"])
            .arg(tiny())
            .arg("--out")
            .arg(&dir)
            .args([
                "--max-pixels",
                MAX_PIXELS,
                "--max-new-tokens",
                MAX_NEW,
                "--batch-size",
                "4",
            ]);
        ok(&run(cmd));
        dir
    })
}

/// `(trajectory, step) → the fields both backends must agree on`, the later line winning.
fn predictions(run: &Path) -> BTreeMap<(String, u64), Value> {
    lines(&run.join("predictions.jsonl"))
        .into_iter()
        .map(|v| {
            let key = (v["trajectory"].to_string(), v["step"].as_u64().unwrap());
            let kept = serde_json::json!([
                v["response"],
                v["image_size"],
                v["prompt_tokens"],
                v["finish"],
                v["error"]
            ]);
            (key, kept)
        })
        .collect()
}

/// The lines of `out`'s `predictions.jsonl` (at least one), each checked to carry an `error` containing every
/// string of `want`.
pub(crate) fn every_step_failed_with(out: &Path, want: &[&str]) -> Vec<Value> {
    let preds = lines(&out.join("predictions.jsonl"));
    assert!(!preds.is_empty());
    for p in &preds {
        let e = p["error"].as_str().unwrap_or_else(|| panic!("{p}"));
        assert!(
            want.iter().all(|w| e.contains(w)),
            "{want:?} not all in {e}"
        );
    }
    preds
}

/// A one-trajectory benchmark (the sample's first) in `dir`.
pub(crate) fn one_trajectory(dir: &Path) -> PathBuf {
    let png = crate::openai_support::sample_png(dir);
    let sample = png
        .ancestors()
        .find(|p| p.join("data.jsonl").exists())
        .unwrap()
        .to_path_buf();
    let text = std::fs::read_to_string(sample.join("data.jsonl")).unwrap();
    let first = text.lines().next().unwrap();
    let one = dir.join("one");
    std::fs::create_dir_all(&one).unwrap();
    std::fs::write(one.join("data.jsonl"), format!("{first}\n")).unwrap();
    std::os::unix::fs::symlink(sample.join("images"), one.join("images")).unwrap();
    one
}

#[test]
fn a_served_run_gives_the_local_predictions_and_verdicts() {
    let local = local_reference();
    let server = Server::start(
        &[
            "--batch-size",
            "4",
            "--max-new-tokens",
            "64",
            "--served-model-name",
            "tiny",
        ],
        &[],
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("served");
    let mut cmd = served_eval(
        &server.base,
        "tiny",
        &out,
        None,
        &["--concurrency", "4", "--model"],
    );
    cmd.arg(tiny());
    ok(&run(cmd));

    assert_eq!(predictions(&out), predictions(local));
    let verdicts = |run: &Path| -> BTreeMap<String, Value> {
        lines(&run.join("judgements.jsonl"))
            .into_iter()
            .map(|v| {
                (
                    v["trajectory"].to_string(),
                    serde_json::json!([
                        v["success"],
                        v["reason"],
                        v["response"],
                        v["prompt_tokens"],
                        v["steps_sha256"]
                    ]),
                )
            })
            .collect()
    };
    assert_eq!(verdicts(&out).len(), 5);
    assert_eq!(verdicts(&out), verdicts(local));
    assert_eq!(
        json_file(&out.join("metrics.json"))["accuracy"],
        json_file(&local.join("metrics.json"))["accuracy"]
    );

    let manifest = json_file(&out.join("manifest.json"));
    // A served model is described as one: no dtype, device or ops of this machine.
    assert_eq!(manifest["backend"]["kind"], "served");
    for placeholder in ["ops", "device", "kv_bytes_per_token", "model_path"] {
        assert!(
            manifest["backend"].get(placeholder).is_none(),
            "{placeholder}"
        );
        assert!(manifest.get(placeholder).is_none(), "{placeholder}");
    }
    assert!(manifest["settings"].get("dtype").is_none());
    // What `serve` publishes of its checkpoint: its fingerprint, and the local run's is the same.
    assert_eq!(
        manifest["backend"]["published"]["fingerprint"],
        json_file(&local.join("manifest.json"))["settings"]["model_hash"]
    );
    assert_eq!(manifest["backend"]["endpoint"], server.base.as_str());
    assert_eq!(
        (
            manifest["backend"]["model"].clone(),
            manifest["settings"]["model"].clone()
        ),
        ("tiny".into(), "tiny".into())
    );
    assert!(manifest["backend"]["pixel_bounds_from"]
        .as_str()
        .unwrap()
        .contains("preprocessor_config.json"));
    assert_eq!(
        manifest["settings"]["image_processor"],
        json_file(&local.join("manifest.json"))["settings"]["image_processor"]
    );
    let tp = json_file(&out.join("throughput.json"));
    let req = &tp["phases"][0]["requests"];
    assert_eq!(
        (
            req["requests"].as_u64(),
            req["failed"].as_u64(),
            req["concurrency"].as_u64()
        ),
        (Some(30), Some(0), Some(4))
    );
    assert!(
        req["latency_seconds"]["p50"].as_f64().unwrap() > 0.0
            && req["requests_per_second"].as_f64().unwrap() > 0.0
    );
    assert_eq!(tp["phases"][1]["requests"]["requests"].as_u64(), Some(5));
}

/// A server killed mid-run: after a few connection failures in a row the client stops as on Ctrl-C (what was
/// answered saved, no judge phase against the dead server), names the cause and prints the resume command; a
/// resume against a new server completes the run with the local run's predictions.
#[test]
fn a_server_killed_mid_run_stops_the_run_and_a_resume_completes_it() {
    let local = local_reference();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let first = Server::start(&["--served-model-name", "tiny"], &[]);
    let flags = [
        "--concurrency",
        "4",
        "--max-retries",
        "3",
        "--max-connection-failures",
        "6",
        "--model",
    ];
    let mut cmd = served_eval(&first.base, "tiny", &out, None, &flags);
    cmd.arg(tiny())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut client = cmd.spawn().unwrap();
    wait_for("a few answers", || {
        lines(&out.join("predictions.jsonl")).len() >= 4
    });
    // Freeze the client, kill the server under it, let it go on.
    signal(client.id(), "STOP");
    drop(first);
    let t0 = std::time::Instant::now();
    signal(client.id(), "CONT");
    let status = wait_exit(&mut client, Duration::from_secs(120)).expect("eval did not end");
    let stopped_in = t0.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    // Far less than the retries of every remaining step would take.
    assert!(stopped_in < Duration::from_secs(30), "{stopped_in:?}");
    // At least the limit of failures in a row: requests already in flight (concurrency 4) may fail after it.
    let failures = err
        .split("cannot be reached (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<usize>().ok());
    assert!(failures.is_some_and(|n| n >= 6), "{err}");
    for want in [
        "connection failures in a row",
        "connection refused",
        "steps done and saved in",
        "could not be answered:",
        "Resume with:",
    ] {
        assert!(err.contains(want), "{want:?} not in {err}");
    }
    assert!(
        !out.join("judgements.jsonl").exists(),
        "the judge ran against a dead server"
    );
    let answered = predictions(&out)
        .values()
        .filter(|v| v[4].is_null())
        .count();
    assert!((4..30).contains(&answered), "{answered}");

    let second = Server::start(&["--served-model-name", "tiny"], &[]);
    let mut again = served_eval(&second.base, "tiny", &out, None, &flags);
    again.arg(tiny());
    ok(&run(again));
    let got = predictions(&out);
    assert_eq!(got.len(), 30);
    assert_eq!(got, predictions(local));
}

#[test]
fn retries_honour_retry_after_and_5xx_then_answer() {
    let stub = Stub::start(|n| match n {
        0 => Reply::Status(429, Some("1")),
        1 => Reply::Status(503, None),
        _ => Reply::Answer,
    });
    let tmp = tempfile::tempdir().unwrap();
    let data = one_trajectory(tmp.path());
    let out = tmp.path().join("run");
    ok(&run(served_eval(
        &stub.base,
        "stub",
        &out,
        Some(&data),
        &["--no-judge", "--concurrency", "1", "--max-retries", "3"],
    )));
    let calls = stub.calls();
    assert!(
        calls[1] - calls[0] >= Duration::from_millis(950),
        "Retry-After: 1 not waited for"
    );
    let preds = lines(&out.join("predictions.jsonl"));
    let steps = preds.len();
    assert!(
        steps >= 2
            && preds
                .iter()
                .all(|v| v["response"] == ANSWER && v["error"].is_null()),
        "{preds:?}"
    );
    assert!(preds.iter().all(|v| v["image_size"].is_array()
        && v["prompt_tokens"] == 100
        && v["generated_tokens"] == 10));
    // The 429 and the 503 are retried; a loaded machine may add a retry of its own (a pooled connection the
    // stub closed), so only the accounting is exact: every attempt but one per step is a retry.
    let req = &json_file(&out.join("throughput.json"))["phases"][0]["requests"];
    let (attempts, retries) = (
        req["attempts"].as_u64().unwrap(),
        req["retries"].as_u64().unwrap(),
    );
    assert!(retries >= 2, "{req}");
    assert_eq!(attempts, steps as u64 + retries, "{req}");
}

#[test]
fn a_slow_server_times_out_into_recorded_errors() {
    let stub = Stub::start(|_| Reply::Slow(Duration::from_secs(3)));
    let tmp = tempfile::tempdir().unwrap();
    let data = one_trajectory(tmp.path());
    let out = tmp.path().join("run");
    let flags = [
        "--no-judge",
        "--allow-step-errors",
        "--concurrency",
        "8",
        "--request-timeout",
        "0.3",
        "--max-retries",
        "1",
    ];
    ok(&run(served_eval(
        &stub.base,
        "stub",
        &out,
        Some(&data),
        &flags,
    )));
    let preds = every_step_failed_with(&out, &["gave up after 2 attempts", "timed out"]);
    let req = &json_file(&out.join("throughput.json"))["phases"][0]["requests"];
    assert_eq!(req["failed"].as_u64(), Some(preds.len() as u64));
}

#[test]
fn a_prompt_the_server_refuses_is_recorded_without_retries() {
    let server = Server::start(
        &[
            "--max-new-tokens",
            "16",
            "--max-batch-tokens",
            "64",
            "--served-model-name",
            "tiny",
        ],
        &[],
    );
    let tmp = tempfile::tempdir().unwrap();
    let data = one_trajectory(tmp.path());
    let out = tmp.path().join("run");
    ok(&run(served_eval(
        &server.base,
        "tiny",
        &out,
        Some(&data),
        &["--no-judge", "--allow-step-errors"],
    )));
    let preds = every_step_failed_with(&out, &["HTTP 400", "context_length_exceeded"]);
    let req = &json_file(&out.join("throughput.json"))["phases"][0]["requests"];
    assert_eq!(
        (req["attempts"].as_u64(), req["retries"].as_u64()),
        (Some(preds.len() as u64), Some(0))
    );
}

/// Through a server: a step the server refused leaves its trajectory unjudged, or judged without it under
/// `--allow-step-errors` (the verdict counting it); once a resume gets the step answered, the trajectory is
/// judged again from the new answer, its verdict's digest changing.
#[test]
fn a_served_step_redone_on_resume_sends_its_trajectory_back_to_the_judge() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // The next `refusals` chat calls are refused (HTTP 400, never retried), the others answered.
    let refusals = Arc::new(AtomicUsize::new(1));
    let left = refusals.clone();
    let stub = Stub::start(move |_| {
        match left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) {
            Ok(_) => Reply::Status(400, None),
            Err(_) => Reply::Answer,
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let data = one_trajectory(tmp.path());
    let out = tmp.path().join("run");
    let eval = |extra: &[&str]| {
        let flags = [&["--concurrency", "1", "--max-retries", "0"], extra].concat();
        run(served_eval(&stub.base, "stub", &out, Some(&data), &flags))
    };
    let judgements = || lines(&out.join("judgements.jsonl"));

    // One step refused: the trajectory is not judged, and the run fails saying why.
    let o = eval(&[]);
    assert!(!o.status.success());
    assert!(judgements().is_empty(), "{:?}", judgements());
    let m = json_file(&out.join("metrics.json"));
    assert_eq!(m["judge_skipped_step_errors"], 1);
    assert_eq!(m["judge_judged"], 0);

    // Refused again on resume, judged without it under --allow-step-errors.
    refusals.store(1, Ordering::SeqCst);
    ok(&eval(&["--allow-step-errors"]));
    let partial = judgements();
    assert_eq!(partial.len(), 1, "{partial:?}");
    assert_eq!(partial[0]["missing_steps"], 1);
    assert!(partial[0]["error"].is_null(), "{}", partial[0]);
    let m = json_file(&out.join("metrics.json"));
    assert_eq!(
        (
            m["judge_judged"].as_u64(),
            m["judge_with_missing_steps"].as_u64()
        ),
        (Some(1), Some(1))
    );

    // Answered on the next resume: judged again, from the answer.
    ok(&eval(&[]));
    let all = judgements();
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1]["missing_steps"], 0);
    assert_ne!(all[1]["steps_sha256"], partial[0]["steps_sha256"]);
    let m = json_file(&out.join("metrics.json"));
    assert_eq!(
        (
            m["judge_judged"].as_u64(),
            m["judge_with_missing_steps"].as_u64()
        ),
        (Some(1), Some(0))
    );
    assert!(
        predictions(&out).values().all(|v| v[4].is_null()),
        "every step answered"
    );
}
