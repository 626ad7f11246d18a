//! Unit tests of the model's pure helpers and memory bounds: attention chunk planning for a 1080×2400
//! screenshot, chunked = unchunked attention, budgeted vision forward, loader errors that name tensors.
use crate::model_support::*;
use candle_core::{DType, Device, Tensor};
use mobile_r1_eval::model::window::window_index;
use mobile_r1_eval::model::{ModelFiles, PrefillRequest, VlModel};
use mobile_r1_eval::ops::composed::{
    attention, causal_mask, pad_windows, plan_chunks, DEFAULT_MAX_SCORE_ELEMS, MASK_MIN,
};
use mobile_r1_eval::ops::OpsConfig;

#[test]
fn screenshot_1080x2400_attention_is_chunked() {
    // smart_resize(2400, 1080) with the Hub max_pixels keeps 2408×1092 → grid (1, 172, 78): 13,416 patches.
    let (h, w) = (172usize, 78usize);
    let n = h * w;
    let heads = 16;
    // Full-attention layers: never all heads × N × N at once.
    let plan = plan_chunks(1, heads, 1, n, n, DEFAULT_MAX_SCORE_ELEMS);
    assert!(plan.score_elems(n) <= DEFAULT_MAX_SCORE_ELEMS, "{plan:?}");
    assert!(plan.score_elems(n) < heads * n * n / 8);
    assert!(plan.rows >= 64, "{plan:?}");
    // Window layers: windows padded to 64 patches and batched.
    let wi = window_index(&[[1, h, w]], 2, 4);
    assert_eq!(wi.window_index.len(), n / 4);
    let pw = pad_windows(&wi.cu_window_seqlens, MASK_MIN);
    assert_eq!(pw.width, 64);
    assert_eq!(pw.n_windows, 22 * 10); // ceil(86/4) × ceil(39/4)
    assert_eq!(pw.scatter_back.len(), n);
    let wplan = plan_chunks(pw.n_windows, heads, 1, 64, 64, DEFAULT_MAX_SCORE_ELEMS);
    assert!(wplan.score_elems(64) <= DEFAULT_MAX_SCORE_ELEMS);
    // A tiny budget still yields valid chunks (one head, few rows).
    let p = plan_chunks(1, heads, 2, n, n, 10_000);
    assert_eq!(p.heads, 2);
    assert_eq!(p.rows, 1);
}

#[test]
fn chunked_attention_equals_unchunked() {
    let dev = Device::Cpu;
    let (b, hq, hkv, n, l, d) = (2, 4, 2, 9, 13, 8);
    let q = Tensor::randn(0f32, 1.0, (b, hq, n, d), &dev).unwrap();
    let k = Tensor::randn(0f32, 1.0, (b, hkv, l, d), &dev).unwrap();
    let v = Tensor::randn(0f32, 1.0, (b, hkv, l, d), &dev).unwrap();
    let mask = causal_mask(n, l - n, &dev).unwrap().unsqueeze(0).unwrap();
    let full = attention(&q, &k, &v, Some(&mask), 0.3, usize::MAX).unwrap();
    for budget in [1, 50, 200, 1000] {
        let c = attention(&q, &k, &v, Some(&mask), 0.3, budget).unwrap();
        assert!(max_abs(&full, &c) < 1e-6, "budget {budget}");
    }
    // Reference: explicit GQA repeat + softmax.
    let kr = k
        .unsqueeze(2)
        .unwrap()
        .expand((b, hkv, 2, l, d))
        .unwrap()
        .reshape((b, hq, l, d))
        .unwrap();
    let vr = v
        .unsqueeze(2)
        .unwrap()
        .expand((b, hkv, 2, l, d))
        .unwrap()
        .reshape((b, hq, l, d))
        .unwrap();
    let s = (q.matmul(&kr.t().unwrap()).unwrap() * 0.3)
        .unwrap()
        .broadcast_add(&mask.unsqueeze(0).unwrap())
        .unwrap();
    let p = candle_nn::ops::softmax_last_dim(&s).unwrap();
    let want = p.matmul(&vr).unwrap();
    assert!(max_abs(&full, &want) < 1e-5);
}

#[test]
fn budgeted_forward_equals_default() {
    let gold = goldens("tiny-a");
    let mut model = load_model("tiny-a");
    let input = golden_input(&gold, "");
    let req = [PrefillRequest::new(&input)];
    let (_, a) = model.prefill(&req).unwrap();
    model.set_attention_budget(3000);
    let (_, b) = model.prefill(&req).unwrap();
    assert!(max_abs(&a, &b) < 1e-5);
}

