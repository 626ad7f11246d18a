//! A linear layer's weight held from load in the layout of the tiles' second operand, for weights that only row
//! segments multiply (the vision tower's). The product then runs the other way round from [`super::gemm_nt`]:
//! the activation's rows are the first operand (16 rows of 32 depths, copied as they lie, no pairing), the weight
//! the second (its depth pairs by 16 output columns, laid out once at load), and each accumulator holds 16 rows by
//! 16 output columns in the output's own order, so its store needs no transpose. Each product `a_i · w_j` is
//! exact in f32 and the tile sums them in the same order whichever operand comes first, so every output has the
//! bits of the in-place kernel.

use std::mem::MaybeUninit;

use half::bf16;
use rayon::prelude::*;

use super::{
    pack_a, pipelined, schedule, supported, tiles, SharedOut, Tile, CHUNK, TILE, ZERO_TILE,
};
use crate::ops::cpu_data::written;

/// A bf16 weight (n × k) as second-operand tiles, in [`pack_a`]'s layout (row `p` of a tile holds depth pair `p`
/// of its chunk for 16 output columns), paired: a plain weight pairs its column tiles 2wp and 2wp + 1 (rows 32wp ..
/// of the weight); a gate-up weight [g | u] (2I rows) pairs gate tile wp with up tile wp (rows 16wp .. of each
/// half), as the SwiGLU multiplies them.
pub struct TileWeight {
    /// The packed weight, or its gate half and its up half.
    parts: Vec<Vec<Tile>>,
    n: usize,
    k: usize,
    chunks: usize,
    pairs: usize,
    /// Tiles of the last pair (1 where a plain weight has an odd number of tiles).
    last_tiles: usize,
    gate_up: bool,
}

impl std::fmt::Debug for TileWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TileWeight")
            .field("n", &self.n)
            .field("k", &self.k)
            .field("gate_up", &self.gate_up)
            .finish()
    }
}

impl TileWeight {
    /// `w` (n × k, row-major) in tiles, paired as a plain weight or (`gate_up`) as a gate-up weight. Panics where
    /// `w` is shorter than its shape, `k` is 0, or a gate-up weight has an odd number of rows.
    pub fn new(w: &[bf16], (n, k): (usize, usize), gate_up: bool) -> Self {
        assert!(
            w.len() >= n * k && k > 0,
            "a weight of {n} x {k} from {}",
            w.len()
        );
        assert!(
            !gate_up || n.is_multiple_of(2),
            "a gate-up weight of {n} rows"
        );
        assert!(supported(), "the AMX bf16 GEMM needs AMX-BF16");
        let tile_count = n.div_ceil(TILE);
        let (parts, pairs, last_tiles) = match gate_up {
            true => {
                let (gate, up) = w[..n * k].split_at(n / 2 * k);
                let parts = vec![pack_a(gate, n / 2, k), pack_a(up, n / 2, k)];
                (parts, (n / 2).div_ceil(TILE), 2)
            }
            false => (
                vec![pack_a(w, n, k)],
                tile_count.div_ceil(2),
                2 - tile_count % 2,
            ),
        };
        Self {
            parts,
            n,
            k,
            chunks: k.div_ceil(CHUNK),
            pairs,
            last_tiles,
            gate_up,
        }
    }

    /// The weight's rows and depths (n, k).
    pub fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// Whether it is paired as a gate-up weight (its product is the SwiGLU: [`gemm_nt_held`]).
    pub fn gate_up(&self) -> bool {
        self.gate_up
    }

    /// Columns of its product: n, or I = n / 2 for a gate-up weight.
    pub fn out_cols(&self) -> usize {
        match self.gate_up {
            true => self.n / 2,
            false => self.n,
        }
    }

    /// Tiles in pair `wp`: 1 or 2.
    fn tiles_in(&self, wp: usize) -> usize {
        match wp + 1 == self.pairs {
            true => self.last_tiles,
            false => 2,
        }
    }

    /// Tile `t` of pair `wp` at chunk 0 (its chunks follow it; past the last tile of a plain weight, the end of
    /// its tiles, never read).
    fn tile(&self, wp: usize, t: usize) -> *const Tile {
        match self.gate_up {
            true => self.parts[t][wp * self.chunks..].as_ptr(),
            false => self.parts[0][(2 * wp + t) * self.chunks..].as_ptr(),
        }
    }
}

/// The rows of `a` (m × k) as first-operand tiles: tile `(r, q)` (row tile `r`, chunk `q`) is `packed[r · chunks
/// + q]`, its row `i` the 32 depths of the chunk of row `16r + i` as they lie; zeros past `k` and past `m`.
fn pack_rows(a: &[bf16], m: usize, k: usize) -> Vec<Tile> {
    let chunks = k.div_ceil(CHUNK);
    let fill = |packed: &mut [MaybeUninit<Tile>]| {
        packed
            .par_chunks_mut(chunks)
            .enumerate()
            .for_each(|(rt, tiles)| {
                let rows = TILE.min(m - rt * TILE);
                for (q, slot) in tiles.iter_mut().enumerate() {
                    let (d0, d1) = (q * CHUNK, k.min((q + 1) * CHUNK));
                    let mut tile = ZERO_TILE;
                    for i in 0..rows {
                        let src = &a[(rt * TILE + i) * k + d0..][..d1 - d0];
                        // SAFETY: a tile row is 64 bytes: up to 32 bf16 values, pairs packed low depth first as they
                        // lie in memory (little-endian).
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                src.as_ptr(),
                                tile.0.as_mut_ptr().add(i * TILE).cast::<bf16>(),
                                src.len(),
                            )
                        };
                    }
                    slot.write(tile);
                }
            })
    };
    // SAFETY: every row tile's chunks are written by its task.
    unsafe { written(m.div_ceil(TILE) * chunks, fill) }
}

