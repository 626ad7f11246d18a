//! `serve` shared with others, through the binary on loopback: idle connections beyond the cap wait in the backlog
//! and are closed by the request-head deadline, so a real request is still answered; a slowloris does not keep a
//! SIGTERM from exiting within the shutdown deadline; while draining, `/health` and new requests get 503 and a
//! request still running at the deadline gets an error; and a hostile burst (long texts, many large pictures,
//! large bodies, bodies announced over the limit) never lifts the server's peak memory more than 1 GiB over its
//! footprint after the start; and without `--max-pixels` a picture costs at most 1280 image tokens.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::openai_support::{
    closed_by_server, connect, get, one_at_a_time, post, raw_post, signal, start_long_request,
    wait_exit, wait_for, Server,
};

/// A short greedy chat request.
fn small() -> Vec<u8> {
    json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        .to_string()
        .into_bytes()
}

#[test]
fn idle_connections_beyond_the_cap_do_not_block_a_request() {
    let server = Server::start(&["--max-connections", "4", "--header-timeout", "1"], &[]);
    let root = server.root();
    // Three times the cap, sending nothing: the first four are accepted, the rest wait in the backlog.
    let mut idle: Vec<TcpStream> = (0..12).map(|_| connect(&root)).collect();
    let t0 = Instant::now();
    let a = post(&format!("{}/chat/completions", server.base), &small(), &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "the request waited {:?}",
        t0.elapsed()
    );
    assert!(
        closed_by_server(&mut idle[0]),
        "an idle connection was kept open"
    );
}

#[test]
fn a_slowloris_does_not_keep_sigterm_from_exiting() {
    let mut server = Server::start(&["--header-timeout", "120", "--shutdown-timeout", "2"], &[]);
    let mut slow = connect(&server.root());
    let dripping = std::thread::spawn(move || {
        let _ = slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ");
        // One byte every 100 ms, for at most a minute, until the server hangs up.
        for _ in 0..600 {
            if slow.write_all(b"a").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(get(&format!("{}/health", server.root()), &[]).status, 200);
    let t0 = Instant::now();
    signal(server.child.id(), "TERM");
    let status = wait_exit(&mut server.child, Duration::from_secs(30)).expect("serve did not stop");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "took {:?} to stop",
        t0.elapsed()
    );
    assert!(status.success(), "{status:?}: {}", server.log());
    dripping.join().unwrap();
}

#[test]
fn draining_answers_503_and_the_deadline_cuts_off_what_still_runs() {
    let mut server = one_at_a_time("3");
    let url = format!("{}/chat/completions", server.base);
    let running = start_long_request(&server, 30000);
    let t0 = Instant::now();
    signal(server.child.id(), "TERM");
    wait_for("/health to say 503", || {
        get(&format!("{}/health", server.root()), &[]).status == 503
    });
    let late = post(&url, &small(), &[]);
    assert_eq!(late.status, 503, "{}", late.body);
    assert_eq!(late.json()["error"]["code"], "unavailable");
    let cut = running.join().unwrap();
    assert_eq!(cut.status, 503, "{}", cut.body);
    assert!(
        cut.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--shutdown-timeout"),
        "{}",
        cut.body
    );
    let status = wait_exit(&mut server.child, Duration::from_secs(30)).expect("serve did not stop");
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "took {:?} to stop",
        t0.elapsed()
    );
    assert!(
        !status.success(),
        "a cut-off request must not end in success"
    );
    assert!(server.log().contains("unanswered"), "{}", server.log());
}

/// `VmRSS` and `VmHWM` of process `pid`, in bytes.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {key} in\n{status}"))
            * 1024
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}

