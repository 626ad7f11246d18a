//! Run folders under kills, signals, concurrent runs and replaced weights, through the binary: one test per
//! behaviour, named after it. Every eval runs the tiny-b checkpoint on a copy of the embedded sample (30 steps,
//! 5 trajectories). Where an outcome hinges on a run still going, the test waits for a state it observes (a
//! lock file, a first saved step) and freezes the run there (SIGSTOP) while it acts, so a fast machine cannot
//! finish first. Value checks, `score` and the smaller items are in `reliability_inputs.rs`.
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::reliability_support::*;
use serde_json::Value;

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
    let first = spawn(eval_cmd(&tiny_b(), &data, &run, &["--batch-size", "2"]));
    let pid = first.id();
    let preds = run.join("predictions.jsonl");
    wait_for(
        "the first run's lock and a first saved step",
        Duration::from_secs(60),
        || {
            std::fs::read_to_string(run.join(".lock"))
                .is_ok_and(|t| t.contains(&format!("\"pid\":{pid},")))
                && not_empty(&preds)
        },
    );
    // The first run, stopped, holds the lock for as long as the others take: they must give up on their own,
    // not wait for it (a waiting one never exits and fails the bound).
    let (second, score) = {
        let _frozen = Frozen::new(&first);
        let second = spawn(eval_cmd(&tiny_b(), &data, &run, &[]));
        let second = output_within(second, "the second eval", Duration::from_secs(60));
        // `score` writing into the run folder is refused too.
        let mut score = Command::new(BIN);
        score.args(["score", "--predictions"]).arg(&preds);
        (
            second,
            output_within(spawn(score), "score", Duration::from_secs(60)),
        )
    };
    let first = output_within(first, "the first eval", Duration::from_secs(300));
    assert!(first.status.success(), "{}", text(&first));
    assert!(!score.status.success(), "score wrote into a running run");
    assert!(
        text(&score).contains("in use by another run"),
        "{}",
        text(&score)
    );
    assert!(
        !second.status.success(),
        "the second run must refuse the folder"
    );
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains(&format!("pid {pid} on host ")), "{err}");
    assert!(err.contains("in use by another run"), "{err}");
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
    let stale = r#"{"schema_version":1,"pid":4000000,"host":"elsewhere"}"#;
    std::fs::write(run.join(".lock"), stale).unwrap();
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
fn ctrl_c_and_sigterm_save_finished_steps_and_print_the_resume_command() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
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

/// A second signal while the first one's stop is under way quits at once. Both are queued while the run is
/// frozen (two Ctrl-C would merge into one pending signal there), so the second always finds the first's stop
/// still going; the exit status is 128 + whichever the handler saw second.
#[test]
fn a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = sample(dir.path());
    let run = dir.path().join("run");
    let o = interrupted_run(&run, &data, &[libc::SIGINT, libc::SIGTERM]);
    assert!(matches!(o.status.code(), Some(130 | 143)), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("quitting at once"), "{err}");
    assert!(!err.contains("Resume with"), "{err}");
}
