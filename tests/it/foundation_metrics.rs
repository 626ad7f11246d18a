//! Metrics on a hand-computed small benchmark (`tests/data/small`), under both presets.
use std::path::PathBuf;

use mobile_r1_eval::dataset::Benchmark;
use mobile_r1_eval::predictions::PredictionSet;
use mobile_r1_eval::report;
use mobile_r1_eval::score::{aggregate, score_benchmark, Outcome, RunMetrics};
use mobile_r1_eval::settings::RulePreset;

fn small() -> (Benchmark, PredictionSet) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/small");
    let bench = Benchmark::load(&dir).expect("fixture loads");
    let preds = PredictionSet::read(dir.join("predictions.jsonl")).expect("fixture reads");
    (bench, preds)
}

fn metrics(rules: &RulePreset) -> (RunMetrics, Vec<Outcome>) {
    let (bench, preds) = small();
    let run = score_benchmark(rules, &bench, &preds);
    assert_eq!(run.unknown, vec![("zzz".to_string(), 0)]);
    let m = aggregate(&run.steps, rules);
    (m, run.steps.iter().map(|s| s.outcome).collect())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn fixture_shape() {
    let (bench, preds) = small();
    let ids: Vec<&str> = bench.trajectories.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["a", "2", "7"],
        "id field, else the 0-based line number (blank line counted)"
    );
    assert_eq!(bench.num_steps(), 7);
    assert_eq!(bench.trajectories[2].steps[1].bboxes.len(), 2);
    assert_eq!(preds.malformed.len(), 1);
    assert_eq!(preds.malformed[0].line, 7);
    assert_eq!(preds.duplicates, 1);
}

#[test]
fn mobile_r1_hand_computed() {
    use Outcome::*;
    let (m, outcomes) = metrics(&RulePreset::mobile_r1());
    // a0 click outside the strict box, a1 type (trimmed), a2 wrong status, 2/0 swipe down vs up,
    // 2/1 click mapped from a 500x1000 image, 7/0 wrong type, 7/1 missing.
    assert_eq!(
        outcomes,
        [
            ArgsError,
            Correct,
            ArgsError,
            ArgsError,
            Correct,
            TypeError,
            FormatError
        ]
    );
    assert_eq!((m.steps, m.trajectories), (7, 3));
    assert_eq!(
        (m.correct, m.args_errors, m.format_errors, m.type_errors),
        (2, 3, 1, 1)
    );
    assert_eq!(
        m.correct + m.args_errors + m.format_errors + m.type_errors,
        m.steps
    );
    assert!(close(m.accuracy, 200.0 / 7.0));
    assert!(close(m.task_success, 0.0));
    assert!(
        close(m.tail_success, 100.0 / 3.0),
        "only trajectory 2 ends with a correct step"
    );
    assert!(close(m.avg_args_errors, 1.0));
    assert!(close(m.type_accuracy, 500.0 / 7.0));
    assert_eq!(m.missing_predictions, 1);
    assert_eq!(m.full_format, 2);
    assert_eq!(m.format_error_kinds.get("missing"), Some(&1));
    let confusion = serde_json::to_value(&m.confusion).unwrap();
    assert_eq!(confusion["system_button"]["click"], 1);
    assert_eq!(confusion["long_press"]["none"], 1);
    let taobao = m.per_app.iter().find(|g| g.key == "淘宝").unwrap();
    assert_eq!(
        (taobao.trajectories, taobao.steps, taobao.correct),
        (2, 5, 1)
    );
    let idx0 = &m.per_step_index[0];
    assert_eq!((idx0.key.as_str(), idx0.steps, idx0.correct), ("0", 3, 0));
    let click = m
        .per_action
        .iter()
        .find(|a| a.action.as_str() == "click")
        .unwrap();
    assert_eq!((click.count, click.type_correct, click.correct), (2, 2, 1));
}

