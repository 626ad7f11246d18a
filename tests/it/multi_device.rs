//! Several devices in one process when one of them fails mid-run (a lost GPU): [`MultiBackend`] is handed one
//! real tiny checkpoint plus another wrapped so that it fails after answering a few requests. The healthy device
//! finishes every group the failed one did not take, the error names the failed device, every outcome produced
//! reaches the sink exactly once, and at the evaluation level a one-device resume redoes only what is missing and
//! ends with the files of an uninterrupted run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Result};
use clap::Parser;
use mobile_r1_eval::backend::{
    Backend, BackendInfo, DeviceBackend, JobQueue, LoadedModel, LocalBackend, MakeRequest,
    ModelSpec, MultiBackend, Sink, Taker,
};
use mobile_r1_eval::cli::{Cli, Command};
use mobile_r1_eval::dataset::Benchmark;
use mobile_r1_eval::eval::{pending_steps, Phase, StepPhase};
use mobile_r1_eval::preprocess::ImageProcessorConfig;
use mobile_r1_eval::records::PhaseStats;
use mobile_r1_eval::settings::BatchLimits;
use mobile_r1_eval::settings::DeviceSpec;
use mobile_r1_eval::settings::SystemPrompt;

use crate::util::ok;

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b")
}

/// Small screenshots and short answers keep the runs fast; two sequences per batch keep each device's
/// look-ahead small, so both devices take part.
const ARGS: [&str; 6] = [
    "--max-pixels",
    "40000",
    "--max-new-tokens",
    "10",
    "--batch-size",
    "2",
];

/// The cause the failing device reports.
const LOST: &str = "CUDA_ERROR_DEVICE_LOST (test stand-in)";

/// What a [`Flaky`] device did: the indices it pulled from the shared queue and those it answered.
#[derive(Default)]
struct Log {
    pulled: Mutex<Vec<usize>>,
    answered: Mutex<Vec<usize>>,
}

/// A real device that fails as a lost GPU would once it has answered `fail_after` requests.
struct Flaky {
    inner: LocalBackend,
    fail_after: usize,
    log: Arc<Log>,
}

impl Flaky {
    fn new(inner: LocalBackend, fail_after: usize) -> (Self, Arc<Log>) {
        let log = Arc::new(Log::default());
        let log2 = Arc::clone(&log);
        let device = Self {
            inner,
            fail_after,
            log,
        };
        (device, log2)
    }
}

impl Backend for Flaky {
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
        self.run_taking(Taker::new(jobs), jobs.count(), 1, make, sink)
    }
}

