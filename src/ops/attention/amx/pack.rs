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
/// dimensions; zeros past the keys and the head dimension.
///
/// # Safety
/// The CPU has AVX-512F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn pack_values(rows: &Rows<'_>, h: Heads) -> Vec<Tile> {
    use std::arch::x86_64::*;
    let dim_tiles = h.dim_tiles();
    let mut tiles = vec![ZERO_TILE; rows.len.div_ceil(CHUNK) * dim_tiles];
    for (c, vt) in tiles.chunks_mut(dim_tiles).enumerate() {
        for p in 0..TILE {
            let n0 = c * CHUNK + 2 * p;
            if n0 >= rows.len {
                break;
            }
            let (r0, r1) = (rows.row(n0), (n0 + 1 < rows.len).then(|| rows.row(n0 + 1)));
            for (t, tile) in vt.iter_mut().enumerate() {
                let m: __mmask16 = ((1u32 << (h.d - t * TILE).min(TILE)) - 1) as u16;
                // SAFETY: the masked lanes lie inside the rows (d values each).
                unsafe {
                    let lo = _mm256_maskz_loadu_epi16(m, r0.as_ptr().add(t * TILE).cast());
                    let hi = match r1 {
                        Some(r1) => _mm256_maskz_loadu_epi16(m, r1.as_ptr().add(t * TILE).cast()),
                        None => _mm256_setzero_si256(),
                    };
                    let pair = _mm512_or_si512(
                        _mm512_cvtepu16_epi32(lo),
                        _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(hi)),
                    );
                    _mm512_storeu_si512(tile.0.as_mut_ptr().add(p * TILE).cast(), pair);
                }
            }
        }
    }
    tiles
}
