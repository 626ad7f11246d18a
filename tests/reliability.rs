//! Regression tests of issue 18 (reliability and the first run), through the binary: one test per reported
//! problem, named after it. Every eval runs the tiny-b checkpoint on a copy of the embedded sample (30 steps,
//! 5 trajectories; about 5 s on two cores), so the whole file stays within a minute or two.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_mobile-r1-eval");

fn tiny_b() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b")
}

/// The embedded sample written to `dir/data` (a copy each test owns).
fn sample(dir: &Path) -> PathBuf {
    let data = dir.join("data");
    let o = Command::new(BIN)
        .args(["sample", "--out"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    data
}

/// `eval` of `model` on `data` into `out` (the brief's command), plus `extra`.
fn eval_cmd(model: &Path, data: &Path, out: &Path, extra: &[&str]) -> Command {
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

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The JSON lines of `path`, keyed by `key`, each with how often it occurs.
fn key_counts(path: &Path, key: impl Fn(&Value) -> String) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let v: Value = serde_json::from_str(line).expect("only whole lines stay in the file");
        *counts.entry(key(&v)).or_insert(0) += 1;
    }
    counts
}

fn step_key(v: &Value) -> String {
    format!("{}#{}", v["trajectory"], v["step"])
}

/// Wait (bounded) until `cond` holds.
fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pseudo-random fraction in [0, 1) from the clock (no dependency needed for a few kill moments).
fn random_fraction(round: u64) -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let x = (nanos ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0x2545_f491_4f6c_dd1d);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

fn send_signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn kill_9_at_random_moments_loses_and_duplicates_no_step() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let (run, reference) = (dir.path().join("run"), dir.path().join("reference"));
    let o = eval_cmd(&tiny_b(), &data, &reference, &[])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    for round in 0..4 {
        let mut child = spawn(eval_cmd(&tiny_b(), &data, &run, &[]));
        std::thread::sleep(Duration::from_secs_f64(0.5 + 3.5 * random_fraction(round)));
        let _ = child.kill(); // SIGKILL; the run may also have finished already
        child.wait().unwrap();
    }
    let o = eval_cmd(&tiny_b(), &data, &run, &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let steps = key_counts(&run.join("predictions.jsonl"), step_key);
    assert_eq!(steps.len(), 30, "every step predicted");
    assert!(
        steps.values().all(|&n| n == 1),
        "duplicated steps: {steps:?}"
    );
    let judged = key_counts(&run.join("judgements.jsonl"), |v| {
        v["trajectory"].to_string()
    });
    assert_eq!(judged.len(), 5);
    assert!(judged.values().all(|&n| n == 1), "{judged:?}");
    // And the results are those of an uninterrupted run.
    let responses = |p: &Path| -> HashMap<String, Value> {
        std::fs::read_to_string(p.join("predictions.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|v| (step_key(&v), v["response"].clone()))
            .collect()
    };
    assert_eq!(responses(&run), responses(&reference));
}

#[test]
fn two_evals_on_one_folder_second_exits_at_once_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let run = dir.path().join("run");
    let mut first = spawn(eval_cmd(&tiny_b(), &data, &run, &[]));
    let pid = first.id();
    wait_for("the first run's lock", Duration::from_secs(60), || {
        std::fs::read_to_string(run.join(".lock"))
            .is_ok_and(|t| t.contains(&format!("pid={pid}\n")))
    });
    let t0 = Instant::now();
    let second = eval_cmd(&tiny_b(), &data, &run, &[]).output().unwrap();
    let second_took = t0.elapsed();
    let first_status = first.wait().unwrap();
    assert!(first_status.success());
    assert!(
        !second.status.success(),
        "the second run must refuse the folder"
    );
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains(&format!("pid {pid} on host ")), "{err}");
    assert!(err.contains("in use by another run"), "{err}");
    assert!(
        second_took < Duration::from_secs(3),
        "took {second_took:?}: {err}"
    );
    let steps = key_counts(&run.join("predictions.jsonl"), step_key);
    assert_eq!(steps.len(), 30);
    assert!(steps.values().all(|&n| n == 1), "{steps:?}");
}

#[test]
fn a_stale_lock_of_a_dead_process_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    // What a SIGKILLed run leaves: the file, but no lock (the kernel dropped it with the process).
    std::fs::write(run.join(".lock"), "pid=4000000\nhost=elsewhere\n").unwrap();
    let o = eval_cmd(
        &tiny_b(),
        &data,
        &run,
        &["--no-judge", "--max-new-tokens", "1"],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn default_run_folders_of_simultaneous_runs_never_collide() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let start = || {
        let mut c = Command::new(BIN);
        c.current_dir(dir.path())
            .arg("eval")
            .arg("--model")
            .arg(tiny_b())
            .arg("--data")
            .arg(&data)
            .args([
                "--max-pixels",
                "50176",
                "--max-new-tokens",
                "1",
                "--no-judge",
            ]);
        spawn(c)
    };
    let (a, b) = (start(), start());
    for child in [a, b] {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        // The main command names its run folder first thing.
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.starts_with("run folder: runs/"), "{err}");
    }
    let runs: Vec<_> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .collect();
    assert_eq!(runs.len(), 2, "two runs, two folders");
}

