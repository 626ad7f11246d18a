//! Semi-online evaluation (`eval --history predicted`) on the embedded sample with the tiny random checkpoint.
//!
//! Through the binary: the prompts dumped by `--dump-prompts` hold the history each procedure prescribes and
//! stop where it says; a run killed in the middle of its chains resumes to the files of an uninterrupted run;
//! batch size 1 on two CPU devices equals batch size 8 on one; shards and `merge` equal the unsharded run;
//! `report --compare` of a gold and a predicted run shows average progress.
//!
//! The tiny checkpoint's answers are never right, so a second set of tests wraps it in a backend that replaces
//! the answers of chosen steps by the gold action (the engine still runs every prompt): the model's own replies
//! then come back verbatim in later prompts, `uis1-sop` stops at the first wrong step, and a resume rebuilds that
//! history from the saved answers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;

use anyhow::Result;
use clap::Parser;
use mobile_r1_eval::backend::{
    Backend, BackendInfo, ChatResult, JobQueue, LocalBackend, MakeRequest, Sink,
};
use mobile_r1_eval::cli::{Cli, Command};
use mobile_r1_eval::dataset::Benchmark;
use mobile_r1_eval::engine::BatchLimits;
use mobile_r1_eval::preprocess::ImageProcessorConfig;
use mobile_r1_eval::records::PhaseStats;
use serde_json::Value;

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b")
}

/// Small screenshots and short answers keep every run to a few seconds.
const SMALL: [&str; 4] = ["--max-pixels", "40000", "--max-new-tokens", "10"];

fn run(args: &[&str]) -> Output {
    crate::util::bin()
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run the binary")
}