#[test]
fn qwen_ac_hand_computed() {
    let (m, _) = metrics(&RulePreset::qwen_ac());
    // a0 (610, 1000) is inside the ×1.2 box [380, 620].
    assert_eq!(
        (m.correct, m.args_errors, m.format_errors, m.type_errors),
        (3, 2, 1, 1)
    );
    assert!(close(m.accuracy, 300.0 / 7.0));
    assert!(close(m.avg_args_errors, 2.0 / 3.0));
    assert_eq!(m.rules.name, "qwen-ac-infigui");
}

#[test]
fn metrics_json_top_level_keys_and_extra() {
    let (mut m, _) = metrics(&RulePreset::mobile_r1());
    m.judge = Some(mobile_r1_eval::score::JudgeSummary {
        judge_success: 12.5,
        judge_unparseable: 0,
        judge_missing: 0,
        judge_judged: 8,
        ..Default::default()
    });
    let v = serde_json::to_value(&m).unwrap();
    for k in [
        "steps",
        "trajectories",
        "accuracy",
        "task_success",
        "tail_success",
        "args_errors",
        "avg_args_errors",
        "format_errors",
        "type_errors",
        "rules",
        "per_action",
        "per_app",
        "per_step_index",
        "confusion",
        "judge_success",
    ] {
        assert!(v.get(k).is_some(), "missing key {k}");
    }
    assert_eq!(v["rules"]["distance_threshold"], 0.14);
    assert_eq!(v["schema_version"], 1);
    let dir = tempfile::tempdir().unwrap();
    let (bench, preds) = small();
    let run = score_benchmark(&RulePreset::mobile_r1(), &bench, &preds);
    let paths = report::write_all(
        &mobile_r1_eval::rundir::RunDir::new(dir.path()),
        &m,
        &run.steps,
    )
    .unwrap();
    let steps = std::fs::read_to_string(paths.steps).unwrap();
    assert_eq!(steps.lines().count(), 7);
    let first: serde_json::Value = serde_json::from_str(steps.lines().next().unwrap()).unwrap();
    assert_eq!(first["check"]["test"], "box");
    assert!(std::fs::read_to_string(paths.summary)
        .unwrap()
        .contains("judge_success"));
}

/// Parse, score and aggregate 10,000 steps (the time is printed, not asserted: speed is measured by
/// `cargo bench --bench hot_paths -- parse_and_score`, not by a unit test on a shared machine).
#[test]
fn ten_thousand_steps_scored() {
    use std::fmt::Write;
    let mut data = String::new();
    let mut preds = String::new();
    let step = r#"{"image": "i.png", "action": "{\"name\": \"mobile_use\", \"arguments\": {\"action\": \"click\", \"coordinate\": [10, 10]}}", "bbox": [0, 0, 20, 20]}"#;
    for t in 0..2500 {
        let steps = [step; 4].join(",");
        writeln!(data, r#"{{"app_name": "a{}", "trajectory_length": 4, "instruction": "x", "image_width": 100, "image_height": 100, "trajectory": [{steps}]}}"#, t % 20).unwrap();
        for s in 0..4 {
            writeln!(preds, r#"{{"trajectory": {t}, "step": {s}, "response": "<think>x</think><action>y</action><tool_call>{{\"name\": \"mobile_use\", \"arguments\": {{\"action\": \"click\", \"coordinate\": [{}, 10]}}}}</tool_call>"}}"#, [0, 5, 10, 25][s]).unwrap();
        }
    }
    let start = std::time::Instant::now();
    let bench =
        Benchmark::from_jsonl(&data, "/nonexistent", std::path::Path::new("mem.jsonl")).unwrap();
    let set = PredictionSet::parse(&preds);
    let rules = RulePreset::mobile_r1();
    let run = score_benchmark(&rules, &bench, &set);
    let m = aggregate(&run.steps, &rules);
    let elapsed = start.elapsed();
    assert_eq!(m.steps, 10_000);
    assert_eq!(m.correct, 7_500, "x = 25 lies outside the box");
    eprintln!("10,000 steps parsed, scored and aggregated in {elapsed:?}");
}