#[test]
fn score_keeps_a_runs_judge_results_and_refuses_another_benchmark() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let run = dir.path().join("run");
    let o = eval_cmd(&tiny_b(), &data, &run, &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let metrics = || -> Value {
        serde_json::from_str(&std::fs::read_to_string(run.join("metrics.json")).unwrap()).unwrap()
    };
    let before = metrics();
    assert!(before.get("judge_success").is_some());
    // No --data: the run's own benchmark is used, and eval's judge results stay.
    let preds = run.join("predictions.jsonl");
    let o = Command::new(BIN)
        .args(["score", "--predictions"])
        .arg(&preds)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(metrics(), before);
    // Another benchmark: an error, and the run's files are untouched.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let lines = std::fs::read_to_string(data.join("data.jsonl")).unwrap();
    std::fs::write(other.join("data.jsonl"), lines.lines().next().unwrap()).unwrap();
    let o = Command::new(BIN)
        .args(["score", "--predictions"])
        .arg(&preds)
        .arg("--data")
        .arg(&other)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("was made on another benchmark"),
        "{}",
        text(&o)
    );
    assert_eq!(metrics(), before);
    // A manifest that cannot tell which benchmark it was made on: only with --out.
    let manifest = run.join("manifest.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["settings"].as_object_mut().unwrap().remove("data_hash");
    std::fs::write(&manifest, m.to_string()).unwrap();
    let o = Command::new(BIN)
        .args(["score", "--predictions"])
        .arg(&preds)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("pass --out"), "{}", text(&o));
    assert_eq!(metrics(), before);
}

#[test]
fn score_warns_in_one_line_when_most_predictions_match_no_step() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let preds = dir.path().join("p.jsonl");
    let lines: String = (0..40)
        .map(|i| format!("{{\"trajectory\": \"nope-{i}\", \"step\": 0, \"response\": \"\"}}\n"))
        .collect();
    std::fs::write(&preds, lines).unwrap();
    let o = Command::new(BIN)
        .args(["score", "--data"])
        .arg(&data)
        .arg("--predictions")
        .arg(&preds)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("match no benchmark step"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("40 of 40") && warnings[0].contains("--data"),
        "{err}"
    );
}

#[test]
fn replaced_weights_are_refused_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let model = dir.path().join("tiny-b");
    std::fs::create_dir(&model).unwrap();
    for f in std::fs::read_dir(tiny_b()).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), model.join(f.file_name())).unwrap();
    }
    let run = dir.path().join("run");
    let args = ["--no-judge", "--max-new-tokens", "1"];
    let o = eval_cmd(&model, &data, &run, &args).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // Same size, same header and tensor names, other values: every data byte changes.
    let path = model.join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let data_start = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    bytes[data_start..].iter_mut().for_each(|b| *b ^= 0x01);
    std::fs::write(&path, bytes).unwrap();
    let o = eval_cmd(&model, &data, &run, &args).output().unwrap();
    assert!(!o.status.success());
    let err = text(&o);
    assert!(
        err.contains("the model's weights changed since this run started"),
        "{err}"
    );
    assert!(
        err.contains("model.safetensors: same size, different content"),
        "{err}"
    );
}

