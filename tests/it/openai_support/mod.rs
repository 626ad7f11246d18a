//! Helpers of the OpenAI tests: `serve` on the tiny checkpoint as a child process (on a port the system picks,
//! read from its first stdout line), plain HTTP calls, and a stand-in server whose faults a test scripts.

pub mod stub;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The tiny checkpoint.
pub fn tiny() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b")
}

/// The pixel bound every test uses: the sample's screenshots become a few dozen image tokens.
pub const MAX_PIXELS: &str = "40000";

/// A running `serve`.
pub struct Server {
    /// The child process.
    pub child: Child,
    /// `http://127.0.0.1:PORT/v1`.
    pub base: String,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// Start `serve --model tiny-b --port 0 --max-pixels 40000` with `extra` flags and `envs`, and wait (up to
    /// 120 s) for it to say where it listens.
    pub fn start(extra: &[&str], envs: &[(&str, &str)]) -> Self {
        Self::start_model(&tiny(), extra, envs)
    }

    /// [`Server::start`] with the checkpoint `model`.
    pub fn start_model(model: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Self {
        Self::start_with(model, &["--max-pixels", MAX_PIXELS], extra, envs)
    }

    /// `serve --model tiny-b --port 0` with `extra` flags only (the server's own pixel bounds).
    pub fn start_unbounded(extra: &[&str]) -> Self {
        Self::start_with(&tiny(), &[], extra, &[])
    }

    fn start_with(model: &Path, pixels: &[&str], extra: &[&str], envs: &[(&str, &str)]) -> Self {
        let mut cmd = crate::util::bin();
        cmd.args(["serve", "--model"])
            .arg(model)
            .args(["--port", "0"])
            .args(pixels)
            .args(extra)
            .envs(envs.iter().copied())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start serve");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| {
                let _ = child.kill();
                panic!("serve did not start; stderr:\n{}", log.lock().unwrap())
            });
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        Self {
            child,
            base,
            stderr: log,
        }
    }

    /// `http://127.0.0.1:PORT` (without `/v1`).
    pub fn root(&self) -> String {
        self.base.trim_end_matches("/v1").to_string()
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `serve` that runs one sequence at a time, of up to 30000 tokens, with `--shutdown-timeout` `seconds`.
pub fn one_at_a_time(seconds: &str) -> Server {
    let flags = ["--batch-size", "1", "--max-new-tokens", "30000"];
    Server::start(
        &[&flags[..], &["--shutdown-timeout", seconds]].concat(),
        &[],
    )
}

/// Send `kill -SIG pid`.
pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill -{sig} {pid} failed");
}

/// Wait for `child` to exit, up to `limit`.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// An HTTP answer: status, `Retry-After`, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: String,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(120))
        .build()
}

fn answer(r: Result<ureq::Response, ureq::Error>) -> Answer {
    let resp = match r {
        Ok(resp) => resp,
        Err(ureq::Error::Status(_, resp)) => resp,
        Err(e) => panic!("request failed: {e}"),
    };
    Answer {
        status: resp.status(),
        retry_after: resp.header("retry-after").map(str::to_string),
        body: resp.into_string().unwrap_or_default(),
    }
}

/// `POST url` with `body` and headers.
pub fn post(url: &str, body: &[u8], headers: &[(&str, &str)]) -> Answer {
    let mut req = agent().post(url).set("Content-Type", "application/json");
    for (k, v) in headers {
        req = req.set(k, v);
    }
    answer(req.send_bytes(body))
}

/// `GET url` with headers.
pub fn get(url: &str, headers: &[(&str, &str)]) -> Answer {
    let mut req = agent().get(url);
    for (k, v) in headers {
        req = req.set(k, v);
    }
    answer(req.call())
}

/// A PNG of the sample benchmark's first screenshot (written once into `dir`).
pub fn sample_png(dir: &Path) -> PathBuf {
    let data = dir.join("sample");
    if !data.join("data.jsonl").exists() {
        let o = crate::util::bin()
            .args(["sample", "--out"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let first = std::fs::read_to_string(data.join("data.jsonl")).unwrap();
    let line: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    data.join(line["trajectory"][0]["image"].as_str().unwrap())
}

/// Wait (up to 60 s, checking every 10 ms) until `f` holds; panic naming `what` otherwise.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "waited 60 s for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Start a greedy request for `max_tokens` tokens (end of sequence ignored) on its own thread, and wait until
/// `server`'s `/metrics` shows it running; its answer comes from the thread.
pub fn start_long_request(server: &Server, max_tokens: usize) -> std::thread::JoinHandle<Answer> {
    let url = format!("{}/chat/completions", server.base);
    let metrics = format!("{}/metrics", server.root());
    let long = serde_json::json!({"messages": [{"role": "user", "content": "Write a long story."}],
        "max_tokens": max_tokens, "ignore_eos": true});
    let running = std::thread::spawn(move || post(&url, long.to_string().as_bytes(), &[]));
    wait_for("the long request to run", || {
        get(&metrics, &[])
            .body
            .lines()
            .any(|l| l == "mobile_r1_eval_running_sequences 1")
    });
    running
}

/// The whole answer to a chat request's headers announcing `length` bytes, sent without the body.
pub fn raw_post(root: &str, length: usize) -> String {
    use std::io::{Read, Write};
    let addr = root.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {length}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// A connection to the server at `root` (`http://127.0.0.1:PORT`).
pub fn connect(root: &str) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(root.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Whether the server closed `s` (a read returns end of file, or the connection was reset).
pub fn closed_by_server(s: &mut std::net::TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match std::io::Read::read(s, &mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}
