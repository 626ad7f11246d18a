//! `eval --backend openai` at scale and against servers that differ from the run, through the binary: busy
//! answers (429) are waited out without costing retries and lower the client's concurrency, so 32 clients finish
//! every step on a 4-slot `serve`;
//! `serve` publishes its image settings (also under `GET /v1/models/{id}`) and a client whose pixel bounds the
//! server would change is refused with the fix; with `--model DIR` a server whose prompt token counts differ stops
//! the run; a server that publishes nothing (as vLLM) is named in a warning; greedy sampling is sent explicitly.

use crate::openai_eval::{every_step_failed_with, lines, one_trajectory, run, served_eval};
use crate::openai_support::stub::{Reply, Stub};
use crate::openai_support::{get, tiny, Server};
use crate::util::{json_file, ok};

#[test]
fn thirty_two_clients_finish_every_step_on_a_four_slot_server() {
    let server = Server::start(
        &[
            "--batch-size",
            "4",
            "--max-queue",
            "0",
            "--max-new-tokens",
            "16",
            "--served-model-name",
            "tiny",
        ],
        &[],
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let flags = [
        "--no-judge",
        "--concurrency",
        "32",
        "--max-retries",
        "1",
        "--model",
    ];
    let mut cmd = served_eval(&server.base, "tiny", &out, None, &flags);
    cmd.arg(tiny());
    ok(&run(cmd));
    let preds = lines(&out.join("predictions.jsonl"));
    assert_eq!(preds.len(), 30);
    assert!(preds.iter().all(|p| p["error"].is_null()), "{preds:?}");
    let req = &json_file(&out.join("throughput.json"))["phases"][0]["requests"];
    assert_eq!(req["failed"].as_u64(), Some(0), "{req}");
    assert!(req["busy"].as_u64().unwrap() > 0, "no 429 was seen: {req}");
    // The 429s lowered the client's own concurrency for a while.
    let lowest = req["lowest_concurrency"].as_u64().unwrap();
    assert!((1..32).contains(&lowest), "{req}");
    let manifest = json_file(&out.join("manifest.json"));
    assert_eq!(manifest["backend"]["busy_wait_seconds"], 600.0);
    assert_eq!(manifest["backend"]["max_connection_failures"], 10);
}

#[test]
fn busy_answers_cost_no_retry() {
    // Three 429s, then answers: with no retry allowed, the step still gets its answer.
    let stub = Stub::start(|n| {
        if n < 3 {
            Reply::Status(429, Some("0.2"))
        } else {
            Reply::Answer
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let data = one_trajectory(tmp.path());
    let out = tmp.path().join("run");
    let flags = ["--no-judge", "--concurrency", "1", "--max-retries", "0"];
    ok(&run(served_eval(
        &stub.base,
        "stub",
        &out,
        Some(&data),
        &flags,
    )));
    let preds = lines(&out.join("predictions.jsonl"));
    assert!(preds.iter().all(|p| p["error"].is_null()), "{preds:?}");
    let req = &json_file(&out.join("throughput.json"))["phases"][0]["requests"];
    assert_eq!(req["busy"].as_u64(), Some(3), "{req}");

    // A server busy beyond --busy-wait: the step is recorded as failed, saying so.
    let busy = Stub::start(|_| Reply::Status(429, Some("0.3")));
    let out = tmp.path().join("busy");
    let flags = ["--no-judge", "--allow-step-errors", "--busy-wait", "0.5"];
    ok(&run(served_eval(
        &busy.base,
        "stub",
        &out,
        Some(&data),
        &flags,
    )));
    every_step_failed_with(&out, &["stayed busy", "HTTP 429"]);
}

#[test]
fn serve_publishes_its_image_settings_and_a_client_they_would_change_is_refused() {
    let server = Server::start(&["--served-model-name", "tiny"], &[]);
    let card = get(&format!("{}/models/tiny", server.base), &[]);
    assert_eq!(card.status, 200, "{}", card.body);
    let card = card.json();
    let image = &card["image"];
    assert_eq!(
        (
            image["max_pixels"].as_u64(),
            image["factor"].as_u64(),
            image["coordinate_frame"].as_str()
        ),
        (Some(40_000), Some(28), Some("image-pixels")),
        "{card}"
    );
    assert_eq!(
        get(&format!("{}/models", server.base), &[]).json()["data"][0],
        card
    );
    let missing = get(&format!("{}/models/other", server.base), &[]);
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["code"], "model_not_found");

    // The client would send pictures of up to 80,000 pixels, which this server shrinks again.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut cmd = crate::util::bin();
    cmd.args([
        "eval",
        "--backend",
        "openai",
        "--endpoint",
        &server.base,
        "--api-model",
        "tiny",
    ])
    .args(["--no-judge", "--max-pixels", "80000", "--out"])
    .arg(&out);
    let o = run(cmd);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    for want in [
        "resizes pictures to 3136–40000 pixels",
        "--max-pixels 40000",
        "--max-pixels 80000",
    ] {
        assert!(err.contains(want), "{want:?} not in {err}");
    }
    assert!(!out.join("predictions.jsonl").exists());
}

#[test]
fn other_prompt_counts_stop_the_run_and_a_silent_server_is_named() {
    // The stub publishes no image settings and counts 7 prompt tokens for every prompt.
    let stub = Stub::start(|_| Reply::Counted(7));
    let tmp = tempfile::tempdir().unwrap();
    let data = one_trajectory(tmp.path());
    let out = tmp.path().join("run");
    let flags = ["--no-judge", "--concurrency", "1", "--model"];
    let mut cmd = served_eval(&stub.base, "stub", &out, Some(&data), &flags);
    cmd.arg(tiny());
    let o = run(cmd);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    for want in [
        "does not publish its image settings",
        "the server counted 7 prompt tokens",
        "prepares prompts differently",
        "Resume with:",
    ] {
        assert!(err.contains(want), "{want:?} not in {err}");
    }
    // The first answer showed it; no further prompt was sent.
    assert_eq!(stub.calls().len(), 1);
    let preds = lines(&out.join("predictions.jsonl"));
    assert_eq!(preds.len(), 1);
    assert!(preds[0]["error"].as_str().unwrap().contains("counted 7"));
}

#[test]
fn greedy_sampling_is_sent_explicitly() {
    let stub = Stub::start(|_| Reply::Answer);
    let tmp = tempfile::tempdir().unwrap();
    let data = one_trajectory(tmp.path());
    let out = tmp.path().join("run");
    let flags = ["--no-judge", "--concurrency", "1"];
    let o = run(served_eval(&stub.base, "stub", &out, Some(&data), &flags));
    ok(&o);
    let body = &stub.bodies()[0];
    assert_eq!(
        (
            body["temperature"].as_f64(),
            body["top_p"].as_f64(),
            body["top_k"].as_i64(),
            body["repetition_penalty"].as_f64()
        ),
        (Some(0.0), Some(1.0), Some(-1), Some(1.0)),
        "{body}"
    );
}