#[test]
fn bad_values_are_refused_before_any_work_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let cases: &[(&[&str], &str)] = &[
        (
            &["--max-pixels", "0"],
            "--max-pixels 0: must be at least 784",
        ),
        (
            &["--max-pixels", "10"],
            "--max-pixels 10: must be at least 784",
        ),
        (
            &["--min-pixels", "5000", "--max-pixels", "4000"],
            "--min-pixels 5000: must not exceed --max-pixels (4000)",
        ),
        (
            &["--max-new-tokens", "0"],
            "--max-new-tokens 0: must be at least 1",
        ),
        (&["--batch-size", "0"], "--batch-size 0: must be at least 1"),
        (
            &["--max-batch-tokens", "0"],
            "--max-batch-tokens 0: must exceed",
        ),
        (
            &["--max-batch-tokens", "8"],
            "--max-batch-tokens 8: must exceed --max-new-tokens (8)",
        ),
        (
            &["--judge-model", "/nope"],
            "--judge-model /nope: no such folder",
        ),
        (&["--device", "cuda:abc"], "--device cuda:abc: expected cpu"),
    ];
    for (i, (args, want)) in cases.iter().enumerate() {
        let run = dir.path().join(format!("run{i}"));
        let o = eval_cmd(&tiny_b(), &data, &run, args).output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        assert!(
            text(&o).contains(want),
            "{args:?}: want `{want}` in {}",
            text(&o)
        );
        assert!(!run.exists(), "{args:?}: nothing may be written");
    }
    // `bench` checks the same values.
    let o = Command::new(BIN)
        .args(["bench", "--random-weights", "--max-pixels", "10"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--max-pixels 10: must be at least 784"),
        "{}",
        text(&o)
    );
    // The prompt check needs the prompts: it names the step that does not fit.
    let run = dir.path().join("too-long");
    let o = eval_cmd(&tiny_b(), &data, &run, &["--max-batch-tokens", "10"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = text(&o);
    assert!(err.contains("--max-batch-tokens 10: trajectory"), "{err}");
    assert!(
        err.contains("prompt tokens, which with --max-new-tokens 8 need"),
        "{err}"
    );
    assert!(!run.join("predictions.jsonl").exists(), "{err}");
    // The bound is exact: one token less than it asks for fails, what it asks for runs, and it is the longest
    // prompt of the run plus --max-new-tokens.
    let need: usize = err
        .split("give --max-batch-tokens at least ")
        .nth(1)
        .and_then(|t| t.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no bound in {err}"));
    let below = (need - 1).to_string();
    let o = eval_cmd(
        &tiny_b(),
        &data,
        &dir.path().join("below"),
        &["--max-batch-tokens", &below],
    )
    .output()
    .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    let ok = dir.path().join("exact");
    let at = need.to_string();
    let o = eval_cmd(
        &tiny_b(),
        &data,
        &ok,
        &["--max-batch-tokens", &at, "--no-judge"],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let longest = std::fs::read_to_string(ok.join("predictions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["prompt_tokens"]
                .as_u64()
                .unwrap()
        })
        .max()
        .unwrap();
    assert_eq!(longest as usize + 8, need);
}

/// Start a run, wait until some steps are saved, send `signals` 100 ms apart, and return its output.
fn interrupted_run(run: &Path, data: &Path, signals: &[&str]) -> Output {
    // Four at a time, so that most steps are still waiting when the signal arrives.
    let child = spawn(eval_cmd(&tiny_b(), data, run, &["--batch-size", "4"]));
    let preds = run.join("predictions.jsonl");
    wait_for("a first saved step", Duration::from_secs(60), || {
        std::fs::read_to_string(&preds).is_ok_and(|t| !t.is_empty())
    });
    for s in signals {
        send_signal(&child, s);
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn ctrl_c_and_sigterm_save_finished_steps_and_print_the_resume_command() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    for (sig, code) in [("-INT", 130), ("-TERM", 143)] {
        let run = dir.path().join(format!("run{code}"));
        let o = interrupted_run(&run, &data, &[sig]);
        assert_eq!(o.status.code(), Some(code), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let done = key_counts(&run.join("predictions.jsonl"), step_key).len();
        assert!(
            done < 30,
            "no step is admitted after the signal ({done} done)"
        );
        assert!(
            err.contains(&format!("interrupted: {done} of 30 steps done")),
            "{err}"
        );
        assert!(err.contains(&format!("--out {}", run.display())), "{err}");
        assert!(!run.join("metrics.json").exists(), "stopped before scoring");
        // The printed command resumes and finishes the run.
        let o = eval_cmd(&tiny_b(), &data, &run, &[]).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        assert!(
            text(&o).contains(&format!("{done} already done")),
            "{}",
            text(&o)
        );
    }
}

#[test]
fn a_second_ctrl_c_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let run = dir.path().join("run");
    let o = interrupted_run(&run, &data, &["-INT", "-INT"]);
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("quitting at once"), "{err}");
    assert!(!err.contains("Resume with"), "{err}");
}

#[test]
fn a_utf8_bom_in_data_jsonl_and_in_predictions_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let file = data.join("data.jsonl");
    let body = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("\u{feff}{body}")).unwrap();
    let o = Command::new(BIN)
        .args(["data", "validate", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // The first trajectory's id: its `id`, else its 0-based line index.
    let first: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    let id = if first["id"].is_null() {
        Value::from(0)
    } else {
        first["id"].clone()
    };
    let preds = dir.path().join("p.jsonl");
    let line = serde_json::json!({"trajectory": id, "step": 0, "response": "x"});
    std::fs::write(&preds, format!("\u{feff}{line}\n")).unwrap();
    let o = Command::new(BIN)
        .args(["score", "--data"])
        .arg(&data)
        .arg("--predictions")
        .arg(&preds)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("malformed JSON"), "{}", text(&o));
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("metrics.json")).unwrap())
            .unwrap();
    assert_eq!(m["missing_predictions"], 29, "the first line counts");
}

#[test]
fn failed_writes_leave_no_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let out = dir.path().join("out");
    // A non-empty folder where steps.jsonl should go: the final rename fails.
    std::fs::create_dir_all(out.join("steps.jsonl/x")).unwrap();
    let preds = dir.path().join("p.jsonl");
    std::fs::write(&preds, "").unwrap();
    let o = Command::new(BIN)
        .args(["score", "--data"])
        .arg(&data)
        .arg("--predictions")
        .arg(&preds)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn redirected_logs_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let o = eval_cmd(
        &tiny_b(),
        &data,
        &dir.path().join("run"),
        &["--no-judge", "--max-new-tokens", "1"],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("INFO"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err}");
}

#[test]
fn an_unreachable_hub_error_gives_next_steps() {
    let home = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args([
            "generate",
            "--model",
            "test-org/absent",
            "--image",
            "x.png",
            "--prompt",
            "hi",
        ])
        .env("HF_HOME", home.path())
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = text(&o);
    for want in ["local model folder", "HF_HUB_OFFLINE=1", "HF_ENDPOINT"] {
        assert!(err.contains(want), "want `{want}` in {err}");
    }
}

#[test]
fn bench_default_tokenizer_is_not_a_build_time_path() {
    let binary = std::fs::read(BIN).unwrap();
    let fixed = format!("{}/tests/fixtures/tokenizer", env!("CARGO_MANIFEST_DIR"));
    assert!(
        !binary.windows(fixed.len()).any(|w| w == fixed.as_bytes()),
        "the binary refers to {fixed}"
    );
    let cwd = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .current_dir(cwd.path())
        .args([
            "bench",
            "--config",
            "tiny",
            "--random-weights",
            "--steps",
            "4",
            "--no-judge",
        ])
        .args(["--max-new-tokens", "2", "--max-pixels", "50176", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn tiny_b_tokenizer_files_survive_a_copy() {
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        let p = tiny_b().join(f);
        let meta = std::fs::symlink_metadata(&p).unwrap();
        assert!(
            meta.file_type().is_file(),
            "{} must be a real file",
            p.display()
        );
    }
}
