//! The HTML report in real headless Chromium (Debian's `chromium`, installed by `.ci/chromium.sh`; the test
//! skips with a message where it is absent), driven through the DevTools protocol over
//! `--remote-debugging-pipe`: the DOM after the page's script ran has one card per step and the metrics with
//! intervals, the filters and the keyboard change what is shown, hostile responses appear as text and none of
//! their script runs, and no request leaves the file (Chromium's own net log and the page's resource timing).
//!
//! `MOBILE_R1_EVAL_REPORT_SCREENSHOTS=DIR` also writes screenshots of the page (`report.png`,
//! `report-steps.png`) into DIR; the ignored test `report_timing_2000_steps` measures a 2,040-step report.
#![cfg(target_os = "linux")]

mod report_support;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use mobile_r1_eval::report::{RunData, RunOverrides};
use mobile_r1_eval::score::Outcome;
use report_support::{make_benchmark, make_run, run_ok, HOSTILE};
use serde_json::{json, Value};

fn chromium() -> Option<PathBuf> {
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
struct Browser {
    child: Child,
    to_browser: std::fs::File,
    from_browser: Receiver<Value>,
    next_id: u64,
}

impl Browser {
    fn start(exe: &Path, profile: &Path, net_log: &Path) -> Browser {
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

    /// Send a command and wait (at most 30 s) for its answer; `Err` carries the protocol's error.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value, Value> {
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
        let deadline = Instant::now() + Duration::from_secs(30);
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
    fn eval(&mut self, session: &str, expr: &str) -> Value {
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

    /// Open `url` in a new tab and wait until the page's script has built the browser.
    fn open(&mut self, url: &str) -> String {
        let target = self
            .call(None, "Target.createTarget", json!({"url": url}))
            .unwrap()["targetId"]
            .clone();
        let session = self
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
            )
            .unwrap()["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        let ready = "document.location.protocol === 'file:' && document.body && document.body.dataset.ready === 'yes'";
        while Instant::now() < deadline {
            let r = self.call(
                Some(&session),
                "Runtime.evaluate",
                json!({"expression": ready, "returnByValue": true}),
            );
            if r.is_ok_and(|v| v["result"]["value"] == true) {
                return session;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let state = self.call(Some(&session), "Runtime.evaluate",
            json!({"expression": "[location.href, document.readyState, document.body && document.body.dataset.ready]", "returnByValue": true}));
        panic!("the report did not finish building within 30 s: {state:?}");
    }

    /// Close the browser (so it writes its net log) and wait for it, at most 20 s.
    fn close(mut self) {
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

fn file_url(path: &Path) -> String {
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

/// Number of step cards shown.
const VISIBLE: &str =
    "Array.from(document.querySelectorAll('.card')).filter(c => c.offsetParent !== null).length";

fn set_filter(b: &mut Browser, s: &str, id: &str, value: &str) -> usize {
    let expr = format!(
        "(() => {{ const e = document.getElementById('{id}'); if (e.type === 'checkbox') e.checked = {value}; \
         else e.value = {value}; e.dispatchEvent(new Event('input')); e.dispatchEvent(new Event('change')); \
         return {VISIBLE}; }})()"
    );
    b.eval(s, &expr).as_u64().unwrap() as usize
}

fn check_page(b: &mut Browser, s: &str, run: &RunData) {
    let n = run.steps.len();
    let dom = b.eval(s, &format!(
        "({{cards: document.querySelectorAll('.card').length, trajs: document.querySelectorAll('.traj').length, \
          visible: {VISIBLE}, overlays: document.querySelectorAll('.shot svg').length, \
          cis: Array.from(document.querySelectorAll('#headline td.ci')).map(e => e.textContent), \
          method: (document.getElementById('interval-method') || {{}}).textContent, \
          pwned: typeof window.__pwned, text: document.getElementById('trajectories').textContent, \
          injected: document.querySelectorAll('main script, main img[onerror], main textarea, main b').length, \
          count: document.getElementById('f-count').textContent}})"
    ));
    assert_eq!(dom["cards"], n, "one card per step");
    assert_eq!(dom["visible"], n);
    assert_eq!(dom["overlays"], n);
    assert_eq!(dom["trajs"], run.bench.trajectories.len());
    assert_eq!(dom["count"], format!("{n} of {n} steps shown"));
    let cis: Vec<&str> = dom["cis"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(cis.len(), 6);
    assert!(
        cis.iter().all(|c| c.contains(" – ")),
        "every headline metric has an interval: {cis:?}"
    );
    assert!(dom["method"].as_str().unwrap().contains("2000 resamples"));
    assert_eq!(dom["pwned"], "undefined", "no hostile script ran");
    assert_eq!(dom["injected"], 0, "no hostile element was created");
    let text = dom["text"].as_str().unwrap();
    for h in HOSTILE {
        assert!(text.contains(h), "hostile response shown as text: {h}");
    }
    assert!(text.contains("搜索 <script>window.__pwned = 4</script>"));
}

fn check_filters(b: &mut Browser, s: &str, run: &RunData) {
    let wrong = run.steps.iter().filter(|x| !x.correct).count();
    assert_eq!(set_filter(b, s, "f-wrong", "true"), wrong);
    assert_eq!(set_filter(b, s, "f-wrong", "false"), run.steps.len());
    let app = &run.steps[0].app;
    let in_app = run.steps.iter().filter(|x| &x.app == app).count();
    assert_eq!(set_filter(b, s, "f-app", &json!(app).to_string()), in_app);
    assert_eq!(set_filter(b, s, "f-app", "''"), run.steps.len());
    let format = run
        .steps
        .iter()
        .filter(|x| x.outcome == Outcome::FormatError)
        .count();
    assert_eq!(set_filter(b, s, "f-outcome", "'format_error'"), format);
    assert_eq!(set_filter(b, s, "f-outcome", "''"), run.steps.len());
    let clicks = run
        .steps
        .iter()
        .filter(|x| x.gold_type.as_str() == "click")
        .count();
    assert_eq!(set_filter(b, s, "f-type", "'click'"), clicks);
    assert_eq!(set_filter(b, s, "f-type", "''"), run.steps.len());
    let hostile = run
        .steps
        .iter()
        .filter(|x| {
            run.bench.trajectories[x.traj_index]
                .instruction
                .contains("<script>")
        })
        .count();
    assert_eq!(set_filter(b, s, "f-search", "'<SCRIPT>'"), hostile);
    assert_eq!(set_filter(b, s, "f-search", "''"), run.steps.len());
    // Keyboard: j moves the focus to the next visible card, k back.
    let key = |k: &str| {
        format!(
            "document.dispatchEvent(new KeyboardEvent('keydown', {{key: '{k}'}})); \
         Array.from(document.querySelectorAll('.card')).indexOf(document.activeElement)"
        )
    };
    assert_eq!(b.eval(s, &key("j")), 0);
    assert_eq!(b.eval(s, &key("j")), 1);
    assert_eq!(b.eval(s, &key("k")), 0);
}

/// The first screenshot decodes (a thumbnail of a file with spaces and non-ASCII in its name included).
fn check_images(b: &mut Browser, s: &str) {
    let expr = "new Promise(done => { const imgs = Array.from(document.querySelectorAll('.shot img')); \
        const pick = [imgs[0], imgs[imgs.length - 1]]; pick.forEach(i => { i.loading = 'eager'; }); \
        const t0 = Date.now(); (function wait() { if (pick.every(i => i.complete)) done(pick.map(i => i.naturalWidth)); \
        else if (Date.now() - t0 > 20000) done([]); else setTimeout(wait, 50); })(); })";
    assert_eq!(b.eval(s, expr), json!([400, 400]));
    let outside = b.eval(s, "performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith('file:'))");
    assert_eq!(outside, json!([]), "only file: resources");
}

fn base64_decode(text: &str) -> Vec<u8> {
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

/// Screenshots of the top of the page and of the first trajectory's cards, as PNG files in `dir`.
fn screenshots(b: &mut Browser, s: &str, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let metrics = json!({"width": 1100, "height": 1000, "deviceScaleFactor": 1, "mobile": false});
    b.call(Some(s), "Emulation.setDeviceMetricsOverride", metrics)
        .unwrap();
    for (name, scroll) in [
        ("report.png", "window.scrollTo(0, 0)"),
        (
            "report-steps.png",
            "document.querySelectorAll('.traj')[2].scrollIntoView()",
        ),
    ] {
        let wait = format!("{scroll}; new Promise(done => {{ const t0 = Date.now(); (function w() {{ \
            const imgs = Array.from(document.querySelectorAll('.shot img')).slice(0, 6); \
            if (imgs.every(i => i.complete) || Date.now() - t0 > 10000) setTimeout(() => done(true), 300); else setTimeout(w, 50); }})(); }})");
        b.eval(s, &wait);
        let shot = b
            .call(Some(s), "Page.captureScreenshot", json!({"format": "png"}))
            .unwrap();
        std::fs::write(
            dir.join(name),
            base64_decode(shot["data"].as_str().unwrap()),
        )
        .unwrap();
    }
}

/// The request of the control page (the discard port: refused at once; nothing leaves the machine).
const CONTROL: &str = "http://127.0.0.1:9/control.png";

/// The network requests made by pages (not by the browser itself, whose initiator is "not an origin").
fn page_requests(net_log: &Path) -> Vec<String> {
    let log: Value = serde_json::from_str(&std::fs::read_to_string(net_log).expect("net log"))
        .expect("net log JSON");
    let start = &log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"];
    let mut urls: Vec<String> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| &e["type"] == start && e["params"]["initiator"] != "not an origin")
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_owned))
        .filter(|u| !u.starts_with("file:"))
        .collect();
    urls.dedup();
    urls
}

#[test]
fn report_in_headless_chromium() {
    let Some(exe) = chromium() else {
        eprintln!(
            "skipped: `chromium` is not installed (bash .ci/chromium.sh installs it as root)"
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(tmp.path(), 2);
    let run_dir = tmp.path().join("run with spaces ü");
    make_run(&data, &run_dir, 1);
    run_ok(&["report", run_dir.to_str().unwrap()]);
    let run = RunData::load(&run_dir, &RunOverrides::default()).unwrap();
    let page = run_dir.join("report.html");
    let net_log = tmp.path().join("net-log.json");
    let profile = tmp.path().join("profile");
    let mut b = Browser::start(&exe, &profile, &net_log);
    let s = b.open(&file_url(&page));
    check_page(&mut b, &s, &run);
    check_filters(&mut b, &s, &run);
    check_images(&mut b, &s);
    if let Some(dir) = std::env::var_os("MOBILE_R1_EVAL_REPORT_SCREENSHOTS") {
        screenshots(&mut b, &s, Path::new(&dir));
    }
    // A control page without a policy makes one request: it proves the net log shows the pages' requests.
    let control = tmp.path().join("control.html");
    std::fs::write(&control, format!("<img src=\"{CONTROL}\">")).unwrap();
    let c = b
        .call(
            None,
            "Target.createTarget",
            json!({"url": file_url(&control)}),
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    drop(c);
    b.close();
    let page_requests = page_requests(&net_log);
    assert_eq!(
        page_requests,
        vec![CONTROL.to_owned()],
        "only the control page's request left a file"
    );
}

/// How long `report` takes on 2,040 steps (the sample replicated 68 times) and how big its output is.
#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn report_timing_2000_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(tmp.path(), 68);
    let run = tmp.path().join("run");
    make_run(&data, &run, 1);
    for pass in ["first (thumbnails made)", "second (thumbnails reused)"] {
        let t0 = Instant::now();
        run_ok(&["report", run.to_str().unwrap()]);
        let secs = t0.elapsed().as_secs_f64();
        let html = std::fs::metadata(run.join("report.html")).unwrap().len();
        let thumbs: u64 = std::fs::read_dir(run.join("report"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        let n = std::fs::read_dir(run.join("report")).unwrap().count();
        println!(
            "{pass}: {secs:.2} s; report.html {:.2} MB; {n} thumbnails, {:.2} MB",
            html as f64 / 1e6,
            thumbs as f64 / 1e6
        );
    }
}
