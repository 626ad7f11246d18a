//! The bf16 GEMM of row segments on AMX tiles (Intel Xeon from Sapphire Rapids on): `c = a · wᵀ` for a
//! row-major bf16 `a` (m × k) and a linear layer's bf16 weight `w` (n × k), products summed in f32.
//!
//! `tdpbf16ps` adds to a 16 × 16 f32 tile the product of a 16 × 32 bf16 tile (16 rows of 32 depths) with a
//! 32 × 16 one stored as 16 rows of 16 depth pairs. The weight is the first operand, loaded straight from `w`
//! (each of its rows is contiguous in depth, which is the first operand's layout: no packing, no copy); the
//! activation is the second, packed once per call ([`pack_a`]). A register block is two weight tiles by two
//! activation tiles into four accumulators (32 weight rows × 32 rows of `a`), stored transposed into `c`. Which
//! weight tiles a block pairs and where its sums go is a [`Plan`]: the plain product here, the SwiGLU of a gate/up
//! projection in [`swiglu`].
//!
//! Each output is one f32 chain over `k`'s chunks of 32 depths in order from zero, rounded to bf16 once when
//! stored; past `k` and past `m` or `n` the tiles hold zeros. Nothing depends on `m`, on the row's place, on
//! `n` or on the thread count, so each row's bits are the same whatever else is multiplied with it.

use std::sync::OnceLock;

use std::mem::MaybeUninit;

use half::bf16;
use rayon::prelude::*;

pub use held::{gemm_nt_held, TileWeight};
pub use swiglu::gemm_nt_swiglu;

use super::SharedOut;
use crate::ops::cpu_data::{written, zeroed, ZeroBytes};

/// Rows of every tile: weight rows of a first operand, depth pairs of a second one, rows of an accumulator.
const TILE: usize = 16;
/// Depths per tile product (64 bytes of bf16 per tile row).
const CHUNK: usize = 32;
/// u32 values (depth pairs or f32 sums) per tile.
const TILE_LEN: usize = TILE * TILE;
/// Bytes of packed activation a task keeps in the core's L2 cache (its rows are read once per weight block).
const A_BYTES_PER_TASK: usize = 1 << 20;

/// Whether this CPU and OS run the kernel: AMX-TILE and AMX-BF16 reported by `cpuid`, the AVX-512 features of
/// [`super::supported`] (the row kernel beside it, and the stores), and Linux granting the process the tile data
/// state (`arch_prctl`, asked once).
pub fn supported() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| super::supported() && detect())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    /// `arch_prctl` request for permission to use an extended state component.
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    /// The AMX tile data state component.
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
    let (amx_bf16, amx_tile) = (leaf7.edx >> 22 & 1 == 1, leaf7.edx >> 24 & 1 == 1);
    // SAFETY: arch_prctl with these arguments only changes the process's permitted state components.
    amx_bf16
        && amx_tile
        && unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        } == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

/// Load on this thread the tile configuration of every AMX kernel here: palette 1, eight tiles of 16 rows of 64
/// bytes.
///
/// # Safety
/// [`supported`] holds.
pub(crate) unsafe fn configure_tiles() {
    // SAFETY: the caller checked supported().
    unsafe { tiles::configure() }
}

/// Return this thread's tiles to their initial state.
///
/// # Safety
/// [`supported`] holds.
pub(crate) unsafe fn release_tiles() {
    // SAFETY: the caller checked supported().
    unsafe { tiles::release() }
}

#[cfg(target_arch = "x86_64")]
pub(super) use tiles::store_sums;
#[cfg(target_arch = "x86_64")]
pub(crate) use tiles::{gather_pairs, round16_bf16, widen16};

/// One tile's data: 16 rows of 64 bytes, aligned to a cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Tile(pub(crate) [u32; TILE_LEN]);

pub(crate) const ZERO_TILE: Tile = Tile([0; TILE_LEN]);

// SAFETY: a tile of zero bytes is a tile of zeros.
unsafe impl ZeroBytes for Tile {}

/// `c = a · wᵀ (+ bias)` for `a` (m × k) and `w` (n × k), both row-major bf16, and `bias` ([`super::Kernel`]),
/// into `c` (m × n, row-major, overwritten),
/// `dims` = (m, k, n), on rayon's threads. Panics where the CPU lacks AMX ([`supported`]) or a slice is
/// shorter than its shape.
pub fn gemm_nt(
    a: &[bf16],
    w: &[bf16],
    bias: &[f32],
    dims: (usize, usize, usize),
    c: &mut [MaybeUninit<bf16>],
) {
    let (m, k, n) = dims;
    assert!(supported(), "the AMX bf16 GEMM needs AMX-BF16");
    assert!(a.len() >= m * k && w.len() >= n * k && c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        super::no_depth(c, (m, n), bias);
        return;
    }
    let plan = Linear {
        weights: Weights::new(w, n, k),
        out: SharedOut::new(c, n, bias),
    };
    run(&plan, a, (m, k));
}