fn eval(out: &Path, extra: &[&str]) -> Output {
    let model = model_dir();
    let mut args = vec!["eval", "--model", model.to_str().unwrap()];
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend(SMALL);
    args.extend(extra);
    run(&args)
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "failed:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

type Key = (String, u64);

fn key(v: &Value) -> Key {
    (
        v["trajectory"].as_str().unwrap().to_string(),
        v["step"].as_u64().unwrap(),
    )
}

/// `(trajectory, step) → line` of a predictions file, asserting that no step appears twice.
fn predictions(run: &Path) -> BTreeMap<Key, Value> {
    let mut map = BTreeMap::new();
    for v in json_lines(&run.join("predictions.jsonl")) {
        let k = key(&v);
        assert!(
            map.insert(k.clone(), v).is_none(),
            "step {k:?} written twice"
        );
    }
    map
}

/// `(trajectory, step) → prompt` of a `--dump-prompts` file, asserting each step was built once.
fn prompts(path: &Path) -> BTreeMap<Key, Value> {
    let mut map = BTreeMap::new();
    for v in json_lines(path) {
        let k = key(&v);
        assert!(
            map.insert(k.clone(), v).is_none(),
            "prompt {k:?} built twice"
        );
    }
    map
}

/// The text of a prompt's last user turn.
fn user_text(prompt: &Value) -> String {
    let turns = prompt["messages"].as_array().unwrap();
    turns.last().unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

fn sample() -> Benchmark {
    let dir = mobile_r1_eval::sample::materialize_default().unwrap();
    Benchmark::load(&dir).unwrap()
}

/// Cut a run's predictions to their first half (in file order, so in the middle of chains) plus half a line, as
/// a kill leaves them, into a fresh folder with the same manifest.
fn killed_copy(full: &Path, cut: &Path) {
    std::fs::create_dir_all(cut).unwrap();
    std::fs::copy(full.join("manifest.json"), cut.join("manifest.json")).unwrap();
    let text = std::fs::read_to_string(full.join("predictions.jsonl")).unwrap();
    let all: Vec<&str> = text.lines().collect();
    let half = all.len() / 2;
    let mut partial = all[..half].join("\n") + "\n";
    partial.push_str(&all[half][..all[half].len() / 2]);
    std::fs::write(cut.join("predictions.jsonl"), partial).unwrap();
}

/// `guievalkit`: every step runs and, every answer being wrong, each history entry is the gold tool call
/// (Python-`json.dumps` style); resume, batch size, two devices, shards and merge change nothing.
#[test]
fn guievalkit_history_resume_batches_devices_and_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);
    let guievalkit = [
        "--history",
        "predicted",
        "--semi-online",
        "guievalkit",
        "--no-judge",
    ];
    let dump = p("g8.jsonl");
    let g8 = p("g8");
    ok(&eval(
        &g8,
        &[
            &guievalkit[..],
            &[
                "--batch-size",
                "8",
                "--dump-prompts",
                dump.to_str().unwrap(),
            ],
        ]
        .concat(),
    ));
    let bench = sample();
    let expected = predictions(&g8);
    assert_eq!(expected.len(), bench.num_steps(), "every step runs");
    let built = prompts(&dump);
    assert_eq!(built.len(), bench.num_steps());
    for t in &bench.trajectories {
        for (si, _) in t.steps.iter().enumerate() {
            let text = user_text(&built[&(t.id.clone(), si as u64)]);
            // Step k's entry is the gold action (the answer was wrong), in the model's frame.
            for (k, gold) in t.steps[..si].iter().enumerate() {
                let head = format!(
                    "Step {}: {{\"name\": \"mobile_use\", \"arguments\": {{\"action\": \"{}\"",
                    k + 1,
                    gold.action.action_type()
                );
                assert!(text.contains(&head), "{head} not in {text}");
            }
            assert!(!text.contains(&format!("Step {}:", si + 1)), "{text}");
            assert_eq!(
                built[&(t.id.clone(), si as u64)]["images"]
                    .as_array()
                    .unwrap()
                    .len(),
                1
            );
        }
    }
    let m = json_file(&g8.join("metrics.json"));
    assert_eq!(m["semi_online"]["procedure"], "guievalkit");
    assert_eq!(m["semi_online"]["steps_reached"], 30);
    assert_eq!(m["semi_online"]["gold_history_entries"], 25);
    let manifest = json_file(&g8.join("manifest.json"));
    assert_eq!(manifest["settings"]["history"]["format"], "text");

    // Batch 1 on two CPU devices gives the same answers.
    let g1 = p("g1");
    ok(&eval(
        &g1,
        &[
            &guievalkit[..],
            &["--batch-size", "1", "--device", "cpu,cpu"],
        ]
        .concat(),
    ));
    assert_eq!(
        predictions(&g1),
        expected,
        "batch size or devices changed an answer"
    );

    // Killed in the middle of its chains, then resumed: the files of the uninterrupted run.
    let cut = p("cut");
    killed_copy(&g8, &cut);
    ok(&eval(
        &cut,
        &[&guievalkit[..], &["--batch-size", "8"]].concat(),
    ));
    assert_eq!(predictions(&cut), expected);
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
    assert_eq!(
        read(cut.join("metrics.json")),
        read(g8.join("metrics.json"))
    );

    // Two shards and a merge.
    let sharded = p("sharded");
    for s in ["0/2", "1/2"] {
        ok(&eval(
            &sharded,
            &[&guievalkit[..], &["--batch-size", "8", "--shard", s]].concat(),
        ));
    }
    ok(&run(&["merge", sharded.to_str().unwrap()]));
    assert_eq!(predictions(&sharded), expected);
    assert_eq!(
        read(sharded.join("metrics.json")),
        read(g8.join("metrics.json"))
    );
}

