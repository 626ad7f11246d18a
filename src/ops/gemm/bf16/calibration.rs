//! The timing at load that chooses the bf16 kernel of row segments ([`super::Bf16Gemm::for_this_cpu`]): the
//! kernels' rates on one product, kept per machine in a file beside the f32 GEMM's calibration where there is one,
//! so that every start on the machine (a resume, another shard) runs the same kernel — and so gives the same last
//! bits — instead of following the noise of its own short measurement (under a competing load the kernels' order
//! can flip).

use std::path::{Path, PathBuf};

use candle_core::Tensor;
use half::bf16;
use serde::{Deserialize, Serialize};

use super::{amx, packed, widened};
use crate::ops::cpu_data::as_storage;
use crate::ops::gemm::blas::record::{self, CalibrationKey};
use crate::ops::GemmCalibration;

/// The calibration product (rows, k, n): a text-model shape of the `small` checkpoint at 512 rows, about 1 GFLOP,
/// so that the widened kernel's copy of the weight weighs on it about as on a prompt's products (at 192 rows the
/// widened kernel measured 10–15 % ahead of the packed one where it is 47–73 % ahead on the model's shapes). The
/// calibration takes about 0.15 s at load.
const CALIBRATION: (usize, usize, usize) = (512, 896, 1152);

/// Rounds of the calibration: each kernel runs once per round; its best time counts.
const CALIBRATION_ROUNDS: usize = 6;

/// The segments' kernels' rates on [`CALIBRATION`] in GFLOP/s (the calibration file's rates).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(super) struct Rates {
    /// The AMX kernel's (0 where it does not run here).
    pub amx_gflops: f64,
    /// The packed kernel's (0 where it does not run here).
    pub packed_gflops: f64,
    /// The widened kernel's.
    pub widened_gflops: f64,
    /// candle's bf16 matmul's.
    pub candle_gflops: f64,
}

/// GFLOP/s of the AMX kernel (0 where the CPU has none), of the packed kernel (0 unless `dots`: the CPU has
/// AVX512-BF16), of the widened kernel and of candle's bf16 matmul on [`CALIBRATION`], each the best of
/// [`CALIBRATION_ROUNDS`] runs taken in turn with the others'.
pub(super) fn calibrate(dots: bool) -> Rates {
    let (m, k, n) = CALIBRATION;
    let value = |i: usize| bf16::from_f32(((i * 7919) % 1000) as f32 / 1000.0 - 0.5);
    let (a, w): (Vec<bf16>, Vec<bf16>) = (
        (0..m * k).map(value).collect(),
        (0..n * k).map(value).collect(),
    );
    let mut c = vec![bf16::ZERO; m * n];
    // SAFETY: the kernels write bf16 values only.
    let c = unsafe { as_storage(&mut c) };
    let x = Tensor::from_slice(&a, (m, k), &candle_core::Device::Cpu);
    let wt = Tensor::from_slice(&w, (n, k), &candle_core::Device::Cpu).and_then(|w| w.t());
    let candle_product = match (&x, &wt) {
        (Ok(x), Ok(wt)) => Some((x, wt)),
        _ => None,
    };
    // [AMX, packed, widened, candle]; a kernel that does not run here keeps an infinite time.
    let runs = [
        dots && amx::supported(),
        dots,
        true,
        candle_product.is_some(),
    ];
    let mut best = [f64::INFINITY; 4];
    // The kernels in turn, round after round, each keeping its best time: a process's first products run slower
    // (threads starting, caches, clocks) and the rounds spread that over all of them.
    for _ in 0..CALIBRATION_ROUNDS {
        for (kernel, best) in best.iter_mut().enumerate().filter(|(i, _)| runs[*i]) {
            let t0 = std::time::Instant::now();
            match kernel {
                0 => amx::gemm_nt(&a, &w, &[], (m, k, n), c),
                1 => packed::gemm_nt(&a, &w, &[], (m, k, n), c),
                2 => widened::gemm_nt(&a, &w, &[], (m, k, n), c),
                _ => {
                    if let Some((x, wt)) = candle_product {
                        let _ = x.matmul(wt);
                    }
                }
            }
            *best = best.min(t0.elapsed().as_secs_f64());
        }
    }
    let [amx, packed, widened, candle] = best;
    let gflops = |s: f64| 2.0 * (m * k * n) as f64 / s / 1e9;
    Rates {
        amx_gflops: gflops(amx),
        packed_gflops: gflops(packed),
        widened_gflops: gflops(widened),
        candle_gflops: gflops(candle),
    }
}

/// The rates on this machine and where they come from: read from the kernels' file beside the f32 calibration
/// `calibration` names ([`file_beside`]) when it holds this machine's key, else measured by `measure` (and kept
/// there); measured by `measure` where there is no file.
pub(super) fn kept_rates(
    calibration: &GemmCalibration,
    dots: bool,
    measure: &mut dyn FnMut() -> Rates,
) -> (Rates, String) {
    let GemmCalibration::File(path) = calibration else {
        return (measure(), "measured at load".to_string());
    };
    let key = CalibrationKey::here("the built-in bf16 kernels", None, &timed(dots));
    let Ok(kept) =
        record::kept_in_file::<_, std::convert::Infallible>(&file_beside(path), &key, || {
            Ok(measure())
        });
    kept
}

/// The kernels timed on this CPU, in the key of the kept rates.
fn timed(dots: bool) -> String {
    let amx = dots && amx::supported();
    [
        (amx, "amx"),
        (dots, "packed"),
        (true, "widened"),
        (true, "candle"),
    ]
    .iter()
    .filter(|(runs, _)| *runs)
    .map(|(_, name)| *name)
    .collect::<Vec<_>>()
    .join(", ")
}

/// The kernels' file beside the f32 calibration's `path`: `NAME.json` → `NAME-bf16-kernels.json`.
pub(super) fn file_beside(path: &Path) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!("{stem}-bf16-kernels.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(x: f64) -> Rates {
        Rates {
            amx_gflops: 0.0,
            packed_gflops: x,
            widened_gflops: 2.0 * x,
            candle_gflops: 3.0 * x,
        }
    }

    #[test]
    fn the_rates_are_measured_once_per_machine_where_a_file_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let f32_file = dir.path().join("cpu-gemm.json");
        let file = GemmCalibration::File(f32_file.clone());
        let measured = std::cell::Cell::new(0);
        let measure = |x: f64| {
            let calls = &measured;
            move || {
                calls.set(calls.get() + 1);
                rates(x)
            }
        };
        let (first, source) = kept_rates(&file, true, &mut measure(1.0));
        assert_eq!(first, rates(1.0));
        assert!(source.contains("measured now"), "{source}");
        // A later start reads them back (another measurement would give other rates).
        let (again, source) = kept_rates(&file, true, &mut measure(5.0));
        assert_eq!(again, rates(1.0));
        assert!(source.contains("kept in"), "{source}");
        assert_eq!(measured.get(), 1);
        let kept = std::fs::read_to_string(dir.path().join("cpu-gemm-bf16-kernels.json")).unwrap();
        assert!(kept.contains("\"widened_gflops\": 2.0"), "{kept}");
        // The f32 calibration's own file is not touched.
        assert!(!f32_file.exists());
        // Another set of kernels (a CPU without AVX512-BF16) is another key: measured again.
        let (other, _) = kept_rates(&file, false, &mut measure(7.0));
        assert_eq!(other, rates(7.0));
        // Without a file every start measures.
        let (each, source) = kept_rates(&GemmCalibration::EachStart, true, &mut measure(9.0));
        assert_eq!((each, source.as_str()), (rates(9.0), "measured at load"));
    }
}
