//! `serve` over HTTP: the official `openai` Python client (plain, a picture, streaming, log-probabilities, seeded
//! sampling, bad requests, many requests at once batched together), the refusals in OpenAI's error shape, the API
//! key, the bounded queue (429 with `Retry-After`) and a stop that finishes the request in flight.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::openai_support::{
    get, post, raw_post, sample_png, signal, start_long_request, tiny, wait_exit, Server,
    MAX_PIXELS,
};

/// The virtual environment `.ci/openai-client.sh` makes, if it has the client.
fn python() -> Option<PathBuf> {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-openai/bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import openai"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok.then_some(py)
}

/// A metric's value from `/metrics` text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in\n{text}"))
}

#[test]
fn the_official_python_client_talks_to_serve() {
    let Some(py) = python() else {
        eprintln!("skipped: the `openai` Python client is not installed in .venv-openai (run bash .ci/openai-client.sh)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let png = sample_png(tmp.path());
    let server = Server::start(
        &[
            "--batch-size",
            "8",
            "--max-new-tokens",
            "64",
            "--served-model-name",
            "tiny",
        ],
        &[],
    );
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/openai_support/client_check.py");
    let out = Command::new(py)
        .arg(script)
        .args([&server.base, "tiny"])
        .arg(&png)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "client_check.py failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();

    // The greedy answer to a picture is `generate`'s, whole and streamed.
    let gen = crate::util::bin()
        .args(["generate", "--model"])
        .arg(tiny())
        .arg("--image")
        .arg(&png)
        .args([
            "--prompt",
            "Describe the screen.",
            "--max-new-tokens",
            "8",
            "--max-pixels",
            MAX_PIXELS,
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        gen.status.success(),
        "{}",
        String::from_utf8_lossy(&gen.stderr)
    );
    let gen: Value = serde_json::from_slice(&gen.stdout).unwrap();
    assert_eq!(v["image"]["content"], gen["text"], "{v}");
    assert_eq!(v["image"]["prompt_tokens"], gen["prompt_tokens"]);
    assert_eq!(v["stream"]["content"], v["image"]["content"]);
    assert_eq!(
        v["stream"]["finish_reasons"],
        json!([v["image"]["finish_reason"]])
    );
    assert_eq!(
        v["stream"]["completion_tokens"],
        v["image"]["completion_tokens"]
    );
    assert_eq!(v["bad_request"]["status"], 400);
    assert!(
        v["bad_request"]["message"]
            .as_str()
            .unwrap()
            .contains("bad base64"),
        "{v}"
    );
    assert_eq!(v["unknown_model"], 404);
    let concurrent = v["concurrent"].as_array().unwrap();
    assert_eq!(concurrent.len(), 12);
    assert!(
        concurrent.iter().all(|a| *a == json!(["length", 24])),
        "{v}"
    );

    let m = get(&format!("{}/metrics", server.root()), &[]).body;
    assert!(
        metric(&m, "mobile_r1_eval_batch_occupancy_peak") > 1.0,
        "{m}"
    );
    let ok = metric(
        &m,
        "mobile_r1_eval_requests_total{path=\"/v1/chat/completions\",status=\"200\"}",
    );
    assert!(ok >= 18.0, "{m}");
    assert_eq!(
        metric(
            &m,
            "mobile_r1_eval_requests_total{path=\"/v1/chat/completions\",status=\"400\"}"
        ),
        1.0
    );
    assert_eq!(metric(&m, "mobile_r1_eval_running_sequences"), 0.0);
    assert_eq!(metric(&m, "mobile_r1_eval_queue_depth"), 0.0);
}

/// A user turn with one picture.
fn with_picture(url: &str) -> Value {
    json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "hi"}]}], "max_tokens": 4})
}

