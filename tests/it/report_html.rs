//! The HTML report and the run comparison without a browser: files written, escaping, thumbnails, bootstrap
//! intervals in `metrics.json`, `compare.json`'s statistics, and the refusals.
use std::path::Path;
use std::process::Command;

use crate::report_support::{make_benchmark, make_run, run_ok, BIN, HOSTILE};
use mobile_r1_eval::report::{RunData, RunOverrides};
use mobile_r1_eval::rundir::RunDir;
use mobile_r1_eval::score::{intervals, paired_intervals};
use serde_json::Value;

/// `report --compare A B --out OUT`, which must succeed; its `compare.json`.
fn compare(a: &Path, b: &Path, out: &Path) -> Value {
    run_ok(&[
        "report",
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap()
}

/// The JSON data block of a report page.
fn data_block(page: &str) -> Value {
    let start = page.find("id=\"report-data\">").expect("data block") + "id=\"report-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).expect("data block is JSON")
}

#[test]
fn report_command_writes_an_escaped_offline_page() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(tmp.path(), 2);
    let run = tmp.path().join("run ü");
    make_run(&data, &run, 0);
    run_ok(&["report", run.to_str().unwrap()]);
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(page.contains("http-equiv=\"Content-Security-Policy\""));
    assert!(
        page.contains("default-src &#39;none&#39;"),
        "CSP forbids loads"
    );
    // Only the page's two script elements: the data block and the script; no hostile markup anywhere.
    assert_eq!(page.matches("<script").count(), 2);
    for bad in [
        "window.__pwned = 1</script>",
        "<img src=x",
        "<b>model</b>",
        "<b>app</b>",
    ] {
        assert!(!page.contains(bad), "unescaped {bad:?}");
    }
    assert!(page.contains("tiny &lt;b&gt;model&lt;/b&gt;"));
    assert!(page.matches("<svg").count() >= 7, "charts drawn");
    let d = data_block(&page);
    let trajs = d["trajectories"].as_array().unwrap();
    assert_eq!(trajs.len(), 10);
    let steps: Vec<&Value> = trajs
        .iter()
        .flat_map(|t| t["steps"].as_array().unwrap())
        .collect();
    assert_eq!(steps.len(), 60);
    let responses: String = steps
        .iter()
        .filter_map(|s| s["response"].as_str())
        .collect();
    for h in HOSTILE {
        assert!(responses.contains(h), "hostile response kept as data: {h}");
    }
    // One thumbnail per distinct screenshot, about 400 px wide, named in plain ASCII.
    let thumbs: Vec<_> = std::fs::read_dir(run.join("report"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(thumbs.len(), 60);
    let first = image::open(&thumbs[0]).unwrap();
    assert_eq!(first.width(), 400);
    assert!(steps
        .iter()
        .all(|s| s["img"].as_str().is_some_and(|u| u.is_ascii())));
}

#[test]
fn score_writes_intervals_into_metrics_and_a_report() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(tmp.path(), 1);
    let run = tmp.path().join("run");
    make_run(&data, &run, 1);
    let out = tmp.path().join("scored");
    let preds = run.join("predictions.jsonl");
    run_ok(&[
        "score",
        "--data",
        data.to_str().unwrap(),
        "--predictions",
        preds.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    let iv = &m["intervals"];
    assert_eq!(iv["resamples"], 2000);
    assert_eq!(iv["confidence"], 0.95);
    assert!(iv["seed"].is_u64());
    for key in [
        "accuracy",
        "task_success",
        "tail_success",
        "type_accuracy",
        "avg_args_errors",
        "full_format_rate",
    ] {
        let (lo, hi, v) = (
            iv["metrics"][key]["low"].as_f64().unwrap(),
            iv["metrics"][key]["high"].as_f64().unwrap(),
            m[key].as_f64().unwrap(),
        );
        assert!(lo <= v && v <= hi, "{key}: {v} outside [{lo}, {hi}]");
    }
    assert!(
        iv["metrics"]["accuracy"]["high"].as_f64().unwrap()
            > iv["metrics"]["accuracy"]["low"].as_f64().unwrap()
    );
    assert!(std::fs::read_to_string(out.join("summary.md"))
        .unwrap()
        .contains("resamples"));
    assert!(out.join("report.html").exists());
}

#[test]
fn bootstrap_is_deterministic_and_a_run_against_itself_has_zero_deltas() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(tmp.path(), 1);
    let run = tmp.path().join("run");
    make_run(&data, &run, 1);
    let r = RunData::load(&RunDir::new(&run), &RunOverrides::default()).unwrap();
    assert_eq!(intervals(&r.steps, 500, 7), intervals(&r.steps, 500, 7));
    assert_ne!(intervals(&r.steps, 500, 7), intervals(&r.steps, 500, 8));
    // Trajectories 0, 2 and 4 of 5 are judged successful (the fixture's judgements): 60%, with an interval.
    assert_eq!(r.metrics.judge.as_ref().unwrap().judge_success, 60.0);
    let judge = r.metrics.intervals.as_ref().unwrap().metrics["judge_success"];
    assert!(judge.low < 60.0 && judge.high > 60.0, "{judge:?}");
    let same = paired_intervals(&r.steps, &r.steps, 300, 1);
    assert!(same.metrics.values().all(|i| i.low == 0.0 && i.high == 0.0));
}

#[test]
fn compare_reports_deltas_mcnemar_and_flips() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(tmp.path(), 2);
    let (a, b, out) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("cmp"),
    );
    make_run(&data, &a, 0);
    make_run(&data, &b, 1);
    let c = compare(&a, &b, &out);
    let (ra, rb) = (
        RunData::load(&RunDir::new(&a), &RunOverrides::default()).unwrap(),
        RunData::load(&RunDir::new(&b), &RunOverrides::default()).unwrap(),
    );
    let a_only = ra
        .steps
        .iter()
        .zip(&rb.steps)
        .filter(|(x, y)| x.correct && !y.correct)
        .count();
    let b_only = ra
        .steps
        .iter()
        .zip(&rb.steps)
        .filter(|(x, y)| !x.correct && y.correct)
        .count();
    assert!(a_only + b_only > 0);
    assert_eq!(c["mcnemar"]["a_only"], a_only);
    assert_eq!(c["mcnemar"]["b_only"], b_only);
    assert_eq!(c["flipped"].as_array().unwrap().len(), a_only + b_only);
    let acc = c["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "accuracy")
        .unwrap();
    let delta = rb.metrics.accuracy - ra.metrics.accuracy;
    assert!((acc["delta"].as_f64().unwrap() - delta).abs() < 1e-9);
    assert!(acc["low"].as_f64().unwrap() <= delta && delta <= acc["high"].as_f64().unwrap());
    assert!(c["per_app"].as_array().unwrap().len() >= 5);
    check_compare_page(&out.join("compare.html"), a_only + b_only);
}

fn check_compare_page(path: &Path, flipped: usize) {
    let page = std::fs::read_to_string(path).unwrap();
    assert_eq!(page.matches("<script").count(), 2);
    assert!(!page.contains("window.__pwned = 1</script>"));
    assert_eq!(
        data_block(&page)["trajectories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["steps"].as_array().unwrap().len())
            .sum::<usize>(),
        flipped
    );
}

#[test]
fn compare_refuses_runs_on_different_benchmarks() {
    let tmp = tempfile::tempdir().unwrap();
    let one = make_benchmark(&tmp.path().join("one"), 1);
    let two = make_benchmark(&tmp.path().join("two"), 2);
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    make_run(&one, &a, 0);
    make_run(&two, &b, 0);
    let o = Command::new(BIN)
        .args([
            "report",
            "--compare",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--out",
        ])
        .arg(tmp.path().join("cmp"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("different benchmarks"), "{err}");
}

#[test]
fn a_manifest_that_is_not_a_run_manifest_is_named_with_its_missing_field() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(tmp.path(), 1);
    let run = tmp.path().join("run");
    make_run(&data, &run, 0);
    let manifest = run.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["settings"].as_object_mut().unwrap().remove("data_hash");
    std::fs::write(&manifest, m.to_string()).unwrap();
    let o = Command::new(BIN)
        .args(["report", run.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("manifest.json") && err.contains("missing field `data_hash`"),
        "{err}"
    );
}

fn report_err(args: &[&str]) -> String {
    let o = Command::new(BIN).args(args).output().unwrap();
    assert!(!o.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_folder_without_predictions_is_refused_not_scored_as_all_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(tmp.path(), 1);
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let err = report_err(&["report", empty.to_str().unwrap()]);
    assert!(err.contains("has no predictions.jsonl"), "{err}");
    let err = report_err(&[
        "report",
        empty.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    assert!(err.contains("has no predictions.jsonl"), "{err}");
    assert!(!empty.join("report.html").exists());
    // Predictions without a manifest: the benchmark must be named.
    let loose = tmp.path().join("loose");
    make_run(&data, &loose, 0);
    std::fs::remove_file(loose.join("manifest.json")).unwrap();
    let err = report_err(&["report", loose.to_str().unwrap()]);
    assert!(
        err.contains("manifest.json") && err.contains("--data"),
        "{err}"
    );
    run_ok(&[
        "report",
        loose.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    let page = std::fs::read_to_string(loose.join("report.html")).unwrap();
    assert!(Path::new(&loose.join("report")).is_dir());
    let err = report_err(&["report", loose.to_str().unwrap(), "--out", "elsewhere"]);
    assert!(err.contains("--out elsewhere is for --compare"), "{err}");
    assert_eq!(
        data_block(&page)["trajectories"].as_array().unwrap().len(),
        5
    );
}

#[test]
fn report_refuses_a_benchmark_other_than_the_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(&tmp.path().join("a"), 1);
    let other = make_benchmark(&tmp.path().join("b"), 2);
    let run = tmp.path().join("run");
    make_run(&data, &run, 0);
    run_ok(&["report", run.to_str().unwrap()]);
    let before = std::fs::read(run.join("report.html")).unwrap();
    let err = report_err(&[
        "report",
        run.to_str().unwrap(),
        "--data",
        other.to_str().unwrap(),
    ]);
    assert!(err.contains("another benchmark"), "{err}");
    assert_eq!(std::fs::read(run.join("report.html")).unwrap(), before);
}

/// `metrics.json`'s headline numbers.
fn headline(dir: &Path) -> Vec<f64> {
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("metrics.json")).unwrap()).unwrap();
    ["accuracy", "task_success", "tail_success", "args_errors"]
        .iter()
        .map(|k| m[*k].as_f64().unwrap())
        .collect()
}

#[test]
fn a_scored_folder_reads_back_as_score_wrote_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(tmp.path(), 1);
    let (run_a, run_b) = (tmp.path().join("a"), tmp.path().join("b"));
    make_run(&data, &run_a, 0);
    make_run(&data, &run_b, 1);
    // Predictions moved away from their runs: score writes scored folders.
    let loose = tmp.path().join("loose");
    std::fs::create_dir_all(&loose).unwrap();
    let (pa, pb) = (loose.join("a.jsonl"), loose.join("b.jsonl"));
    std::fs::rename(run_a.join("predictions.jsonl"), &pa).unwrap();
    std::fs::rename(run_b.join("predictions.jsonl"), &pb).unwrap();
    let (sa, sb) = (tmp.path().join("sa"), tmp.path().join("sb"));
    for (p, out) in [(&pa, &sa), (&pb, &sb)] {
        run_ok(&[
            "score",
            "--predictions",
            p.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(out.join("scored.json").is_file() && out.join("predictions.jsonl").is_file());
    }
    let written = headline(&sa);
    std::fs::remove_file(&pa).unwrap(); // the folder holds its own copy
    run_ok(&["report", sa.to_str().unwrap()]);
    assert_eq!(
        headline(&sa),
        written,
        "report does not rewrite metrics.json"
    );
    let r = RunData::load(&RunDir::new(&sa), &RunOverrides::default()).unwrap();
    assert_eq!(
        vec![
            r.metrics.accuracy,
            r.metrics.task_success,
            r.metrics.tail_success,
            r.metrics.args_errors as f64
        ],
        written
    );
    let cmp = tmp.path().join("cmp");
    let c = compare(&sa, &sb, &cmp);
    let acc = c["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "accuracy")
        .unwrap();
    assert_eq!(acc["a"].as_f64().unwrap(), written[0]);
    assert_eq!(acc["b"].as_f64().unwrap(), headline(&sb)[0]);
    let differ: Vec<&str> = c["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["key"].as_str().unwrap())
        .collect();
    assert!(differ.contains(&"predictions"), "{differ:?}");
    let page = std::fs::read_to_string(cmp.join("compare.html")).unwrap();
    assert!(page.contains("Settings that differ"));
    // Scoring other predictions into a run folder is refused.
    let err = report_err(&[
        "score",
        "--predictions",
        pb.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--out",
        run_a.to_str().unwrap(),
    ]);
    assert!(err.contains("is a run folder"), "{err}");
}

#[test]
fn a_report_is_a_pure_function_of_its_folder_and_shows_every_type_label() {
    let tmp = tempfile::tempdir().unwrap();
    let data = make_benchmark(tmp.path(), 2);
    let run = tmp.path().join("run");
    make_run(&data, &run, 0);
    run_ok(&["report", run.to_str().unwrap()]);
    let first = std::fs::read(run.join("report.html")).unwrap();
    for _ in 0..2 {
        run_ok(&["report", run.to_str().unwrap()]);
        let again = std::fs::read(run.join("report.html")).unwrap();
        assert!(again == first, "two reports of one folder differ");
    }
    // The type confusion's column labels are whole: turned, each starting below the cells.
    let page = String::from_utf8(first).unwrap();
    let title = page.find("Type confusion").expect("heat map");
    let start = page[..title].rfind("<svg").unwrap();
    let svg = &page[start..start + page[start..].find("</svg>").unwrap()];
    let turned: Vec<&str> = svg
        .split("<text")
        .filter(|t| t.contains("rotate(90"))
        .collect();
    assert!(!turned.is_empty(), "{svg}");
    for t in &turned {
        assert!(t.contains("text-anchor=\"start\""), "{t}");
    }
    let label = |t: &str| {
        let body = t.split_once('>').map_or("", |(_, b)| b);
        body.split("</text>")
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    };
    assert!(
        turned.iter().any(|t| label(t) == "long_press"),
        "long_press is not a whole label: {svg}"
    );
}
