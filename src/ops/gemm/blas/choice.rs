//! Whether the CBLAS library found is worth using on this CPU: a library never makes a run slower by default.
//!
//! Two checks, in this order. OpenBLAS names the kernels it picked for the CPU (`openblas_get_corename`); a build
//! that does not know a newer CPU falls back to a pre-AVX2 core (Debian's 0.3.21 says `Prescott` on a Sapphire
//! Rapids Xeon and runs 4× slower than the built-in GEMM), which is refused whatever it measures. Then a
//! calibration product (768 × 1280 × 1280, a vision-tower-like shape) is timed through the library and through
//! the run's built-in GEMM ([`BuiltinGemm`]: the packed AVX2 kernel or candle's matmul, the `gemm` crate); under
//! `auto` the library is used only when it is at least as fast. The choice changes the last bits of the results, so it must not follow timing noise between
//! two close rates (two runs on one machine, or a run and its resume, must choose the same): the calibration is
//! measured once per machine and kept ([`super::record`]), and within one process once per library. A library
//! asked for by name (`on`, a path) is used whatever it measures, with a warning when it is the slower one.

use candle_core::{Device, Tensor};

use super::record::{self, seconds, CalibrationKey};
use super::{Blas, BuiltinGemm};
use crate::ops::GemmCalibration;
use crate::records::BlasChoice;

/// The calibration product's shape (m, k, n): about 2.5 GFLOP, some 25 ms a call at 100 GFLOP/s; enough rows for
/// the built-in packed kernel ([`crate::ops::gemm::packed::MIN_ROWS`]).
const CALIBRATION: (usize, usize, usize) = (768, 1280, 1280);

/// Whether the log line of a choice is a warning: the library misdetects the CPU, or it was required and is the
/// slower.
pub(crate) fn needs_attention(c: &BlasChoice) -> bool {
    let misfit = c
        .corename
        .as_deref()
        .is_some_and(|name| core_misfit(name, CpuSimd::detect()).is_some());
    let slower = matches!((c.blas_gflops, c.builtin_gflops), (Some(b), Some(g)) if b < g);
    misfit || (c.used && slower)
}

/// OpenBLAS core names whose kernels predate AVX2/FMA: on a CPU with AVX2 they mean that the library did not
/// recognise the CPU (its `DYNAMIC_ARCH` fell back to an old core).
const PRE_AVX2_CORES: [&str; 22] = [
    "katmai",
    "coppermine",
    "northwood",
    "prescott",
    "banias",
    "core2",
    "penryn",
    "dunnington",
    "nehalem",
    "sandybridge",
    "atom",
    "amd64",
    "opteron",
    "opteron_sse3",
    "barcelona",
    "bobcat",
    "bulldozer",
    "piledriver",
    "steamroller",
    "nano",
    "generic",
    "unknown",
];

/// What the CPU offers, for [`core_misfit`].
#[derive(Debug, Clone, Copy)]
pub struct CpuSimd {
    /// AVX2 and FMA.
    pub avx2_fma: bool,
    /// AVX-512F.
    pub avx512f: bool,
}

impl CpuSimd {
    /// This CPU's features (run-time detection; all false off x86-64).
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            Self {
                avx2_fma: is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
                avx512f: is_x86_feature_detected!("avx512f"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Self {
                avx2_fma: false,
                avx512f: false,
            }
        }
    }
}

/// Why OpenBLAS's `corename` does not fit a CPU with `cpu`'s features (a pre-AVX2 core on an AVX2 CPU), naming the
/// `OPENBLAS_CORETYPE` that would; `None` when it fits or cannot be judged.
pub fn core_misfit(corename: &str, cpu: CpuSimd) -> Option<String> {
    let name = corename.trim().to_ascii_lowercase();
    if !cpu.avx2_fma || !PRE_AVX2_CORES.contains(&name.as_str()) {
        return None;
    }
    let fit = if cpu.avx512f { "SkylakeX" } else { "Haswell" };
    Some(format!(
        "OpenBLAS took this CPU for a {corename} (kernels without AVX2/FMA); OPENBLAS_CORETYPE={fit} selects \
         the kernels that fit it"
    ))
}

