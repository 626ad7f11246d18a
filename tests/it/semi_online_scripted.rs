//! Semi-online evaluation with answers that are right: the tiny checkpoint's answers are never right, so these
//! tests wrap it in a backend that replaces the answers of chosen steps by the gold action (the engine still runs
//! every prompt). The model's own replies then come back verbatim in later prompts, `uis1-sop` stops at the first
//! wrong step, a resume rebuilds that history from the saved answers, and `guievalkit` keeps the right tool calls.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Result;
use clap::Parser;
use mobile_r1_eval::backend::{
    Backend, BackendInfo, ChatResult, JobQueue, LocalBackend, MakeRequest, Sink,
};
use mobile_r1_eval::cli::{Cli, Command};
use mobile_r1_eval::dataset::Benchmark;
use mobile_r1_eval::preprocess::ImageProcessorConfig;
use mobile_r1_eval::records::PhaseStats;
use mobile_r1_eval::settings::BatchLimits;
use serde_json::Value;

use crate::semi_online_support::*;

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
