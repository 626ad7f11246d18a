//! `serve`'s connection edges, through the binary on loopback: a kept-alive connection left idle is closed after
//! `--keep-alive-timeout` while a slow request head still gets `--header-timeout`; a slow body gets 408 after
//! `--body-timeout`; a streamed answer still running at the `--shutdown-timeout` deadline ends with an error event
//! and the process exits 1; a client still sending a body the server refused unread (401, an announced 413) gets
//! the refusal, not a reset; and `GET /v1/models/{id}` is counted under its route in `/metrics`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::openai_support::{
    closed_by_server, connect, get, one_at_a_time, signal, wait_exit, wait_for, Server,
};

/// Read one answer with a `Content-Length` from `s` (head and body), leaving the connection open.
fn read_answer(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(str::to_string)
                })
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text;
            }
        }
        let n = s.read(&mut buf).expect("reading the answer");
        assert!(n > 0, "the connection closed mid-answer: {text}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Send `GET /health` on `s` and read its answer.
fn health(s: &mut TcpStream) {
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(read_answer(s).starts_with("HTTP/1.1 200"));
}

#[test]
fn keep_alive_and_request_head_deadlines_are_separate() {
    let server = Server::start(&["--header-timeout", "1", "--keep-alive-timeout", "6"], &[]);
    let root = server.root();
    // Quiet after an answer: closed by the keep-alive deadline, well after the header deadline.
    let quiet = {
        let root = root.clone();
        std::thread::spawn(move || {
            let mut s = connect(&root);
            health(&mut s);
            let t0 = Instant::now();
            assert!(closed_by_server(&mut s));
            t0.elapsed()
        })
    };
    // The first bytes of a second request, then nothing: closed by the header deadline, counted from them.
    let mut s = connect(&root);
    health(&mut s);
    std::thread::sleep(Duration::from_millis(500));
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").unwrap();
    let t0 = Instant::now();
    assert!(closed_by_server(&mut s));
    let slow_head = t0.elapsed();
    let quiet = quiet.join().unwrap();
    assert!(
        slow_head >= Duration::from_millis(800) && slow_head < Duration::from_secs(4),
        "a partial head was closed after {slow_head:?}, not the header timeout"
    );
    assert!(
        quiet >= Duration::from_secs(4) && quiet < Duration::from_secs(30),
        "an idle connection was closed after {quiet:?}, not the keep-alive timeout"
    );
}

#[test]
fn a_slow_body_gets_408_after_the_body_timeout() {
    let server = Server::start(&["--body-timeout", "1"], &[]);
    let mut s = connect(&server.root());
    let head =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                Content-Length: 1000\r\n\r\n{\"messages\": [";
    s.write_all(head.as_bytes()).unwrap();
    let t0 = Instant::now();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--body-timeout"), "{answer}");
    assert!(
        t0.elapsed() >= Duration::from_millis(900) && t0.elapsed() < Duration::from_secs(20),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn a_stream_running_at_the_shutdown_deadline_ends_with_an_error_event() {
    let mut server = one_at_a_time("2");
    let body = json!({"messages": [{"role": "user", "content": "Write a long story."}],
        "max_tokens": 30000, "ignore_eos": true, "stream": true})
    .to_string();
    let mut s = connect(&server.root());
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let streamed = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    });
    let metrics = format!("{}/metrics", server.root());
    wait_for("the stream to run", || {
        get(&metrics, &[])
            .body
            .lines()
            .any(|l| l == "mobile_r1_eval_running_sequences 1")
    });
    let t0 = Instant::now();
    signal(server.child.id(), "TERM");
    let status = wait_exit(&mut server.child, Duration::from_secs(30)).expect("serve did not stop");
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert_eq!(status.code(), Some(1), "{}", server.log());
    let out = streamed.join().unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("\"role\":\"assistant\""), "{out}");
    assert!(out.contains("data: {\"error\""), "no error event:\n{out}");
    assert!(out.contains("--shutdown-timeout"), "{out}");
    assert!(!out.contains("[DONE]"), "{out}");
}

/// Send a chat request with a body of `length` bytes, all of it (a client that reads the answer once it has sent
/// the body), with `auth` as the key; the answer, or the error that cut the exchange.
fn send_all(root: &str, length: usize, auth: Option<&str>) -> Result<String, std::io::Error> {
    let mut s = connect(root);
    let auth = auth.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{auth}\
         Content-Length: {length}\r\n\r\n"
    );
    s.write_all(head.as_bytes())?;
    s.write_all(&vec![b' '; length])?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    Ok(answer)
}

#[test]
fn a_client_still_sending_a_refused_body_gets_the_refusal() {
    let server = Server::start(
        &["--api-key-env", "SERVE_EDGES_KEY"],
        &[("SERVE_EDGES_KEY", "sekrit")],
    );
    let root = server.root();
    // Several megabytes more than the sockets buffer, refused before a byte of the body is read.
    let unauthorized = send_all(&root, 24 << 20, None).expect("the exchange was cut");
    assert!(unauthorized.starts_with("HTTP/1.1 401"), "{unauthorized}");
    let too_large = send_all(&root, 24 << 20, Some("sekrit")).expect("the exchange was cut");
    assert!(too_large.starts_with("HTTP/1.1 413"), "{too_large}");
    assert!(too_large.contains("--max-body-bytes"), "{too_large}");
}

#[test]
fn model_cards_are_counted_under_their_route() {
    let server = Server::start(&["--served-model-name", "tiny"], &[]);
    assert_eq!(
        get(&format!("{}/models/tiny", server.base), &[]).status,
        200
    );
    assert_eq!(
        get(&format!("{}/models/tiny", server.base), &[]).status,
        200
    );
    assert_eq!(
        get(&format!("{}/models/other", server.base), &[]).status,
        404
    );
    let metrics = get(&format!("{}/metrics", server.root()), &[]).body;
    for line in [
        "mobile_r1_eval_requests_total{path=\"/v1/models/{id}\",status=\"200\"} 2",
        "mobile_r1_eval_requests_total{path=\"/v1/models/{id}\",status=\"404\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line} in\n{metrics}"
        );
    }
}