/// Decide about a loaded library against the run's `builtin` GEMM: `required` when the spec named it (`on`, a
/// path), else `auto`. The rates come from the file `calibration` names when it holds this machine's and library's
/// ([`record::rates`]).
pub(crate) fn decide(
    blas: Blas,
    spec: &str,
    required: bool,
    calibration: &GemmCalibration,
    builtin: BuiltinGemm,
) -> (Blas, BlasChoice) {
    let misfit = blas
        .corename
        .as_deref()
        .and_then(|c| core_misfit(c, CpuSimd::detect()));
    let name = builtin.describe();
    let key = CalibrationKey::here(&blas.description, blas.corename.as_deref(), &name);
    let (blas_rate, builtin_rate, source) = match measured(calibration, &key, &blas, builtin) {
        Ok(((b, g), source)) => (Some(b), Some(g), Some(source)),
        Err(e) => {
            tracing::debug!("BLAS calibration failed: {e}");
            (None, None, None)
        }
    };
    let rates = match (blas_rate, builtin_rate) {
        (Some(b), Some(g)) => format!("{b:.1} vs {g:.1} GFLOP/s built-in"),
        _ => "not measured".to_string(),
    };
    // Unmeasured counts as fit: only a measurement refuses a library.
    let fast_enough = !matches!((blas_rate, builtin_rate), (Some(b), Some(g)) if g > b);
    let (used, reason) = match (&misfit, required, fast_enough) {
        (_, true, _) => (
            true,
            format!("asked for by MOBILE_R1_EVAL_BLAS={spec} ({rates})"),
        ),
        (Some(why), false, _) => (
            false,
            format!("{why}; the built-in {name} instead ({rates})"),
        ),
        (None, false, true) => (
            true,
            format!("fits this CPU and is at least as fast as the built-in {name} ({rates})"),
        ),
        (None, false, false) => (
            false,
            format!(
                "{} is slower than the built-in {name} ({rates}); the built-in one instead",
                blas.description
            ),
        ),
    };
    let choice = BlasChoice {
        spec: spec.to_string(),
        library: Some(blas.description.clone()),
        corename: blas.corename.clone(),
        used,
        blas_gflops: blas_rate,
        builtin_gflops: builtin_rate,
        calibration: source,
        reason,
    };
    (blas, choice)
}

/// The calibration rates of `blas` on this machine ([`record::kept_rates`]).
fn measured(
    calibration: &GemmCalibration,
    key: &CalibrationKey,
    blas: &Blas,
    builtin: BuiltinGemm,
) -> candle_core::Result<((f64, f64), String)> {
    let file = match calibration {
        GemmCalibration::File(path) => Some(path.as_path()),
        GemmCalibration::EachStart => None,
    };
    record::kept_rates(file, key, || calibrate(blas, builtin))
}

/// The choice when no library is loaded: `reason` says why (`off`, none installed).
pub fn none(spec: &str, reason: &str) -> BlasChoice {
    BlasChoice {
        spec: spec.to_string(),
        library: None,
        corename: None,
        used: false,
        blas_gflops: None,
        builtin_gflops: None,
        calibration: None,
        reason: reason.to_string(),
    }
}

/// GFLOP/s of the calibration product through `blas` and through the `builtin` GEMM (best of five timed calls
/// after a warm-up each, the two paths alternated).
pub(crate) fn calibrate(blas: &Blas, builtin: BuiltinGemm) -> candle_core::Result<(f64, f64)> {
    let (m, k, n) = CALIBRATION;
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let w: Vec<f32> = (0..n * k)
        .map(|i| ((i * 104_729) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let flop = 2.0 * (m * k * n) as f64;
    let (x, wt) = (
        Tensor::from_slice(&a, (m, k), &Device::Cpu)?,
        Tensor::from_slice(&w, (n, k), &Device::Cpu)?.t()?,
    );
    let mut via_blas = || {
        drop(blas.sgemm_nt(&a, &w, m, k, n));
        Ok(())
    };
    let mut c = vec![0f32; m * n];
    let mut via_builtin = || match builtin {
        BuiltinGemm::GemmCrate => x.matmul(&wt).map(drop),
        BuiltinGemm::Packed => {
            crate::ops::gemm::packed::sgemm_nt(&a, &w, (m, k, n), &mut c);
            Ok(())
        }
    };
    via_blas()?;
    via_builtin()?;
    let (mut best_blas, mut best_builtin) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..5 {
        best_blas = best_blas.min(seconds(&mut via_blas)?);
        best_builtin = best_builtin.min(seconds(&mut via_builtin)?);
    }
    Ok((flop / best_blas / 1e9, flop / best_builtin / 1e9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_avx2_cores_are_misfits_only_on_avx2_cpus() {
        let avx2 = CpuSimd {
            avx2_fma: true,
            avx512f: false,
        };
        let avx512 = CpuSimd {
            avx2_fma: true,
            avx512f: true,
        };
        let old = CpuSimd {
            avx2_fma: false,
            avx512f: false,
        };
        let why = core_misfit("Prescott", avx512).expect("a misfit");
        assert!(
            why.contains("Prescott") && why.contains("OPENBLAS_CORETYPE=SkylakeX"),
            "{why}"
        );
        assert!(core_misfit("PRESCOTT", avx2).unwrap().contains("=Haswell"));
        assert_eq!(
            core_misfit("Prescott", old),
            None,
            "an SSE3 CPU gets SSE3 kernels"
        );
        for fits in ["Haswell", "Zen", "SkylakeX", "CooperLake", "SapphireRapids"] {
            assert_eq!(core_misfit(fits, avx512), None, "{fits}");
        }
    }
}