impl DeviceBackend for Flaky {
    fn run_taking(
        &self,
        taker: Taker<'_>,
        count: usize,
        chunk: usize,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats> {
        // Every request taken is built once, on preparation.
        let pulled = |i: usize| {
            self.log.pulled.lock().unwrap().push(i);
            make(i)
        };
        let mut answer = |i, outcome, stats: &PhaseStats| {
            let mut answered = self.log.answered.lock().unwrap();
            if answered.len() == self.fail_after {
                bail!("{LOST}");
            }
            answered.push(i);
            sink(i, outcome, stats)
        };
        self.inner
            .run_taking(taker, count, chunk, &pulled, &mut answer)
    }
}

/// The tiny checkpoint on the CPU under the batch limits `eval` would give it.
fn tiny_cpu() -> LocalBackend {
    let spec = ModelSpec {
        model: model_dir().to_string_lossy().into_owned(),
        device: DeviceSpec::Cpu,
        dtype: None,
        ops: Default::default(),
        min_pixels: None,
        max_pixels: Some(40_000),
        hub: Default::default(),
    };
    let loaded = LoadedModel::load(&spec).unwrap();
    let limits = BatchLimits::auto(&loaded.model, 2, 10, None);
    LocalBackend::new(&spec.model, loaded, limits)
}

fn sorted(v: &Mutex<Vec<usize>>) -> Vec<usize> {
    let mut v = v.lock().unwrap().clone();
    v.sort_unstable();
    v
}

/// Through `MultiBackend::run`: device 1 is lost after two answers; device 0 finishes every group device 1 did
/// not take, the error names device 1 and says the others finished, and the sink sees every answer produced
/// exactly once.
#[test]
fn multi_device_lost_mid_run_the_others_finish_and_nothing_is_lost_or_doubled() {
    let data = mobile_r1_eval::sample::materialize_default().unwrap();
    let bench = Benchmark::load(&data).unwrap();
    let (healthy, log0) = Flaky::new(tiny_cpu(), usize::MAX);
    let (lost, log1) = Flaky::new(tiny_cpu(), 2);
    let multi = MultiBackend::new(vec![Box::new(healthy), Box::new(lost)]).unwrap();
    let phase = StepPhase {
        bench: &bench,
        jobs: pending_steps(&bench, &Default::default()),
        system: SystemPrompt::Default.into(),
        image: multi.image_config(),
        max_new_tokens: 10,
    };
    let groups = phase.groups();
    let jobs = JobQueue::ready(phase.pending(), groups.clone());
    let mut seen = Vec::new();
    let err = multi
        .run(&jobs, &|i| phase.request(i), &mut |i, outcome, _| {
            assert!(outcome.is_ok(), "request {i}: {outcome:?}");
            seen.push(i);
            Ok(())
        })
        .expect_err("a device was lost");
    let msg = format!("{err:#}");
    for part in [
        "1 of 2 devices failed",
        "the others finished",
        "cpu#1",
        LOST,
    ] {
        assert!(msg.contains(part), "{part:?} not in: {msg}");
    }
    assert!(!msg.contains("cpu#0"), "{msg}");
    seen.sort_unstable();
    let mut answered = [sorted(&log0.answered), sorted(&log1.answered)].concat();
    answered.sort_unstable();
    assert_eq!(seen, answered, "every answer reaches the sink exactly once");
    assert_eq!(log1.answered.lock().unwrap().len(), 2);
    let taken: BTreeSet<usize> = log1.pulled.lock().unwrap().iter().copied().collect();
    assert!(taken.len() > 2, "the lost device took part: {taken:?}");
    let done: BTreeSet<usize> = seen.iter().copied().collect();
    for group in &groups {
        if group.iter().all(|i| !taken.contains(i)) {
            assert!(
                group.iter().all(|i| done.contains(i)),
                "group {group:?} unfinished"
            );
        }
    }
    assert!(
        done.len() < jobs.count(),
        "what the lost device held is missing"
    );
}

/// `eval --device cpu --no-judge` of the tiny checkpoint into `out` through the binary.
fn eval_one_device(out: &Path) -> Output {
    crate::util::bin()
        .args(["eval", "--model"])
        .arg(model_dir())
        .arg("--out")
        .arg(out)
        .args(ARGS)
        .args(["--device", "cpu", "--no-judge"])
        .env("RUST_LOG", "mobile_r1_eval=info")
        .output()
        .expect("run the binary")
}

/// The configuration `eval --device cpu,cpu --no-judge` builds for `out`.
fn two_device_config(
    out: &Path,
) -> (
    mobile_r1_eval::eval::EvalConfig,
    mobile_r1_eval::rundir::ClaimedRun,
) {
    let model = model_dir();
    let mut argv = vec!["mobile-r1-eval", "eval", "--model", model.to_str().unwrap()];
    argv.extend([
        "--out",
        out.to_str().unwrap(),
        "--device",
        "cpu,cpu",
        "--no-judge",
    ]);
    argv.extend(ARGS);
    let Command::Eval(args) = Cli::try_parse_from(argv).unwrap().command else {
        unreachable!("an eval command line")
    };
    mobile_r1_eval::commands::eval::config(args, &Default::default()).unwrap()
}

/// `(trajectory, step) → line` of a predictions file, asserting that no step appears twice.
fn keyed(run: &Path) -> BTreeMap<(String, u64), String> {
    let text = std::fs::read_to_string(run.join("predictions.jsonl")).unwrap();
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = (v["trajectory"].to_string(), v["step"].as_u64().unwrap());
        let old = map.insert(key.clone(), line.to_string());
        assert!(old.is_none(), "step {key:?} written twice");
    }
    map
}

/// The evaluation with device 1 lost mid-run, then resumed on one device: the folder holds each finished
/// prediction once, the resume predicts only the missing steps, and the predictions and metrics equal an
/// uninterrupted one-device run's, bit for bit.
#[test]
fn multi_device_lost_mid_eval_then_a_resume_equals_the_one_device_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, run) = (tmp.path().join("one"), tmp.path().join("run"));
    ok(&eval_one_device(&one));
    let reference = keyed(&one);

    let (cfg, claim) = two_device_config(&run);
    let mut devices = mobile_r1_eval::eval::load_devices(&cfg, &cfg.model).unwrap();
    let (lost, log1) = Flaky::new(devices.pop().unwrap(), 3);
    let healthy: Box<dyn DeviceBackend> = Box::new(devices.pop().unwrap());
    let multi = MultiBackend::new(vec![healthy, Box::new(lost)]).unwrap();
    let err = mobile_r1_eval::eval::run_eval_with(&cfg, Box::new(multi)).expect_err("lost");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("cpu#1") && msg.contains("the others finished"),
        "{msg}"
    );
    assert_eq!(log1.answered.lock().unwrap().len(), 3);

    drop(claim); // the run stops: its folder is free for the resume
    let partial = keyed(&run);
    assert!(!partial.is_empty() && partial.len() < reference.len());
    for (key, line) in &partial {
        assert_eq!(Some(line), reference.get(key), "{key:?}");
    }
    let resumed = eval_one_device(&run);
    ok(&resumed);
    let log = String::from_utf8_lossy(&resumed.stderr);
    let want = format!(
        "steps: {} to predict, {} already done",
        reference.len() - partial.len(),
        partial.len()
    );
    assert!(log.contains(&want), "{want:?} not in: {log}");
    assert_eq!(keyed(&run), reference);
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
    assert_eq!(
        read(run.join("metrics.json")),
        read(one.join("metrics.json"))
    );
}
