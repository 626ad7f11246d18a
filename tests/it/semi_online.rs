//! Semi-online evaluation (`eval --history predicted`) through the binary, on the embedded sample with the tiny
//! random checkpoint: the prompts dumped by `--dump-prompts` hold the history each procedure prescribes and stop
//! where it says; a run killed in the middle of its chains resumes to the files of an uninterrupted run; batch size
//! 1 on two CPU devices equals batch size 8 on one; shards and `merge` equal the unsharded run; `report --compare`
//! of a gold and a predicted run shows average progress; `bench --history predicted` reports both histories.

use std::collections::HashSet;
use std::path::PathBuf;

use crate::semi_online_support::*;

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
        "qwen-ac-uis1",
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
    assert_eq!(
        manifest["settings"]["history"]["rules"]["name"],
        "qwen-ac-uis1"
    );
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
            "qwen-ac-uis1",
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
            "qwen-ac-uis1",
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
    // The two trajectories' chains decode together: the batch is not one sequence at a time.
    assert!(
        h.predicted.mean_batch_occupancy > 1.0,
        "{}",
        h.predicted.mean_batch_occupancy
    );
}
