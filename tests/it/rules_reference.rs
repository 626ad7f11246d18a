//! Each preset that names a reference evaluator agrees with it step for step on its probe set
//! (`tests/data/probes/<preset>/`, made by `make_probes.py` from the reference's own code), except on the
//! departures listed here and in `docs/rules.md`.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use mobile_r1_eval::dataset::Benchmark;
use mobile_r1_eval::predictions::PredictionSet;
use mobile_r1_eval::score::score_benchmark;
use mobile_r1_eval::settings::RulePreset;

/// A probe step on which the preset departs from its reference on purpose, and why.
type Departure = (&'static str, &'static str);

// Why a step departs (docs/rules.md, "Departures on purpose").
const KEY_RAISES: &str = "the reference has no key rule and raises, so the step counts as wrong; the preset compares the key by containment";
const LP_100MS: &str =
    "a 0.1 s long press is a 'stop' for AgentCPM-GUI; the preset never compares time";
const LP_200MS: &str = "a 0.2 s long press is a click for AgentCPM-GUI (a long press needs more than 200 ms); the preset never compares time";
const STATUS_UNKNOWN: &str = "an unknown terminate status is refused by this program; AgentCPM-GUI's conversion turns every terminate into 'finish'";
const TERMINATE_RAISES: &str = "the reference has no terminate rule and raises, so the step counts as wrong; the preset compares the status";

/// The Qwen ports.
const QWEN: &[Departure] = &[
    ("0545", TERMINATE_RAISES),
    ("0559", TERMINATE_RAISES),
    ("0573", KEY_RAISES),
    ("0610", TERMINATE_RAISES),
];

/// AgentCPM-GUI's conversion and evaluator (`androidcontrol`, `androidcontrol-strict`, `androidcontrol-agentcpm`,
/// `cagui`).
const AGENTCPM: &[Departure] = &[
    ("0535", LP_200MS),
    ("0536", LP_100MS),
    ("0547", STATUS_UNKNOWN),
];

/// AITW and GUI-Odyssey (responses read as the Qwen evaluator reads them): none.
const NONE: &[Departure] = &[];

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
    check("qwen-ac-infigui", QWEN);
}

#[test]
fn qwen_ac_uis1() {
    check("qwen-ac-uis1", QWEN);
}

#[test]
fn androidcontrol() {
    check("androidcontrol", AGENTCPM);
}

#[test]
fn androidcontrol_strict() {
    check("androidcontrol-strict", AGENTCPM);
}

#[test]
fn androidcontrol_agentcpm() {
    check("androidcontrol-agentcpm", AGENTCPM);
}

#[test]
fn cagui() {
    check("cagui", AGENTCPM);
}

#[test]
fn aitw() {
    check("aitw", NONE);
}

#[test]
fn gui_odyssey() {
    check("gui-odyssey", NONE);
}

/// `score --rules P` reads answers as P's reference does and `--lenient-reading` reads them with this program's
/// reader; each records its reading with the preset in `metrics.json` and `scored.json`.
#[test]
fn the_reading_is_chosen_and_recorded() {
    let dir = probes("qwen-ac-infigui");
    let score = |extra: &[&str]| -> serde_json::Value {
        let out = tempfile::tempdir().unwrap();
        let mut args = vec![
            "score",
            "--data",
            dir.to_str().unwrap(),
            "--predictions",
            dir.join("predictions.jsonl").to_str().unwrap(),
            "--out",
            out.path().to_str().unwrap(),
            "--rules",
            "qwen-ac-infigui",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
        args.extend(extra.iter().map(|s| s.to_string()));
        let o = std::process::Command::new(crate::util::BIN)
            .args(&args)
            .env("RUST_LOG", "warn")
            .output()
            .expect("binary runs");
        assert!(o.status.success(), "{}", crate::util::text(&o));
        let text = std::fs::read_to_string(out.path().join("metrics.json")).unwrap();
        let metrics: serde_json::Value = serde_json::from_str(&text).unwrap();
        let text = std::fs::read_to_string(out.path().join("scored.json")).unwrap();
        let scored: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(scored["rules"]["reading"], metrics["rules"]["reading"]);
        metrics
    };
    let reference = score(&[]);
    let lenient = score(&["--lenient-reading"]);
    assert_eq!(reference["rules"]["reading"], "qwen_evaluator");
    assert_eq!(lenient["rules"]["reading"], "lenient");
    // The lenient reader credits answers the reference cannot read (a fence, a tool name, `tap`, …).
    let correct = |m: &serde_json::Value| m["correct"].as_u64().expect("correct");
    assert!(
        correct(&lenient) > correct(&reference),
        "{} {}",
        correct(&lenient),
        correct(&reference)
    );
}