/// `uis1-sop` with the checkpoint's own (always wrong) answers: each trajectory stops after step 0, whose prompt
/// is the gold-history prompt; `--rules`, `--system-prompt data` and the judge phase work; the report and
/// `report --compare` against a gold run show where trajectories stopped and the average progress.
#[test]
fn uis1_sop_stops_at_the_first_wrong_step() {
    let tmp = tempfile::tempdir().unwrap();
    let (sop, gold) = (tmp.path().join("sop"), tmp.path().join("gold"));
    let dump = tmp.path().join("sop.jsonl");
    let args = [
        "--history",
        "predicted",
        "--rules",
        "qwen-ac",
        "--system-prompt",
        "data",
    ];
    ok(&eval(
        &sop,
        &[&args[..], &["--dump-prompts", dump.to_str().unwrap()]].concat(),
    ));
    let bench = sample();
    let got = predictions(&sop);
    let firsts: HashSet<Key> = bench
        .trajectories
        .iter()
        .map(|t| (t.id.clone(), 0))
        .collect();
    assert_eq!(got.keys().cloned().collect::<HashSet<_>>(), firsts);
    let built = prompts(&dump);
    assert_eq!(built.keys().cloned().collect::<HashSet<_>>(), firsts);
    for t in &bench.trajectories {
        let p = &built[&(t.id.clone(), 0)];
        assert_eq!(p["messages"][0]["content"].as_str(), t.system.as_deref());
        assert!(user_text(p).contains(&t.instruction));
    }
    let m = json_file(&sop.join("metrics.json"));
    let s = &m["semi_online"];
    assert_eq!(s["procedure"], "uis1-sop");
    assert_eq!(
        (s["steps_reached"].as_u64(), s["steps_not_reached"].as_u64()),
        (Some(5), Some(25))
    );
    assert_eq!(m["format_error_kinds"]["not_reached"], 25);
    assert_eq!(s["average_progress"], 0.0);
    assert!(m["intervals"]["metrics"]["average_progress"].is_object());
    assert_eq!(m["judge_judged"], 5, "one verdict per trajectory");
    let manifest = json_file(&sop.join("manifest.json"));
    assert_eq!(manifest["settings"]["history"]["rules"]["name"], "qwen-ac");
    assert!(manifest["settings"]["prompt_hashes"]["step_turn.jinja"].is_string());
    let html = std::fs::read_to_string(sop.join("report.html")).unwrap();
    assert!(html.contains("data-metric=\"semi_online.average_progress\""));
    assert!(
        html.contains("\"stopsEarly\":true"),
        "the browser knows where each trajectory stopped"
    );
    let summary = std::fs::read_to_string(sop.join("summary.md")).unwrap();
    assert!(summary.contains("| average progress % | 0.00"), "{summary}");

    // A gold run's files are as before: no history in its manifest, no semi-online figures in its metrics.
    ok(&eval(
        &gold,
        &[
            "--no-judge",
            "--rules",
            "qwen-ac",
            "--system-prompt",
            "data",
        ],
    ));
    let gold_manifest = json_file(&gold.join("manifest.json"));
    assert!(gold_manifest["settings"].get("history").is_none());
    assert!(json_file(&gold.join("metrics.json"))
        .get("semi_online")
        .is_none());
    // Step 0 had the same prompt in both runs, so the same answer.
    let gold_preds = predictions(&gold);
    for k in &firsts {
        assert_eq!(got[k]["response"], gold_preds[k]["response"], "{k:?}");
    }
    // Another history is another run: the gold folder refuses a predicted resume.
    let o = eval(
        &gold,
        &[
            "--no-judge",
            "--rules",
            "qwen-ac",
            "--system-prompt",
            "data",
            "--history",
            "predicted",
        ],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("history"));

    let cmp = tmp.path().join("cmp");
    let (g, s) = (gold.to_str().unwrap(), sop.to_str().unwrap());
    ok(&run(&[
        "report",
        "--compare",
        g,
        s,
        "--out",
        cmp.to_str().unwrap(),
    ]));
    let c = json_file(&cmp.join("compare.json"));
    assert_eq!(c["history"], serde_json::json!(["gold", "uis1-sop"]));
    let rows = c["metrics"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["metric"] == "average_progress"));
}

