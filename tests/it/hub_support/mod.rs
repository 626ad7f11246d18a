//! A stand-in for the Hugging Face Hub on the loopback interface, and listeners that misbehave (accept and never
//! answer; count and refuse every connection). Every listener stops by itself after [`LIFETIME`].
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The commit every stand-in repo is at.
pub const COMMIT: &str = "89abcdef0123456789abcdef0123456789abcdef";

/// How long a listener serves before it stops (tests end well before).
pub const LIFETIME: Duration = Duration::from_secs(300);

/// repo key (`org/name` for a model, `datasets/org/name` for a dataset) → file path → contents.
pub type Repos = HashMap<String, HashMap<String, Vec<u8>>>;

/// What the stand-in does besides answering; files are named `{repo}/{path}` (e.g. `test-org/tiny-a/config.json`,
/// `datasets/o/n/data.jsonl`) or by their path alone (in every repo).
#[derive(Default)]
pub struct Faults {
    /// The first full-body download of each of these files stops half-way (a dropped connection).
    pub cut: Vec<String>,
    /// file → how many requests for it get HTTP 500 first.
    pub fail: HashMap<String, u32>,
    /// file → an ETag (a 64-hex "SHA-256") that does not match its bytes.
    pub wrong_sha: HashMap<String, String>,
}

/// A minimal Hub: `GET /{repo}/resolve/{main|COMMIT}/{file}` (models) and `/datasets/{repo}/resolve/…`
/// (datasets) with a `Range` header, answered the way the Hub's CDN does (206, `Content-Range`, `ETag`,
/// `X-Repo-Commit`); `GET /api/datasets/{repo}/revision/{rev}` (the commit and the file list); 404 with
/// `X-Error-Code` otherwise. Every request is logged as `{path} {first byte}-`.
pub struct MockHub {
    pub url: String,
    log: Arc<Mutex<Vec<String>>>,
}

struct Served {
    repos: Repos,
    faults: Mutex<Faults>,
    log: Arc<Mutex<Vec<String>>>,
}

