//! Run folders for the report tests, made without a model: the embedded sample benchmark (optionally
//! replicated, with screenshot names holding spaces and non-ASCII characters), predictions derived from the
//! gold actions (right, off target, wrong type, unparseable, hostile markup), judgements and a manifest.
#![allow(dead_code)]

#[cfg(target_os = "linux")]
pub mod browser;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mobile_r1_eval::action::Action;
use mobile_r1_eval::dataset::Benchmark;
use mobile_r1_eval::records::{JudgeSettings, RunSettings};
use mobile_r1_eval::settings::RulePreset;
use mobile_r1_eval::settings::SystemPrompt;
use serde_json::{json, Value};

/// The binary under test.
pub use crate::util::BIN;

/// Responses that would run script if they were inserted as markup.
pub const HOSTILE: &[&str] = &[
    "<script>window.__pwned = 1</script>",
    "\"><img src=x onerror=\"window.__pwned = 2\">",
    "</textarea><script>window.__pwned = 3</script>",
    "<img src=\"http://127.0.0.1:9/leak.png\">",
];

/// Run the binary with `args`; panics with its output when it fails.
pub fn run_ok(args: &[&str]) -> Output {
    let o = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("binary runs");
    assert!(
        o.status.success(),
        "{args:?} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The sample benchmark in `dir/data`, its trajectories copied `copies` times; copies after the first keep
/// their screenshots under `images/copy N/截图 sK.png` (spaces, non-ASCII) and get hostile instructions/apps.
pub fn make_benchmark(dir: &Path, copies: usize) -> PathBuf {
    let sample = dir.join("sample");
    run_ok(&["sample", "--out", sample.to_str().unwrap()]);
    let data = dir.join("data");
    std::fs::create_dir_all(data.join("images")).unwrap();
    let text = std::fs::read_to_string(sample.join("data.jsonl")).unwrap();
    let mut out = String::new();
    for copy in 0..copies {
        for (line_no, line) in text.lines().enumerate() {
            let mut t: Value = serde_json::from_str(line).unwrap();
            t["id"] = json!(format!("c{copy}-t{line_no}"));
            if copy == 1 && line_no == 0 {
                t["instruction"] = json!("搜索 <script>window.__pwned = 4</script> & \"quotes\"");
                t["app_name"] = json!("\"><b>app</b>");
            }
            for step in t["trajectory"].as_array_mut().unwrap() {
                let src = step["image"].as_str().unwrap().to_owned();
                let rel = if copy == 0 {
                    src.clone()
                } else {
                    let name = Path::new(&src).file_name().unwrap().to_str().unwrap();
                    format!("images/copy {copy}/截图 é {name}")
                };
                let dst = data.join(&rel);
                std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
                if !dst.exists() {
                    std::fs::copy(sample.join(&src), &dst).unwrap();
                }
                step["image"] = json!(rel);
            }
            out.push_str(&t.to_string());
            out.push('\n');
        }
    }
    std::fs::write(data.join("data.jsonl"), out).unwrap();
    data
}

/// A response for gold action `gold` at global step `k`, varied by `variant` (0 = mostly right).
fn response(gold: &Action, k: usize, variant: usize) -> (String, Option<[u32; 2]>) {
    let wrap = |a: &Action, think: &str| {
        format!(
            "<think>{think}</think>\n<action>do it</action>\n<tool_call>\n{}\n</tool_call>",
            a.to_tool_call()
        )
    };
    match (k + variant) % 9 {
        0 => (HOSTILE[(k / 9) % HOSTILE.len()].to_owned(), None),
        1 => (wrap(gold, HOSTILE[(k / 9 + 1) % HOSTILE.len()]), None),
        2 => match gold {
            Action::Click { coordinate } => {
                let off = Action::Click {
                    coordinate: [coordinate[0] + 300.0, coordinate[1] - 500.0],
                };
                (wrap(&off, "a bit off"), None)
            }
            _ => (wrap(gold, "right"), None),
        },
        3 => (wrap(&Action::Wait { time: Some(1.0) }, "wait"), None),
        4 => match gold {
            // The model saw a half-size image: coordinates halved, mapped back by image_size.
            Action::Click { coordinate } => {
                let half = Action::Click {
                    coordinate: [coordinate[0] / 2.0, coordinate[1] / 2.0],
                };
                (wrap(&half, "half size"), Some([360, 800]))
            }
            _ => (wrap(gold, "right"), None),
        },
        5 if variant > 0 => ("I am not sure.".to_owned(), None),
        _ => (wrap(gold, "right"), None),
    }
}

/// A run folder at `run` for the benchmark `data`: predictions (`variant` shifts which steps go wrong),
/// judgements with a hostile reason, and a manifest written by hand.
pub fn make_run(data: &Path, run: &Path, variant: usize) {
    std::fs::create_dir_all(run).unwrap();
    let bench = Benchmark::load(data).unwrap();
    let (mut preds, mut judgements, mut k) = (String::new(), String::new(), 0);
    for (ti, t) in bench.trajectories.iter().enumerate() {
        for (si, s) in t.steps.iter().enumerate() {
            let (text, size) = response(&s.action, k, variant);
            let mut line = json!({"trajectory": t.id, "step": si, "response": text,
                "prompt_tokens": 900 + 37 * (k % 11), "generated_tokens": 20 + 13 * (k % 7)});
            if let Some(sz) = size {
                line["image_size"] = json!(sz);
            }
            preds.push_str(&format!("{line}\n"));
            k += 1;
        }
        let reason = if ti == 0 { HOSTILE[2] } else { "looks done" };
        judgements.push_str(&format!(
            "{}\n",
            json!({"trajectory": t.id, "success": ti % 2 == 0, "reason": reason, "response": "{}"})
        ));
    }
    std::fs::write(run.join("predictions.jsonl"), preds).unwrap();
    std::fs::write(run.join("judgements.jsonl"), judgements).unwrap();
    let manifest =
        json!({"settings": settings(data), "data": data, "rules": RulePreset::default()});
    std::fs::write(run.join("manifest.json"), manifest.to_string()).unwrap();
}

/// The settings of a run of a model named with markup, judged, on the benchmark in `data`.
fn settings(data: &Path) -> RunSettings {
    use sha2::Digest;
    let bytes = std::fs::read(data.join("data.jsonl")).unwrap();
    RunSettings {
        model: "tiny <b>model</b>".into(),
        model_hash: "0".repeat(16),
        weights: Default::default(),
        dtype: Some("f32".into()),
        data_hash: format!("{:x}", sha2::Sha256::digest(&bytes)),
        prompt_hashes: Default::default(),
        system_prompt: SystemPrompt::Default,
        coordinate_frame: Default::default(),
        image_processor: Default::default(),
        max_new_tokens: 8,
        judge: Some(JudgeSettings {
            model: "same".into(),
            hash: "0".repeat(16),
            weights: Default::default(),
        }),
        version: "test".into(),
        shard: None,
        history: Default::default(),
        family: mobile_r1_eval::settings::ModelFamily::Qwen25Vl,
    }
}
