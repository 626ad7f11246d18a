//! What the cores reach when they do nothing but one thing, measured on every compute thread at once: the clock
//! they run at (a chain of dependent 64-bit integer multiplies, three cycles each on Intel cores since Nehalem and
//! AMD cores since Zen) and the rate of f32 FMAs from registers (independent accumulators of the widest vector, enough of them to
//! hide the FMA latency on two units). No product can beat the FMA rate at the clock it ran, so the ISA peak is
//! that rate, not the nominal clock of `/proc/cpuinfo` (under a hypervisor the base clock, below the turbo the cores
//! run at).

use std::time::Instant;

/// Repetitions of each measurement; the fastest counts (the first also wakes the pool's threads).
const PASSES: usize = 3;
/// Multiplies in the clock chain of each thread (about 40 ms at 4 GHz).
const CHAIN: u64 = 50_000_000;
/// Loop iterations of the FMA measurement (16 or 12 FMAs each: about 80 ms at one FMA a cycle and 3.5 GHz).
const FMA_ITERATIONS: u64 = 16_000_000;

/// The clock and FMA rate of the compute threads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Silicon {
    /// Mean over the threads of the clock each ran its multiply chain at, GHz.
    pub clock_ghz: f64,
    /// f32 FLOP/s of the FMA loops of all threads at once (their FMAs over the time from the first start to the
    /// last end).
    pub fma_flops: f64,
    /// f32 lanes of the vector the FMA loop used.
    pub lanes: u32,
}

/// Measure on every thread of rayon's pool at once; `None` off x86-64 or without AVX2 and FMA.
pub fn measure() -> Option<Silicon> {
    let lanes = fma::lanes()?;
    let threads = rayon::current_num_threads().max(1) as f64;
    let passes = |f: &(dyn Fn() -> f64 + Sync)| (0..PASSES).map(|_| f()).fold(0.0, f64::max);
    // Each thread times its own chain: the mean of their clocks.
    let clock_hz = passes(&|| {
        let clocks = rayon::broadcast(|_| {
            let t = Instant::now();
            std::hint::black_box(multiply_chain(CHAIN));
            3.0 * CHAIN as f64 / t.elapsed().as_secs_f64()
        });
        clocks.iter().sum::<f64>() / threads
    });
    // All threads' FMAs over the time from the first start to the last end, so a thread that ran alone for a
    // while (at a higher one-core clock) does not count as if the others ran beside it.
    let fma_flops = passes(&|| {
        let t = Instant::now();
        let fmas: u64 = rayon::broadcast(|_| fma::run(FMA_ITERATIONS)).iter().sum();
        2.0 * fmas as f64 * f64::from(lanes) / t.elapsed().as_secs_f64()
    });
    Some(Silicon {
        clock_ghz: clock_hz / 1e9,
        fma_flops,
        lanes,
    })
}

/// `n` dependent 64-bit multiplies (three cycles each), as inline assembly so the compiler neither folds nor
/// reorders them.
#[cfg(target_arch = "x86_64")]
fn multiply_chain(n: u64) -> u64 {
    let (mut x, y) = (1u64, 3u64);
    for _ in 0..n / 4 {
        // SAFETY: register arithmetic only.
        unsafe {
            std::arch::asm!(
                "imul {x}, {y}",
                "imul {x}, {y}",
                "imul {x}, {y}",
                "imul {x}, {y}",
                x = inout(reg) x,
                y = in(reg) y,
                options(nomem, nostack),
            );
        }
    }
    x
}

#[cfg(not(target_arch = "x86_64"))]
fn multiply_chain(n: u64) -> u64 {
    n
}

#[cfg(target_arch = "x86_64")]
mod fma {
    use std::arch::x86_64::*;

    /// Lanes of the widest FMA vector this CPU runs; `None` without AVX2 and FMA.
    pub(super) fn lanes() -> Option<u32> {
        if is_x86_feature_detected!("avx512f") {
            Some(16)
        } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            Some(8)
        } else {
            None
        }
    }

    /// `iterations` × 16 (AVX-512) or 12 (AVX2) FMAs of the widest vector, returning how many ran.
    pub(super) fn run(iterations: u64) -> u64 {
        // SAFETY: `lanes` found the features before any caller gets here.
        unsafe {
            if is_x86_feature_detected!("avx512f") {
                avx512(iterations)
            } else {
                avx2(iterations)
            }
        }
    }

    /// 16 independent zmm accumulators (two FMA units of latency 4 need 8 in flight).
    #[target_feature(enable = "avx512f")]
    unsafe fn avx512(iterations: u64) -> u64 {
        let (b, c) = (_mm512_set1_ps(0.999), _mm512_set1_ps(1e-3));
        let mut acc = [b; 16];
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm512_set1_ps(1.0 + i as f32 / 8.0);
        }
        // Opaque to the compiler, so that it keeps every chain.
        let mut acc = std::hint::black_box(acc);
        for _ in 0..iterations {
            for a in &mut acc {
                *a = _mm512_fmadd_ps(*a, b, c);
            }
        }
        std::hint::black_box(acc);
        16 * iterations
    }

    /// 12 independent ymm accumulators (AVX2 has 16 registers; two hold the constants).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2(iterations: u64) -> u64 {
        let (b, c) = (_mm256_set1_ps(0.999), _mm256_set1_ps(1e-3));
        let mut acc = [b; 12];
        for (i, a) in acc.iter_mut().enumerate() {
            *a = _mm256_set1_ps(1.0 + i as f32 / 8.0);
        }
        // Opaque to the compiler, so that it keeps every chain.
        let mut acc = std::hint::black_box(acc);
        for _ in 0..iterations {
            for a in &mut acc {
                *a = _mm256_fmadd_ps(*a, b, c);
            }
        }
        std::hint::black_box(acc);
        12 * iterations
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod fma {
    pub(super) fn lanes() -> Option<u32> {
        None
    }

    pub(super) fn run(_: u64) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock is a plausible one and the FMA rate at most four and a half vector FMAs a cycle per thread (a
    /// chain the compiler folded would land above) and at least a fifth (accumulators spilled to memory, or a
    /// thread sharing its core with the other tests' threads, land below one).
    #[test]
    fn clock_and_fma_rate_are_those_of_a_cpu() {
        let Some(s) = measure() else {
            eprintln!("skipped: no AVX2/FMA");
            return;
        };
        eprintln!("{s:?}");
        assert!((0.3..8.0).contains(&s.clock_ghz), "{s:?}");
        let threads = rayon::current_num_threads() as f64;
        let per_cycle = s.fma_flops / (threads * f64::from(s.lanes) * 2.0 * s.clock_ghz * 1e9);
        assert!(
            (0.2..4.5).contains(&per_cycle),
            "{per_cycle} FMAs a cycle: {s:?}"
        );
    }
}