/// `a · wᵀ (+ bias)` for the held weight `w` (n × k) and `a` (m × k, row-major bf16) into `c` (m × n), or for a
/// gate-up weight the SwiGLU `silu(a · gᵀ + b_g) · (a · uᵀ + b_u)` into `c` (m × I), `bias` holding n values or
/// none (empty): the bits of [`super::gemm_nt`] and [`super::gemm_nt_swiglu`] on the weight in place. With a
/// `residual` (m × n, plain products only) each rounded output `y` becomes `r + y` rounded again: the bits of the
/// residual add after the product. Panics where the CPU lacks AMX ([`supported`]), a slice is shorter than its
/// shape, or a gate-up product has a residual.
pub fn gemm_nt_held(
    a: &[bf16],
    w: &TileWeight,
    (bias, residual): (&[f32], Option<&[bf16]>),
    m: usize,
    c: &mut [MaybeUninit<bf16>],
) {
    assert!(supported(), "the AMX bf16 GEMM needs AMX-BF16");
    let (n, k, cols) = (w.n, w.k, w.out_cols());
    assert!(a.len() >= m * k && c.len() >= m * cols);
    assert!(
        bias.is_empty() || bias.len() == n,
        "bias of {} for {n}",
        bias.len()
    );
    if m == 0 || cols == 0 {
        return;
    }
    let packed = pack_rows(a, m, k);
    let (out, halves) = match w.gate_up {
        true => (
            SharedOut::new(c, cols, &[]),
            (!bias.is_empty()).then(|| bias.split_at(cols)),
        ),
        false => (SharedOut::new(c, n, bias), None),
    };
    let out = match residual {
        Some(r) => {
            assert!(!w.gate_up, "a residual after a gate-up product");
            out.with_residual(r, m)
        }
        None => out,
    };
    let job = Job {
        w,
        packed: &packed,
        m,
        out: &out,
        halves,
    };
    schedule((m, w.chunks), w.pairs, |rows, wps| {
        // SAFETY: supported() holds; the task writes only its own blocks' outputs.
        unsafe { job.task(rows, wps) }
    });
}

/// One held product's inputs and output.
struct Job<'a> {
    w: &'a TileWeight,
    packed: &'a [Tile],
    m: usize,
    out: &'a SharedOut,
    /// A gate-up weight's bias halves (I values each), where it has one.
    halves: Option<(&'a [f32], &'a [f32])>,
}

