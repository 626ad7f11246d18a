//! Scale-out end to end through the binary on the embedded sample with the tiny checkpoint: `eval --shard`
//! (fixed and from each scheduler's environment) plus `merge` equal an unsharded run; incomplete shards,
//! differing settings and a missing scheduler are clear errors; the Kubernetes example parses, and its command
//! lines are accepted by the argument parser.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::Parser;
use mobile_r1_eval::cli::{Cli, Command as Sub};
use mobile_r1_eval::merge::MergedThroughput;
use mobile_r1_eval::records::ManifestHeader;
use mobile_r1_eval::shard::{SchedulerEnv, ShardArg, ShardSpec};
use serde_json::Value;

use crate::scale_support::{parse_documents, Yaml};
use crate::util::ok;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Run the binary with `args`, no scheduler variable inherited, plus `envs`.
fn bin(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = crate::util::bin();
    for k in SchedulerEnv::NAMES {
        cmd.env_remove(k);
    }
    cmd.args(args)
        .env("RUST_LOG", "warn")
        .envs(envs.iter().copied())
        .output()
        .expect("run the binary")
}

/// `eval` of the tiny checkpoint on the embedded sample into `out`, with extra arguments.
fn eval(out: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Output {
    let model = root().join("tests/fixtures/models/tiny-b");
    let mut args = vec![
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(["--max-pixels", "200704"]);
    if !extra.contains(&"--max-new-tokens") {
        args.extend(["--max-new-tokens", "4"]);
    }
    args.extend(extra);
    bin(&args, envs)
}

fn failed_with(o: &Output, parts: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "should fail: {err}");
    for p in parts {
        assert!(err.contains(p), "{p:?} not in: {err}");
    }
}

/// Lines keyed by (trajectory, step): the same set whatever the completion order.
fn keyed_lines(path: &Path) -> BTreeMap<(String, u64), String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let key = (v["trajectory"].to_string(), v["step"].as_u64().unwrap_or(0));
            (key, l.to_string())
        })
        .collect()
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const MERGED: [&str; 7] = [
    "predictions.jsonl",
    "judgements.jsonl",
    "metrics.json",
    "steps.jsonl",
    "summary.md",
    "manifest.json",
    "throughput.json",
];

#[test]
fn shards_then_merge_equal_the_unsharded_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (single, run) = (tmp.path().join("single"), tmp.path().join("run"));
    let run_s = run.to_str().unwrap();
    ok(&eval(&single, &[], &[]));
    // Each shard from another scheduler's environment.
    let slurm = [
        ("SLURM_ARRAY_TASK_ID", "7"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
        ("SLURM_ARRAY_TASK_MIN", "7"),
    ];
    ok(&eval(&run, &["--shard", "auto"], &slurm));
    ok(&eval(
        &run,
        &["--shard", "auto"],
        &[("RANK", "1"), ("WORLD_SIZE", "3")],
    ));
    failed_with(
        &bin(&["merge", run_s], &[]),
        &["1 of 3 shards", "2-of-3", "missing"],
    );
    let partial = bin(&["merge", run_s, "--allow-partial"], &[]);
    ok(&partial);
    assert!(String::from_utf8_lossy(&partial.stdout).contains("shards 2/3 are missing"));
    let m: Value = serde_json::from_str(&read(run.join("metrics.json"))).unwrap();
    let shard2: Value = serde_json::from_str(&read(run.join("manifest.json"))).unwrap();
    assert_eq!(shard2["partial"], true);
    assert!(m["missing_predictions"].as_u64().unwrap() > 0, "{m}");

    ok(&eval(
        &run,
        &["--shard", "auto/3"],
        &[("JOB_COMPLETION_INDEX", "2")],
    ));
    ok(&bin(&["merge", run_s], &[]));
    assert_eq!(
        read(single.join("metrics.json")),
        read(run.join("metrics.json"))
    );
    assert!(run.join("report.html").is_file(), "merge writes the report");
    for f in ["predictions.jsonl", "judgements.jsonl"] {
        assert_eq!(
            keyed_lines(&single.join(f)),
            keyed_lines(&run.join(f)),
            "{f}"
        );
    }
    assert_eq!(
        read(single.join("steps.jsonl")),
        read(run.join("steps.jsonl"))
    );
    let first: Vec<String> = MERGED.iter().map(|f| read(run.join(f))).collect();
    ok(&bin(&["merge", run_s], &[]));
    let again: Vec<String> = MERGED.iter().map(|f| read(run.join(f))).collect();
    assert_eq!(first, again, "merging twice gives the same files");

    let manifest: Value = serde_json::from_str(&first[5]).unwrap();
    assert_eq!(manifest["merged_from"].as_array().unwrap().len(), 3);
    assert_eq!(manifest["partial"], false);
    assert!(manifest["settings"].get("shard").is_none());
    let throughput: MergedThroughput = serde_json::from_str(&first[6]).unwrap();
    let steps = throughput.phases[0].stats.prompts as u64;
    assert_eq!(steps, m["steps"].as_u64().unwrap(), "{throughput:?}");
    assert_eq!(throughput.shards.len(), 3);
    assert!(throughput.shards.iter().all(|s| s.throughput.is_some()));
    every_manifest_reads_as_a_header(&single, &run);
    killed_shard_resumes(&run, &single);
}

