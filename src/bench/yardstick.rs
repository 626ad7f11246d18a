//! The physical limits `bench` holds its figures against, beside the matmul rates: the memory bandwidth a stream
//! of reads reaches on this machine (what bounds single-sequence decode, which reads every weight of the language
//! model once per step) and the figures per compute thread.

use std::time::Instant;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Bytes of the buffer read to measure the bandwidth: far above any CPU's caches.
pub const STREAM_BYTES: usize = 512 << 20;

/// Decode against the memory bandwidth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecodeBandwidth {
    /// Bytes per second of the best of [`STREAM_PASSES`] parallel passes summing a buffer of
    /// `stream_buffer_bytes` (every compute thread reading its own contiguous share), measured in the same run.
    pub stream_read_bytes_per_second: f64,
    /// The read loop of the fastest pass: `avx512`, `avx2` (vector loads into eight accumulators) or `portable`;
    /// `+prefetch` where the vector loop that also prefetches the lines 8 KiB ahead read faster.
    #[serde(default)]
    pub stream_read_kernel: String,
    /// The buffer's size.
    pub stream_buffer_bytes: u64,
    /// Bytes of weights one decode step reads: the language model's parameters (its head included, the embedding
    /// table's one row per token left out) times the dtype's size.
    pub weight_bytes_per_step: f64,
    /// Those bytes times the step phase's decode steps / its decode seconds.
    pub weight_bytes_per_second: f64,
    /// `weight_bytes_per_second / stream_read_bytes_per_second`: 1 is decode at the bandwidth bound (with one
    /// sequence per step; with more the steps also compute more per byte).
    pub share_of_bandwidth: f64,
    /// Sequences per decode step on average (the running sequences summed over the steps / the steps).
    pub sequences_per_step: f64,
}

/// The step phase's rates per compute thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerCore {
    /// The compute threads (rayon's pool, shared by every CPU kernel: `--threads`).
    pub threads: usize,
    /// Steps per wall-clock second per thread.
    pub steps_per_second: f64,
    /// Model FLOPs per second of prefill per thread.
    pub prefill_flops_per_second: f64,
    /// Decode tokens per second per thread.
    pub decode_tokens_per_second: f64,
}

/// Timed passes of each read loop in the bandwidth measurement; the fastest counts (the first also brings the
/// pool's threads up).
pub const STREAM_PASSES: usize = 7;

/// How far ahead of its loads the prefetching read loop asks for lines (into L2): 8 KiB, where the gain levelled
/// off on an Intel Xeon (1 to 16 KiB tried; decode's row kernels prefetch the weight rows ahead the same way).
const PREFETCH_AHEAD_BYTES: usize = 8 << 10;

/// The read bandwidth of this machine (bytes per second) and the read loop that reached it: a buffer of
/// [`STREAM_BYTES`] split into one contiguous share per thread of rayon's pool, each share written first by a pool
/// thread (so its pages are mapped before the clock starts), then read [`STREAM_PASSES`] times by each loop in
/// turn, the plain one and one that also prefetches the lines [`PREFETCH_AHEAD_BYTES`] ahead (decode's kernels
/// do; without it the yardstick read ~10 % below them on an Intel Xeon), every thread summing its own share at
/// once; the fastest pass counts. Its loop is named with `+prefetch` where the prefetching one won.
pub fn stream_read_bandwidth() -> (f64, String) {
    let threads = rayon::current_num_threads().max(1);
    let mut buf = vec![0f32; STREAM_BYTES / 4];
    let share = buf.len().div_ceil(threads);
    buf.par_chunks_mut(share).for_each(|c| c.fill(1.0));
    let kernel = ReadKernel::detect();
    let mut best = [f64::INFINITY; 2];
    for _ in 0..STREAM_PASSES {
        for (prefetch, best) in [false, true].into_iter().zip(&mut best) {
            let t = Instant::now();
            let sums = rayon::broadcast(|ctx| {
                let mine = buf.chunks(share).nth(ctx.index()).unwrap_or(&[]);
                kernel.sum(mine, prefetch)
            });
            std::hint::black_box(sums);
            *best = best.min(t.elapsed().as_secs_f64());
        }
    }
    let prefetched = best[1] < best[0] && kernel != ReadKernel::Portable;
    let name = if prefetched {
        format!("{}+prefetch", kernel.name())
    } else {
        kernel.name().to_string()
    };
    (STREAM_BYTES as f64 / best[0].min(best[1]), name)
}

