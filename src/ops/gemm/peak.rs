//! The matmul rates a machine reaches, the denominator of MFU figures (`bench`) and of the CPU time estimate of
//! `eval`: the best of a few square GEMMs through every path the ops have (candle's matmul, the built-in packed
//! kernel, the run's CBLAS library and an installed OpenBLAS; in bf16 the AVX512-BF16 and AMX kernels).

use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor};

use super::blas::Blas;
use super::packed;
use crate::ops::CpuGemm;
pub(crate) use crate::records::MatmulRate;

/// Measured matmul throughput of `device` in `dtype` of every path available (FLOP/s): the best of a few square
/// GEMMs of size `n` through candle's matmul and, for f32 on the CPU, through the built-in packed kernel
/// (its widest tile) where the CPU runs it, the run's CBLAS library and OpenBLAS where it is installed (each whether or not this
/// run uses it), so that the MFU is against the best GEMM the machine has.
pub fn matmul_rates(
    device: &Device,
    dtype: DType,
    n: usize,
    in_use: Option<&Blas>,
) -> Result<Vec<MatmulRate>> {
    let a = Tensor::randn(0f32, 1.0, (n, n), device)?.to_dtype(dtype)?;
    let b = Tensor::randn(0f32, 1.0, (n, n), device)?.to_dtype(dtype)?;
    let flops = 2.0 * (n as f64).powi(3);
    let mut rates = vec![MatmulRate {
        path: "candle".to_string(),
        detail: candle_detail(device),
        flops: flops / best_seconds(device, || a.matmul(&b).map(drop))?,
    }];
    if device.is_cpu() && dtype == DType::F32 {
        let installed = Blas::load(&CpuGemm::Auto)
            .ok()
            .flatten()
            .filter(|i| in_use.is_none_or(|u| u.description != i.description));
        let (av, bv) = (a.flatten_all()?.to_vec1()?, b.flatten_all()?.to_vec1()?);
        if packed::supported() {
            let mut c = vec![0f32; n * n];
            let secs = best_seconds(device, || {
                packed::sgemm_nt(&av, &bv, (n, n, n), &mut c);
                Ok(())
            })?;
            rates.push(MatmulRate {
                path: "packed".to_string(),
                detail: format!(
                    "the built-in packed kernel, {} (the built-in GEMM of segments of {} rows or more on \
                     CPUs without AVX-512)",
                    packed::active().map_or_else(String::new, packed::Isa::describe),
                    packed::MIN_ROWS
                ),
                flops: flops / secs,
            });
        }
        for (blas, used) in in_use
            .map(|b| (b, true))
            .into_iter()
            .chain(installed.as_ref().map(|b| (b, false)))
        {
            let secs = best_seconds(device, || {
                drop(blas.sgemm_nt(&av, &bv, n, n, n));
                Ok(())
            })?;
            rates.push(MatmulRate {
                path: format!("cblas: {}", blas.description),
                detail: format!(
                    "corename {}, {}",
                    blas.corename.as_deref().unwrap_or("unknown"),
                    if used {
                        "used by this run"
                    } else {
                        "installed, not used by this run"
                    }
                ),
                flops: flops / secs,
            });
        }
    }
    if device.is_cpu() && dtype == DType::BF16 {
        rates.extend(bf16_rates(&a, &b, n, in_use)?);
    }
    Ok(rates)
}