#[test]
fn semi_online_needs_the_predicted_history() {
    let tmp = tempfile::tempdir().unwrap();
    let o = eval(&tmp.path().join("x"), &["--semi-online", "guievalkit"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--history predicted"));
}

/// The tiny checkpoint, whose answers to chosen steps are replaced by the gold action as a tool call (in screen
/// pixels: the answer's picture size is the screen's); the others keep the checkpoint's own text.
struct Scripted {
    inner: LocalBackend,
    bench: Benchmark,
    right: HashSet<(usize, usize)>,
}

impl Scripted {
    /// The `(trajectory index, step)` whose screenshot `path` is (`images/t{ti}_s{si}.png`).
    fn step_of(path: &Path) -> (usize, usize) {
        let name = path.file_stem().unwrap().to_str().unwrap();
        let (t, s) = name.trim_start_matches('t').split_once("_s").unwrap();
        (t.parse().unwrap(), s.parse().unwrap())
    }

    fn answer(&self, shown: &Path, mut r: ChatResult) -> ChatResult {
        let (ti, si) = Self::step_of(shown);
        if self.right.contains(&(ti, si)) {
            let t = &self.bench.trajectories[ti];
            r.text = format!(
                "<tool_call>{}</tool_call>",
                t.steps[si].action.to_tool_call()
            );
            r.image_sizes = vec![[t.image_width, t.image_height]];
        }
        r
    }
}

impl Backend for Scripted {
    fn info(&self) -> &BackendInfo {
        self.inner.info()
    }
    fn image_config(&self) -> &ImageProcessorConfig {
        self.inner.image_config()
    }
    fn limits(&self) -> BatchLimits {
        self.inner.limits()
    }
    fn run(
        &self,
        jobs: &JobQueue,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats> {
        let shown: Mutex<HashMap<usize, PathBuf>> = Mutex::default();
        let make = |i: usize| {
            let r = make(i)?;
            shown
                .lock()
                .unwrap()
                .insert(i, r.images.last().unwrap().clone());
            Ok(r)
        };
        self.inner.run(jobs, &make, &mut |i, outcome, st| {
            let path = shown.lock().unwrap()[&i].clone();
            sink(i, outcome.map(|r| self.answer(&path, r)), st)
        })
    }
}

/// Evaluate `out` with the scripted backend (steps `right` answered right) and these flags.
fn scripted_eval(out: &Path, right: &HashSet<(usize, usize)>, extra: &[&str]) {
    let model = model_dir();
    let mut argv = vec!["mobile-r1-eval", "eval", "--model", model.to_str().unwrap()];
    argv.extend([
        "--out",
        out.to_str().unwrap(),
        "--device",
        "cpu",
        "--no-judge",
        "--batch-size",
        "4",
    ]);
    argv.extend(SMALL);
    argv.extend(["--history", "predicted"]);
    argv.extend(extra);
    let Command::Eval(args) = Cli::try_parse_from(argv).unwrap().command else {
        unreachable!("an eval command line")
    };
    let (cfg, _claim) = mobile_r1_eval::commands::eval::config(args, &Default::default()).unwrap();
    let inner = mobile_r1_eval::eval::load_devices(&cfg, &cfg.model)
        .unwrap()
        .remove(0);
    let backend = Scripted {
        inner,
        bench: Benchmark::load(&cfg.data).unwrap(),
        right: right.clone(),
    };
    mobile_r1_eval::eval::run_eval_with(&cfg, Box::new(backend)).unwrap();
}

/// Trajectory 0 right for two steps then wrong, trajectory 1 right throughout, the others wrong at once.
fn script(bench: &Benchmark) -> HashSet<(usize, usize)> {
    let mut right: HashSet<(usize, usize)> = [(0, 0), (0, 1)].into();
    right.extend((0..bench.trajectories[1].steps.len()).map(|si| (1, si)));
    right
}

/// `uis1-sop` with answers that are right: each prompt is the conversation so far with the model's replies
/// verbatim and the two latest screenshots; the chain stops at the first wrong step; a kill in the middle of
/// the chains resumes to the same files.
#[test]
fn uis1_sop_puts_the_replies_back_verbatim_and_resumes_from_them() {
    let tmp = tempfile::tempdir().unwrap();
    let bench = sample();
    let right = script(&bench);
    let (full, dump) = (tmp.path().join("full"), tmp.path().join("full.jsonl"));
    scripted_eval(&full, &right, &["--dump-prompts", dump.to_str().unwrap()]);
    let got = predictions(&full);
    let n1 = bench.trajectories[1].steps.len();
    let id = |ti: usize| bench.trajectories[ti].id.clone();
    let mut want: HashSet<Key> = (0..3).map(|si| (id(0), si)).collect();
    want.extend((0..n1 as u64).map(|si| (id(1), si)));
    want.extend((2..5).map(|ti| (id(ti), 0)));
    assert_eq!(
        got.keys().cloned().collect::<HashSet<_>>(),
        want,
        "stops after the first wrong step"
    );

    let built = prompts(&dump);
    let last = &built[&(id(1), n1 as u64 - 1)];
    let turns = last["messages"].as_array().unwrap();
    let replies: Vec<&Value> = turns.iter().filter(|m| m["role"] == "assistant").collect();
    assert_eq!(replies.len(), n1 - 1);
    for (si, reply) in replies.iter().enumerate() {
        assert_eq!(
            reply["content"],
            got[&(id(1), si as u64)]["response"],
            "reply {si} verbatim"
        );
    }
    let images = last["images"].as_array().unwrap();
    assert_eq!(images.len(), 2, "the two latest screenshots");
    assert!(images[1]
        .as_str()
        .unwrap()
        .ends_with(&format!("t1_s{}.png", n1 - 1)));
    let with_image = turns
        .iter()
        .filter(|m| m["role"] == "user" && m["content"].as_array().unwrap().len() == 2)
        .count();
    assert_eq!(with_image, 2);
    let m = json_file(&full.join("metrics.json"));
    let progress = 100.0 * (2.0 / bench.trajectories[0].steps.len() as f64 + 1.0) / 5.0;
    assert!((m["semi_online"]["average_progress"].as_f64().unwrap() - progress).abs() < 1e-9);
    assert_eq!(m["semi_online"]["success_rate"], 20.0);
    assert_eq!(m["tail_success"], 20.0);

    let cut = tmp.path().join("cut");
    killed_copy(&full, &cut);
    scripted_eval(&cut, &right, &[]);
    assert_eq!(predictions(&cut), got);
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
    assert_eq!(
        read(cut.join("metrics.json")),
        read(full.join("metrics.json"))
    );
}

/// `guievalkit` with answers that are right: a right step's entry is the model's own tool call, a wrong one's
/// the gold action.
#[test]
fn guievalkit_keeps_the_models_right_tool_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let bench = sample();
    let (out, dump) = (tmp.path().join("run"), tmp.path().join("run.jsonl"));
    scripted_eval(
        &out,
        &script(&bench),
        &[
            "--semi-online",
            "guievalkit",
            "--dump-prompts",
            dump.to_str().unwrap(),
        ],
    );
    assert_eq!(predictions(&out).len(), bench.num_steps());
    let t0 = &bench.trajectories[0];
    let text = user_text(&prompts(&dump)[&(t0.id.clone(), 3)]);
    for si in 0..2 {
        let own = format!("Step {}: {};", si + 1, t0.steps[si].action.to_tool_call());
        assert!(text.contains(&own), "{own} not in {text}");
    }
    let gold = format!(
        "Step 3: {{\"name\": \"mobile_use\", \"arguments\": {{\"action\": \"{}\"",
        t0.steps[2].action.action_type()
    );
    assert!(text.contains(&gold), "{gold} not in {text}");
}

/// `bench --history predicted`: the same synthetic trajectories with the gold history, then as `uis1-sop`
/// chains (every step counted right, so each runs to its end), both reported.
#[test]
fn bench_reports_the_cost_of_the_predicted_history_against_gold() {
    let o = run(&[
        "bench",
        "--config",
        "tiny",
        "--steps",
        "8",
        "--batch-size",
        "4",
        "--max-new-tokens",
        "6",
        "--max-pixels",
        "100352",
        "--no-judge",
        "--history",
        "predicted",
        "--json",
    ]);
    ok(&o);
    let r: mobile_r1_eval::bench::BenchReport = serde_json::from_slice(&o.stdout).unwrap();
    let h = r.history.expect("the history comparison");
    assert_eq!(h.procedure, "uis1-sop");
    assert_eq!((h.gold.stats.prompts, h.predicted.stats.prompts), (8, 8));
    assert_eq!(r.steps, 8, "the figures are the chained phase's");
    // Two screenshots per prompt after the first step: the chained prompts are longer.
    assert!(h.prompt_tokens_ratio > 1.0, "{}", h.prompt_tokens_ratio);
    assert!(h.wall_ratio > 0.0);
    assert!(
        h.predicted.stats.prefix_cached_tokens > 0,
        "the system turn is reused"
    );
}