/// A run's, a shard's and a merged run's manifest all read as the one header type that `score`, `report` and
/// the resume check use, and `report` and `score` work on the merged run folder.
fn every_manifest_reads_as_a_header(single: &Path, run: &Path) {
    let header = |p: PathBuf| -> ManifestHeader { serde_json::from_str(&read(p)).unwrap() };
    let one = header(single.join("manifest.json"));
    let merged = header(run.join("manifest.json"));
    let shard = header(run.join("shards/0-of-3/manifest.json"));
    assert_eq!(
        merged.settings, one.settings,
        "a merged run records the unsharded settings"
    );
    assert_eq!(shard.settings.shard.as_deref(), Some("0/3"));
    assert_eq!((merged.data, merged.rules), (one.data, one.rules));
    assert!(merged.finished_at_unix.is_some());
    let before = read(run.join("metrics.json"));
    ok(&bin(&["report", run.to_str().unwrap()], &[]));
    assert!(read(run.join("report.html")).contains("tiny-b"));
    let preds = run.join("predictions.jsonl");
    ok(&bin(
        &["score", "--predictions", preds.to_str().unwrap()],
        &[],
    ));
    assert_eq!(
        read(run.join("metrics.json")),
        before,
        "scored as merge scored it"
    );
}

/// A shard killed mid-run: unfinished for merge, then resumed as a run is, and the merge is whole again.
fn killed_shard_resumes(run: &Path, single: &Path) {
    let run_s = run.to_str().unwrap();
    let shard1 = run.join("shards/1-of-3");
    let kept: Vec<String> = read(shard1.join("predictions.jsonl"))
        .lines()
        .take(5)
        .map(String::from)
        .collect();
    let torn = format!("{}\n{{\"trajectory\":", kept.join("\n"));
    std::fs::write(shard1.join("predictions.jsonl"), torn).unwrap();
    std::fs::remove_file(shard1.join("judgements.jsonl")).unwrap();
    let mut m1: Value = serde_json::from_str(&read(shard1.join("manifest.json"))).unwrap();
    m1["finished_at_unix"] = Value::Null;
    std::fs::write(shard1.join("manifest.json"), m1.to_string()).unwrap();
    failed_with(&bin(&["merge", run_s], &[]), &["1-of-3", "not finished"]);
    ok(&eval(run, &["--shard", "1/3"], &[]));
    ok(&bin(&["merge", run_s], &[]));
    assert_eq!(
        read(single.join("metrics.json")),
        read(run.join("metrics.json"))
    );
    let p1 = shard1.join("predictions.jsonl");
    assert_eq!(
        keyed_lines(&p1).len(),
        read(p1.clone()).lines().count(),
        "no step done twice"
    );
    assert_eq!(
        keyed_lines(&single.join("predictions.jsonl")),
        keyed_lines(&run.join("predictions.jsonl"))
    );
}

#[test]
fn merge_lists_differing_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    ok(&eval(&run, &["--shard", "0/2", "--no-judge"], &[]));
    ok(&eval(
        &run,
        &["--shard", "1/2", "--no-judge", "--max-new-tokens", "3"],
        &[],
    ));
    let o = bin(&["merge", run.to_str().unwrap()], &[]);
    failed_with(
        &o,
        &[
            "different settings",
            "shard 1-of-2 vs 0-of-2: max_new_tokens: 4 → 3",
        ],
    );
}