/// The products of `a` (m × k, k > 0) with a plan's weight tiles, on rayon's threads: `a` packed once, then the
/// [`schedule`]'s tasks.
fn run(plan: &impl Plan, a: &[bf16], (m, k): (usize, usize)) {
    let chunks = k.div_ceil(CHUNK);
    let packed = pack_a(a, m, k);
    schedule((m, chunks), plan.pairs(), |rows, wps| {
        // SAFETY: the callers checked supported(); the task writes only its own blocks' outputs.
        unsafe { task(plan, &packed, (m, chunks), rows, wps) }
    });
}

/// Tasks over `m` rows of `chunks` chunks by `weight_pairs` pairs of weight tiles, on rayon's threads: groups of
/// row-tile pairs (as many as fit A_BYTES_PER_TASK) by groups of weight-tile pairs, at least four per thread where
/// the product allows; `task(row pairs, weight pairs)`.
fn schedule(
    (m, chunks): (usize, usize),
    weight_pairs: usize,
    task: impl Fn(std::ops::Range<usize>, std::ops::Range<usize>) + Sync,
) {
    let row_pairs = m.div_ceil(2 * TILE);
    let per_rows = (A_BYTES_PER_TASK / (chunks * 2 * TILE_LEN * 4)).clamp(1, 8);
    let row_tasks = row_pairs.div_ceil(per_rows);
    let want = 4 * rayon::current_num_threads();
    let per_weights = weight_pairs.div_ceil(want.div_ceil(row_tasks)).max(1);
    let tasks: Vec<(usize, usize)> = (0..row_tasks)
        .flat_map(|t| (0..weight_pairs).step_by(per_weights).map(move |g| (t, g)))
        .collect();
    tasks.into_par_iter().for_each(|(t, g0)| {
        let rows = t * per_rows..row_pairs.min((t + 1) * per_rows);
        task(rows, g0..weight_pairs.min(g0 + per_weights));
    });
}

/// What a GEMM multiplies `a` by and where each register block's sums go: the register blocks of a task are
/// pairs of weight tiles (`pairs` of them across the output's columns) by pairs of row tiles.
trait Plan: Sync {
    /// Pairs of weight tiles.
    fn pairs(&self) -> usize;
    /// Weight tiles in pair `wp`: 1 or 2.
    fn tiles_in(&self, wp: usize) -> usize;
    /// The address and row stride (bytes) of chunk `q` of weight tile `t` of pair `wp`.
    fn chunk(&self, wp: usize, t: usize, q: usize) -> (*const u8, usize);
    /// Write the sums of pair `wp` by row tiles `rt` (the second where `nr` is 2) of `a`'s `m` rows:
    /// `sums[2t + r]` is weight tile `t` by row tile `r`.
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW and VL; no other task writes these outputs.
    unsafe fn store(&self, wp: usize, rows: ([usize; 2], usize), sums: &[Tile; 4], m: usize);
}

/// The plain product: weight tiles `2wp` and `2wp + 1` of `w`, the sums (plus the bias) rounded into `out`.
struct Linear<'a> {
    weights: Weights<'a>,
    out: SharedOut,
}

impl Plan for Linear<'_> {
    fn pairs(&self) -> usize {
        self.weights.tiles.div_ceil(2)
    }

    fn tiles_in(&self, wp: usize) -> usize {
        (self.weights.tiles - 2 * wp).min(2)
    }

    fn chunk(&self, wp: usize, t: usize, q: usize) -> (*const u8, usize) {
        self.weights.chunk(2 * wp + t, q)
    }

    unsafe fn store(&self, wp: usize, (rt, nr): ([usize; 2], usize), sums: &[Tile; 4], m: usize) {
        let n = self.out.n;
        for t in 0..self.tiles_in(wp) {
            for (r, &tile) in rt.iter().enumerate().take(nr) {
                let (i0, j0) = (tile * TILE, (2 * wp + t) * TILE);
                let part = (TILE.min(m - i0), TILE.min(n - j0));
                // SAFETY: the tile's rows and columns lie inside c; this task alone writes them.
                unsafe { tiles::store_sums(&sums[2 * t + r], &self.out, (i0, j0), part, true) };
            }
        }
    }
}

