//! Each preset that names a reference evaluator agrees with it step for step on its probe set
//! (`tests/data/probes/<preset>/`, made by `make_probes.py` from the reference's own code), except on the
//! departures listed here and in `docs/rules.md`.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use mobile_r1_eval::dataset::Benchmark;
use mobile_r1_eval::predictions::PredictionSet;
use mobile_r1_eval::score::{score_benchmark, RulePreset};

/// A probe step on which the preset departs from its reference on purpose, and why.
type Departure = (&'static str, &'static str);

fn probes(preset: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/probes")
        .join(preset)
}

/// Score the probe set with the preset; return the steps where the verdicts differ, as `id → description`.
fn disagreements(preset: &str) -> BTreeMap<String, String> {
    let dir = probes(preset);
    let bench = Benchmark::load(&dir).expect("probe data");
    let preds = PredictionSet::read(dir.join("predictions.jsonl")).expect("probe predictions");
    assert!(
        preds.malformed.is_empty(),
        "{preset}: malformed prediction lines"
    );
    let text = std::fs::read_to_string(dir.join("verdicts.jsonl")).expect("verdicts");
    let verdicts: BTreeMap<String, bool> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("verdict line");
            (
                v["trajectory"].as_str().expect("id").to_owned(),
                v["correct"].as_bool().expect("correct"),
            )
        })
        .collect();
    let rules = RulePreset::by_name(preset).expect("preset");
    let run = score_benchmark(&rules, &bench, &preds);
    assert_eq!(
        run.steps.len(),
        verdicts.len(),
        "{preset}: one verdict per step"
    );
    assert!(run.steps.len() >= 300, "{preset}: at least 300 probe steps");
    let both = run.steps.iter().filter(|s| s.correct).count();
    assert!(
        both > 50 && both + 50 < run.steps.len(),
        "{preset}: probes on both sides"
    );
    run.steps
        .iter()
        .filter(|s| s.correct != verdicts[&s.trajectory])
        .map(|s| {
            let t = bench.trajectory(&s.trajectory).expect("trajectory");
            let what = format!(
                "{} ours={} ref={} gold={} boxes={:?} size={:?} response={:?}",
                t.app_name,
                s.correct,
                !s.correct,
                s.gold,
                t.steps[0].bboxes,
                s.image_size,
                s.response.as_deref().unwrap_or("")
            );
            (s.trajectory.clone(), what)
        })
        .collect()
}

fn check(preset: &str, departures: &[Departure]) {
    let found = disagreements(preset);
    let listed: BTreeSet<&str> = departures.iter().map(|d| d.0).collect();
    let unexpected: Vec<String> = found
        .iter()
        .filter(|(id, _)| !listed.contains(id.as_str()))
        .map(|(id, what)| format!("{id}: {what}"))
        .collect();
    let agreeing: Vec<&str> = listed
        .iter()
        .copied()
        .filter(|id| !found.contains_key(*id))
        .collect();
    assert!(
        unexpected.is_empty() && agreeing.is_empty(),
        "{preset}: {} steps disagree with the reference without a listed departure:\n{}\nlisted departures that agree now: {agreeing:?}",
        unexpected.len(),
        unexpected.join("\n")
    );
}

#[test]
fn qwen_ac_infigui() {
    check("qwen-ac-infigui", &[]);
}

#[test]
fn qwen_ac_uis1() {
    check("qwen-ac-uis1", &[]);
}

#[test]
fn androidcontrol() {
    check("androidcontrol", &[]);
}

#[test]
fn androidcontrol_strict() {
    check("androidcontrol-strict", &[]);
}

#[test]
fn cagui() {
    check("cagui", &[]);
}

#[test]
fn aitw() {
    check("aitw", &[]);
}

#[test]
fn gui_odyssey() {
    check("gui-odyssey", &[]);
}
