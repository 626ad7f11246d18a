//! `goldens/preprocess.safetensors`: smart-resize edge cases (ties-to-even, min/max branches, float floor/ceil
//! edges, tiny sides) and a 2400×1080 phone screenshot under `max_pixels = 1003520`, each bit-exact against
//! both transformers backends; plus the aspect-ratio error cases.

use std::path::{Path, PathBuf};

use mobile_r1_eval::preprocess::{
    load_and_prepare, smart_resize, ImageProcessorConfig, PreparedImage, ProcessorBackend,
};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("missing fixture {}: {e}", path.display()))
}

fn tensor<'a>(
    st: &'a SafeTensors,
    name: &str,
    dtype: Dtype,
) -> safetensors::tensor::TensorView<'a> {
    let t = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("tensor {name}: {e}"));
    assert_eq!(t.dtype(), dtype, "{name}");
    t
}

fn f32s(st: &SafeTensors, name: &str) -> Vec<f32> {
    tensor(st, name, Dtype::F32)
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn f64s(st: &SafeTensors, name: &str) -> Vec<f64> {
    tensor(st, name, Dtype::F64)
        .data()
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn i64s(st: &SafeTensors, name: &str) -> Vec<i64> {
    tensor(st, name, Dtype::I64)
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn meta() -> Value {
    serde_json::from_slice(&read(&fixtures().join("goldens/preprocess.json"))).unwrap()
}

fn prepare(case: &Value, backend: ProcessorBackend) -> PreparedImage {
    let cfg = ImageProcessorConfig::default()
        .with_pixel_bounds(
            case["min_pixels"].as_u64().unwrap(),
            case["max_pixels"].as_u64().unwrap(),
        )
        .with_backend(backend);
    load_and_prepare(&fixtures().join(case["image"].as_str().unwrap()), &cfg).unwrap()
}

fn bits_differ(a: &[f32], b: &[f32]) -> usize {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count()
}

fn rows(p: &PreparedImage) -> std::slice::ChunksExact<'_, f32> {
    p.patches.chunks_exact(1176)
}

/// Compares a case stored in full.
fn check_full(st: &SafeTensors, name: &str, case: &Value) {
    for (backend, suffix) in [
        (ProcessorBackend::Torchvision, ""),
        (ProcessorBackend::Pil, "_pil_backend"),
    ] {
        let p = prepare(case, backend);
        let hw = i64s(st, &format!("{name}.resized_hw"));
        assert_eq!(
            [p.resized_wh[1] as i64, p.resized_wh[0] as i64],
            [hw[0], hw[1]],
            "{name} resized"
        );
        let grid = i64s(st, &format!("{name}.image_grid_thw"));
        assert_eq!(p.grid_thw.map(|g| g as i64).to_vec(), grid, "{name} grid");
        let n = bits_differ(
            &p.patches,
            &f32s(st, &format!("{name}.pixel_values{suffix}")),
        );
        assert_eq!(n, 0, "{name} {backend:?}: {n} values differ");
    }
}

/// Compares the screenshot case from its stored rows and f64 row/column sums.
fn check_screen(st: &SafeTensors, name: &str, case: &Value) {
    for (backend, suffix) in [
        (ProcessorBackend::Torchvision, ""),
        (ProcessorBackend::Pil, "_pil_backend"),
    ] {
        let p = prepare(case, backend);
        assert_eq!(
            p.grid_thw.map(|g| g as i64).to_vec(),
            i64s(st, &format!("{name}.image_grid_thw"))
        );
        let head: Vec<f32> = rows(&p).take(16).flatten().copied().collect();
        assert_eq!(
            bits_differ(
                &head,
                &f32s(st, &format!("{name}.pixel_values{suffix}.head16"))
            ),
            0,
            "{backend:?} head"
        );
        let index = i64s(st, &format!("{name}.rows_stride127_index"));
        let picked: Vec<f32> = index
            .iter()
            .flat_map(|&i| rows(&p).nth(i as usize).unwrap().to_vec())
            .collect();
        let stored = f32s(st, &format!("{name}.pixel_values{suffix}.rows_stride127"));
        assert_eq!(bits_differ(&picked, &stored), 0, "{backend:?} strided rows");
        let row_sums = f64s(st, &format!("{name}.pixel_values{suffix}.row_sums_f64"));
        let col_sums = f64s(st, &format!("{name}.pixel_values{suffix}.col_sums_f64"));
        let mut cols = vec![0f64; 1176];
        for (r, row) in rows(&p).enumerate() {
            let s: f64 = row.iter().map(|&v| f64::from(v)).sum();
            assert!(
                (s - row_sums[r]).abs() <= 1e-6 * s.abs().max(1.0),
                "{backend:?} row {r}: {s} vs {}",
                row_sums[r]
            );
            cols.iter_mut()
                .zip(row)
                .for_each(|(c, &v)| *c += f64::from(v));
        }
        for (c, (a, b)) in cols.iter().zip(&col_sums).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 * a.abs().max(1.0),
                "{backend:?} col {c}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn preprocess_cases_bit_exact_both_backends() {
    let bytes = read(&fixtures().join("goldens/preprocess.safetensors"));
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let meta = meta();
    let cases = meta["cases"].as_object().expect("cases");
    assert!(cases.len() >= 8, "expected the 8 stored cases");
    for (name, case) in cases {
        if st.tensor(&format!("{name}.pixel_values")).is_ok() {
            check_full(&st, name, case);
        } else {
            check_screen(&st, name, case);
        }
    }
}

/// A JSON array of sizes.
fn usizes(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect()
}

#[test]
fn smart_resize_matches_every_case() {
    let meta = meta();
    for (name, case) in meta["cases"].as_object().unwrap() {
        let hw = usizes(&case["image_size_hw"]);
        let want = usizes(&case["resized_hw"]);
        let got = smart_resize(
            hw[0],
            hw[1],
            28,
            case["min_pixels"].as_u64().unwrap(),
            case["max_pixels"].as_u64().unwrap(),
        )
        .unwrap();
        assert_eq!([got.0, got.1].to_vec(), want, "{name}");
    }
}

#[test]
fn aspect_ratio_errors() {
    let meta = meta();
    for (name, case) in meta["error_cases"].as_object().unwrap() {
        let hw = usizes(&case["image_size_hw"]);
        let err = smart_resize(hw[0], hw[1], 28, 3136, 12_845_056).expect_err(name);
        assert!(err.to_string().contains("aspect ratio"), "{name}: {err}");
    }
}