/// The rates of this program's bf16 kernels of row segments on `n`³ (bf16 CPU tensors `a`, `b`): the AVX512-BF16
/// packed kernel and the AMX kernel, where the CPU runs them (each whether or not the run uses it), and the bf16
/// GEMM of `library` where it has one (called as the run calls it).
fn bf16_rates(a: &Tensor, b: &Tensor, n: usize, library: Option<&Blas>) -> Result<Vec<MatmulRate>> {
    use super::bf16::{amx, packed, KernelFn};
    let (av, bv) = (
        a.flatten_all()?.to_vec1::<half::bf16>()?,
        b.flatten_all()?.to_vec1::<half::bf16>()?,
    );
    let mut kernels: Vec<(String, &str, Box<KernelFn<'_>>)> = Vec::new();
    if super::bf16::supported() {
        kernels.push((
            "bf16 packed".into(),
            "AVX512-BF16 vdpbf16ps, f32 sums",
            Box::new(packed::gemm_nt),
        ));
    }
    if amx::supported() {
        kernels.push((
            "bf16 AMX".into(),
            "AMX tiles, tdpbf16ps, f32 sums",
            Box::new(amx::gemm_nt),
        ));
    }
    if let Some((lib, symbol)) = library.and_then(|l| Some((l, l.bf16_gemm()?))) {
        kernels.push((
            format!("cblas bf16: {} ({symbol})", lib.description),
            "the library's bf16 GEMM, f32 sums, one call per chunk of rows and block of columns",
            Box::new(move |a, w, bias, dims, c| {
                super::bf16::blas::product(lib, a, w, bias, dims, c)
            }),
        ));
    }
    let mut c = vec![half::bf16::ZERO; n * n];
    // SAFETY: the kernels write bf16 values only.
    let c = unsafe { crate::ops::cpu_data::as_storage(&mut c) };
    let mut rates = Vec::new();
    for (path, detail, f) in kernels {
        let secs = best_seconds(&Device::Cpu, || {
            f(&av, &bv, &[], (n, n, n), c);
            Ok(())
        })?;
        rates.push(MatmulRate {
            path,
            detail: detail.to_string(),
            flops: 2.0 * (n as f64).powi(3) / secs,
        });
    }
    Ok(rates)
}

/// The best of [`matmul_rates`]: (FLOP/s, path).
pub(crate) fn matmul_peak(
    device: &Device,
    dtype: DType,
    n: usize,
    in_use: Option<&Blas>,
) -> Result<(f64, String)> {
    let rates = matmul_rates(device, dtype, n, in_use)?;
    Ok(best_rate(&rates))
}

/// The fastest of `rates`: (FLOP/s, path); (0, empty) for none.
pub(crate) fn best_rate(rates: &[MatmulRate]) -> (f64, String) {
    rates
        .iter()
        .max_by(|a, b| a.flops.total_cmp(&b.flops))
        .map_or((0.0, String::new()), |r| (r.flops, r.path.clone()))
}

/// Which kernels candle's matmul runs on `device`: on the CPU the `gemm` crate's widest for this CPU.
fn candle_detail(device: &Device) -> String {
    if !device.is_cpu() {
        return format!("{device:?}");
    }
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            return "gemm crate, x86-v4 AVX-512 kernels".to_string();
        }
        if is_x86_feature_detected!("fma") {
            return "gemm crate, AVX2/FMA kernels".to_string();
        }
    }
    "gemm crate".to_string()
}

/// The shortest of three timed calls of `f`, after one warm-up call.
fn best_seconds(device: &Device, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    device.synchronize()?;
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        f()?;
        device.synchronize()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In bf16 on the CPU the rates list candle's matmul and each bf16 kernel this CPU runs, all positive.
    #[test]
    fn bf16_rates_list_the_kernels_this_cpu_runs() {
        let rates = matmul_rates(&Device::Cpu, DType::BF16, 96, None).unwrap();
        let paths: Vec<&str> = rates.iter().map(|r| r.path.as_str()).collect();
        let want = [
            (true, "candle"),
            (super::super::bf16::supported(), "bf16 packed"),
            (super::super::bf16::amx::supported(), "bf16 AMX"),
        ];
        for (runs, path) in want {
            assert_eq!(paths.contains(&path), runs, "{path} in {paths:?}");
        }
        assert!(
            !paths.iter().any(|p| p.starts_with("cblas bf16")),
            "{paths:?}"
        );
        // A library with a bf16 GEMM adds its rate (MKL from .ci/mkl.sh, where it is installed).
        if let Some(path) = super::super::bf16::blas::tests::mkl_path() {
            let mkl = Blas::open(&path).unwrap();
            let rates = matmul_rates(&Device::Cpu, DType::BF16, 96, Some(&mkl)).unwrap();
            let lib = rates.iter().find(|r| r.path.starts_with("cblas bf16: "));
            assert!(
                lib.is_some_and(|r| r.flops > 0.0 && r.path.contains("bf16bf16f32")),
                "{rates:?}"
            );
        }
        assert!(rates.iter().all(|r| r.flops > 0.0), "{rates:?}");
    }
}