#[test]
fn empty_shard_and_argument_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // Five trajectories in six shards: the last is empty, and still a finished shard.
    ok(&eval(&run, &["--shard", "5/6", "--no-judge"], &[]));
    let m: Value = serde_json::from_str(&read(run.join("shards/5-of-6/manifest.json"))).unwrap();
    assert_eq!(m["shard"]["trajectories"], serde_json::json!([]));
    assert!(m["finished_at_unix"].is_u64());
    // Merged where the shards' sample folder is absent: the embedded sample, recognised by its hash, is used.
    let mut moved = m.clone();
    moved["data"] = "/nonexistent/sample".into();
    std::fs::write(run.join("shards/5-of-6/manifest.json"), moved.to_string()).unwrap();
    let o = bin(&["merge", run.to_str().unwrap(), "--allow-partial"], &[]);
    ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("shards 0/6, 1/6, 2/6, 3/6, 4/6 are missing")
    );
    let o = bin(
        &[
            "merge",
            run.to_str().unwrap(),
            "--allow-partial",
            "--data",
            "/nonexistent",
        ],
        &[],
    );
    failed_with(&o, &["/nonexistent/data.jsonl"]);
    let o = eval(&run, &["--shard", "auto"], &[]);
    failed_with(
        &o,
        &[
            "SLURM_ARRAY_TASK_ID",
            "RANK",
            "WORLD_SIZE",
            "JOB_COMPLETION_INDEX",
        ],
    );
    let model = root().join("tests/fixtures/models/tiny-b");
    let o = bin(
        &["eval", "--model", model.to_str().unwrap(), "--shard", "0/2"],
        &[],
    );
    failed_with(&o, &["--shard 0/2 needs --out RUN"]);
    failed_with(
        &eval(&run, &["--shard", "2/2"], &[]),
        &["--shard", "2/2", "not below"],
    );
    let o = bin(
        &["merge", tmp.path().join("nothing").to_str().unwrap()],
        &[],
    );
    failed_with(&o, &["no shards to merge"]);
}

/// The Slurm example without Slurm: its submit branch (against a stand-in `sbatch` that logs its arguments) asks
/// for the array, the GPUs and the dependent merge job. The real Slurm run is `.ci/slurm-test.sh`.
#[test]
fn slurm_example_submits_array_and_merge() {
    let tmp = tempfile::tempdir().unwrap();
    let (fake, log, run) = (
        tmp.path().join("bin"),
        tmp.path().join("sbatch.log"),
        tmp.path().join("run"),
    );
    std::fs::create_dir(&fake).unwrap();
    let stub = "#!/bin/sh\necho \"$*\" >> \"$FAKE_SBATCH_LOG\"\necho \"$((100 + $(wc -l < \"$FAKE_SBATCH_LOG\")));c\"\n";
    std::fs::write(fake.join("sbatch"), stub).unwrap();
    ok(&Command::new("chmod")
        .arg("+x")
        .arg(fake.join("sbatch"))
        .output()
        .unwrap());
    let script = root().join("examples/slurm/eval-array.sbatch");
    let path = format!(
        "{}:{}",
        fake.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let model = root().join("tests/fixtures/models/tiny-b");
    let (exe, model_s, run_s) = (
        crate::util::BIN,
        model.to_str().unwrap(),
        run.to_str().unwrap(),
    );
    let common = [("MODEL", model_s), ("RUN", run_s), ("MOBILE_R1_EVAL", exe)];
    let mut submit = Command::new("bash");
    submit
        .arg(&script)
        .args(["--max-pixels", "200704"])
        .envs(common)
        .env("SHARDS", "3");
    let o = submit
        .env("PATH", &path)
        .env("FAKE_SBATCH_LOG", &log)
        .output()
        .unwrap();
    ok(&o);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "101 102");
    let calls = read(log);
    let calls: Vec<&str> = calls.lines().collect();
    for part in [
        "--array=0-2",
        "--gres=gpu:1",
        script.to_str().unwrap(),
        "--max-pixels 200704",
    ] {
        assert!(calls[0].contains(part), "{part} not in {}", calls[0]);
    }
    for part in ["--dependency=afterok:101", "--wrap=", " merge ", run_s] {
        assert!(calls[1].contains(part), "{part} not in {}", calls[1]);
    }
}