/// The rows of `a` (m × k) as tiles of 16 rows by 32 depths: tile `(r, q)` (row tile `r`, chunk `q`) is
/// `packed[r · chunks + q]`, its row `p` holding depth pair `p` of the chunk for each of the 16 rows, depth
/// `2p` in the low half of the 32-bit value and `2p + 1` in the high half (the order `tdpbf16ps` pairs them
/// in); zeros past `k` and for rows past `m`.
pub(super) fn pack_a(a: &[bf16], m: usize, k: usize) -> Vec<Tile> {
    let chunks = k.div_ceil(CHUNK);
    let fill = |packed: &mut [MaybeUninit<Tile>]| {
        packed
            .par_chunks_mut(chunks)
            .enumerate()
            .for_each(|(rt, tiles)| pack_row_tile(a, (m, k), rt, tiles))
    };
    // SAFETY: every row tile's chunks are written by its task.
    unsafe { written(m.div_ceil(TILE) * chunks, fill) }
}

/// Row tile `rt` of [`pack_a`] into its fresh `tiles` (one per chunk), every one of them written: whole chunks of
/// 16 rows gathered, the rest zeroed, then filled.
fn pack_row_tile(a: &[bf16], (m, k): (usize, usize), rt: usize, tiles: &mut [MaybeUninit<Tile>]) {
    let rows = TILE.min(m - rt * TILE);
    let whole = match rows == TILE && k.is_multiple_of(2) {
        // SAFETY: supported() (the caller's check) includes AVX-512F; 16 rows of k values from rt · 16,
        // pairs up to k / 2.
        true => unsafe {
            tiles::gather_pairs(&a[rt * TILE * k..][..TILE * k], k, k / CHUNK * TILE, tiles);
            k / CHUNK
        },
        false => 0,
    };
    let rest = zeroed(&mut tiles[whole..]);
    if rest.is_empty() {
        return;
    }
    for r in 0..rows {
        let row = &a[(rt * TILE + r) * k..][..k];
        for (q, pair) in row.chunks(2).enumerate().skip(whole * TILE) {
            let hi = pair.get(1).map_or(0, |v| v.to_bits() as u32);
            rest[q / TILE - whole].0[(q % TILE) * TILE + r] = pair[0].to_bits() as u32 | hi << 16;
        }
    }
}

/// Where the tile products read the weight: its full chunks in place (row stride `2k` bytes), the last
/// partial chunk of each weight tile and the rows of a partial last weight tile from zero-padded copies.
struct Weights<'a> {
    w: &'a [bf16],
    k: usize,
    /// Full 32-depth chunks per row.
    full: usize,
    /// Weight tiles (16 rows each).
    tiles: usize,
    /// The last weight tile's rows padded with zero rows to 16 (rows of `k` values), where `n % 16 != 0`.
    last: Vec<bf16>,
    /// For each weight tile, its depths past `full · 32` padded with zeros to one chunk, where `k % 32 != 0`.
    tails: Vec<Tile>,
}

impl<'a> Weights<'a> {
    fn new(w: &'a [bf16], n: usize, k: usize) -> Self {
        let tiles = n.div_ceil(TILE);
        let last = match n % TILE {
            0 => Vec::new(),
            rows => {
                let mut last = vec![bf16::ZERO; TILE * k];
                last[..rows * k].copy_from_slice(&w[(n - rows) * k..n * k]);
                last
            }
        };
        let full = k / CHUNK;
        let tails = match k % CHUNK {
            0 => Vec::new(),
            rest => (0..tiles)
                .map(|t| {
                    let mut tile = ZERO_TILE;
                    for r in 0..TILE.min(n - t * TILE) {
                        let row = &w[(t * TILE + r) * k + full * CHUNK..][..rest];
                        for (q, pair) in row.chunks(2).enumerate() {
                            let hi = pair.get(1).map_or(0, |v| v.to_bits() as u32);
                            tile.0[r * TILE + q] = pair[0].to_bits() as u32 | hi << 16;
                        }
                    }
                    tile
                })
                .collect(),
        };
        Self {
            w,
            k,
            full,
            tiles,
            last,
            tails,
        }
    }

    /// The address and row stride (bytes) of weight tile `t`'s chunk `q`, `q` < the chunk count.
    fn chunk(&self, t: usize, q: usize) -> (*const u8, usize) {
        if q == self.full {
            return (self.tails[t].0.as_ptr().cast(), 64);
        }
        let rows = match t + 1 == self.tiles && !self.last.is_empty() {
            true => &self.last[..],
            false => &self.w[t * TILE * self.k..],
        };
        (rows[q * CHUNK..].as_ptr().cast(), 2 * self.k)
    }
}

