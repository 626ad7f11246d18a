//! The rule preset a benchmark folder suggests (`benchmark.json`, written by `data import`): the default of
//! `score`, `report` and `eval`, overridden by `--rules`, recorded in the run's manifest; an unknown name is an
//! error naming the file. Tested with a preset name written into a folder by hand (`qwen-ac`) and with the one an
//! import writes (`cagui`).

use std::path::{Path, PathBuf};

use mobile_r1_eval::settings::{RuleName, RulePreset};
use serde_json::Value;

use super::{import, run, samples, text};

/// The preset a name on the command line or in `benchmark.json` stands for.
fn preset(name: &str) -> RulePreset {
    name.parse::<RuleName>().unwrap().preset()
}

/// A copy of `tests/data/small` with `benchmark.json` suggesting `rules`.
fn small_with_rules(dir: &Path, rules: &str) -> PathBuf {
    let data = dir.join("small");
    std::fs::create_dir_all(&data).unwrap();
    let small = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/small");
    for f in ["data.jsonl", "predictions.jsonl"] {
        std::fs::copy(small.join(f), data.join(f)).unwrap();
    }
    let json = format!("{{\"schema_version\": 1, \"rules\": \"{rules}\"}}\n");
    std::fs::write(data.join("benchmark.json"), json).unwrap();
    data
}

fn metrics_rules(dir: &Path) -> Value {
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("metrics.json")).unwrap()).unwrap();
    m["rules"]["name"].clone()
}

#[test]
fn the_suggested_preset_is_scores_and_reports_default_and_rules_overrides_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = small_with_rules(tmp.path(), "qwen-ac");
    let (d, p) = (data.to_str().unwrap(), data.join("predictions.jsonl"));
    let p = p.to_str().unwrap();
    let out = tmp.path().join("scored");
    let o = run(&[
        "score",
        "--data",
        d,
        "--predictions",
        p,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let qwen = preset("qwen-ac");
    assert_eq!(metrics_rules(&out), qwen.name.as_str());
    let o = run(&[
        "score",
        "--data",
        d,
        "--predictions",
        p,
        "--out",
        out.to_str().unwrap(),
        "--rules",
        "mobile-r1",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(metrics_rules(&out), "mobile-r1");
    // `report` on a folder without a manifest, scored against --data: the suggested preset.
    let run_dir = tmp.path().join("run");
    std::fs::create_dir(&run_dir).unwrap();
    std::fs::copy(
        data.join("predictions.jsonl"),
        run_dir.join("predictions.jsonl"),
    )
    .unwrap();
    let o = run(&["report", run_dir.to_str().unwrap(), "--data", d]);
    assert!(o.status.success(), "{}", text(&o));
    let html = std::fs::read_to_string(run_dir.join("report.html")).unwrap();
    let named = format!("{} v{}", qwen.name, qwen.version);
    assert!(html.contains(&named), "report.html does not name {named}");
    // An unknown suggested preset is an error naming the file and the known presets.
    let bad = small_with_rules(&tmp.path().join("bad"), "nope");
    let o = run(&[
        "score",
        "--data",
        bad.to_str().unwrap(),
        "--predictions",
        p,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains(&format!(
            "{}: suggested rule preset \"nope\"",
            bad.join("benchmark.json").display()
        )),
        "{t}"
    );
    assert!(
        t.contains(&format!("known: {}", RulePreset::NAMES.join(", "))),
        "{t}"
    );
}

/// `eval` on one episode of every imported format (tiny checkpoint) runs, and uses and records the preset the
/// folder suggests; `--rules` wins over it.
#[test]
fn eval_runs_on_every_format_with_its_suggested_preset() {
    let tmp = tempfile::tempdir().unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b");
    let eval = |data: &Path, out: &Path, extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            model.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--no-judge",
            "--max-pixels",
            "40000",
            "--max-new-tokens",
            "4",
        ];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert!(o.status.success(), "{}", text(&o));
    };
    let mu = samples()
        .join("androidcontrol-mobile-use")
        .join("android_control_evaluation_std.sample.jsonl");
    let formats: [(&str, PathBuf, &[&str], &str); 5] = [
        (
            "androidcontrol",
            samples().join("androidcontrol"),
            &["--split", "test"],
            "androidcontrol",
        ),
        ("androidcontrol-mobile-use", mu, &[], "androidcontrol"),
        ("aitz", samples().join("aitz/test"), &[], "aitw"),
        (
            "gui-odyssey",
            samples().join("gui-odyssey"),
            &["--split", "random"],
            "gui-odyssey",
        ),
        ("cagui", samples().join("cagui"), &[], "cagui"),
    ];
    for (format, src, extra, suggested) in formats {
        let data = tmp.path().join(format);
        let mut args = extra.to_vec();
        args.extend(["--limit", "1"]);
        import(format, &src, &data, &args);
        let run_dir = tmp.path().join(format!("run-{format}"));
        eval(&data, &run_dir, &[]);
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(run_dir.join("manifest.json")).unwrap())
                .unwrap();
        let want = preset(suggested);
        assert_eq!(manifest["rules"]["name"], want.name.as_str(), "{format}");
        assert_eq!(metrics_rules(&run_dir), want.name.as_str(), "{format}");
    }
    // --rules wins over the folder's suggestion.
    let other = tmp.path().join("run-mobile-r1");
    eval(&tmp.path().join("cagui"), &other, &["--rules", "mobile-r1"]);
    assert_eq!(metrics_rules(&other), "mobile-r1");
}