/// A PNG of `w`x`h` pixels (one colour: small to send, as costly as any to decode).
fn big_png(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbImage::from_pixel(w, h, image::Rgb([40, 90, 160]));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

#[cfg(target_os = "linux")]
#[test]
fn a_hostile_burst_stays_within_a_stated_memory_bound() {
    // The default limits, but for the tests' small pictures after resizing.
    let server = Server::start(&[], &[]);
    let url = format!("{}/chat/completions", server.base);
    let pid = server.child.id();
    assert_eq!(post(&url, &small(), &[]).status, 200);
    let (footprint, _) = memory(pid);
    const BOUND: u64 = 1 << 30;

    // Just under the 1 MiB text limit: tokenised, two at a time.
    let words = "the quick brown fox jumps over the lazy dog; ".repeat((1 << 20) / 46);
    let text = Arc::new(
        json!({"messages": [{"role": "user", "content": words}], "max_tokens": 1})
            .to_string()
            .into_bytes(),
    );
    // Eight pictures of 15.2 million pixels each (under the 16 million limit), all decoded.
    let picture = mobile_r1_eval::openai::png_data_url(&big_png(3900, 3900));
    let parts: Vec<_> = (0..8)
        .map(|_| json!({"type": "image_url", "image_url": {"url": picture}}))
        .collect();
    let pictures = Arc::new(
        json!({"messages": [{"role": "user", "content": parts}], "max_tokens": 1})
            .to_string()
            .into_bytes(),
    );
    // A picture of 36 million pixels: refused from its header.
    let bomb = Arc::new(
        json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url":
            mobile_r1_eval::openai::png_data_url(&big_png(6000, 6000))}}]}]})
        .to_string()
        .into_bytes(),
    );
    // Bodies just under the 16 MiB body limit.
    let mut filler = b"{\"messages\": [{\"role\": \"user\", \"content\": \"".to_vec();
    filler.resize((16 << 20) - 100, b'x');
    filler.extend_from_slice(b"\"}]}");
    let filler = Arc::new(filler);

    let mut burst = Vec::new();
    let mut send = |body: &Arc<Vec<u8>>, n: usize| {
        for _ in 0..n {
            let (url, body) = (url.clone(), body.clone());
            burst.push(std::thread::spawn(move || post(&url, &body, &[]).status));
        }
    };
    send(&text, 6);
    send(&pictures, 3);
    send(&bomb, 3);
    send(&filler, 16);
    let announced: Vec<_> = (0..8)
        .map(|_| {
            let root = server.root();
            std::thread::spawn(move || raw_post(&root, 100 << 20))
        })
        .collect();
    for a in announced {
        assert!(a.join().unwrap().starts_with("HTTP/1.1 413"));
    }
    let statuses: Vec<u16> = burst.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(
        statuses.iter().all(|s| *s < 500),
        "{statuses:?}\n{}",
        server.log()
    );
    assert!(statuses.contains(&200), "{statuses:?}");
    let (_, peak) = memory(pid);
    eprintln!(
        "footprint {} MiB, peak {} MiB under the burst",
        footprint >> 20,
        peak >> 20
    );
    assert!(
        peak < footprint + BOUND,
        "peak {} MiB over the footprint {} MiB plus the bound {} MiB",
        peak >> 20,
        footprint >> 20,
        BOUND >> 20
    );
    assert_eq!(post(&url, &small(), &[]).status, 200);
}

#[test]
fn without_max_pixels_a_picture_costs_at_most_1280_tokens() {
    let server = Server::start_unbounded(&["--max-new-tokens", "4"]);
    // 2000x2000 would be 71 · 71 = 5041 image tokens under the checkpoint's bounds; serve's default makes it
    // 35 · 35 = 1225 (980x980 pixels, within 1280 · 28² pixels).
    let picture = mobile_r1_eval::openai::png_data_url(&big_png(2000, 2000));
    let body = json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": picture}}, {"type": "text", "text": "hi"}]}], "max_tokens": 1});
    let a = post(
        &format!("{}/chat/completions", server.base),
        body.to_string().as_bytes(),
        &[],
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let prompt = a.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!((1225..1300).contains(&prompt), "{prompt} prompt tokens");
}