/// The products of row-tile pairs `rows` with the plan's weight-tile pairs `wps`, stored by the plan.
///
/// # Safety
/// The CPU has AMX-BF16 and the process its tile state ([`supported`]); no other task writes these outputs.
unsafe fn task(
    plan: &impl Plan,
    packed: &[Tile],
    (m, chunks): (usize, usize),
    rows: std::ops::Range<usize>,
    wps: std::ops::Range<usize>,
) {
    let block =
        |wp: usize, (rt, nr): ([usize; 2], usize), sums: &mut [Tile; 4], overlapped: &dyn Fn()| {
            let a = rt.map(|r| packed[r * chunks..].as_ptr());
            // SAFETY: the tiles are configured (pipelined); the block's addresses read whole tiles.
            unsafe {
                tiles::block(
                    chunks,
                    |t, q| plan.chunk(wp, t, q),
                    a,
                    (plan.tiles_in(wp), nr),
                    sums,
                    overlapped,
                )
            }
        };
    // SAFETY: the caller's guarantees; the plan's stores write this task's outputs alone.
    unsafe {
        pipelined(m, (rows, wps), block, |wp, rows, sums| {
            plan.store(wp, rows, sums, m)
        })
    };
}

/// The register blocks of row-tile pairs `rows` by weight pairs `wps` (weight pairs outer) on this thread's tiles:
/// `block(wp, (row tiles, their count), sums, overlapped)` computes a block's sums, running `overlapped` while its
/// products are under way, and `store(wp, (row tiles, count), sums)` writes a block's sums out. Each block's sums
/// are stored while the tiles compute the next block (two sets of sums, the previous block's stores as the next
/// one's `overlapped`), so that the vector unit's rounding and stores overlap the tile products instead of holding
/// them up.
///
/// # Safety
/// The CPU has AMX-BF16 and the process its tile state ([`supported`]); `block` reads whole tiles and `store`
/// writes outputs no other task writes.
unsafe fn pipelined(
    m: usize,
    (rows, wps): (std::ops::Range<usize>, std::ops::Range<usize>),
    block: impl Fn(usize, ([usize; 2], usize), &mut [Tile; 4], &dyn Fn()),
    store: impl Fn(usize, ([usize; 2], usize), &[Tile; 4]),
) {
    let row_tiles = m.div_ceil(TILE);
    let mut sums = [[ZERO_TILE; 4]; 2];
    // The block whose sums wait to be stored: its set of sums, weight pair and row tiles.
    let mut previous: Option<(usize, usize, ([usize; 2], usize))> = None;
    tiles::configure();
    let blocks = wps.flat_map(|wp| rows.clone().map(move |rp| (wp, rp)));
    for (i, (wp, rp)) in blocks.enumerate() {
        let rt = [2 * rp, (2 * rp + 1).min(row_tiles - 1)];
        let nr = if 2 * rp + 1 < row_tiles { 2 } else { 1 };
        let [even, odd] = &mut sums;
        let (now, before) = match i % 2 {
            0 => (even, &*odd),
            _ => (odd, &*even),
        };
        let overlapped = || {
            if let Some((_, wp, rows)) = previous {
                store(wp, rows, before);
            }
        };
        block(wp, (rt, nr), now, &overlapped);
        previous = Some((i % 2, wp, (rt, nr)));
    }
    tiles::release();
    if let Some((set, wp, rows)) = previous {
        store(wp, rows, &sums[set]);
    }
}

mod held;
mod swiglu;
/// The AMX instructions, as inline assembly (the tile registers are not the compiler's).
#[cfg(target_arch = "x86_64")]
mod tiles;

#[cfg(not(target_arch = "x86_64"))]
#[path = "no_tiles.rs"]
mod tiles;

#[cfg(test)]
mod tests {
    use super::super::check::{self, matches_reference, rows_stand_alone};
    use super::*;

    /// True, with a line saying so, where this CPU or OS runs no AMX: the test then skips.
    fn skip() -> bool {
        let skip = check::skip() || !supported();
        if skip {
            eprintln!("skipped: no AMX tiles here");
        }
        skip
    }

    #[test]
    fn matches_a_float64_reference_on_partial_tiles_and_odd_depths() {
        if skip() {
            return;
        }
        // Partial row and weight tiles and pairs, depths below, at and past a chunk (odd: a lone last depth),
        // several tasks, k = 0.
        matches_reference(
            &gemm_nt,
            &[
                (1, 1, 1),
                (5, 7, 15),
                (16, 32, 16),
                (33, 31, 13),
                (32, 64, 48),
                (150, 97, 29),
                (3, 20, 200),
                (64, 1176, 40),
                (4, 0, 9),
            ],
        );
    }

    #[test]
    fn a_rows_bits_depend_neither_on_the_other_rows_nor_on_the_threads() {
        if skip() {
            return;
        }
        // Rows alone at other places in the tiles and tasks, across a pair's end, one row, and all rows on one
        // thread; k spans several chunks and a tail.
        let parts = [100..111, 29..35, 7..8];
        rows_stand_alone(&gemm_nt, (2 * 2 * TILE * 3 + 9, 301, 70), &parts);
    }
}
