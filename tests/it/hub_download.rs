//! `--model org/name` through the binary. Fetched over HTTP into the Hugging Face cache, against a stand-in for
//! the Hub on the loopback interface (`HF_ENDPOINT`; no network): a single-file and a sharded checkpoint download
//! and reproduce the golden tokens, a dropped connection resumes where it stopped, a missing optional file is
//! skipped, the cached copy then serves `HF_HUB_OFFLINE=1` runs without a request, and an unknown repo or a
//! missing shard is a clear error. Offline: a cache laid out by Python's `huggingface_hub` (no blobs), and a
//! clear error for a repo that is not cached.
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};

use crate::model_support::{fixture, generate_json, golden_case, json_u64s};

const COMMIT: &str = "89abcdef0123456789abcdef0123456789abcdef";

/// repo id → file name → contents.
type Repos = HashMap<String, HashMap<String, Vec<u8>>>;

/// A minimal Hub: `GET /{org}/{name}/resolve/main/{file}` with a `Range` header, answered the way the Hub's
/// CDN does (206, `Content-Range`, `ETag`, `X-Repo-Commit`); 404 for anything else. Every request is logged as
/// `{path} {first byte}-`. The first full-body download of a file named in `cut` stops half-way (a dropped
/// connection).
struct MockHub {
    url: String,
    log: Arc<Mutex<Vec<String>>>,
}

struct Served {
    repos: Repos,
    cut: Mutex<Vec<String>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl MockHub {
    fn start(repos: Repos, cut: &[&str]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::new(Served {
            repos,
            cut: Mutex::new(cut.iter().map(|s| s.to_string()).collect()),
            log: log.clone(),
        });
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let served = served.clone();
                std::thread::spawn(move || serve(stream, &served));
            }
        });
        Self { url, log }
    }

    fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

fn serve(mut stream: TcpStream, served: &Served) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
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
    served
        .log
        .lock()
        .unwrap()
        .push(format!("{path} {}-", range.0));
    let (repo, name) = path
        .strip_prefix('/')
        .and_then(|p| p.split_once("/resolve/main/"))
        .unwrap_or_default();
    let response = match served.repos.get(repo).and_then(|r| r.get(name)) {
        Some(data) => {
            let end = range.1.unwrap_or(usize::MAX).min(data.len() - 1);
            let body = &data[range.0.min(end + 1)..=end];
            let head = format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {}-{end}/{}\r\n\
                 ETag: \"{:016x}{}\"\r\nX-Repo-Commit: {COMMIT}\r\nConnection: close\r\n\r\n",
                body.len(),
                range.0,
                data.len(),
                checksum(data),
                data.len()
            );
            let mut cut = served.cut.lock().unwrap();
            let body = match cut.iter().position(|c| c == name) {
                Some(i) if range.1.is_none() => {
                    cut.remove(i);
                    &body[..body.len() / 2]
                }
                _ => body,
            };
            [head.as_bytes(), body].concat()
        }
        None => {
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
        }
    };
    let _ = stream.write_all(&response);
}

/// FNV-1a: a stand-in for the Hub's content hash (the cache names blobs by ETag).
fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The tiny-a checkpoint as a repo's files (symlinked tokenizer files read through).
fn tiny_a_files() -> HashMap<String, Vec<u8>> {
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

/// `generate --model {repo}` with the golden prompt, against `hub` (or offline when `hub` is `None`).
fn generate(repo: &str, home: &Path, hub: Option<&MockHub>) -> Output {
    let g = golden_case("tiny-a", None);
    let mut cmd = crate::util::bin();
    cmd.arg("generate")
        .args(["--model", repo, "--prompt", &g.text, "--image"])
        .arg(&g.image)
        .args(["--max-new-tokens", "8", "--ignore-eos", "--json"])
        .env("HF_HOME", home)
        .env("RUST_LOG", "warn");
    for proxy in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        cmd.env_remove(proxy).env_remove(proxy.to_lowercase());
    }
    match hub {
        Some(h) => cmd.env("HF_ENDPOINT", &h.url).env_remove("HF_HUB_OFFLINE"),
        None => cmd
            .env("HF_ENDPOINT", "http://127.0.0.1:9")
            .env("HF_HUB_OFFLINE", "1"),
    };
    cmd.output().expect("run binary")
}

fn assert_golden(out: &Output) {
    let v = generate_json(out);
    assert_eq!(
        json_u64s(&v["token_ids"]),
        golden_case("tiny-a", None).ids[..8]
    );
}

fn fetched(hub: &MockHub, repo: &str) -> Vec<String> {
    let prefix = format!("/{repo}/resolve/main/");
    let mut names: Vec<String> = hub
        .requests()
        .iter()
        .filter_map(|p| {
            p.strip_prefix(&prefix)?
                .split(' ')
                .next()
                .map(str::to_string)
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn hub_repos_download_into_the_cache_and_then_serve_offline_runs() {
    let repos: Repos = [
        ("test-org/tiny-a".to_string(), tiny_a_files()),
        ("test-org/tiny-a-sharded".to_string(), tiny_a_sharded()),
    ]
    .into_iter()
    .collect();
    let hub = MockHub::start(repos, &["model.safetensors"]);
    let home = tempfile::tempdir().unwrap();

    assert_golden(&generate("test-org/tiny-a", home.path(), Some(&hub)));
    let snapshot = home
        .path()
        .join("hub/models--test-org--tiny-a/snapshots")
        .join(COMMIT);
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        assert!(snapshot.join(f).is_file(), "{f} not in the cache");
    }
    let got = fetched(&hub, "test-org/tiny-a");
    assert!(
        !got.iter().any(|f| f.ends_with(".index.json")),
        "single-file weights need no index: {got:?}"
    );
    let half = std::fs::metadata(snapshot.join("model.safetensors"))
        .unwrap()
        .len()
        / 2;
    let resumed = format!("/test-org/tiny-a/resolve/main/model.safetensors {half}-");
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
    let got = fetched(&hub, "test-org/tiny-a-sharded");
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
        &[],
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
