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
    /// Bytes per second of the best of five parallel passes summing a buffer of `stream_buffer_bytes` (every
    /// compute thread reading its share), measured in the same run.
    pub stream_read_bytes_per_second: f64,
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

/// The read bandwidth of this machine (bytes per second): a buffer of [`STREAM_BYTES`] written once, then summed
/// five times in parallel on rayon's threads; the fastest pass counts.
pub fn stream_read_bandwidth() -> f64 {
    let buf = vec![1f32; STREAM_BYTES / 4];
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        let sum: f32 = buf.par_chunks(1 << 16).map(chunk_sum).sum();
        std::hint::black_box(sum);
        best = best.min(t.elapsed().as_secs_f64());
    }
    STREAM_BYTES as f64 / best
}

/// The sum of `xs` in 16 independent lanes (so the compiler vectorises it and the pass is bound by memory, not by
/// one chain of additions).
fn chunk_sum(xs: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let mut blocks = xs.chunks_exact(16);
    for b in &mut blocks {
        for (a, x) in acc.iter_mut().zip(b) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + blocks.remainder().iter().sum::<f32>()
}

/// Decode's weight traffic against `bandwidth` (bytes per second): `lm_params` parameters of `dtype_bytes` bytes
/// read per step, `steps` steps running `seq_sum` sequences in all, in `seconds`. `None` without decode steps or
/// bandwidth.
pub fn decode_bandwidth(
    bandwidth: f64,
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
        let d = decode_bandwidth(20e9, 1_000_000_000, 4, (10, 20, 4.0)).unwrap();
        assert_eq!(d.weight_bytes_per_step, 4e9);
        assert_eq!(d.weight_bytes_per_second, 1e10);
        assert!((d.share_of_bandwidth - 0.5).abs() < 1e-12);
        assert_eq!(d.sequences_per_step, 2.0);
        assert!(decode_bandwidth(20e9, 1, 4, (0, 0, 0.0)).is_none());
    }

    #[test]
    fn the_chunk_sum_counts_every_value() {
        let xs: Vec<f32> = (0..1000).map(|i| (i % 7) as f32).collect();
        assert_eq!(chunk_sum(&xs), xs.iter().sum::<f32>());
    }
}
