//! The keys and values of a KV head packed as the tile products' second operands.

use super::{Heads, Rows, Tile, CHUNK, TILE, ZERO_TILE};
use crate::ops::cpu_data::as_storage;
use crate::ops::gemm::bf16::amx::gather_pairs;

/// A KV head's keys `rows` as second operands of `q·kᵀ`: tile (key tile `t`, chunk `c`) at `t · chunks + c`,
/// its row `p` holding depth pair `16c + p` of the tile's 16 keys (depth `2p` in the low half); zeros past the
/// keys and the head dimension. Whole key tiles from one source gather a pair of each key at once.
///
/// # Safety
/// The CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn pack_keys(rows: &Rows<'_>, h: Heads) -> Vec<Tile> {
    let (chunks, pairs) = (h.chunks(), h.d / 2);
    let mut tiles = vec![ZERO_TILE; rows.len.div_ceil(TILE) * chunks];
    for (t, kt) in tiles.chunks_mut(chunks).enumerate() {
        let n0 = t * TILE;
        if let Some((x, at, stride)) = rows.tile(n0) {
            // SAFETY: the CPU has AVX-512F; the 16 keys' d values lie inside x (Rows::tile checked them).
            unsafe { gather_pairs(&x[at..], stride, pairs, as_storage(kt)) };
            continue;
        }
        for j in 0..TILE.min(rows.len - n0) {
            let key = rows.row(n0 + j);
            for (p, pair) in key.chunks_exact(2).enumerate() {
                kt[p / TILE].0[(p % TILE) * TILE + j] =
                    pair[0].to_bits() as u32 | (pair[1].to_bits() as u32) << 16;
            }
        }
    }
    tiles
}

/// A KV head's values `rows` as second operands of `weights · v`: tile (key chunk `c`, dimension tile `t`) at
/// `c · dim_tiles + t`, its row `p` holding keys `32c + 2p` (low half) and `32c + 2p + 1` of the tile's 16
/// dimensions; zeros past the keys and the head dimension. Two keys' 32 dimensions at a time are interleaved by
/// one permutation per tile row.
///
/// # Safety
/// The CPU has AVX-512F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn pack_values(rows: &Rows<'_>, h: Heads) -> Vec<Tile> {
    use std::arch::x86_64::*;
    let dim_tiles = h.dim_tiles();
    // Lane 2i of a tile row from the first key's dimension i, lane 2i + 1 from the second's (index 32 + i):
    // dimensions 0–15 of the pair, then 16–31.
    let interleave = |from: u16| {
        let idx: [u16; 32] = std::array::from_fn(|l| from + l as u16 / 2 + 32 * (l as u16 % 2));
        // SAFETY: 32 values.
        unsafe { _mm512_loadu_si512(idx.as_ptr().cast()) }
    };
    let (lo, hi) = (interleave(0), interleave(16));
    let mut tiles = vec![ZERO_TILE; rows.len.div_ceil(CHUNK) * dim_tiles];
    for (c, vt) in tiles.chunks_mut(dim_tiles).enumerate() {
        for p in 0..TILE {
            let n0 = c * CHUNK + 2 * p;
            if n0 >= rows.len {
                break;
            }
            let (r0, r1) = (rows.row(n0), (n0 + 1 < rows.len).then(|| rows.row(n0 + 1)));
            for t in (0..dim_tiles).step_by(2) {
                let m = super::rows::first32(h.d - t * TILE);
                // SAFETY: the masked lanes lie inside the rows (d values each); each tile row is 16 u32.
                unsafe {
                    let a = _mm512_maskz_loadu_epi16(m, r0.as_ptr().add(t * TILE).cast());
                    let b = match r1 {
                        Some(r1) => _mm512_maskz_loadu_epi16(m, r1.as_ptr().add(t * TILE).cast()),
                        None => _mm512_setzero_si512(),
                    };
                    let mut row = |t: usize| vt[t].0.as_mut_ptr().add(p * TILE).cast();
                    _mm512_storeu_si512(row(t), _mm512_permutex2var_epi16(a, lo, b));
                    if t + 1 < dim_tiles {
                        _mm512_storeu_si512(row(t + 1), _mm512_permutex2var_epi16(a, hi, b));
                    }
                }
            }
        }
    }
    tiles
}
