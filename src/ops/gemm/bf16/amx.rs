//! The bf16 GEMM of row segments on AMX tiles (Intel Xeon from Sapphire Rapids on): `c = a · wᵀ` for a
//! row-major bf16 `a` (m × k) and a linear layer's bf16 weight `w` (n × k), products summed in f32.
//!
//! `tdpbf16ps` adds to a 16 × 16 f32 tile the product of a 16 × 32 bf16 tile (16 rows of 32 depths) with a
//! 32 × 16 one stored as 16 rows of 16 depth pairs. The weight is the first operand, loaded straight from `w`
//! (each of its rows is contiguous in depth, which is the first operand's layout: no packing, no copy); the
//! activation is the second, packed once per call ([`pack_a`]). A register block is two weight tiles by two
//! activation tiles into four accumulators (32 weight rows × 32 rows of `a`), stored transposed into `c`.
//!
//! Each output is one f32 chain over `k`'s chunks of 32 depths in order from zero, rounded to bf16 once when
//! stored; past `k` and past `m` or `n` the tiles hold zeros. Nothing depends on `m`, on the row's place, on
//! `n` or on the thread count, so each row's bits are the same whatever else is multiplied with it.

use std::sync::OnceLock;

use half::bf16;
use rayon::prelude::*;

use super::SharedOut;

/// Rows of every tile: weight rows of a first operand, depth pairs of a second one, rows of an accumulator.
const TILE: usize = 16;
/// Depths per tile product (64 bytes of bf16 per tile row).
const CHUNK: usize = 32;
/// u32 values (depth pairs or f32 sums) per tile.
const TILE_LEN: usize = TILE * TILE;
/// Bytes of packed activation a task keeps in the core's L2 cache (its rows are read once per weight block).
const A_BYTES_PER_TASK: usize = 1 << 20;

/// Whether this CPU and OS run the kernel: AMX-TILE and AMX-BF16 reported by `cpuid`, AVX512-BF16 (the row
/// kernel beside it) and AVX-512VL (the stores), and Linux granting the process the tile data state
/// (`arch_prctl`, asked once).
pub fn supported() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| super::supported() && avx512vl() && detect())
}

