//! The products of [`super::tiles`] by AVX512-BF16 dot products, for CPUs without AMX: the same operands in
//! memory (first operands as rows of depth pairs, second operands as tiles of 16 pairs by 16 columns), the same
//! f32 sums stored where the tiles store them. Per row of the first operand and pair `p` of a chunk, one
//! `vdpbf16ps` adds the row's pair broadcast times the tile's row `p` (16 columns' pairs) to the row's 16 sums;
//! a register block is [`ROWS`] rows by up to three tiles.

use std::arch::x86_64::*;

use super::{Tile, CHUNK, KEY_BLOCK, TILE};

/// Rows of the first operand per register block (8 × 3 accumulators, three tile rows and a broadcast).
const ROWS: usize = 8;

/// The first operand's rows and the sums' rows of one register block.
struct Rows {
    /// Each row's depth pairs: chunk `c`'s 16 pairs from pair `16c`.
    a: [*const u32; ROWS],
    /// Each row's sums: column tile `t`'s 16 from value `16t`.
    c: [*mut f32; ROWS],
}

/// `c` = (or += where not `fresh`) the products over `chunks` chunks of the rows' pairs with the tiles `b(chunk,
/// t)` for `t < NT`, the last chunk's over its first `last` pairs only (those after them are zeros in the rows:
/// head dimensions or weights past the end, whose products would add exact zeros).
///
/// # Safety
/// The CPU has AVX-512F and AVX512-BF16; each row holds `chunks` · 16 pairs and `NT` · 16 sums, each tile
/// pointer a tile; `last` is at most 16.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn block<const NT: usize>(
    rows: &Rows,
    b: impl Fn(usize, usize) -> *const Tile,
    (chunks, last): (usize, usize),
    fresh: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); NT]; ROWS];
    if !fresh {
        for (sums, c) in acc.iter_mut().zip(rows.c) {
            for (t, s) in sums.iter_mut().enumerate() {
                *s = _mm512_loadu_ps(c.add(t * TILE));
            }
        }
    }
    for ch in 0..chunks {
        let tiles: [*const u32; NT] = std::array::from_fn(|t| b(ch, t).cast());
        let pairs = if ch + 1 == chunks { last } else { TILE };
        for p in 0..pairs {
            let bv: [__m512bh; NT] = std::array::from_fn(|t| {
                std::mem::transmute(_mm512_load_si512(tiles[t].add(p * TILE).cast()))
            });
            for (sums, a) in acc.iter_mut().zip(rows.a) {
                let pair = a.add(ch * TILE + p).read_unaligned();
                let x: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair as i32));
                for (s, y) in sums.iter_mut().zip(&bv) {
                    *s = _mm512_dpbf16_ps(*s, x, *y);
                }
            }
        }
    }
    for (sums, c) in acc.iter().zip(rows.c) {
        for (t, s) in sums.iter().enumerate() {
            _mm512_storeu_ps(c.add(t * TILE), *s);
        }
    }
}

/// [`block`] for `nt` (1 to 3) tiles.
///
/// # Safety
/// As [`block`] for `nt` tiles.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn blocks(
    rows: &Rows,
    b: impl Fn(usize, usize) -> *const Tile,
    (chunks, last, nt): (usize, usize, usize),
    fresh: bool,
) {
    match nt {
        3 => block::<3>(rows, b, (chunks, last), fresh),
        2 => block::<2>(rows, b, (chunks, last), fresh),
        _ => block::<1>(rows, b, (chunks, last), fresh),
    }
}

/// The tiles `tiles` as register blocks of at most three, as even as possible (four tiles: two and two, not three
/// and one, whose block would load eight broadcasts for each tile row): each block's first tile and count.
fn even_groups(tiles: std::ops::Range<usize>) -> impl Iterator<Item = (usize, usize)> {
    let n = tiles.len();
    let groups = n.div_ceil(3);
    (0..groups).map(move |g| {
        let (from, to) = (g * n / groups, (g + 1) * n / groups);
        (tiles.start + from, to - from)
    })
}

/// [`super::tiles::scores`] by dot products, over the head dimension's `depth_pairs` pairs only (the queries' and
/// keys' padding to whole chunks adds exact zeros).
///
/// # Safety
/// The CPU has AVX-512F and AVX512-BF16; otherwise as [`super::tiles::scores`], with `depth_pairs` in the last of
/// the `chunks`.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn scores(
    (queries, qstride): (*const half::bf16, usize),
    keys: &[Tile],
    (key_tiles, chunks, two): (usize, usize, bool),
    scores: *mut f32,
    (pairs, depth_pairs): (std::ops::Range<usize>, usize),
) {
    let tiles = 2 * pairs.start..key_tiles.min(2 * pairs.end);
    let last = depth_pairs - (chunks - 1) * TILE;
    for r0 in (0..TILE * (1 + usize::from(two))).step_by(ROWS) {
        for (t0, nt) in even_groups(tiles.clone()) {
            let rows = Rows {
                a: std::array::from_fn(|r| queries.add((r0 + r) * qstride).cast()),
                c: std::array::from_fn(|r| scores.add((r0 + r) * KEY_BLOCK + t0 * TILE)),
            };
            let b = |ch: usize, t: usize| keys.as_ptr().add((t0 + t) * chunks + ch);
            blocks(&rows, b, (chunks, last, nt), true);
        }
    }
}

/// [`super::tiles::weighted_sums`] by dot products, over the block's `keys` only (the weights past them are
/// zeros to the chunk's end).
///
/// # Safety
/// The CPU has AVX-512F and AVX512-BF16; otherwise as [`super::tiles::weighted_sums`], with `keys` in the last of
/// the `key_chunks`.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn weighted_sums(
    weights: *const half::bf16,
    values: &[Tile],
    (key_chunks, dim_tiles, two, fresh): (usize, usize, bool, bool),
    (acc, astride): (*mut f32, usize),
    keys: usize,
) {
    let last = (keys - (key_chunks - 1) * CHUNK).div_ceil(2);
    for r0 in (0..TILE * (1 + usize::from(two))).step_by(ROWS) {
        for (t0, nt) in even_groups(0..dim_tiles) {
            let rows = Rows {
                a: std::array::from_fn(|r| weights.add((r0 + r) * KEY_BLOCK).cast()),
                c: std::array::from_fn(|r| acc.add((r0 + r) * astride + t0 * TILE)),
            };
            let b = |ch: usize, t: usize| values.as_ptr().add(ch * dim_tiles + t0 + t);
            blocks(&rows, b, (key_chunks, last, nt), fresh);
        }
    }
}

const _: () = assert!(
    CHUNK == 2 * TILE,
    "a chunk's depth pairs fill a tile's rows"
);
