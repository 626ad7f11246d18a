//! The inner loops of the fused decode attention on each vector path. Scores are taken a block of keys at a time
//! for every query of the head group (the block stays in L1 while the group reads it); weighted sums add a block
//! of value rows into every query's running sums, several queries per value load. Every value computed is the
//! same chain of FMAs and additions at AVX2 and at AVX-512, so both paths give the same bits.

use crate::ops::simd::Level;

#[cfg(target_arch = "x86_64")]
mod x86;

/// Keys per block of scores: the AVX-512 path reduces their scores together, the AVX2 path eight at a time.
pub(super) const KEYS: usize = 16;

/// Where a block's scores or weights lie in the chunk's (group × rows) scores: `rows` per query, the block's
/// first at `j0`.
#[derive(Clone, Copy)]
pub(super) struct At {
    pub rows: usize,
    pub j0: usize,
}

/// The largest of `s` (−∞ for none; scores are never NaN where the inputs are not) on `level`.
pub(super) fn max(s: &[f32], level: Level) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if level == Level::Avx512 {
        // SAFETY: the caller checked the CPU supports AVX-512.
        return unsafe { x86::max16(s) };
    }
    let _ = level;
    s.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// Scores of one block of keys `k` (n × d, n at most [`KEYS`]) for every query of `qg` (group × d):
/// `s[i·rows + j0 + j] = q_i·k_j`, on `level` (one the CPU supports). Each score: per 16 dims one FMA into a low
/// and one into a high 8-lane accumulator (a last 8 dims into the low one), the two added, then the 8 lanes
/// summed as halves, pairs and the last two.
pub(super) fn scores(qg: &[f32], k: &[f32], s: &mut [f32], d: usize, at: At, level: Level) {
    let n = k.len() / d;
    for (i, q) in qg.chunks_exact(d).enumerate() {
        let out = &mut s[i * at.rows + at.j0..][..n];
        #[cfg(target_arch = "x86_64")]
        // SAFETY (all arms): the caller checked the CPU supports `level`; d is a multiple of 8 and `k` holds n
        // rows of d.
        match level {
            Level::Avx512 if n == KEYS => {
                unsafe { x86::scores16_block(q, k, out) };
                continue;
            }
            Level::Avx512 => {
                unsafe { x86::scores16(q, k, out) };
                continue;
            }
            Level::Avx2 => {
                let full = n - n % 8;
                for (kb, sb) in k[..full * d]
                    .chunks_exact(8 * d)
                    .zip(out.chunks_exact_mut(8))
                {
                    unsafe { x86::scores8_block(q, kb, sb) };
                }
                unsafe { x86::scores8(q, &k[full * d..], &mut out[full..]) };
                continue;
            }
            Level::Portable => {}
        }
        for (sj, kj) in out.iter_mut().zip(k.chunks_exact(d)) {
            *sj = q.iter().zip(kj).map(|(a, b)| a * b).sum();
        }
    }
    let _ = level;
}

/// `o_i += Σ_j p[i·rows + j0 + j]·v_j` for every query i of `o` (group × d) over the value rows of `v` (n × d),
/// on `level` (one the CPU supports): each value of `o` one FMA chain over the rows in order, continued from
/// the value `o` holds.
pub(super) fn weighted_sums(p: &[f32], v: &[f32], o: &mut [f32], d: usize, at: At, level: Level) {
    let n = v.len() / d;
    let weights = |i: usize| &p[i * at.rows + at.j0..][..n];
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY (both arms): as in `scores`; every query has n weights at `at`.
        Level::Avx512 => return unsafe { x86::weighted_sums16(&weights, v, o, d) },
        Level::Avx2 => return unsafe { x86::weighted_sums8(&weights, v, o, d) },
        Level::Portable => {}
    }
    let _ = level;
    for (i, oi) in o.chunks_exact_mut(d).enumerate() {
        for (pj, vj) in weights(i).iter().zip(v.chunks_exact(d)) {
            for (x, y) in oi.iter_mut().zip(vj) {
                *x += pj * y;
            }
        }
    }
}