fn broken_copy(
    edit: impl FnOnce(&mut std::collections::HashMap<String, Tensor>),
) -> tempfile::TempDir {
    let src = fixture("models/tiny-a");
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "generation_config.json"] {
        std::fs::copy(src.join(name), dir.path().join(name)).unwrap();
    }
    let mut t =
        candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu).unwrap();
    edit(&mut t);
    candle_core::safetensors::save(&t, dir.path().join("model.safetensors")).unwrap();
    dir
}

fn load_err(dir: &std::path::Path) -> String {
    let files = ModelFiles::from_dir(dir).unwrap();
    format!(
        "{}",
        VlModel::load(&files, &Device::Cpu, DType::F32, &OpsConfig::default()).unwrap_err()
    )
}

#[test]
fn missing_or_misshapen_tensor_is_named() {
    let d = broken_copy(|t| {
        t.remove("visual.blocks.2.mlp.up_proj.bias");
    });
    let e = load_err(d.path());
    assert!(e.contains("visual.blocks.2.mlp.up_proj.bias"), "{e}");
    let d = broken_copy(|t| {
        let x = Tensor::zeros((3, 3), DType::BF16, &Device::Cpu).unwrap();
        t.insert("model.layers.1.self_attn.k_proj.bias".into(), x);
    });
    let e = load_err(d.path());
    assert!(
        e.contains("model.layers.1.self_attn.k_proj.bias") && e.contains("shape"),
        "{e}"
    );
    let d = tempfile::tempdir().unwrap();
    let e = format!("{}", ModelFiles::from_dir(d.path()).unwrap_err());
    assert!(e.contains("config.json"), "{e}");
}

#[test]
fn sharded_checkpoint_loads() {
    let src = fixture("models/tiny-a");
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "generation_config.json"] {
        std::fs::copy(src.join(name), dir.path().join(name)).unwrap();
    }
    let all = candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu).unwrap();
    let (mut a, mut b) = (
        std::collections::HashMap::new(),
        std::collections::HashMap::new(),
    );
    let mut map = serde_json::Map::new();
    for (k, v) in all {
        let shard = if k.starts_with("visual") {
            "model-00001-of-00002.safetensors"
        } else {
            "model-00002-of-00002.safetensors"
        };
        map.insert(k.clone(), shard.into());
        if k.starts_with("visual") {
            a.insert(k, v);
        } else {
            b.insert(k, v);
        }
    }
    candle_core::safetensors::save(&a, dir.path().join("model-00001-of-00002.safetensors"))
        .unwrap();
    candle_core::safetensors::save(&b, dir.path().join("model-00002-of-00002.safetensors"))
        .unwrap();
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let files = ModelFiles::from_dir(dir.path()).unwrap();
    assert_eq!(files.weights.len(), 2);
    let m = VlModel::load(&files, &Device::Cpu, DType::F32, &OpsConfig::default()).unwrap();
    assert_eq!(m.config().eos_token_ids, vec![151645, 151643]);
    assert_eq!(m.kv_bytes_per_token(), 2 * 2 * 16 * 4);
}

#[test]
fn rope_index_two_images_and_trailing_text() {
    use mobile_r1_eval::model::rope::{rope_index, RopeTokens};
    let tok = RopeTokens {
        image_token_id: 9,
        spatial_merge_size: 2,
    };
    // 15 text tokens, an image with llm grid 2×3, 2 text tokens, an image with llm grid 1×2, 1 text token.
    let mut ids: Vec<u32> = (100..115).collect();
    ids.extend([9; 6]);
    ids.extend([1, 2]);
    ids.extend([9; 2]);
    ids.push(3);
    let rp = rope_index(&ids, &[[1, 4, 6], [1, 2, 4]], tok).unwrap();
    assert_eq!(rp.pos[14], [14; 3]);
    let img: Vec<[i64; 3]> = rp.pos[15..21].to_vec();
    assert_eq!(
        img,
        vec![
            [15, 15, 15],
            [15, 15, 16],
            [15, 15, 17],
            [15, 16, 15],
            [15, 16, 16],
            [15, 16, 17]
        ]
    );
    assert_eq!(rp.pos[21], [18; 3]);
    assert_eq!(rp.pos[22], [19; 3]);
    assert_eq!(&rp.pos[23..25], &[[20, 20, 20], [20, 20, 21]]);
    assert_eq!(rp.pos[25], [22; 3]);
    assert_eq!(rp.next, 23);
    assert_eq!(rp.delta(), 23 - 26);
    // Mismatches are errors, not panics.
    assert!(rope_index(&ids, &[[1, 4, 6]], tok).is_err());
    assert!(rope_index(&ids[..18], &[[1, 4, 6]], tok).is_err());
}

