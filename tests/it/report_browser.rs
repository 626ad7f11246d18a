//! The HTML report in real headless Chromium (Debian's `chromium`, installed by `.ci/chromium.sh`; the test
//! skips with a message where it is absent), driven through the DevTools protocol over
//! `--remote-debugging-pipe`: the DOM after the page's script ran has one card per step and the metrics with
//! intervals, the filters and the keyboard change what is shown, hostile responses appear as text and none of
//! their script runs, and no request leaves the file (Chromium's own net log and the page's resource timing);
//! `compare.html` shows one card per flipped step and filters them by direction.
//!
//! `MOBILE_R1_EVAL_REPORT_SCREENSHOTS=DIR` also writes screenshots of the page (`report.png`,
//! `report-steps.png`) into DIR; the ignored test `report_timing_2000_steps` measures a 2,040-step report.
#![cfg(target_os = "linux")]
use std::path::Path;
use std::time::{Duration, Instant};

use crate::report_support::browser::{base64_decode, chromium, file_url, Browser};
use crate::report_support::{make_benchmark, make_run, run_ok, HOSTILE};
use mobile_r1_eval::report::{RunData, RunOverrides};
use mobile_r1_eval::rundir::RunDir;
use mobile_r1_eval::score::Outcome;
use serde_json::{json, Value};

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
    assert_eq!(cis.len(), 10, "nine metrics and the judge's success");
    // Rates have an interval; the three counts (args, type and format errors) do not.
    let with: Vec<bool> = cis.iter().map(|c| c.contains(" – ")).collect();
    assert_eq!(
        with,
        [true, true, true, true, true, true, false, false, false, true],
        "{cis:?}"
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
        else if (Date.now() - t0 > 60000) done([]); else setTimeout(wait, 50); })(); })";
    assert_eq!(b.eval(s, expr), json!([400, 400]));
    let outside = b.eval(s, "performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith('file:'))");
    assert_eq!(outside, json!([]), "only file: resources");
}

/// Screenshots of the top of the page and of the third trajectory's cards, as PNG files in `dir`.
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

/// `compare.html` of the run against another: one card per flipped step with both outcomes, the flip filter,
/// no hostile script.
fn check_compare(b: &mut Browser, tmp: &Path, data: &Path, run_a: &Path) {
    let (run_b, out) = (tmp.join("run b"), tmp.join("compare é"));
    make_run(data, &run_b, 0);
    let (a, o) = (run_a.to_str().unwrap(), out.to_str().unwrap());
    run_ok(&[
        "report",
        "--compare",
        a,
        run_b.to_str().unwrap(),
        "--out",
        o,
    ]);
    let c: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    let (a_only, b_only) = (
        c["mcnemar"]["a_only"].as_u64().unwrap(),
        c["mcnemar"]["b_only"].as_u64().unwrap(),
    );
    assert!(a_only > 0 && b_only > 0, "the runs differ both ways");
    let s = b.open(&file_url(&out.join("compare.html")));
    let dom = b.eval(&s, &format!(
        "({{cards: document.querySelectorAll('.card').length, visible: {VISIBLE}, \
          both: Array.from(document.querySelectorAll('.card')).every(c => c.querySelectorAll('.badge').length === 2), \
          pwned: typeof window.__pwned, injected: document.querySelectorAll('main script, main img[onerror]').length}})"
    ));
    assert_eq!(
        dom,
        json!({"cards": a_only + b_only, "visible": a_only + b_only, "both": true, "pwned": "undefined", "injected": 0})
    );
    assert_eq!(
        set_filter(b, &s, "f-flip", "'right_to_wrong'") as u64,
        a_only
    );
    assert_eq!(
        set_filter(b, &s, "f-flip", "'wrong_to_right'") as u64,
        b_only
    );
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
    let run = RunData::load(&RunDir::new(&run_dir), &RunOverrides::default()).unwrap();
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
    check_compare(&mut b, tmp.path(), &data, &run_dir);
    // A control page without a policy makes one request: it proves the net log shows the pages' requests.
    let control = tmp.path().join("control.html");
    std::fs::write(&control, format!("<img src=\"{CONTROL}\">")).unwrap();
    let c = b.open_tab(&file_url(&control));
    // The image has failed (the port refuses at once) once the page has loaded and the image is complete with
    // no pixels: its request is then in the net log, which the browser writes when it closes.
    let failed = "document.readyState === 'complete' && document.images.length === 1 \
        && document.images[0].complete && document.images[0].naturalWidth === 0";
    assert!(
        b.wait_until(&c, failed, Duration::from_secs(60)),
        "the control page's image request did not end within 60 s"
    );
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
