//! `eval` end to end through the binary on the embedded sample benchmark with the tiny random checkpoint:
//! metrics written, batch-size invariance, resume after a kill, manifest mismatch, corrupt screenshot, judge.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::util::{json_file, json_lines, killed_copy, ok};

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b")
}

/// Small pixel bound: every sample screenshot becomes a few dozen image tokens, so the suite stays fast.
const MAX_PIXELS: &str = "40000";
const MAX_NEW: &str = "10";

fn eval(out: &Path, data: Option<&Path>, extra: &[&str]) -> Output {
    eval_env(out, data, extra, &[])
}

/// [`eval`] with extra environment variables.
fn eval_env(out: &Path, data: Option<&Path>, extra: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = crate::util::bin();
    cmd.args(["eval", "--model"])
        .arg(model_dir())
        .arg("--out")
        .arg(out);
    cmd.args(["--max-pixels", MAX_PIXELS, "--max-new-tokens", MAX_NEW]);
    if let Some(d) = data {
        cmd.arg("--data").arg(d);
    }
    cmd.args(extra)
        .env("RUST_LOG", "warn")
        .envs(envs.iter().copied())
        .output()
        .expect("run the binary")
}

/// `(trajectory, step) → response` of a predictions file, asserting that no step appears twice.
fn responses(run: &Path) -> BTreeMap<(String, u64), String> {
    let mut map = BTreeMap::new();
    for v in json_lines(&run.join("predictions.jsonl")) {
        let key = (v["trajectory"].to_string(), v["step"].as_u64().unwrap());
        let old = map.insert(key.clone(), v["response"].as_str().unwrap().to_string());
        assert!(old.is_none(), "step {key:?} written twice");
    }
    map
}