#[test]
fn device_and_dtype_parsing() {
    use mobile_r1_eval::model::{dtype_for, open_device};
    use mobile_r1_eval::settings::{DTypeSpec, DeviceSpec};
    assert!(open_device(DeviceSpec::Cpu).unwrap().is_cpu());
    assert!("tpu".parse::<DeviceSpec>().is_err());
    assert!(open_device(DeviceSpec::Auto).is_err());
    assert_eq!(dtype_for(None, &Device::Cpu), DType::F32);
    assert_eq!(dtype_for(Some(DTypeSpec::Bf16), &Device::Cpu), DType::BF16);
    assert_eq!(dtype_for(Some(DTypeSpec::F16), &Device::Cpu), DType::F16);
    #[cfg(not(feature = "cuda"))]
    assert!(open_device(DeviceSpec::Cuda(0)).is_err());
}

#[test]
fn bf16_cpu_forward_runs_and_stays_close() {
    // The HF cast order in bf16 (RMSNorm weight after the cast, f32 softmax and vision rotary) on the CPU.
    let gold = goldens("tiny-a");
    let files = ModelFiles::from_dir(&fixture("models/tiny-a")).unwrap();
    let m = VlModel::load(&files, &Device::Cpu, DType::BF16, &OpsConfig::default()).unwrap();
    let input = golden_input(&gold, "");
    let (_, logits) = m.prefill(&[PrefillRequest::new(&input)]).unwrap();
    assert_eq!(logits.dtype(), DType::F32);
    let d = max_abs(&logits, g(&gold, "text.logits_last"));
    eprintln!("bf16 vs f32 golden logits: {d:.3e}");
    assert!(d.is_finite() && d < 0.1, "{d}");
}

/// Slow (seconds to minutes): a real 1080×2400-size vision forward (13,416 patches) with tiny-a's weights.
/// Run by hand: `cargo test --test it model_units::screenshot_vision_forward -- --ignored`.
#[test]
#[ignore]
fn screenshot_vision_forward() {
    let model = load_model("tiny-a");
    let grid = [1usize, 172, 78];
    let n = grid.iter().product::<usize>();
    let patches: Vec<f32> = (0..n * 1176)
        .map(|i| ((i % 977) as f32 / 977.0) - 0.5)
        .collect();
    let img = mobile_r1_eval::preprocess::PreparedImage {
        patches,
        grid_thw: grid,
        resized_wh: [1092, 2408],
        original_wh: [1080, 2400],
    };
    let t = std::time::Instant::now();
    let out = model.encode_images(&[&img], None).unwrap();
    eprintln!(
        "vision forward of {n} patches: {:?} in {:?}",
        out.shape(),
        t.elapsed()
    );
    assert_eq!(out.dims(), &[n / 4, 32]);
    let v = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert!(v.iter().all(|x| x.is_finite()));
}

/// `Linear::concat` stacks the parts' outputs side by side, and refuses parts that disagree on having a bias.
#[test]
fn linear_concat_stacks_outputs_and_refuses_mixed_biases() {
    use candle_nn::VarBuilder;
    use mobile_r1_eval::model::nn::{Linear, Pass};
    use mobile_r1_eval::ops::{Ops, Rows};
    let dev = Device::Cpu;
    let ops = Ops::new(&OpsConfig::default(), &dev, candle_core::DType::F32).unwrap();
    let p = Pass {
        ops: &ops,
        rows: Rows::Independent,
    };
    let t = |shape: &[usize], seed: f32| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| ((i as f32 + seed) * 0.37).sin()).collect();
        Tensor::from_vec(v, shape, &dev).unwrap()
    };
    let mut map = std::collections::HashMap::new();
    map.insert("a.weight".to_string(), t(&[3, 4], 1.0));
    map.insert("a.bias".to_string(), t(&[3], 2.0));
    map.insert("b.weight".to_string(), t(&[5, 4], 3.0));
    map.insert("b.bias".to_string(), t(&[5], 4.0));
    map.insert("c.weight".to_string(), t(&[2, 4], 5.0));
    let vb = VarBuilder::from_tensors(map, DType::F32, &dev);
    let a = Linear::new(4, 3, true, vb.pp("a")).unwrap();
    let b = Linear::new(4, 5, true, vb.pp("b")).unwrap();
    let c = Linear::new(4, 2, false, vb.pp("c")).unwrap();
    let x = t(&[6, 4], 6.0);
    let both = Linear::concat(&[a.clone(), b.clone()]).unwrap();
    let want = Tensor::cat(&[a.forward(p, &x).unwrap(), b.forward(p, &x).unwrap()], 1).unwrap();
    assert!(max_abs(&both.forward(p, &x).unwrap(), &want) < 1e-6);
    let err = Linear::concat(&[a, c]).unwrap_err().to_string();
    assert!(
        err.contains("some parts have a bias and some do not"),
        "{err}"
    );
}