/// Accept connections until `LIFETIME` has passed, handing each to `handle` on its own thread.
fn serve_for(listener: TcpListener, handle: impl Fn(TcpStream) + Send + Sync + 'static) {
    listener.set_nonblocking(true).unwrap();
    let handle = Arc::new(handle);
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < LIFETIME {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    let h = handle.clone();
                    std::thread::spawn(move || h(stream));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
}

impl MockHub {
    pub fn start(repos: Repos, faults: Faults) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::new(Served {
            repos,
            faults: Mutex::new(faults),
            log: log.clone(),
        });
        serve_for(listener, move |stream| serve(stream, &served));
        Self { url, log }
    }

    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The distinct files of `repo` (e.g. `test-org/tiny-a`, `datasets/o/n`) that were requested.
    pub fn fetched(&self, repo: &str) -> Vec<String> {
        let prefix = format!("/{repo}/resolve/");
        let mut names: Vec<String> = self
            .requests()
            .iter()
            .filter_map(|p| {
                let rest = p.strip_prefix(&prefix)?.split(' ').next()?;
                rest.split_once('/').map(|(_, f)| f.to_string())
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

fn read_request(stream: &TcpStream) -> Option<(String, (usize, Option<usize>))> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut range = (0usize, None::<usize>);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            if name.eq_ignore_ascii_case("range") {
                let spec = value.trim().trim_start_matches("bytes=");
                let (a, b) = spec.split_once('-').unwrap_or((spec, ""));
                range = (a.parse().unwrap_or(0), b.parse().ok());
            }
        }
    }
    Some((path, range))
}

fn serve(mut stream: TcpStream, served: &Served) {
    let Some((path, range)) = read_request(&stream) else {
        return;
    };
    served
        .log
        .lock()
        .unwrap()
        .push(format!("{path} {}-", range.0));
    let path = percent_decode(&path);
    let response = if let Some(api) = path.strip_prefix("/api/") {
        revision_info(served, api)
    } else {
        file(served, path.trim_start_matches('/'), range)
    };
    let _ = stream.write_all(&response);
}

fn not_found(code: &str) -> Vec<u8> {
    format!("HTTP/1.1 404 Not Found\r\nX-Error-Code: {code}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .into_bytes()
}

/// `datasets/{org}/{name}/revision/{rev}` → `{"sha", "siblings"}`.
fn revision_info(served: &Served, api: &str) -> Vec<u8> {
    let Some((repo, rev)) = api.split_once("/revision/") else {
        return not_found("EntryNotFound");
    };
    let Some(files) = served.repos.get(repo) else {
        return not_found("RepoNotFound");
    };
    if rev != "main" && rev != COMMIT {
        return not_found("RevisionNotFound");
    }
    let siblings: Vec<serde_json::Value> = files
        .keys()
        .map(|f| serde_json::json!({ "rfilename": f }))
        .collect();
    let body = serde_json::json!({ "id": repo, "sha": COMMIT, "siblings": siblings }).to_string();
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn file(served: &Served, path: &str, range: (usize, Option<usize>)) -> Vec<u8> {
    let Some((repo, rest)) = path.split_once("/resolve/") else {
        return not_found("EntryNotFound");
    };
    let (rev, name) = rest.split_once('/').unwrap_or((rest, ""));
    let Some(files) = served.repos.get(repo) else {
        return not_found("RepoNotFound");
    };
    if rev != "main" && rev != COMMIT {
        return not_found("RevisionNotFound");
    }
    let Some(data) = files.get(name) else {
        return not_found("EntryNotFound");
    };
    let mut faults = served.faults.lock().unwrap();
    let full = format!("{repo}/{name}");
    let fail_key = if faults.fail.contains_key(&full) {
        full.clone()
    } else {
        name.to_string()
    };
    if let Some(n) = faults.fail.get_mut(&fail_key).filter(|n| **n > 0) {
        *n -= 1;
        return b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            .to_vec();
    }
    let end = range
        .1
        .unwrap_or(usize::MAX)
        .min(data.len().saturating_sub(1));
    let body = &data[range.0.min(end + 1)..=end];
    let etag = faults
        .wrong_sha
        .get(&full)
        .or_else(|| faults.wrong_sha.get(name))
        .cloned()
        .unwrap_or_else(|| format!("{:016x}{}", checksum(data), data.len()));
    let head = format!(
        "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {}-{end}/{}\r\n\
         ETag: \"{etag}\"\r\nX-Repo-Commit: {COMMIT}\r\nConnection: close\r\n\r\n",
        body.len(),
        range.0,
        data.len(),
    );
    let body = match faults.cut.iter().position(|c| *c == name || *c == full) {
        Some(i) if range.1.is_none() => {
            faults.cut.remove(i);
            &body[..body.len() / 2]
        }
        _ => body,
    };
    [head.as_bytes(), body].concat()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (
            b[i],
            s.get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok()),
        ) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// FNV-1a: a stand-in for the Hub's content hash (the cache names blobs by ETag).
pub fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A server that accepts every connection and never answers (nor closes it).
pub struct Silent {
    pub url: String,
    pub accepted: Arc<AtomicUsize>,
}

impl Silent {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        serve_for(listener, move |stream| {
            count.fetch_add(1, Ordering::SeqCst);
            // Hold the connection open without a byte until the listener's lifetime ends.
            std::thread::sleep(LIFETIME);
            drop(stream);
        });
        Self { url, accepted }
    }
}

/// A listener that counts every connection and closes it at once (a proxy or endpoint that must never be
/// used).
pub struct Refusing {
    pub url: String,
    pub connections: Arc<AtomicUsize>,
}

impl Refusing {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let count = connections.clone();
        serve_for(listener, move |stream| {
            count.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        });
        Self { url, connections }
    }

    pub fn count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// The process environment of a hub test: a fresh `HF_HOME`, no proxies, nothing offline, unless set after.
pub fn hub_env(cmd: &mut std::process::Command, home: &std::path::Path) {
    cmd.env("HF_HOME", home)
        .env("RUST_LOG", "warn")
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("MOBILE_R1_EVAL_HUB_TIMEOUT")
        .env_remove("MOBILE_R1_EVAL_HUB_RETRIES");
    for proxy in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"] {
        cmd.env_remove(proxy).env_remove(proxy.to_lowercase());
    }
}