#[test]
fn batch_size_does_not_change_predictions_and_metrics_are_written() {
    let tmp = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for bs in ["1", "3", "8"] {
        let out = tmp.path().join(format!("bs{bs}"));
        let judge: &[&str] = if bs == "3" { &[] } else { &["--no-judge"] };
        ok(&eval(&out, None, &[&["--batch-size", bs], judge].concat()));
        runs.push(responses(&out));
        let metrics: Value = json_file(&out.join("metrics.json"));
        for key in [
            "steps",
            "trajectories",
            "accuracy",
            "task_success",
            "tail_success",
            "args_errors",
            "format_errors",
        ] {
            assert!(metrics.get(key).is_some(), "metrics.json lacks {key}");
        }
        assert_eq!(
            metrics["steps"].as_u64().unwrap() as usize,
            runs.last().unwrap().len()
        );
        assert!(out.join("summary.md").exists() && out.join("steps.jsonl").exists());
        assert!(
            out.join("report.html").exists()
                && metrics["intervals"]["metrics"]["accuracy"].is_object()
        );
        let tp: Value = json_file(&out.join("throughput.json"));
        assert!(
            tp["phases"][0]["decode_tokens_per_second"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        if bs == "3" {
            let verdicts = json_lines(&out.join("judgements.jsonl"));
            assert_eq!(
                verdicts.len() as u64,
                metrics["trajectories"].as_u64().unwrap()
            );
            assert!(
                metrics.get("judge_success").is_some()
                    && metrics.get("judge_unparseable").is_some()
            );
        }
    }
    assert!(runs[0].values().all(|r| !r.is_empty()));
    assert_eq!(runs[0], runs[1], "batch size 3 changed a response");
    assert_eq!(runs[0], runs[2], "batch size 8 changed a response");
}

#[test]
fn a_killed_run_resumes_without_losing_or_duplicating_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    ok(&eval(&full, None, &["--no-judge", "--batch-size", "4"]));
    let expected = responses(&full);

    // Simulate a kill: keep the manifest and the first half of the lines, plus half of the next line.
    let cut = tmp.path().join("cut");
    killed_copy(&full, &cut);

    ok(&eval(&cut, None, &["--no-judge", "--batch-size", "4"]));
    assert_eq!(responses(&cut), expected);
}

#[test]
fn a_run_folder_made_with_other_settings_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    ok(&eval(&out, None, &["--no-judge"]));
    let mut cmd = crate::util::bin();
    let o = cmd
        .args(["eval", "--no-judge", "--model"])
        .arg(model_dir())
        .arg("--out")
        .arg(&out)
        .args(["--max-pixels", MAX_PIXELS, "--max-new-tokens", "11"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("max_new_tokens") && err.contains("other settings"),
        "{err}"
    );
}

/// A screenshot that cannot be read is recorded as that step's error; the run finishes, says so and exits 1
/// (0 with `--allow-step-errors`); once the screenshot is fixed, a resume redoes only that step. A screenshot
/// replaced after its answer was saved is refused on resume, naming it.
#[test]
fn a_corrupt_screenshot_is_recorded_then_fixed_and_a_replaced_one_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let o = crate::util::bin()
        .arg("sample")
        .arg("--out")
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success());
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(data.join("data.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let image = first["trajectory"][0]["image"].as_str().unwrap();
    let good = std::fs::read(data.join(image)).unwrap();
    std::fs::write(data.join(image), b"not a png").unwrap();

    let out = tmp.path().join("run");
    let o = eval(&out, Some(&data), &["--no-judge"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("1 of 30 steps could not be prepared"), "{err}");
    let errors: Vec<Value> = json_lines(&out.join("predictions.jsonl"))
        .into_iter()
        .filter(|v| v.get("error").is_some())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["step"], 0);
    let metrics: Value = json_file(&out.join("metrics.json"));
    assert_eq!(metrics["prediction_errors"], 1);
    assert!(metrics["format_errors"].as_u64().unwrap() >= 1);
    ok(&eval(
        &out,
        Some(&data),
        &["--no-judge", "--allow-step-errors"],
    ));

    // Fixed: the step without an answer is redone; nothing else runs again.
    std::fs::write(data.join(image), &good).unwrap();
    let failed = errors.len();
    let o = eval_env(&out, Some(&data), &["--no-judge"], &[("RUST_LOG", "info")]);
    ok(&o);
    let want = format!("steps: {failed} to predict, {} already done", 30 - failed);
    assert!(String::from_utf8_lossy(&o.stderr).contains(&want), "{want}");
    let metrics: Value = json_file(&out.join("metrics.json"));
    assert_eq!(metrics["prediction_errors"], 0);

    // Replaced after its answer was saved: refused, named.
    let second = first["trajectory"][1]["image"].as_str().unwrap();
    let mut bytes = std::fs::read(data.join(second)).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(data.join(second), &bytes).unwrap();
    let o = eval(&out, Some(&data), &["--no-judge"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("changed since this run started") && err.contains(second),
        "{err}"
    );
}

#[test]
fn a_separate_judge_model_answers_the_aggregation_prompts() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let judge = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-a");
    ok(&eval(
        &out,
        None,
        &[
            "--judge-model",
            judge.to_str().unwrap(),
            "--batch-size",
            "8",
        ],
    ));
    let metrics: Value = json_file(&out.join("metrics.json"));
    let verdicts = json_lines(&out.join("judgements.jsonl"));
    assert_eq!(
        verdicts.len() as u64,
        metrics["trajectories"].as_u64().unwrap()
    );
    assert!(verdicts
        .iter()
        .all(|v| v["prompt_tokens"].as_u64().unwrap() > 0));
    let manifest: Value = json_file(&out.join("manifest.json"));
    assert!(manifest["settings"]["judge"]["model"]
        .as_str()
        .unwrap()
        .ends_with("tiny-a"));
    assert!(manifest["finished_at_unix"].as_u64().is_some());
    assert_eq!(manifest["backend"]["kind"], "local");
    assert_eq!(manifest["settings"]["dtype"], "f32");
    assert_eq!(manifest["backend"]["ops"]["fused"], true);
    assert_eq!(
        manifest["backend"]["ops"]["kernels_sha256"]
            .as_str()
            .map(str::len),
        Some(64)
    );
    assert_eq!(manifest["backend"]["ops"]["decode_attention"], "Fused");
    // Resuming a finished run redoes nothing and keeps every line.
    ok(&eval(
        &out,
        None,
        &[
            "--judge-model",
            judge.to_str().unwrap(),
            "--batch-size",
            "8",
        ],
    ));
    assert_eq!(
        json_lines(&out.join("judgements.jsonl")).len(),
        verdicts.len()
    );
}

/// The fused ops (CPU varlen attention) give the composed references' greedy outputs; the profiled run (the fused
/// one) reports its sections in `throughput.json`.
#[test]
fn fused_ops_and_their_references_give_the_same_predictions() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str, kernels: &str| {
        let out = tmp.path().join(name);
        let profile = if kernels == "on" { "1" } else { "0" };
        let envs = [
            ("MOBILE_R1_EVAL_KERNELS", kernels),
            ("MOBILE_R1_EVAL_PROFILE", profile),
        ];
        ok(&eval_env(&out, None, &["--no-judge"], &envs));
        let manifest = json_file(&out.join("manifest.json"));
        assert_eq!(manifest["backend"]["ops"]["fused"], kernels == "on");
        // The tensor-core attention is on by default (off only through MOBILE_R1_EVAL_MMA or its flag) and the
        // profiler follows its switch.
        assert_eq!(manifest["backend"]["ops"]["tensor_core_attention"], true);
        assert_eq!(manifest["backend"]["ops"]["profiled"], kernels == "on");
        let profile = &json_file(&out.join("throughput.json"))["profile"];
        if kernels == "on" {
            for section in [
                "vision.qkv_rope",
                "text.qkv_rope",
                "linear.matmul",
                "decode.text_layers",
            ] {
                assert!(
                    profile[section]["calls"].as_u64().unwrap() > 0,
                    "{section}: {profile}"
                );
            }
        } else {
            assert!(profile.is_null(), "{profile}");
        }
        responses(&out)
    };
    let fused = run("fused", "on");
    assert_eq!(fused.len(), 30);
    assert_eq!(fused, run("reference", "off"));
}

