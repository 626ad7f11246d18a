//! Shared helpers of the model tests: fixture paths, golden tensors, comparisons.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use mobile_r1_eval::model::{ModelFiles, VlModel};
use mobile_r1_eval::ops::{CpuGemm, OpsConfig};
use mobile_r1_eval::preprocess::{ModelInput, PreparedImage};

/// `tests/fixtures/...`.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Golden tensors of `name` (`tiny-a` / `tiny-b`).
pub fn goldens(name: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(
        fixture(&format!("goldens/{name}.safetensors")),
        &Device::Cpu,
    )
    .expect("goldens")
}

/// Golden JSON metadata.
pub fn golden_meta(name: &str) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(fixture(&format!("goldens/{name}.json"))).unwrap(),
    )
    .unwrap()
}

/// A golden prompt of `goldens/{model}.json` (`case` for tiny-b's "p0", "p1", ...): image path, text, the greedy
/// ids transformers generated and the prompt length.
pub struct GoldenCase {
    pub image: PathBuf,
    pub text: String,
    pub ids: Vec<u64>,
    pub n_input_ids: u64,
}

/// The golden prompt `case` of `model` (`None` for tiny-a's single case).
pub fn golden_case(model: &str, case: Option<&str>) -> GoldenCase {
    let meta = golden_meta(model);
    let c = match case {
        Some(c) => &meta["cases"][c],
        None => &meta,
    };
    GoldenCase {
        image: fixture(c["image"].as_str().unwrap()),
        text: c["text"].as_str().unwrap().to_string(),
        ids: json_u64s(&c["generated_ids"]),
        n_input_ids: c["n_input_ids"].as_u64().unwrap(),
    }
}

/// A JSON array of unsigned integers.
pub fn json_u64s(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// The JSON object a successful `generate --json` run printed (panics with its stderr otherwise).
pub fn generate_json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// Load a fixture model in f32 on the CPU with the default ops settings.
pub fn load_model(name: &str) -> VlModel {
    load_model_with(name, &OpsConfig::default())
}

/// Load a fixture model in f32 on the CPU with the ops running as `ops` says.
pub fn load_model_with(name: &str, ops: &OpsConfig) -> VlModel {
    let files = ModelFiles::from_dir(&fixture(&format!("models/{name}"))).expect("files");
    VlModel::load(&files, &Device::Cpu, DType::F32, ops).expect("load")
}

/// The ops settings the model tests run under: the default (fused CPU paths, OpenBLAS where installed), the
/// `gemm` crate's GEMM alone, and, unless `fused_only`, the composed references (fused paths off).
pub fn ops_variants(fused_only: bool) -> Vec<(&'static str, OpsConfig)> {
    let default = OpsConfig::default();
    let mut v = vec![
        ("default", default.clone()),
        (
            "gemm crate",
            OpsConfig {
                cpu_gemm: CpuGemm::Builtin,
                ..default.clone()
            },
        ),
    ];
    if !fused_only {
        v.push((
            "composed",
            OpsConfig {
                fused_kernels: false,
                ..default
            },
        ));
    }
    v
}

/// Fixture model `name` loaded under each of [`ops_variants`]`(fused_only)`.
pub fn model_variants(name: &str, fused_only: bool) -> Vec<(&'static str, VlModel)> {
    ops_variants(fused_only)
        .into_iter()
        .map(|(label, ops)| (label, load_model_with(name, &ops)))
        .collect()
}

/// Tensor `key` of the golden map.
pub fn g<'a>(gold: &'a HashMap<String, Tensor>, key: &str) -> &'a Tensor {
    gold.get(key)
        .unwrap_or_else(|| panic!("golden tensor {key} missing"))
}

/// Integer tensor as u32 values.
pub fn ids(t: &Tensor) -> Vec<u32> {
    t.flatten_all()
        .unwrap()
        .to_dtype(DType::I64)
        .unwrap()
        .to_vec1::<i64>()
        .unwrap()
        .into_iter()
        .map(|x| x as u32)
        .collect()
}

/// Integer tensor as i64 values.
pub fn i64s(t: &Tensor) -> Vec<i64> {
    t.flatten_all()
        .unwrap()
        .to_dtype(DType::I64)
        .unwrap()
        .to_vec1::<i64>()
        .unwrap()
}

/// The golden model input of case `prefix` ("" for tiny-a, "p0." ... for tiny-b).
pub fn golden_input(gold: &HashMap<String, Tensor>, prefix: &str) -> ModelInput {
    let px = g(gold, &format!("{prefix}pixel_values"));
    let grid = ids(g(gold, &format!("{prefix}image_grid_thw")));
    let grid_thw = [grid[0] as usize, grid[1] as usize, grid[2] as usize];
    let (h, w) = ((grid_thw[1] * 14) as u32, (grid_thw[2] * 14) as u32);
    ModelInput {
        input_ids: ids(g(gold, &format!("{prefix}input_ids"))),
        images: vec![PreparedImage {
            patches: px.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            grid_thw,
            resized_wh: [w, h],
            original_wh: [w, h],
        }],
    }
}

/// Max |a - b| over all elements (shapes must have the same element count).
pub fn max_abs(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(
        a.elem_count(),
        b.elem_count(),
        "shape {:?} vs {:?}",
        a.shape(),
        b.shape()
    );
    let a = a.flatten_all().unwrap().to_dtype(DType::F32).unwrap();
    let b = b.flatten_all().unwrap().to_dtype(DType::F32).unwrap();
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// Assert max |a - b| ≤ tol, printing the measured value.
pub fn assert_close(what: &str, a: &Tensor, b: &Tensor, tol: f32) -> f32 {
    let d = max_abs(a, b);
    eprintln!("parity {what}: max abs diff {d:.3e}");
    assert!(d <= tol, "{what}: max abs diff {d} > {tol}");
    d
}

/// Greedy generation of every input through the engine (all admitted together, end-of-sequence ignored), with
/// `top_logprobs` most likely (id, log-probability) pairs per position.
pub fn greedy(
    model: &VlModel,
    inputs: &[&ModelInput],
    max_new_tokens: usize,
    top_logprobs: usize,
) -> Vec<mobile_r1_eval::engine::Generation> {
    use mobile_r1_eval::engine::{Engine, Generation, Request, Requests};
    use mobile_r1_eval::settings::BatchLimits;
    let limits = BatchLimits {
        max_seqs: inputs.len(),
        max_batch_tokens: usize::MAX,
        max_new_tokens,
    };
    let requests = inputs.iter().enumerate().map(|(id, input)| Request {
        id,
        input: (*input).clone(),
        prefix_len: 0,
        max_new_tokens,
        stop_tokens: Vec::new(),
        top_logprobs,
        sampling: Default::default(),
    });
    let mut out = vec![None; inputs.len()];
    let mut stats = mobile_r1_eval::records::PhaseStats::default();
    Engine::new(model, limits, Default::default())
        .run(
            &mut Requests(requests),
            &mut stats,
            &mut |g: Generation, _: &_| {
                let id = g.id;
                out[id] = Some(g);
                Ok(())
            },
        )
        .expect("generation");
    out.into_iter()
        .map(|g| g.expect("every input answered"))
        .collect()
}