#[test]
fn refusals_come_in_openai_error_shape_and_the_server_keeps_serving() {
    let small = image::RgbImage::from_pixel(40, 40, image::Rgb([9, 9, 9]));
    let mut small_png = std::io::Cursor::new(Vec::new());
    small
        .write_to(&mut small_png, image::ImageFormat::Png)
        .unwrap();
    let small_url = mobile_r1_eval::openai::png_data_url(small_png.get_ref());
    let server = Server::start(
        &[
            "--max-body-bytes",
            "8192",
            "--max-images",
            "1",
            "--max-new-tokens",
            "16",
            "--served-model-name",
            "tiny",
        ],
        &[],
    );
    let url = format!("{}/chat/completions", server.base);
    let two = json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": small_url}}, {"type": "image_url", "image_url": {"url": small_url}}]}]});
    let text = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "hi"}]});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{\"messages\": [".to_vec(), 400, "not valid JSON"),
        (b"[]".to_vec(), 400, "a JSON object"),
        (
            json!({"messages": [{"role": "tool", "content": "x"}]})
                .to_string()
                .into(),
            400,
            "unknown role `tool`",
        ),
        (
            json!({"messages": [{"role": "user", "content": 7}]})
                .to_string()
                .into(),
            400,
            "messages[0].content",
        ),
        (
            with_picture("data:image/png;base64,@@@@")
                .to_string()
                .into(),
            400,
            "bad base64",
        ),
        (
            with_picture(&mobile_r1_eval::openai::png_data_url(
                b"GIF89a, not a picture we take",
            ))
            .to_string()
            .into(),
            400,
            "not a PNG or JPEG",
        ),
        (
            with_picture("http://127.0.0.1:9/x.png").to_string().into(),
            400,
            "only `data:` URLs",
        ),
        (two.to_string().into(), 400, "at most 1 (--max-images)"),
        (
            text(json!({"max_tokens": 17})).to_string().into(),
            400,
            "at most 16 tokens",
        ),
        (
            text(json!({"temperature": "hot"})).to_string().into(),
            400,
            "`temperature` must be a number",
        ),
        (
            text(json!({"model": "gpt-4o"})).to_string().into(),
            404,
            "`gpt-4o` is not served here",
        ),
        (
            text(json!({"presence_penalty": 0.5})).to_string().into(),
            400,
            "`presence_penalty` is not supported",
        ),
        (
            text(json!({"logit_bias": {"7": 5}})).to_string().into(),
            400,
            "`logit_bias` is not supported",
        ),
        (
            text(json!({"response_format": {"type": "json_object"}}))
                .to_string()
                .into(),
            400,
            "only `response_format`",
        ),
        (
            text(json!({"tool_choice": "required"})).to_string().into(),
            400,
            "only `tool_choice`",
        ),
    ];
    for (body, status, says) in cases {
        let a = post(&url, &body, &[]);
        assert_eq!(
            a.status,
            status,
            "{}: {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(120)
                .collect::<String>(),
            a.body
        );
        let e = &a.json()["error"];
        assert!(
            e["message"].as_str().unwrap().contains(says),
            "{} lacks {says}",
            e["message"]
        );
        assert!(
            e["type"].is_string() && e.get("param").is_some() && e.get("code").is_some(),
            "{e}"
        );
    }
    // A body over the limit is refused from its Content-Length, before it is read.
    let big = raw_post(&server.root(), 100_000);
    assert!(big.starts_with("HTTP/1.1 413"), "{big}");
    assert!(
        big.contains("\"code\":\"request_too_large\"") && big.contains("--max-body-bytes"),
        "{big}"
    );
    // A method a path does not take: 405 in the error shape, with the methods it takes.
    let wrong = get(&url, &[]);
    assert_eq!(wrong.status, 405, "{}", wrong.body);
    assert_eq!(wrong.json()["error"]["code"], "method_not_allowed");
    let lost = get(&format!("{}/v1/nothing", server.root()), &[]);
    assert_eq!(
        (lost.status, lost.json()["error"]["code"].clone()),
        (404, json!("not_found"))
    );
    // Still serving.
    assert_eq!(get(&format!("{}/health", server.root()), &[]).status, 200);
    let a = post(&url, with_picture(&small_url).to_string().as_bytes(), &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["choices"][0]["message"]["role"], "assistant");

    // A stop string ends the answer, which is cut before it.
    let ask = |extra: Value| post(&url, text(extra).to_string().as_bytes(), &[]).json();
    let whole = ask(json!({"max_tokens": 16, "ignore_eos": true}));
    let full = whole["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 4, "too short to cut: {full:?}");
    let stop: String = chars[2..4].iter().collect();
    let cut = ask(json!({"max_tokens": 16, "ignore_eos": true, "stop": [stop.clone()]}));
    let at = full.find(&stop).unwrap();
    assert_eq!(
        cut["choices"][0]["message"]["content"],
        &full[..at],
        "stop {stop:?} in {full:?}"
    );
    assert_eq!(cut["choices"][0]["finish_reason"], "stop");
    assert!(
        cut["usage"]["completion_tokens"].as_u64() < whole["usage"]["completion_tokens"].as_u64()
    );
}