/// The loop that reads the buffer: the widest vector loads this CPU has, in eight independent accumulators (so
/// the loads, not a chain of additions or the instruction rate, bound a pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadKernel {
    /// Plain Rust in 64 lanes (any CPU: the compiler's vectors of the build's target).
    Portable,
    /// AVX2: 8 accumulators of 8 lanes.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512F: 8 accumulators of 16 lanes.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl ReadKernel {
    /// The widest kernel this CPU runs.
    fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                return Self::Avx512;
            }
            if is_x86_feature_detected!("avx2") {
                return Self::Avx2;
            }
        }
        Self::Portable
    }

    /// Its name in the report.
    fn name(self) -> &'static str {
        match self {
            Self::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => "avx512",
        }
    }

    /// The sum of `xs` (a kernel the CPU supports: [`ReadKernel::detect`]'s or a narrower one), the vector loops
    /// asking for the lines [`PREFETCH_AHEAD_BYTES`] ahead where `prefetch` (the portable loop has no hint).
    fn sum(self, xs: &[f32], prefetch: bool) -> f32 {
        // SAFETY (the vector arms): `detect` picks these only where the CPU has the feature, and the tests run
        // only those.
        match (self, prefetch) {
            (Self::Portable, _) => chunk_sum(xs),
            #[cfg(target_arch = "x86_64")]
            (Self::Avx2, false) => unsafe { simd::sum_avx2::<false>(xs) },
            #[cfg(target_arch = "x86_64")]
            (Self::Avx2, true) => unsafe { simd::sum_avx2::<true>(xs) },
            #[cfg(target_arch = "x86_64")]
            (Self::Avx512, false) => unsafe { simd::sum_avx512::<false>(xs) },
            #[cfg(target_arch = "x86_64")]
            (Self::Avx512, true) => unsafe { simd::sum_avx512::<true>(xs) },
        }
    }
}

/// The sum of `xs` in 64 independent lanes (the portable read loop).
fn chunk_sum(xs: &[f32]) -> f32 {
    let mut acc = [0f32; 64];
    let mut blocks = xs.chunks_exact(64);
    for b in &mut blocks {
        for (a, x) in acc.iter_mut().zip(b) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + blocks.remainder().iter().sum::<f32>()
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    /// A hint for the line [`super::PREFETCH_AHEAD_BYTES`] past `p`, into L2, where `PREFETCH`. A hint reads
    /// nothing and cannot fault, wherever it points.
    #[inline(always)]
    fn ahead<const PREFETCH: bool>(p: *const f32) {
        if PREFETCH {
            let line = p.wrapping_byte_add(super::PREFETCH_AHEAD_BYTES);
            // SAFETY: SSE is in every x86-64 CPU; a prefetch dereferences nothing.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(line.cast()) };
        }
    }

    /// The sum of `xs` through 512-bit loads into eight accumulators (a hint per 64-byte line where `PREFETCH`).
    #[target_feature(enable = "avx512f")]
    pub(super) fn sum_avx512<const PREFETCH: bool>(xs: &[f32]) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 8];
        let mut blocks = xs.chunks_exact(128);
        for b in &mut blocks {
            for line in 0..8 {
                ahead::<PREFETCH>(b.as_ptr().wrapping_add(16 * line));
            }
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: `b` holds 128 values, so the 16 read from `16 * k` (k < 8) lie inside it.
                *a = _mm512_add_ps(*a, unsafe { _mm512_loadu_ps(b.as_ptr().add(16 * k)) });
            }
        }
        let total = acc[1..].iter().fold(acc[0], |t, a| _mm512_add_ps(t, *a));
        _mm512_reduce_add_ps(total) + super::chunk_sum(blocks.remainder())
    }

    /// The sum of `xs` through 256-bit loads into eight accumulators (a hint per 64-byte line where `PREFETCH`).
    #[target_feature(enable = "avx2")]
    pub(super) fn sum_avx2<const PREFETCH: bool>(xs: &[f32]) -> f32 {
        let mut acc = [_mm256_setzero_ps(); 8];
        let mut blocks = xs.chunks_exact(64);
        for b in &mut blocks {
            for line in 0..4 {
                ahead::<PREFETCH>(b.as_ptr().wrapping_add(16 * line));
            }
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: `b` holds 64 values, so the 8 read from `8 * k` (k < 8) lie inside it.
                *a = _mm256_add_ps(*a, unsafe { _mm256_loadu_ps(b.as_ptr().add(8 * k)) });
            }
        }
        let total = acc[1..].iter().fold(acc[0], |t, a| _mm256_add_ps(t, *a));
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds the 8 values stored.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), total) };
        lanes.iter().sum::<f32>() + super::chunk_sum(blocks.remainder())
    }
}

