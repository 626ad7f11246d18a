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

// Why a step departs (docs/rules.md, "Departures").
const ACTION_CASE: &str = "parser: action names are read ignoring case by this program; the reference compares them exactly";
const ALIAS_TAP: &str =
    "parser: `tap` is read as click by this program; the reference compares action names exactly";
const BARE_JSON: &str = "parser: a tool call without <tool_call> tags is read by this program; AgentCPM-GUI's conversion splits on '<tool_call>\n' and fails";
const BUTTON_CASE: &str = "parser: buttons are read ignoring case and spaces by this program; AgentCPM-GUI's conversion compares 'Back' exactly";
const COMPACT_TAGS: &str = "parser: tags without newlines are read by this program; AgentCPM-GUI's conversion needs '<tool_call>\n' and '\n</tool_call>'";
const FENCE: &str = "parser: a Markdown fence inside <tool_call> is removed by this program; the reference's json.loads fails on it";
const KEY_RAISES: &str = "the reference has no key rule and raises, so the step counts as wrong; the preset compares the key by containment";
const LP_100MS: &str =
    "a 0.1 s long press is a 'stop' for AgentCPM-GUI; the preset never compares time";
const LP_200MS: &str = "a 0.2 s long press is a click for AgentCPM-GUI (a long press needs more than 200 ms); the preset never compares time";
const LP_NO_TIME: &str = "long_press without `time`: the preset never compares time; AgentCPM-GUI's conversion raises (KeyError)";
const STATUS_UNKNOWN: &str = "parser: an unknown terminate status is refused by this program; AgentCPM-GUI's conversion turns every terminate into 'finish'";
const STRING_ARGS: &str = "parser: `arguments` given as a JSON string is read by this program; the reference takes the string itself and fails";
const STRING_TIME: &str =
    "parser: a string `time` is refused by this program; the reference never reads `time`";
const TERMINATE_RAISES: &str = "the reference has no terminate rule and raises, so the step counts as wrong; the preset compares the status";
const THREE_NUMBERS: &str = "parser: a coordinate of three numbers is refused by this program; the reference uses the first two";
const TOOL_NAME: &str = "parser: a tool name other than mobile_use is refused by this program; the reference does not read the name";
const WAIT_NO_TIME: &str =
    "wait without `time`: AgentCPM-GUI's conversion raises (KeyError); this program accepts it";

/// The Qwen ports (both read responses through InfiGUI-R1's extraction).
const QWEN: &[Departure] = &[
    ("0545", TERMINATE_RAISES),
    ("0559", TERMINATE_RAISES),
    ("0573", KEY_RAISES),
    ("0580", FENCE),
    ("0583", STRING_ARGS),
    ("0584", TOOL_NAME),
    ("0585", THREE_NUMBERS),
    ("0589", ALIAS_TAP),
    ("0590", ACTION_CASE),
    ("0591", ACTION_CASE),
    ("0598", STRING_TIME),
    ("0603", STRING_TIME),
    ("0610", TERMINATE_RAISES),
];

/// AgentCPM-GUI's conversion and evaluator (`androidcontrol`, `androidcontrol-strict`, `cagui`).
const AGENTCPM: &[Departure] = &[
    ("0513", BARE_JSON),
    ("0514", BARE_JSON),
    ("0516", FENCE),
    ("0517", COMPACT_TAGS),
    ("0519", STRING_ARGS),
    ("0520", TOOL_NAME),
    ("0525", ALIAS_TAP),
    ("0526", ACTION_CASE),
    ("0527", ACTION_CASE),
    ("0533", LP_NO_TIME),
    ("0535", LP_200MS),
    ("0536", LP_100MS),
    ("0538", WAIT_NO_TIME),
    ("0541", BUTTON_CASE),
    ("0542", BUTTON_CASE),
    ("0543", BUTTON_CASE),
    ("0547", STATUS_UNKNOWN),
];

/// AITW (responses read as the Qwen evaluator reads them).
const AITW: &[Departure] = &[
    ("0449", FENCE),
    ("0452", STRING_ARGS),
    ("0453", TOOL_NAME),
    ("0454", THREE_NUMBERS),
    ("0458", ALIAS_TAP),
    ("0459", ACTION_CASE),
    ("0460", ACTION_CASE),
];

/// GUI-Odyssey (responses read as the Qwen evaluator reads them).
const ODYSSEY: &[Departure] = &[
    ("0503", FENCE),
    ("0506", STRING_ARGS),
    ("0507", TOOL_NAME),
    ("0508", THREE_NUMBERS),
    ("0512", ALIAS_TAP),
    ("0513", ACTION_CASE),
    ("0514", ACTION_CASE),
    ("0521", STRING_TIME),
];

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
fn cagui() {
    check("cagui", AGENTCPM);
}

#[test]
fn aitw() {
    check("aitw", AITW);
}

#[test]
fn gui_odyssey() {
    check("gui-odyssey", ODYSSEY);
}
