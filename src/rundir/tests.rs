use super::*;
use serde_json::json;

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[test]
fn partial_last_line_is_cut_and_redone() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path());
    let p = run.path(PREDICTIONS);
    write(
        &p,
        "{\"trajectory\":\"a\",\"step\":0,\"response\":\"x\"}\n{\"trajectory\":\"a\",\"st",
    );
    assert_eq!(run.completed_steps().unwrap().len(), 1);
    let mut w = JsonlAppender::open(&p, 1).unwrap();
    w.append(&json!({"trajectory": "a", "step": 1, "response": "y"}))
        .unwrap();
    drop(w);
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(text.ends_with("\"y\"}\n"));
    let keys = run.completed_steps().unwrap();
    assert!(keys.contains("a#0") && keys.contains("a#1"));
}

#[test]
fn errored_steps_are_not_completed() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path());
    write(
        &run.path(PREDICTIONS),
        "{\"trajectory\":3,\"step\":0,\"response\":\"\",\"error\":\"bad png\"}\n",
    );
    assert!(run.completed_steps().unwrap().is_empty());
}

#[test]
fn a_failed_start_leaves_no_folder_behind() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("runs").join("one");
    let claim = RunDir::new(&root).claim().unwrap();
    assert!(root.join(LOCK_FILE).is_file());
    drop(claim);
    assert!(
        !parent.path().join("runs").exists(),
        "created folders removed"
    );
    let claim = RunDir::new(&root).claim().unwrap();
    write(&claim.dir().path(PREDICTIONS), "");
    drop(claim);
    assert!(
        root.join(PREDICTIONS).is_file(),
        "a folder with results stays"
    );
    let fresh = RunDir::claim_fresh(&parent.path().join("fresh"), "org/m").unwrap();
    let made = fresh.dir().root().to_path_buf();
    drop(fresh);
    assert!(!made.exists() && !parent.path().join("fresh").exists());
}

#[test]
fn files_and_benchmark_folders_are_not_run_folders() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    write(&file, "x");
    let err = RunDir::new(&file).claim().unwrap_err().to_string();
    assert!(err.contains("is a file"), "{err}");
    write(&dir.path().join("data.jsonl"), "");
    let err = RunDir::new(dir.path()).claim().unwrap_err().to_string();
    assert!(err.contains("holds a benchmark"), "{err}");
}

#[test]
fn a_resume_with_other_settings_names_each_difference() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path());
    let settings = crate::records::RunSettings {
        model: "m".into(),
        model_hash: "h".into(),
        weights: Default::default(),
        dtype: Some("f32".into()),
        data_hash: "d".into(),
        prompt_hashes: Default::default(),
        system_prompt: crate::settings::SystemPrompt::Default,
        coordinate_frame: Default::default(),
        image_processor: Default::default(),
        max_new_tokens: 8,
        judge: None,
        version: "v".into(),
        shard: None,
        history: Default::default(),
        family: crate::settings::ModelFamily::Qwen25Vl,
    };
    // Written as a manifest from before the coordinate frame was recorded: it reads as image pixels.
    let mut old_settings = serde_json::to_value(&settings).unwrap();
    old_settings
        .as_object_mut()
        .unwrap()
        .remove("coordinate_frame");
    let manifest = serde_json::json!({
        "settings": old_settings, "model_path": "m", "device": "cpu", "data": "d",
        "rules": crate::settings::RulePreset::default(),
        "batch_limits": {"max_seqs": 1, "max_batch_tokens": 1, "max_new_tokens": 1},
        "kv_bytes_per_token": 1, "ops": {"fused": true, "cuda_kernels": false, "tensor_core_attention": false,
        "kernels_sha256": "", "cpu_f32_gemm": "", "cpu_gemm_row_block": 16, "cpu_gemm_blas_min_rows": 4,
        "decode_attention": "PerSequence", "profiled": false},
        "versions": {"mobile-r1-eval": "v", "candle": "c", "git_revision": "g"},
        "started_at_unix": 0, "resumed_at_unix": null, "finished_at_unix": null
    });
    write(&run.path(MANIFEST), &manifest.to_string());
    assert!(run.check_resume(&settings).unwrap().is_some());
    let other = crate::records::RunSettings {
        dtype: Some("bf16".into()),
        max_new_tokens: 9,
        coordinate_frame: crate::settings::CoordinateFrame::Relative(999),
        ..settings.clone()
    };
    let err = run.check_resume(&other).unwrap_err().to_string();
    assert!(
        err.contains(
            r#"coordinate_frame: {"kind":"image_pixels"} → {"kind":"relative","max":999}"#
        ),
        "{err}"
    );
    assert!(err.contains("dtype: \"f32\" → \"bf16\""), "{err}");
    assert!(err.contains("max_new_tokens: 8 → 9"), "{err}");
    assert!(!err.contains("model_hash"), "{err}");
    // A judge phase may be added to a run made without one.
    let judged = crate::records::RunSettings {
        judge: Some(crate::records::JudgeSettings {
            model: "m".into(),
            hash: "h".into(),
            weights: Default::default(),
        }),
        ..settings
    };
    assert!(run.check_resume(&judged).unwrap().is_some());
}