impl Job<'_> {
    /// The products of row-tile pairs `rows` with the weight pairs `wps`, each register block's sums stored while
    /// the tiles compute the next block ([`pipelined`]).
    ///
    /// # Safety
    /// The CPU has AMX-BF16 and the process its tile state; no other task writes these outputs.
    unsafe fn task(&self, rows: std::ops::Range<usize>, wps: std::ops::Range<usize>) {
        let chunks = self.w.chunks;
        let block = |wp: usize,
                     (rt, nr): ([usize; 2], usize),
                     sums: &mut [Tile; 4],
                     overlapped: &dyn Fn()| {
            let weight = [self.w.tile(wp, 0), self.w.tile(wp, 1)];
            // SAFETY: the tiles are configured (pipelined); the addresses read whole tiles of the packed rows and
            // of the weight (a pair's missing second tile is never read).
            unsafe {
                tiles::block(
                    chunks,
                    |t, q| (self.packed[rt[t] * chunks + q].0.as_ptr().cast(), 64),
                    weight,
                    (nr, self.w.tiles_in(wp)),
                    sums,
                    overlapped,
                )
            }
        };
        // SAFETY: the caller's guarantees; the stores write this task's outputs alone.
        unsafe {
            pipelined(self.m, (rows, wps), block, |wp, rows, sums| {
                self.store(wp, rows, sums)
            })
        };
    }

    /// Write the sums of weight pair `wp` by row tiles `rt` (`nr` of them): `sums[2t + r]` is row tile `t` by
    /// weight tile `r`, rows by output columns.
    ///
    /// # Safety
    /// The CPU has what the stores need ([`supported`]); no other task writes these outputs.
    unsafe fn store(&self, wp: usize, (rt, nr): ([usize; 2], usize), sums: &[Tile; 4]) {
        let n = self.out.n;
        for (t, &tile) in rt.iter().enumerate().take(nr) {
            let i0 = tile * TILE;
            let rows = TILE.min(self.m - i0);
            match self.w.gate_up {
                true => {
                    let j0 = wp * TILE;
                    let bias = self.halves.map(|(g, u)| (&g[j0..], &u[j0..]));
                    let part = (rows, TILE.min(n - j0));
                    let pair = [&sums[2 * t], &sums[2 * t + 1]];
                    // SAFETY: the tile's rows and columns lie inside c; this task alone writes them.
                    unsafe { tiles::store_swiglu(pair, bias, self.out, (i0, j0), part, false) };
                }
                false => {
                    for r in 0..self.w.tiles_in(wp) {
                        let j0 = (2 * wp + r) * TILE;
                        let part = (rows, TILE.min(n - j0));
                        // SAFETY: as above.
                        unsafe {
                            tiles::store_sums(&sums[2 * t + r], self.out, (i0, j0), part, false)
                        };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::check;
    use super::*;

    /// The held weight gives the in-place kernels' bits: plain and gate-up pairs, with and without a bias, over
    /// partial row, weight and pair tiles, depths below, at and past a chunk (odd: a lone last depth), several tasks.
    #[test]
    fn gives_the_bits_of_the_weight_in_place() {
        if check::skip() || !supported() {
            eprintln!("skipped: no AMX tiles here");
            return;
        }
        let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (m, k, n) in [
            (1, 1, 2),
            (5, 7, 30),
            (33, 31, 26),
            (70, 96, 32),
            (150, 97, 58),
            (64, 1280, 106),
            (3, 20, 200),
        ] {
            let (a, w) = (check::values(m * k, 1), check::values(n * k, 2));
            let b: Vec<f32> = check::values(n, 3)
                .iter()
                .map(|v| v.to_f32() * 4.0)
                .collect();
            for bias in [&b[..], &[][..]] {
                for gate_up in [false, true] {
                    let held = TileWeight::new(&w, (n, k), gate_up);
                    let cols = held.out_cols();
                    let (mut want, mut got) =
                        (vec![bf16::NAN; m * cols], vec![bf16::NAN; m * cols]);
                    match gate_up {
                        true => super::super::gemm_nt_swiglu(
                            &a,
                            &w,
                            bias,
                            (m, k, cols),
                            check::storage(&mut want),
                        ),
                        false => super::super::gemm_nt(
                            &a,
                            &w,
                            bias,
                            (m, k, n),
                            check::storage(&mut want),
                        ),
                    }
                    gemm_nt_held(&a, &held, (bias, None), m, check::storage(&mut got));
                    let case = format!(
                        "{m} x {k} x {n}, bias {}, gate-up {gate_up}",
                        !bias.is_empty()
                    );
                    assert_eq!(bits(&got), bits(&want), "{case}");
                    if !gate_up {
                        // The residual in the store: the residual add's bits after the product's.
                        let r = check::values(m * n, 4);
                        let added: Vec<bf16> = r
                            .iter()
                            .zip(&want)
                            .map(|(r, y)| {
                                crate::ops::elementwise::bf16::round(r.to_f32() + y.to_f32())
                            })
                            .collect();
                        gemm_nt_held(&a, &held, (bias, Some(&r)), m, check::storage(&mut got));
                        assert_eq!(bits(&got), bits(&added), "{case}, residual");
                    }
                }
            }
        }
    }

    /// `cargo test --release --lib amx::held::tests::timing -- --ignored --nocapture`: the vision tower's products
    /// at a screenshot's 5,088 patches with the weight in place and held, alternated, best of 5 calls each.
    #[test]
    #[ignore = "a timing run: use --release --ignored --nocapture"]
    fn timing() {
        if check::skip() || !supported() {
            eprintln!("skipped: no AMX tiles here");
            return;
        }
        let best = |f: &mut dyn FnMut()| {
            f();
            (0..5)
                .map(|_| {
                    let t0 = std::time::Instant::now();
                    f();
                    t0.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        for round in 0..2 {
            for (m, k, n, gate_up) in [
                (5088, 1280, 3840, false),
                (5088, 3420, 1280, false),
                (5088, 1280, 6840, true),
            ] {
                let (a, w) = (check::values(m * k, 1), check::values(n * k, 2));
                let held = TileWeight::new(&w, (n, k), gate_up);
                let mut c = vec![bf16::ZERO; m * held.out_cols()];
                let in_place = best(&mut || match gate_up {
                    true => super::super::gemm_nt_swiglu(
                        &a,
                        &w,
                        &[],
                        (m, k, n / 2),
                        check::storage(&mut c),
                    ),
                    false => super::super::gemm_nt(&a, &w, &[], (m, k, n), check::storage(&mut c)),
                });
                let tiles =
                    best(&mut || gemm_nt_held(&a, &held, (&[], None), m, check::storage(&mut c)));
                let rate = |s: f64| 2.0 * (m * k * n) as f64 / s / 1e9;
                eprintln!(
                    "round {round}: {m} x {k} x {n} (gate-up {gate_up}): in place {:.1} ms {:.0} GFLOP/s, held \
                     {:.1} ms {:.0} GFLOP/s",
                    in_place * 1e3,
                    rate(in_place),
                    tiles * 1e3,
                    rate(tiles)
                );
            }
        }
    }
}