#[test]
fn a_config_whose_kv_heads_do_not_divide_the_heads_is_refused() {
    use mobile_r1_eval::model::ModelConfig;
    let path = format!(
        "{}/tests/fixtures/models/tiny-a/config.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(ModelConfig::from_json(&v.to_string(), None).is_ok());
    for kv in [0, 3] {
        v["text_config"]["num_key_value_heads"] = kv.into();
        let err = ModelConfig::from_json(&v.to_string(), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "text_config.num_key_value_heads ({kv}) must divide text_config.num_attention_heads (2)"
            )),
            "{err}"
        );
    }
}

/// The ops settings reach the model as a value: the manifest records them, and the profiler's table fills only
/// when asked for, with the sections of both the vision tower and the language model.
#[test]
fn ops_settings_are_recorded_and_the_profiler_follows_its_setting() {
    use mobile_r1_eval::ops::CpuGemm;
    let gold = goldens("tiny-a");
    let input = golden_input(&gold, "");
    let plain = load_model("tiny-a");
    let m = plain.ops_manifest();
    assert!(m.fused && m.tensor_core_attention);
    assert_eq!(m.kernels_sha256.len(), 64);
    assert_eq!(plain.profile_snapshot(), None);
    let config = OpsConfig {
        fused_kernels: false,
        cpu_gemm: CpuGemm::Builtin,
        profile: true,
        ..OpsConfig::default()
    };
    let model = load_model_with("tiny-a", &config);
    assert_eq!(model.ops().config(), &config);
    let m = model.ops_manifest();
    assert!(!m.fused);
    let builtin = mobile_r1_eval::ops::gemm::packed::BuiltinGemm::for_this_cpu(false);
    assert_eq!(m.cpu_f32_gemm, builtin.describe());
    let rows = mobile_r1_eval::ops::gemm::row::RowGemm::for_this_cpu(false);
    assert_eq!(m.cpu_gemm_independent_rows, rows.describe());
    assert_eq!(m.cpu_threads, rayon::current_num_threads());
    // The attention tiles take the packed kernel wherever the CPU runs it, whatever the built-in GEMM.
    let packed = mobile_r1_eval::ops::gemm::packed::supported();
    assert_eq!(m.cpu_attention_packed_min_keys.is_some(), packed);
    // With the AVX-512 tile the packed attention transposes the scores; the manifest says how.
    let avx512 = mobile_r1_eval::ops::gemm::packed::active()
        == Some(mobile_r1_eval::ops::gemm::packed::Isa::Avx512);
    let plan = m.cpu_attention_packed.as_deref().unwrap_or("");
    assert_eq!(plan.is_empty(), !packed, "{plan}");
    assert_eq!(plan.contains("transposed scores"), avx512, "{plan}");
    let json = serde_json::to_value(&m).unwrap();
    for key in [
        "fused",
        "cuda_kernels",
        "tensor_core_attention",
        "kernels_sha256",
        "cpu_f32_gemm",
        "cpu_threads",
        "cpu_gemm_row_block",
        "cpu_gemm_independent_rows",
        "cpu_gemm_blas_min_rows",
        "cpu_attention_tiled_min_keys",
    ] {
        assert!(json.get(key).is_some(), "{key}: {json}");
    }
    let (mut caches, _) = model.prefill(&[PrefillRequest::new(&input)]).unwrap();
    model.decode(&[7], &mut [&mut caches[0]]).unwrap();
    let table = model.profile_snapshot().expect("profiling is on");
    for section in [
        "vision.attn_core.window",
        "vision.attn_core.full",
        "text.attend",
        "prefill.text_layers",
        "decode.text_layers",
        "linear.matmul",
    ] {
        assert!(
            table.0.get(section).is_some_and(|s| s.calls > 0),
            "{section}: {table:?}"
        );
    }
    let missing = OpsConfig {
        cpu_gemm: CpuGemm::Library("/nonexistent/libcblas.so".into()),
        ..OpsConfig::default()
    };
    let files = ModelFiles::from_dir(&fixture("models/tiny-a")).unwrap();
    let err = VlModel::load(&files, &Device::Cpu, DType::F32, &missing).unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/libcblas.so"),
        "{err}"
    );
}
