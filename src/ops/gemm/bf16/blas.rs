//! bf16 row segments on the CBLAS library's own bf16 GEMM ([`crate::ops::gemm::blas::bf16`]): MKL's
//! `cblas_gemm_bf16bf16f32` or OpenBLAS's `cblas_sbgemm`, f32 sums with the bias added before the one rounding to
//! bf16, as the built-in kernels round. Used where the library is asked for by name, or under `auto` where it is at
//! least as fast as the built-in kernel of segments on a calibration product: the rates are measured once per
//! machine where the f32 GEMM's calibration is kept (in a file beside it), else once per process. Independent rows
//! (decode) and the weights held in tiles keep the built-in kernels.

use std::mem::MaybeUninit;
use std::path::PathBuf;

use candle_core::{Device, Result, Tensor};
use half::bf16;

use super::{by_segments, Bf16Gemm, SharedOut};
use crate::ops::gemm::blas::bf16::Block;
use crate::ops::gemm::blas::record::{self, seconds};
use crate::ops::gemm::blas::{Blas, BlasChoice};
use crate::ops::GemmCalibration;

/// The calibration product (rows, k, n): the `small` text model's gate-up product at 1,024 rows, about 9 GFLOP
/// (a few milliseconds), large enough that two runs on one machine rank the two alike (the built-in kernels'
/// smaller product varies by a third from run to run).
const CALIBRATION: (usize, usize, usize) = (1024, 896, 4864);

/// `x · wᵀ (+ b)` for bf16 `x` (rows, k), `w` (n, k) and an optional bias `b` (n) through `blas`'s bf16 GEMM, each
/// segment of `lens` alone.
pub(crate) fn matmul_nt(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    lens: &[usize],
    blas: &Blas,
) -> Result<Tensor> {
    let kernel = |a: &[bf16], w: &[bf16], bias: &[f32], dims, c: &mut [MaybeUninit<bf16>]| {
        product(blas, a, w, bias, dims, c)
    };
    by_segments(x, w, b, (lens, w.dim(0)?), &kernel)
}

/// [`super::Kernel`]'s contract through `blas`: every output of `c` (m × n) written, the bias added to the f32
/// sums before their rounding. Panics where the library has no bf16 GEMM.
pub(crate) fn product(
    blas: &Blas,
    a: &[bf16],
    w: &[bf16],
    bias: &[f32],
    (m, k, n): (usize, usize, usize),
    c: &mut [MaybeUninit<bf16>],
) {
    let out = SharedOut::new(c, n, bias);
    let store = |b: Block<'_>| {
        for (r, sums) in b.sums.chunks(b.cols).enumerate() {
            for (j, &v) in sums.iter().enumerate() {
                // SAFETY: each block covers its own rows and columns of the m × n output.
                unsafe { out.set(b.row + r, b.col + j, v) };
            }
        }
    };
    if let Err(e) = blas.gemm_bf16_nt(a, w, (m, k, n), &store) {
        panic!("{e}");
    }
}

/// Whether `blas`'s bf16 GEMM multiplies the run's bf16 segments instead of `builtin`, and the record of why:
/// `required` where the run named the library (`on`, a path), else where it measures at least as fast. `None`
/// where the library has no bf16 GEMM.
pub(crate) fn decide(
    blas: &Blas,
    (spec, required): (&str, bool),
    builtin: Bf16Gemm,
    calibration: &GemmCalibration,
) -> Option<BlasChoice> {
    let symbol = blas.bf16_gemm()?;
    let library = format!("{} ({symbol})", blas.description);
    let builtin_name = builtin.segments_name();
    let key = record::CalibrationKey::here(&library, blas.corename.as_deref(), builtin_name);
    let measured = rates(calibration, &key, || calibrate(blas, builtin));
    let (rates, source) = match measured {
        Ok(((b, g), source)) => (Some((b, g)), Some(source)),
        Err(e) => {
            tracing::debug!("bf16 BLAS calibration failed: {e}");
            (None, None)
        }
    };
    let said = match rates {
        Some((b, g)) => format!("{b:.1} vs {g:.1} GFLOP/s for the built-in {builtin_name}"),
        None => "not measured".to_string(),
    };
    let faster = rates.is_none_or(|(b, g)| b >= g);
    let (used, reason) = match (required, faster) {
        (true, _) => (
            true,
            format!("asked for by MOBILE_R1_EVAL_BLAS={spec} ({said})"),
        ),
        (false, true) => (
            true,
            format!("at least as fast as the built-in {builtin_name} ({said})"),
        ),
        (false, false) => (
            false,
            format!("slower than the built-in {builtin_name} ({said}); the built-in one"),
        ),
    };
    Some(BlasChoice {
        spec: spec.to_string(),
        library: Some(library),
        corename: blas.corename.clone(),
        used,
        blas_gflops: rates.map(|r| r.0),
        builtin_gflops: rates.map(|r| r.1),
        calibration: source,
        reason,
    })
}

/// The rates of `key` ([`record::kept_rates`]), kept in the bf16 calibration file beside the f32 one where there is
/// one.
fn rates(
    calibration: &GemmCalibration,
    key: &record::CalibrationKey,
    measure: impl FnOnce() -> Result<(f64, f64)>,
) -> Result<((f64, f64), String)> {
    let file = match calibration {
        GemmCalibration::File(path) => Some(file_beside(path)),
        GemmCalibration::EachStart => None,
    };
    record::kept_rates(file.as_deref(), key, measure)
}

/// The bf16 calibration's file beside the f32 one's `path`: `NAME.json` → `NAME-bf16.json`.
pub(crate) fn file_beside(path: &std::path::Path) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!("{stem}-bf16.json"))
}

/// GFLOP/s of [`CALIBRATION`] through `blas` and through `builtin`'s kernel of segments (candle's bf16 matmul
/// where it has none): best of five calls after a warm-up each, the two alternated.
fn calibrate(blas: &Blas, builtin: Bf16Gemm) -> Result<(f64, f64)> {
    let (m, k, n) = CALIBRATION;
    let value = |i: usize| bf16::from_f32(((i * 7919) % 1000) as f32 / 1000.0 - 0.5);
    let a: Vec<bf16> = (0..m * k).map(value).collect();
    let w: Vec<bf16> = (0..n * k).map(|i| value(i + 17)).collect();
    let mut c = vec![bf16::ZERO; m * n];
    // SAFETY: the kernels write bf16 values only.
    let c = unsafe { crate::ops::cpu_data::as_storage(&mut c) };
    let (x, wt) = (
        Tensor::from_slice(&a, (m, k), &Device::Cpu)?,
        Tensor::from_slice(&w, (n, k), &Device::Cpu)?.t()?,
    );
    let via_builtin = |c: &mut [MaybeUninit<bf16>]| match builtin.segment_kernel() {
        Some(f) => {
            f(&a, &w, &[], (m, k, n), c);
            Ok(())
        }
        None => x.matmul(&wt).map(drop),
    };
    let (mut best_blas, mut best_builtin) = (f64::INFINITY, f64::INFINITY);
    for round in 0..6 {
        let t_blas = seconds(&mut || {
            product(blas, &a, &w, &[], (m, k, n), c);
            Ok(())
        })?;
        let t_builtin = seconds(&mut || via_builtin(c))?;
        if round > 0 {
            best_blas = best_blas.min(t_blas);
            best_builtin = best_builtin.min(t_builtin);
        }
    }
    let flop = 2.0 * (m * k * n) as f64;
    Ok((flop / best_blas / 1e9, flop / best_builtin / 1e9))
}

#[cfg(test)]
pub(crate) mod tests;
