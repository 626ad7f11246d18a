//! `bench --json` through the binary: the same engine as `eval` on synthetic step prompts.

use serde_json::Value;

#[test]
fn bench_json_reports_throughput_memory_and_mfu() {
    let o = crate::util::bin()
        .args([
            "bench",
            "--config",
            "tiny",
            "--steps",
            "8",
            "--batch-size",
            "4",
        ])
        .args(["--max-new-tokens", "6", "--max-pixels", "100352", "--json"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).expect("one JSON object on stdout");
    // The report reads back through the type that wrote it.
    let typed: mobile_r1_eval::bench::BenchReport =
        serde_json::from_slice(&o.stdout).expect("a BenchReport");
    assert_eq!(
        typed.schema_version,
        mobile_r1_eval::bench::BENCH_SCHEMA_VERSION
    );
    assert_eq!(typed.phases.len(), 2);
    for key in [
        "steps_per_second",
        "images_per_second",
        "prefill_tokens_per_second",
        "decode_tokens_per_second",
        "mfu",
        "mfu_prefill",
        "mfu_vision",
    ] {
        assert!(r[key].as_f64().unwrap() > 0.0, "{key} = {}", r[key]);
    }
    assert!(r["peak_memory_bytes"].as_u64().unwrap() > 0);
    // The peak is the best of candle's GEMM, the packed kernel (where the CPU has AVX2), OpenBLAS's where it is
    // installed, and the rates the run's own prefill and vision pass reached; no MFU exceeds 1.
    let source = r["matmul_peak_source"].as_str().unwrap();
    assert!(
        [
            "candle",
            "packed",
            "this run's prefill",
            "this run's separate vision pass"
        ]
        .contains(&source)
            || source.starts_with("cblas: "),
        "{source}"
    );
    for key in ["mfu", "mfu_prefill", "mfu_vision"] {
        assert!(r[key].as_f64().unwrap() <= 1.0, "{key} = {}", r[key]);
    }
    // The work counted includes the attention of the prefills and of the decode steps.
    assert!(typed.phases[0].stats.prefill_attention_flops > 0.0);
    assert!(typed.phases[0].stats.decode_attention_flops > 0.0);
    // Every GEMM path measured is listed, the best one is the peak, and the CPU and its ISA peak are described.
    let rates = r["matmul_rates"].as_array().unwrap();
    let best = rates
        .iter()
        .map(|x| x["flops"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(best, r["matmul_peak_flops"].as_f64().unwrap());
    assert!(rates.iter().any(|x| x["path"] == source), "{rates:?}");
    assert!(r["cpu"]["logical_cpus"].as_u64().unwrap() >= 1);
    assert!(r["cpu"]["features"].is_array());
    if let Some(isa) = r["isa_peak"].as_object() {
        // The measured FMA rate is the product of the cores, lanes, two FLOPs, the measured clock and the FMAs
        // a cycle it implies; the nominal clock is /proc/cpuinfo's.
        let product = isa["cores"].as_f64().unwrap()
            * isa["fma_per_cycle"].as_f64().unwrap()
            * isa["lanes"].as_f64().unwrap()
            * 2.0
            * isa["clock_ghz"].as_f64().unwrap()
            * 1e9;
        assert!((isa["flops"].as_f64().unwrap() - product).abs() <= 1e-6 * product);
        assert!(isa["fma_per_cycle"].as_f64().unwrap() > 0.0, "{isa:?}");
        assert!(isa["assumptions"].as_str().unwrap().contains("GHz"));
        assert!(r["mfu_isa"]["mfu_prefill"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(r["steps"], 8);
    assert_eq!(r["device"], "cpu");
    assert!(r.get("devices").is_none(), "one device: no shares");
    assert_eq!(
        r["phases"][1]["phase"], "judge",
        "the aggregation phase is benchmarked too"
    );
    assert_eq!(r["phases"][0]["decode_tokens"], 8 * 6);
    // The full benchmark at the measured rates: 2,000 steps at the step phase's rate plus 500 judge prompts.
    let est = &r["benchmark_estimate"];
    assert_eq!(
        (est["trajectories"].as_u64(), est["steps"].as_u64()),
        (Some(500), Some(2000))
    );
    assert_eq!(est["judge_included"], true);
    let per_prompt =
        |p: &Value| p["wall_seconds"].as_f64().unwrap() / p["prompts"].as_f64().unwrap();
    let want = 2000.0 * per_prompt(&r["phases"][0]) + 500.0 * per_prompt(&r["phases"][1]);
    let got = est["seconds"].as_f64().unwrap();
    assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
}

/// `bench --config tiny --max-pixels 100352 --json` with `args` through the binary, its report read back.
fn bench_report(args: &[&str]) -> mobile_r1_eval::bench::BenchReport {
    let o = crate::util::bin()
        .args([
            "bench",
            "--config",
            "tiny",
            "--max-pixels",
            "100352",
            "--json",
        ])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("a BenchReport")
}

/// `bench --device cpu,cpu`: two copies of the random model share the step and judge prompts through the same
/// queue as `eval`, and the report gives each device's share.
#[test]
fn bench_on_two_devices_reports_each_share() {
    let r = bench_report(&[
        "--device",
        "cpu,cpu",
        "--steps",
        "16",
        "--batch-size",
        "2",
        "--max-new-tokens",
        "4",
    ]);
    assert_eq!(r.device, "cpu,cpu");
    assert_eq!(r.steps, 16);
    let names: Vec<&str> = r.devices.iter().map(|d| d.device.as_str()).collect();
    assert_eq!(names, ["cpu#0", "cpu#1"]);
    assert!(r.devices.iter().all(|d| d.prompts > 0), "{:?}", r.devices);
    let sum = |f: fn(&mobile_r1_eval::records::DeviceShare) -> usize| -> usize {
        r.devices.iter().map(f).sum()
    };
    assert_eq!(sum(|d| d.prompts), 16);
    assert_eq!(sum(|d| d.decode_tokens), 16 * 4);
    assert_eq!(r.devices, r.phases[0].stats.devices);
    let judge = &r.phases[1].stats;
    assert_eq!(judge.phase, "judge");
    assert_eq!(judge.devices.iter().map(|d| d.prompts).sum::<usize>(), 4);
    assert!(r.steps_per_second > 0.0 && r.mfu > 0.0);
    assert!(r.render().contains("cpu#1: "), "{}", r.render());
}

/// `bench --threads 1 --torch-gflops G`: every kernel runs on one compute thread, the rates per thread are those
/// of the run, a given torch rate above every measured one becomes the MFU's yardstick, and decode is held against
/// the stream read bandwidth measured in the run (the language model's weights read once per step).
#[test]
fn bench_holds_its_figures_against_the_given_rate_and_the_bandwidth() {
    let r = bench_report(&[
        "--threads",
        "1",
        "--steps",
        "4",
        "--batch-size",
        "1",
        "--max-new-tokens",
        "4",
        "--no-judge",
        "--torch-gflops",
        "1000000",
    ]);
    assert_eq!(r.matmul_peak_source, "torch");
    assert_eq!(r.matmul_peak_flops, 1e15);
    let per = r.per_core.as_ref().expect("rates per thread on the CPU");
    assert_eq!(per.threads, 1);
    assert!((per.steps_per_second - r.steps_per_second).abs() <= 1e-9 * r.steps_per_second);
    let d = r
        .decode_bandwidth
        .as_ref()
        .expect("decode against the bandwidth");
    assert_eq!(
        d.weight_bytes_per_step,
        r.params.language_model as f64 * 4.0
    );
    assert_eq!(d.sequences_per_step, 1.0);
    assert!(d.stream_read_bytes_per_second > 1e8, "{d:?}");
    let share = d.weight_bytes_per_second / d.stream_read_bytes_per_second;
    assert!(share > 0.0 && (share - d.share_of_bandwidth).abs() < 1e-12);
    let text = r.render();
    assert!(
        text.contains("stream read") && text.contains("per thread (1 threads)"),
        "{text}"
    );
    // Bad values name their flag.
    for (flag, value) in [("--threads", "0"), ("--torch-gflops", "0")] {
        let o = crate::util::bin()
            .args(["bench", "--config", "tiny", flag, value])
            .output()
            .unwrap();
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(flag), "{err}");
    }
}

/// Random weights are `bench`'s only mode: no flag is needed; an unknown `--config` names the presets.
#[test]
fn bench_needs_no_mode_flag_and_names_its_presets() {
    let o = crate::util::bin()
        .args([
            "bench",
            "--config",
            "tiny",
            "--steps",
            "1",
            "--no-judge",
            "--json",
        ])
        .args([
            "--max-new-tokens",
            "2",
            "--max-pixels",
            "20000",
            "--device",
            "cpu",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["config"], "tiny");
    let o = crate::util::bin()
        .args(["bench", "--config", "13b"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("tiny, small, 3b, 7b"), "{err}");
}

/// `MOBILE_R1_EVAL_PROFILE=1` adds the per-section table; `MOBILE_R1_EVAL_KERNELS=off` (the composed references)
/// generates the same tokens as the fused path.
#[test]
fn profile_sections_and_the_kernel_switch() {
    let run = |env: &[(&str, &str)], dir: &std::path::Path| -> Value {
        let o = crate::util::bin()
            .args(["bench", "--config", "tiny", "--steps", "4"])
            .args([
                "--max-new-tokens",
                "5",
                "--max-pixels",
                "100352",
                "--no-judge",
                "--json",
            ])
            .env("RUST_LOG", "warn")
            .env("TMPDIR", dir)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let tmp = tempfile::tempdir().unwrap();
    let plain = run(&[], tmp.path());
    assert!(plain["profile"].is_null());
    let profiled = run(&[("MOBILE_R1_EVAL_PROFILE", "1")], tmp.path());
    let p = profiled["profile"].as_object().expect("a profile table");
    for section in [
        "vision.attn_core.window",
        "vision.attn_core.full",
        "vision.mlp",
        "text.attend",
        "prefill.text_layers",
        "decode.text_layers",
        "linear.matmul",
    ] {
        assert!(p[section]["calls"].as_u64().unwrap() > 0, "{section}");
        assert!(p[section]["seconds"].as_f64().unwrap() >= 0.0, "{section}");
    }
    let off = run(&[("MOBILE_R1_EVAL_KERNELS", "off")], tmp.path());
    assert_eq!(
        off["phases"][0]["decode_tokens"],
        plain["phases"][0]["decode_tokens"]
    );
}

/// The unit tests of `compare.py`'s log-prob parity (standard-library Python), run where `python3` is installed.
#[test]
fn compare_py_log_prob_parity_unit_tests_pass() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/compare");
    let run = std::process::Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(&dir)
        .args(["-p", "test_*.py"])
        .output();
    let Ok(o) = run else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let text = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("OK"), "{text}");
}