/// Decode's weight traffic against `bandwidth` (bytes per second, and the read loop that measured it): `lm_params` parameters of `dtype_bytes` bytes
/// read per step, `steps` steps running `seq_sum` sequences in all, in `seconds`. `None` without decode steps or
/// bandwidth.
pub fn decode_bandwidth(
    (bandwidth, kernel): (f64, &str),
    lm_params: u64,
    dtype_bytes: usize,
    (steps, seq_sum, seconds): (usize, usize, f64),
) -> Option<DecodeBandwidth> {
    if steps == 0 || seconds <= 0.0 || bandwidth <= 0.0 {
        return None;
    }
    let per_step = lm_params as f64 * dtype_bytes as f64;
    let per_second = per_step * steps as f64 / seconds;
    Some(DecodeBandwidth {
        stream_read_bytes_per_second: bandwidth,
        stream_read_kernel: kernel.to_string(),
        stream_buffer_bytes: STREAM_BYTES as u64,
        weight_bytes_per_step: per_step,
        weight_bytes_per_second: per_second,
        share_of_bandwidth: per_second / bandwidth,
        sequences_per_step: seq_sum as f64 / steps as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_traffic_is_the_weights_per_step_over_the_bandwidth() {
        // 1e9 parameters of 4 bytes a step, 10 steps of 2 sequences in 4 s, against 20 GB/s: 10 GB/s, half.
        let d = decode_bandwidth((20e9, "avx2"), 1_000_000_000, 4, (10, 20, 4.0)).unwrap();
        assert_eq!(d.weight_bytes_per_step, 4e9);
        assert_eq!(d.weight_bytes_per_second, 1e10);
        assert!((d.share_of_bandwidth - 0.5).abs() < 1e-12);
        assert_eq!(d.sequences_per_step, 2.0);
        assert_eq!(d.stream_read_kernel, "avx2");
        assert!(decode_bandwidth((20e9, "avx2"), 1, 4, (0, 0, 0.0)).is_none());
    }

    /// Every kernel this CPU runs, narrowest first.
    fn kernels() -> Vec<ReadKernel> {
        let mut all = vec![ReadKernel::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") {
                all.push(ReadKernel::Avx2);
            }
            if is_x86_feature_detected!("avx512f") {
                all.push(ReadKernel::Avx512);
            }
        }
        all
    }

    #[test]
    fn every_read_kernel_counts_every_value() {
        // Small integers sum exactly in any order; lengths around the 64- and 128-value blocks and their tails.
        for n in [0, 1, 63, 64, 127, 128, 129, 1000, 4096 + 17] {
            let xs: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
            let want: f32 = xs.iter().sum();
            for k in kernels() {
                for prefetch in [false, true] {
                    assert_eq!(k.sum(&xs, prefetch), want, "{} over {n} values", k.name());
                }
            }
        }
        assert_eq!(ReadKernel::detect(), *kernels().last().unwrap());
    }

    #[test]
    fn the_stream_bandwidth_is_a_plausible_memory_rate() {
        // Any machine reads more than 100 MB/s and less than 10 TB/s from memory; the kernel is the widest here.
        let (bw, kernel) = stream_read_bandwidth();
        assert!(bw > 1e8 && bw < 1e13, "{bw}");
        let plain = kernel.strip_suffix("+prefetch").unwrap_or(&kernel);
        assert_eq!(plain, ReadKernel::detect().name());
    }
}
