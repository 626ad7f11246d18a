//! Helpers of the run-folder reliability tests (`reliability*.rs`): the binary, a copy of the sample, the
//! `eval` command they run, bounded waits, and signals sent at states the test has observed (a run frozen with
//! SIGSTOP while they are queued), so that no outcome depends on how fast the machine is.
#![allow(dead_code)] // each test binary uses a part

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use crate::util::text;
/// The binary under test.
pub use crate::util::BIN;

/// The tiny-b checkpoint (random weights, Hub layout).
pub fn tiny_b() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b")
}

/// The embedded sample written to `dir/data` (a copy each test owns).
pub fn sample(dir: &Path) -> PathBuf {
    let data = dir.join("data");
    let o = Command::new(BIN)
        .args(["sample", "--out"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    data
}

/// `eval` of `model` on `data` into `out` (small screenshots, 8 new tokens), plus `extra`.
pub fn eval_cmd(model: &Path, data: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("eval")
        .arg("--model")
        .arg(model)
        .arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("RUST_LOG", "info");
    for (flag, default) in [("--max-pixels", "200704"), ("--max-new-tokens", "8")] {
        if !extra.contains(&flag) {
            c.args([flag, default]);
        }
    }
    c
}

/// Start `c` with its output captured.
pub fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The JSON lines of `path`, keyed by `key`, each with how often it occurs.
pub fn key_counts(path: &Path, key: impl Fn(&Value) -> String) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let v: Value = serde_json::from_str(line).expect("only whole lines stay in the file");
        *counts.entry(key(&v)).or_insert(0) += 1;
    }
    counts
}

/// `"<trajectory>#<step>"` of a predictions line.
pub fn step_key(v: &Value) -> String {
    format!("{}#{}", v["trajectory"], v["step"])
}

/// Wait (bounded) until `cond` holds, checking every 5 ms.
pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether `path` exists and holds at least one byte (a first saved line).
pub fn not_empty(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.len() > 0)
}

/// The output of `child` once it exits, waiting at most `limit` (then it is killed and the test fails). Its
/// pipes are read meanwhile, so a chatty child never blocks on a full pipe.
pub fn output_within(mut child: Child, what: &str, limit: Duration) -> Output {
    fn drain(
        pipe: Option<impl std::io::Read + Send + 'static>,
    ) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    }
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = Output {
        status: status.unwrap_or_else(|| child.wait().unwrap()),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    assert!(
        status.is_some(),
        "{what} did not exit within {limit:?}: {}",
        text(&o)
    );
    o
}

/// Send `sig` to `child`.
pub fn send(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped yet.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill({sig}): {}", std::io::Error::last_os_error());
}

/// A child stopped with SIGSTOP until this is dropped (SIGCONT), even when an assertion fails meanwhile.
pub struct Frozen<'a>(&'a Child);

impl<'a> Frozen<'a> {
    /// Stop `child` and wait until it has stopped (or exited, which the caller's later checks then show).
    pub fn new(child: &'a Child) -> Self {
        send(child, libc::SIGSTOP);
        // SAFETY: waitid(2) on our own child; WNOWAIT leaves its state to be collected by `Child::wait`.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WSTOPPED | libc::WEXITED | libc::WNOWAIT;
            libc::waitid(libc::P_PID, child.id() as libc::id_t, &mut info, flags);
        }
        Frozen(child)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        send(self.0, libc::SIGCONT);
    }
}

/// A pseudo-random fraction in [0, 1) from the clock (no dependency needed for a few kill moments).
pub fn random_fraction(round: u64) -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let x = (nanos ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0x2545_f491_4f6c_dd1d);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Start a run on `data` into `run`, stop it (SIGSTOP) the moment its first step is saved, queue `signals`
/// while it is stopped, then let it go on, and return its output. Queued signals are delivered as soon as it
/// continues, so they land with at most the steps finished during one 5 ms check and the batch in flight
/// saved, on a fast machine as on a slow one.
pub fn interrupted_run(run: &Path, data: &Path, signals: &[libc::c_int]) -> Output {
    // Four at a time: at most 4 steps in flight when the signal lands, 30 in all.
    let child = spawn(eval_cmd(&tiny_b(), data, run, &["--batch-size", "4"]));
    let preds = run.join("predictions.jsonl");
    wait_for("a first saved step", Duration::from_secs(60), || {
        not_empty(&preds)
    });
    {
        let _frozen = Frozen::new(&child);
        for &s in signals {
            send(&child, s);
        }
    }
    output_within(child, "the interrupted run", Duration::from_secs(120))
}