#[cfg(target_arch = "x86_64")]
fn avx512vl() -> bool {
    is_x86_feature_detected!("avx512vl")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512vl() -> bool {
    false
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
pub(crate) use tiles::{gather_pairs, round16};

/// One tile's data: 16 rows of 64 bytes, aligned to a cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Tile(pub(crate) [u32; TILE_LEN]);

pub(crate) const ZERO_TILE: Tile = Tile([0; TILE_LEN]);

/// `c = a · wᵀ (+ bias)` for `a` (m × k) and `w` (n × k), both row-major bf16, and `bias` ([`super::Kernel`]),
/// into `c` (m × n, row-major, overwritten),
/// `dims` = (m, k, n), on rayon's threads. Panics where the CPU lacks AMX ([`supported`]) or a slice is
/// shorter than its shape.
pub fn gemm_nt(a: &[bf16], w: &[bf16], bias: &[f32], dims: (usize, usize, usize), c: &mut [bf16]) {
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
    let chunks = k.div_ceil(CHUNK);
    let packed = pack_a(a, m, k);
    let weights = Weights::new(w, n, k);
    let out = SharedOut::new(c, n, bias);
    // Tasks: groups of row-tile pairs (as many as fit A_BYTES_PER_TASK) by groups of weight-tile pairs, at
    // least four per thread where the product allows.
    let (row_pairs, weight_pairs) = (m.div_ceil(2 * TILE), n.div_ceil(2 * TILE));
    let per_rows = (A_BYTES_PER_TASK / (chunks * 2 * TILE_LEN * 4)).clamp(1, 8);
    let row_tasks = row_pairs.div_ceil(per_rows);
    let want = 4 * rayon::current_num_threads();
    let per_weights = weight_pairs.div_ceil(want.div_ceil(row_tasks)).max(1);
    let tasks: Vec<(usize, usize)> = (0..row_tasks)
        .flat_map(|t| (0..weight_pairs).step_by(per_weights).map(move |g| (t, g)))
        .collect();
    tasks.into_par_iter().for_each(|(t, g0)| {
        let rows = t * per_rows..row_pairs.min((t + 1) * per_rows);
        let wps = g0..weight_pairs.min(g0 + per_weights);
        // SAFETY: supported() checked above; the block writes only its own (rows, weight rows) of c.
        unsafe { task(&packed, &weights, (m, chunks, n), rows, wps, &out) };
    });
}

/// The rows of `a` (m × k) as tiles of 16 rows by 32 depths: tile `(r, q)` (row tile `r`, chunk `q`) is
/// `packed[r · chunks + q]`, its row `p` holding depth pair `p` of the chunk for each of the 16 rows, depth
/// `2p` in the low half of the 32-bit value and `2p + 1` in the high half (the order `tdpbf16ps` pairs them
/// in); zeros past `k` and for rows past `m`.
fn pack_a(a: &[bf16], m: usize, k: usize) -> Vec<Tile> {
    let chunks = k.div_ceil(CHUNK);
    let mut packed = vec![ZERO_TILE; m.div_ceil(TILE) * chunks];
    packed
        .par_chunks_mut(chunks)
        .enumerate()
        .for_each(|(rt, tiles)| {
            let rows = TILE.min(m - rt * TILE);
            let whole = match rows == TILE && k.is_multiple_of(2) {
                // SAFETY: supported() (the caller's check) includes AVX-512F; 16 rows of k values from rt · 16,
                // pairs up to k / 2.
                true => unsafe {
                    tiles::gather_pairs(
                        &a[rt * TILE * k..][..TILE * k],
                        k,
                        k / CHUNK * TILE,
                        tiles,
                    );
                    k / CHUNK
                },
                false => 0,
            };
            if whole == chunks {
                return;
            }
            for r in 0..rows {
                let row = &a[(rt * TILE + r) * k..][..k];
                for (q, pair) in row.chunks(2).enumerate().skip(whole * TILE) {
                    let hi = pair.get(1).map_or(0, |v| v.to_bits() as u32);
                    tiles[q / TILE].0[(q % TILE) * TILE + r] = pair[0].to_bits() as u32 | hi << 16;
                }
            }
        });
    packed
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

/// The products of row-tile pairs `rows` with weight-tile pairs `wps`, written to `out` (m × n).
///
/// # Safety
/// The CPU has AMX-BF16 and the process its tile state ([`supported`]); no other task writes these outputs.
unsafe fn task(
    packed: &[Tile],
    weights: &Weights<'_>,
    (m, chunks, n): (usize, usize, usize),
    rows: std::ops::Range<usize>,
    wps: std::ops::Range<usize>,
    out: &SharedOut,
) {
    let row_tiles = m.div_ceil(TILE);
    let mut sums = [ZERO_TILE; 4];
    tiles::configure();
    for wp in wps {
        let wt = [2 * wp, (2 * wp + 1).min(weights.tiles - 1)];
        let nw = if 2 * wp + 1 < weights.tiles { 2 } else { 1 };
        for rp in rows.clone() {
            let rt = [2 * rp, (2 * rp + 1).min(row_tiles - 1)];
            let nr = if 2 * rp + 1 < row_tiles { 2 } else { 1 };
            let a = rt.map(|r| packed[r * chunks..].as_ptr());
            tiles::block(
                chunks,
                |t, q| weights.chunk(wt[t], q),
                a,
                (nw, nr),
                &mut sums,
            );
            for (i, sum) in sums.iter().enumerate() {
                let (wi, ri) = (i / 2, i % 2);
                if wi < nw && ri < nr {
                    let (j0, i0) = (wt[wi] * TILE, rt[ri] * TILE);
                    let part = (TILE.min(m - i0), TILE.min(n - j0));
                    // SAFETY: the tile's rows and columns lie inside c; this task alone writes them.
                    unsafe { tiles::store_transposed(sum, out, (i0, j0), part) };
                }
            }
        }
    }
    tiles::release();
}

/// The AMX instructions, as inline assembly (the tile registers are not the compiler's).
#[cfg(target_arch = "x86_64")]
mod tiles {
    use std::arch::asm;

    use super::{Tile, TILE};

    /// Load the tile configuration: palette 1, the eight tiles 16 rows of 64 bytes.
    ///
    /// # Safety
    /// The CPU has AMX and the process its tile state.
    pub(super) unsafe fn configure() {
        #[repr(C, align(64))]
        struct Config([u8; 64]);
        let mut config = Config([0; 64]);
        config.0[0] = 1;
        for t in 0..8 {
            config.0[16 + 2 * t] = 64;
            config.0[48 + t] = TILE as u8;
        }
        // SAFETY: the configuration is 64 valid bytes; the caller checked AMX.
        unsafe { asm!("ldtilecfg [{0}]", in(reg) config.0.as_ptr(), options(nostack, readonly)) };
    }

    /// Write the accumulator tile `sum` (weight row `j`, row `r` of `a` at `j · 16 + r`) transposed into `c`
    /// (m × n): `c[(i0 + r) · n + j0 + j]` for `r < rows`, `j < cols`, each plus its column's bias (where there is
    /// one) rounded to bf16 as `bf16::from_f32` rounds (to nearest, ties to even; a NaN stays a quiet NaN). The
    /// tile transposed in registers, then a row at a time: the bias added, rounded in integer lanes, one masked
    /// store.
    ///
    /// # Safety
    /// The CPU has AVX-512F, BW and VL; those outputs lie inside `c` and no other task writes them.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn store_transposed(
        sum: &Tile,
        c: &super::SharedOut,
        (i0, j0): (usize, usize),
        (rows, cols): (usize, usize),
    ) {
        use std::arch::x86_64::*;
        let mask: __mmask16 = ((1u32 << cols) - 1) as u16;
        // SAFETY: the bias holds n values (masked past column n).
        let bias = match c.bias.is_null() {
            true => _mm512_setzero_ps(),
            false => unsafe { _mm512_maskz_loadu_ps(mask, c.bias.add(j0)) },
        };
        // SAFETY: the tile is 16 rows of 16 f32, aligned to 64 bytes; the CPU has AVX-512F.
        let sums = unsafe {
            crate::ops::gemm::packed::pack::transpose16(std::array::from_fn(|j| {
                _mm512_load_ps(sum.0.as_ptr().add(j * TILE).cast())
            }))
        };
        for (r, &v) in sums.iter().enumerate().take(rows) {
            let bits = round16(match c.bias.is_null() {
                true => v,
                false => _mm512_add_ps(v, bias),
            });
            // SAFETY: the store writes row i0 + r's columns j0 .. j0 + cols.
            unsafe { _mm256_mask_storeu_epi16(c.c.add((i0 + r) * c.n + j0).cast(), mask, bits) };
        }
    }

    /// 16 f32 lanes rounded to bf16 bits as `bf16::from_f32` rounds (to nearest, ties to even; a NaN stays a quiet
    /// NaN), in integer lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) fn round16(v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        let v = _mm512_castps_si512(v);
        let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(v), _mm512_set1_epi32(1));
        let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(
            _mm512_add_epi32(v, _mm512_set1_epi32(0x7fff)),
            lsb,
        ));
        let abs = _mm512_and_si512(v, _mm512_set1_epi32(0x7fff_ffff));
        let nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f80_0000));
        let quiet = _mm512_or_si512(_mm512_srli_epi32::<16>(v), _mm512_set1_epi32(0x40));
        _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet))
    }

    /// 16 rows of `x` (row `r` from value `r · stride`) as second operands in depth pairs: row `p % 16` of
    /// `tiles[p / 16]` gathers pair `p` (values `2p`, `2p + 1`) of the 16 rows, one 32-bit gather each, for
    /// `p < pairs`.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `x` holds `15 · stride + 2 · pairs` values and `tiles` ⌈pairs / 16⌉ tiles.
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn gather_pairs(
        x: &[half::bf16],
        stride: usize,
        pairs: usize,
        tiles: &mut [Tile],
    ) {
        use std::arch::x86_64::*;
        assert!(pairs == 0 || x.len() >= 15 * stride + 2 * pairs);
        assert!(tiles.len() >= pairs.div_ceil(TILE));
        let rows = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32((2 * stride) as i32),
        );
        for p in 0..pairs {
            // SAFETY: pair p of each of the 16 rows lies inside x (asserted); the store fills tile row p % 16.
            unsafe {
                let v = _mm512_i32gather_epi32::<1>(rows, x.as_ptr().add(2 * p).cast());
                _mm512_store_si512(
                    tiles[p / TILE].0.as_mut_ptr().add(p % TILE * TILE).cast(),
                    v,
                );
            }
        }
    }

    /// Return the tiles to their initial state (cheaper context switches).
    ///
    /// # Safety
    /// The CPU has AMX.
    pub(super) unsafe fn release() {
        // SAFETY: the caller checked AMX.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }

    /// `sums[2w + r]` = weight tile `w` × activation tile `r` over `chunks` chunks, for `w < nw`, `r < nr`:
    /// weight chunk `q` of tile `w` at `weight(w, q)` (address, row stride), activation chunk `q` of tile `r`
    /// at `a[r] + q`. Tiles 0–3 accumulate, 4–5 hold weight tiles, 6–7 activation tiles.
    ///
    /// # Safety
    /// [`configure`] ran on this thread; every address reads a whole tile.
    #[inline(always)]
    pub(super) unsafe fn block(
        chunks: usize,
        weight: impl Fn(usize, usize) -> (*const u8, usize),
        a: [*const Tile; 2],
        (nw, nr): (usize, usize),
        sums: &mut [Tile; 4],
    ) {
        macro_rules! load {
            ($tmm:literal, $at:expr) => {{
                let (p, stride): (*const u8, usize) = $at;
                asm!(concat!("tileloadd ", $tmm, ", [{p} + {s}*1]"), p = in(reg) p, s = in(reg) stride,
                     options(nostack, readonly));
            }};
        }
        macro_rules! dot {
            ($c:literal, $w:literal, $x:literal) => {
                asm!(
                    concat!("tdpbf16ps ", $c, ", ", $w, ", ", $x),
                    options(nostack, nomem)
                )
            };
        }
        macro_rules! store {
            ($tmm:literal, $i:expr) => {
                asm!(concat!("tilestored [{p} + {s}*1], ", $tmm), p = in(reg) sums[$i].0.as_mut_ptr(),
                     s = in(reg) 64usize, options(nostack))
            };
        }
        // SAFETY: the caller configured the tiles; the addresses read whole tiles.
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
            for q in 0..chunks {
                load!("tmm4", weight(0, q));
                load!("tmm6", (a[0].add(q).cast(), 64));
                dot!("tmm0", "tmm4", "tmm6");
                if nr == 2 {
                    load!("tmm7", (a[1].add(q).cast(), 64));
                    dot!("tmm1", "tmm4", "tmm7");
                }
                if nw == 2 {
                    load!("tmm5", weight(1, q));
                    dot!("tmm2", "tmm5", "tmm6");
                    if nr == 2 {
                        dot!("tmm3", "tmm5", "tmm7");
                    }
                }
            }
            store!("tmm0", 0);
            store!("tmm1", 1);
            store!("tmm2", 2);
            store!("tmm3", 3);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod tiles {
    use super::Tile;

    pub(super) unsafe fn configure() {
        unreachable!("the AMX GEMM runs only where super::supported()")
    }

    pub(super) unsafe fn release() {}

    pub(super) unsafe fn gather_pairs(_: &[half::bf16], _: usize, _: usize, _: &mut [Tile]) {}

    pub(super) unsafe fn store_transposed(
        _: &Tile,
        _: &super::SharedOut,
        _: (usize, usize),
        _: (usize, usize),
    ) {
    }

    pub(super) unsafe fn block(
        _: usize,
        _: impl Fn(usize, usize) -> (*const u8, usize),
        _: [*const Tile; 2],
        _: (usize, usize),
        _: &mut [Tile; 4],
    ) {
    }
}

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
            gemm_nt,
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
        rows_stand_alone(gemm_nt, (2 * 2 * TILE * 3 + 9, 301, 70), &parts);
    }
}