/// `MOBILE_R1_EVAL_BLAS`: the manifest names the CPU's f32 GEMM; with OpenBLAS installed, it gives the `gemm`
/// crate's predictions; a library that cannot be loaded stops the run before any step, naming the variable.
#[test]
fn the_cpu_blas_switch_is_recorded_and_a_bad_library_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let calibration = tmp.path().join("cache/cpu-gemm.json");
    let run = |name: &str, blas: &str| {
        let out = tmp.path().join(name);
        let envs = [
            ("MOBILE_R1_EVAL_BLAS", blas),
            (
                "MOBILE_R1_EVAL_CPU_GEMM_CALIBRATION",
                calibration.to_str().unwrap(),
            ),
        ];
        let o = eval_env(&out, None, &["--no-judge"], &envs);
        (out, o)
    };
    let (off, o) = run("off", "off");
    ok(&o);
    let ops = &json_file(&off.join("manifest.json"))["backend"]["ops"];
    // The built-in GEMM: the packed AVX2 kernel for large segments on a CPU without AVX-512, else the gemm crate.
    let builtin = mobile_r1_eval::ops::gemm::packed::BuiltinGemm::for_this_cpu(false);
    assert_eq!(ops["cpu_f32_gemm"], builtin.describe().as_str());
    let choice = &ops["cpu_blas_choice"];
    assert_eq!(
        (&choice["used"], &choice["spec"], &choice["library"]),
        (
            &serde_json::json!(false),
            &serde_json::json!("off"),
            &Value::Null
        )
    );
    assert!(
        choice["reason"].as_str().unwrap().contains("off"),
        "{choice}"
    );
    assert_eq!(ops["cpu_gemm_row_block"], mobile_r1_eval::ops::ROW_BLOCK);
    let rows = mobile_r1_eval::ops::gemm::row::RowGemm::for_this_cpu(false);
    assert_eq!(ops["cpu_gemm_independent_rows"], rows.describe());
    assert_eq!(
        ops["cpu_gemm_blas_min_rows"],
        mobile_r1_eval::ops::BLAS_MIN_ROWS
    );
    let (auto, o) = run("auto", "auto");
    ok(&o);
    let ops = json_file(&auto.join("manifest.json"))["backend"]["ops"].clone();
    let (gemm, choice) = (ops["cpu_f32_gemm"].clone(), &ops["cpu_blas_choice"]);
    // The choice and its measured rates are recorded: a library found was timed against the built-in GEMM.
    assert_eq!(
        choice["used"],
        gemm.as_str().unwrap().starts_with("cblas: "),
        "{choice}"
    );
    if !choice["library"].is_null() {
        for rate in ["blas_gflops", "builtin_gflops"] {
            assert!(choice[rate].as_f64().unwrap() > 0.0, "{choice}");
        }
        // The calibration is kept in the file the flag's variable names, and a second run reads it.
        assert!(calibration.is_file(), "{choice}");
        let (again, o) = run("auto-again", "auto");
        ok(&o);
        let again = &json_file(&again.join("manifest.json"))["backend"]["ops"]["cpu_blas_choice"];
        assert_eq!(again["blas_gflops"], choice["blas_gflops"]);
        assert!(
            again["calibration"]
                .as_str()
                .unwrap()
                .contains("measured once"),
            "{again}"
        );
    }
    if gemm.as_str().unwrap().starts_with("cblas: ") {
        assert_eq!(responses(&auto), responses(&off), "{gemm}");
    } else {
        assert_eq!(gemm, builtin.describe().as_str());
        eprintln!("no OpenBLAS used on this machine: BLAS and built-in predictions not compared");
    }
    let missing = "/nonexistent/libcblas.so";
    let (bad, o) = run("bad", missing);
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("CPU GEMM library `{missing}`")),
        "{stderr}"
    );
    assert!(!bad.join("predictions.jsonl").exists());
}