#[test]
fn an_api_key_is_required_when_set_and_other_hosts_need_one() {
    let key = "s3cret-test-key";
    let server = Server::start(
        &["--api-key-env", "SERVE_TEST_KEY"],
        &[("SERVE_TEST_KEY", key)],
    );
    let models = format!("{}/models", server.base);
    assert_eq!(get(&models, &[]).status, 401);
    let wrong = get(&models, &[("Authorization", "Bearer nope")]);
    assert_eq!(
        (wrong.status, wrong.json()["error"]["code"].clone()),
        (401, json!("invalid_api_key"))
    );
    let bearer = format!("Bearer {key}");
    let ok = get(&models, &[("Authorization", &bearer)]);
    assert_eq!(ok.status, 200);
    // The scheme's name is case-insensitive.
    let lower = format!("bearer {key}");
    assert_eq!(get(&models, &[("Authorization", &lower)]).status, 200);
    let card = &ok.json()["data"][0];
    assert!(
        card["id"].as_str().unwrap().ends_with("tiny-b") && card["fingerprint"].is_string(),
        "{card}"
    );
    assert_eq!(get(&format!("{}/metrics", server.root()), &[]).status, 401);
    assert_eq!(get(&format!("{}/health", server.root()), &[]).status, 200);
    assert!(!server.log().contains(key), "the key was logged");

    // Another interface without a key is refused before anything is bound; so is a variable that is not set.
    let refused = crate::util::bin()
        .args(["serve", "--model"])
        .arg(tiny())
        .args(["--host", "0.0.0.0", "--port", "0"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--api-key-env"));
    let unset = crate::util::bin()
        .args(["serve", "--model"])
        .arg(tiny())
        .args(["--api-key-env", "SERVE_TEST_NOT_SET_ANYWHERE"])
        .env_remove("SERVE_TEST_NOT_SET_ANYWHERE")
        .output()
        .unwrap();
    assert!(!unset.status.success());
    assert!(String::from_utf8_lossy(&unset.stderr).contains("SERVE_TEST_NOT_SET_ANYWHERE"));
}

#[test]
fn a_full_queue_answers_429_and_a_stop_finishes_the_request_in_flight() {
    let server = Server::start(
        &[
            "--batch-size",
            "1",
            "--max-queue",
            "0",
            "--max-new-tokens",
            "500",
        ],
        &[],
    );
    let url = format!("{}/chat/completions", server.base);
    let metrics = format!("{}/metrics", server.root());
    let running = start_long_request(&server, 500);
    let busy = post(
        &url,
        json!({"messages": [{"role": "user", "content": "hi"}]})
            .to_string()
            .as_bytes(),
        &[],
    );
    assert_eq!(busy.status, 429, "{}", busy.body);
    assert_eq!(busy.retry_after.as_deref(), Some("1"));
    assert_eq!(busy.json()["error"]["code"], "rate_limit_exceeded");
    assert!(
        get(&metrics, &[])
            .body
            .lines()
            .any(|l| l == "mobile_r1_eval_running_sequences 1"),
        "the long request ended too soon for this test"
    );

    let mut server = server;
    signal(server.child.id(), "TERM");
    let done = running.join().unwrap();
    assert_eq!(done.status, 200, "{}", done.body);
    let v = done.json();
    assert_eq!(
        (
            v["choices"][0]["finish_reason"].clone(),
            v["usage"]["completion_tokens"].clone()
        ),
        (json!("length"), json!(500))
    );
    let status = wait_exit(&mut server.child, std::time::Duration::from_secs(60))
        .expect("serve did not stop");
    assert!(status.success(), "{status:?}: {}", server.log());
}
