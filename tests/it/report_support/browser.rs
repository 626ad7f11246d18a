//! A DevTools-protocol client for headless Chromium over `--remote-debugging-pipe` (the browser test).

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The `chromium` executable on the PATH.
pub fn chromium() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join("chromium"))
        .find(|p| p.is_file())
}

/// A pipe whose two ends are close-on-exec and numbered ≥ 10 (so they never collide with fds 3 and 4).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds: [RawFd; 2] = [0; 2];
    // SAFETY: plain system calls on fds this function owns.
    unsafe {
        assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
        let high = fds.map(|fd| {
            let h = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10);
            libc::close(fd);
            h
        });
        (OwnedFd::from_raw_fd(high[0]), OwnedFd::from_raw_fd(high[1]))
    }
}

/// Headless Chromium speaking the DevTools protocol on fds 3 and 4, logging its network activity.
fn command(exe: &Path, profile: &Path, net_log: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
    ])
    .args([
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--mute-audio",
    ])
    // Fewer of Chromium's own background requests; those left are told from the pages' by their initiator.
    .args(["--disable-features=NetworkTimeServiceQuerying,OptimizationHints,Translate,MediaRouter"])
    .args([
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        "--no-pings",
    ])
    .args([
        "--safebrowsing-disable-auto-update",
        "--disable-field-trial-config",
    ])
    .args(["--remote-debugging-pipe", "--window-size=1280,900"])
    .arg(format!("--user-data-dir={}", profile.display()))
    .arg(format!("--log-net-log={}", net_log.display()))
    .arg("about:blank")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    cmd
}

/// A DevTools-protocol session with a Chromium over `--remote-debugging-pipe` (NUL-separated JSON).
pub struct Browser {
    child: Child,
    to_browser: std::fs::File,
    from_browser: Receiver<Value>,
    next_id: u64,
}

impl Browser {
    pub fn start(exe: &Path, profile: &Path, net_log: &Path) -> Browser {
        use std::os::fd::AsRawFd;
        let (cmd_read, cmd_write) = pipe();
        let (resp_read, resp_write) = pipe();
        let (cr, rw) = (cmd_read.as_raw_fd(), resp_write.as_raw_fd());
        let mut cmd = command(exe, profile, net_log);
        // SAFETY: only async-signal-safe dup2 calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(cr, 3) < 0 || libc::dup2(rw, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start chromium");
        drop((cmd_read, resp_write));
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(std::fs::File::from(resp_read));
            let mut buf = Vec::new();
            while r.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
                buf.clear();
            }
        });
        Browser {
            child,
            to_browser: std::fs::File::from(cmd_write),
            from_browser: rx,
            next_id: 0,
        }
    }

    /// Send a command and wait (at most 90 s) for its answer; `Err` carries the protocol's error.
    pub fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .expect("write to chromium");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .from_browser
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to {method}"));
            if v["id"] == id {
                return match v.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(v["result"].clone()),
                };
            }
        }
    }

    /// Evaluate an expression in the page (promises awaited) and return its JSON value.
    pub fn eval(&mut self, session: &str, expr: &str) -> Value {
        let r = self
            .call(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": expr, "awaitPromise": true, "returnByValue": true}),
            )
            .unwrap_or_else(|e| panic!("evaluate {expr}: {e}"));
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// Open `url` in a new tab and return the session attached to it, without waiting for the page.
    pub fn open_tab(&mut self, url: &str) -> String {
        let target = self
            .call(None, "Target.createTarget", json!({"url": url}))
            .unwrap()["targetId"]
            .clone();
        self.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        )
        .unwrap()["sessionId"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Wait until `expr` is true in the page (checked every 50 ms, at most `limit`); `false` when it never was.
    pub fn wait_until(&mut self, session: &str, expr: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let r = self.call(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true}),
            );
            if r.is_ok_and(|v| v["result"]["value"] == true) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Open `url` in a new tab and wait (at most 60 s) until the page's script has built the browser.
    pub fn open(&mut self, url: &str) -> String {
        let session = self.open_tab(url);
        let ready = "document.location.protocol === 'file:' && document.body && document.body.dataset.ready === 'yes'";
        if self.wait_until(&session, ready, Duration::from_secs(60)) {
            return session;
        }
        let state = self.call(Some(&session), "Runtime.evaluate",
            json!({"expression": "[location.href, document.readyState, document.body && document.body.dataset.ready]", "returnByValue": true}));
        panic!("the report did not finish building within 60 s: {state:?}");
    }

    /// Close the browser (so it writes its net log) and wait for it, at most 20 s.
    pub fn close(mut self) {
        let _ = self.call(None, "Browser.close", json!({}));
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn file_url(path: &Path) -> String {
    let mut url = String::from("file://");
    for b in path.to_str().unwrap().bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            url.push(b as char);
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

/// Decode standard base64 (the protocol's screenshots).
pub fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=').map(value).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &d)| n | (d as u32) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}