/// A bf16 CPU run with a CBLAS library that has a bf16 GEMM (MKL, put into `.mkl/` by `.ci/mkl.sh`) named by
/// `--cpu-gemm`: every step is answered, and the manifest records that the library's bf16 GEMM multiplied the row
/// segments, with the rates it measured. Skipped where MKL is absent.
#[test]
fn a_named_library_with_a_bf16_gemm_runs_the_bf16_segments() {
    let mkl = Path::new(env!("CARGO_MANIFEST_DIR")).join(".mkl/libmkl_rt.so.3");
    if !mkl.exists() {
        eprintln!(
            "skipped: no MKL at {} (bash .ci/mkl.sh puts it there)",
            mkl.display()
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("mkl");
    let flags = [
        "--no-judge",
        "--dtype",
        "bf16",
        "--cpu-gemm",
        mkl.to_str().unwrap(),
    ];
    ok(&eval(&out, None, &flags));
    assert_eq!(responses(&out).len(), 30);
    let ops = &json_file(&out.join("manifest.json"))["backend"]["ops"];
    let choice = &ops["cpu_bf16_blas_choice"];
    assert_eq!(choice["used"], true, "{choice}");
    assert!(
        choice["library"]
            .as_str()
            .unwrap()
            .contains("cblas_gemm_bf16bf16f32"),
        "{choice}"
    );
    assert!(choice["blas_gflops"].as_f64().unwrap() > 0.0, "{choice}");
    assert!(
        ops["cpu_bf16_gemm"]
            .as_str()
            .unwrap()
            .contains("row segments on"),
        "{ops}"
    );
    // Under `auto`, an installed MKL (here found through the loader's path) is timed against the built-in kernel
    // and used only where it is at least as fast; the rates are kept beside the f32 calibration.
    let auto = tmp.path().join("auto");
    let calibration = tmp.path().join("cache/cpu-gemm.json");
    let envs = [
        ("LD_LIBRARY_PATH", mkl.parent().unwrap().to_str().unwrap()),
        ("MOBILE_R1_EVAL_BLAS", "auto"),
        (
            "MOBILE_R1_EVAL_CPU_GEMM_CALIBRATION",
            calibration.to_str().unwrap(),
        ),
    ];
    ok(&eval_env(
        &auto,
        None,
        &["--no-judge", "--dtype", "bf16"],
        &envs,
    ));
    assert_eq!(responses(&auto).len(), 30);
    let choice =
        json_file(&auto.join("manifest.json"))["backend"]["ops"]["cpu_bf16_blas_choice"].clone();
    assert_eq!(choice["spec"], "auto", "{choice}");
    assert!(
        choice["library"]
            .as_str()
            .unwrap()
            .starts_with("libmkl_rt.so"),
        "{choice}"
    );
    let (b, g) = (
        choice["blas_gflops"].as_f64().unwrap(),
        choice["builtin_gflops"].as_f64().unwrap(),
    );
    assert_eq!(choice["used"], b >= g, "{choice}");
    assert!(calibration.with_file_name("cpu-gemm-bf16.json").is_file());
}

/// `--device cpu,cpu`: two copies of the model share the trajectories through one queue and one writer; the
/// predictions and metrics equal a one-device run's, and `throughput.json` gives each device's share.
#[test]
fn two_devices_give_the_one_device_results() {
    let tmp = tempfile::tempdir().unwrap();
    let one = tmp.path().join("one");
    let two = tmp.path().join("two");
    ok(&eval(&one, None, &["--device", "cpu", "--no-judge"]));
    ok(&eval(&two, None, &["--device", "cpu,cpu", "--no-judge"]));
    assert_eq!(responses(&one), responses(&two));
    let metrics = |run: &Path| {
        let mut m = json_file(&run.join("metrics.json"));
        m.as_object_mut().unwrap().remove("prediction_errors");
        m
    };
    assert_eq!(metrics(&one), metrics(&two));
    let phases = &json_file(&two.join("throughput.json"))["phases"];
    let devices = phases[0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    let total: u64 = devices.iter().map(|d| d["prompts"].as_u64().unwrap()).sum();
    assert_eq!(total, 30);
    assert!(
        devices.iter().all(|d| d["prompts"].as_u64().unwrap() > 0),
        "{devices:?}"
    );
    assert_eq!(
        json_file(&two.join("manifest.json"))["backend"]["device"],
        "cpu,cpu"
    );
}