/// The Slurm example's task branch evaluates the array task's shard (here the empty sixth of the sample).
#[test]
fn slurm_example_task_runs_its_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let script = root().join("examples/slurm/eval-array.sbatch");
    let model = root().join("tests/fixtures/models/tiny-b");
    let exe = crate::util::BIN;
    let common = [
        ("MODEL", model.to_str().unwrap()),
        ("RUN", run.to_str().unwrap()),
        ("MOBILE_R1_EVAL", exe),
    ];
    let mut task = Command::new("bash");
    task.arg(&script)
        .args(["--max-pixels", "200704", "--no-judge"])
        .envs(common);
    for k in SchedulerEnv::NAMES {
        task.env_remove(k);
    }
    let slurm = [
        ("SLURM_ARRAY_TASK_ID", "5"),
        ("SLURM_ARRAY_TASK_COUNT", "6"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
    ];
    ok(&task
        .envs(slurm)
        .env("DEVICE", "cpu")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap());
    assert!(run.join("shards/5-of-6/manifest.json").is_file());
}

/// The container's command and args of a Job document.
fn job_command(doc: &Yaml) -> Vec<String> {
    let container = &doc
        .at(&["spec", "template", "spec", "containers"])
        .unwrap()
        .items()
        .unwrap()[0];
    let mut words: Vec<String> = Vec::new();
    for key in ["command", "args"] {
        let items = container
            .at(&[key])
            .and_then(Yaml::items)
            .unwrap_or_default();
        words.extend(items.iter().map(|w| w.text().unwrap().to_string()));
    }
    words
}

fn claim(doc: &Yaml) -> String {
    let vols = doc
        .at(&["spec", "template", "spec", "volumes"])
        .unwrap()
        .items()
        .unwrap();
    vols[0]
        .at(&["persistentVolumeClaim", "claimName"])
        .unwrap()
        .text()
        .unwrap()
        .to_string()
}

#[test]
fn kubernetes_example_parses_and_its_commands_are_valid() {
    let text = read(root().join("examples/kubernetes/indexed-job.yaml"));
    let docs = parse_documents(&text).unwrap();
    assert_eq!(docs.len(), 2);
    let (shards, merge) = (&docs[0], &docs[1]);
    for d in &docs {
        assert_eq!(d.at(&["kind"]).unwrap().text(), Some("Job"));
    }
    assert_eq!(
        shards.at(&["spec", "completionMode"]).unwrap().text(),
        Some("Indexed")
    );
    let completions: usize = shards
        .at(&["spec", "completions"])
        .unwrap()
        .text()
        .unwrap()
        .parse()
        .unwrap();
    let parallelism = shards.at(&["spec", "parallelism"]).unwrap().text().unwrap();
    assert_eq!(parallelism, completions.to_string());
    assert_eq!(claim(shards), claim(merge));

    let eval = Cli::try_parse_from(job_command(shards)).unwrap_or_else(|e| panic!("{e}"));
    let Sub::Eval(a) = eval.command else {
        panic!("not eval")
    };
    assert_eq!(
        a.shard,
        Some(ShardArg::Auto {
            count: Some(completions)
        })
    );
    let pod = SchedulerEnv::from_pairs([("JOB_COMPLETION_INDEX", (completions - 1).to_string())]);
    let spec = a.shard.unwrap().resolve(&pod).unwrap();
    assert_eq!(
        spec,
        ShardSpec {
            index: completions - 1,
            count: completions
        }
    );
    let merged = Cli::try_parse_from(job_command(merge)).unwrap_or_else(|e| panic!("{e}"));
    let Sub::Merge(m) = merged.command else {
        panic!("not merge")
    };
    assert_eq!(Some(m.run), a.out);
}

#[test]
fn yaml_subset_rejects_what_it_does_not_read() {
    assert!(parse_documents("a: [1, 2]\n").is_err());
    assert!(parse_documents("a: &x 1\n").is_err());
    assert!(parse_documents("a:\n  b: 1\n    c: 2\n").is_err());
    assert!(parse_documents("a: 1\na: 2\n").is_err());
    let d = parse_documents("a:\n- x # c\n- k: v\n  j: \"w # q\"\n").unwrap();
    let items = d[0].at(&["a"]).unwrap().items().unwrap();
    assert_eq!(items[0].text(), Some("x"));
    assert_eq!(items[1].at(&["j"]).unwrap().text(), Some("w # q"));
}
