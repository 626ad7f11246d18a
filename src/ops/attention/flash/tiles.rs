//! The tile products, as inline assembly (the tile registers are not the compiler's).
use std::arch::asm;

use super::{Tile, CHUNK, KEY_BLOCK, TILE};

macro_rules! load {
    ($tmm:literal, $p:expr, $stride:expr) => {
        asm!(concat!("tileloadd ", $tmm, ", [{p} + {s}*1]"), p = in(reg) $p, s = in(reg) $stride,
             options(nostack, readonly))
    };
}
macro_rules! store {
    ($tmm:literal, $p:expr, $stride:expr) => {
        asm!(concat!("tilestored [{p} + {s}*1], ", $tmm), p = in(reg) $p, s = in(reg) $stride,
             options(nostack))
    };
}
macro_rules! dot {
    ($c:literal, $a:literal, $b:literal) => {
        asm!(
            concat!("tdpbf16ps ", $c, ", ", $a, ", ", $b),
            options(nostack, nomem)
        )
    };
}
macro_rules! zero {
    ($($tmm:literal),*) => {
        $(asm!(concat!("tilezero ", $tmm), options(nostack, nomem));)*
    };
}

/// Scores of the first 16 queries (and of the next 16 where `two`) against pairs `pairs` of `key_tiles` 16-key
/// tiles (`keys`, chunk-major per tile; pair `p` is tiles `2p` and `2p + 1`, the last one alone where
/// `key_tiles` is odd), into `scores` (rows of [`KEY_BLOCK`] f32): tiles 0–3 accumulating, 4–5 the queries, 6–7
/// the keys.
///
/// # Safety
/// The tiles are configured on this thread; `queries` holds 32 rows of `qstride` bf16 (`chunks` · 32 of
/// them), `keys` `key_tiles` · `chunks` tiles, `scores` 32 rows of [`KEY_BLOCK`].
pub(super) unsafe fn scores(
    (queries, qstride): (*const half::bf16, usize),
    keys: &[Tile],
    (key_tiles, chunks, two): (usize, usize, bool),
    scores: *mut f32,
    pairs: std::ops::Range<usize>,
) {
    let (qs, ss) = (2 * qstride, 4 * KEY_BLOCK);
    let q1 = queries.add(TILE * qstride);
    for t in pairs.map(|p| 2 * p) {
        let pair = t + 1 < key_tiles;
        zero!("tmm0", "tmm1", "tmm2", "tmm3");
        for c in 0..chunks {
            load!("tmm4", queries.add(c * CHUNK), qs);
            load!("tmm6", keys[t * chunks + c].0.as_ptr(), 64usize);
            dot!("tmm0", "tmm4", "tmm6");
            if two {
                load!("tmm5", q1.add(c * CHUNK), qs);
                dot!("tmm2", "tmm5", "tmm6");
            }
            if pair {
                load!("tmm7", keys[(t + 1) * chunks + c].0.as_ptr(), 64usize);
                dot!("tmm1", "tmm4", "tmm7");
                if two {
                    dot!("tmm3", "tmm5", "tmm7");
                }
            }
        }
        let (s0, s1) = (
            scores.add(t * TILE),
            scores.add(TILE * KEY_BLOCK + t * TILE),
        );
        store!("tmm0", s0, ss);
        if two {
            store!("tmm2", s1, ss);
        }
        if pair {
            store!("tmm1", s0.add(TILE), ss);
            if two {
                store!("tmm3", s1.add(TILE), ss);
            }
        }
    }
}

/// `acc += weights · values` for the first 16 queries (and the next 16 where `two`), per query tile up to four
/// dimension tiles at a time, `acc` zeroed first where `fresh`: `weights` rows of [`KEY_BLOCK`] bf16 over `key_chunks` chunks of 32 keys,
/// `values` the chunks' tiles (`dim_tiles` per chunk), `acc` rows of `astride` f32. Tiles 0–3 accumulate, 4
/// holds the weights, 5–7 the values.
///
/// # Safety
/// The tiles are configured on this thread; the pointers hold those rows, `values` `key_chunks` ·
/// `dim_tiles` tiles.
pub(super) unsafe fn weighted_sums(
    weights: *const half::bf16,
    values: &[Tile],
    (key_chunks, dim_tiles, two, fresh): (usize, usize, bool, bool),
    (acc, astride): (*mut f32, usize),
) {
    let (ws, as_) = (2 * KEY_BLOCK, 4 * astride);
    let groups = dim_tiles.div_ceil(4);
    for u in 0..(1 + usize::from(two)) * groups {
        let (qt, t0) = (u / groups, 4 * (u % groups));
        let (w, a) = (
            weights.add(qt * TILE * KEY_BLOCK),
            acc.add(qt * TILE * astride),
        );
        let nt = 4.min(dim_tiles - t0);
        let at = |t: usize| a.add((t0 + t) * TILE);
        let vt = |c: usize, t: usize| values[c * dim_tiles + t0 + t].0.as_ptr();
        if fresh {
            zero!("tmm0", "tmm1", "tmm2", "tmm3");
        } else {
            load!("tmm0", at(0), as_);
            if nt > 1 {
                load!("tmm1", at(1), as_);
            }
            if nt > 2 {
                load!("tmm2", at(2), as_);
            }
            if nt > 3 {
                load!("tmm3", at(3), as_);
            }
        }
        for c in 0..key_chunks {
            load!("tmm4", w.add(c * CHUNK), ws);
            load!("tmm5", vt(c, 0), 64usize);
            dot!("tmm0", "tmm4", "tmm5");
            if nt > 1 {
                load!("tmm6", vt(c, 1), 64usize);
                dot!("tmm1", "tmm4", "tmm6");
            }
            if nt > 2 {
                load!("tmm7", vt(c, 2), 64usize);
                dot!("tmm2", "tmm4", "tmm7");
            }
            if nt > 3 {
                load!("tmm5", vt(c, 3), 64usize);
                dot!("tmm3", "tmm4", "tmm5");
            }
        }
        store!("tmm0", at(0), as_);
        if nt > 1 {
            store!("tmm1", at(1), as_);
        }
        if nt > 2 {
            store!("tmm2", at(2), as_);
        }
        if nt > 3 {
            store!("tmm3", at(3), as_);
        }
    }
}
