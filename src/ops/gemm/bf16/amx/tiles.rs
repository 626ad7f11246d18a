//! The AMX instructions, as inline assembly (the tile registers are not the compiler's), and the vector
//! code around them.

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

/// Write the accumulator tile `sum` into `c` (m × n): `c[(i0 + r) · n + j0 + j]` for `r < rows`, `j < cols`,
/// each plus its column's bias (where there is one) rounded to bf16 as `bf16::from_f32` rounds (to nearest, ties
/// to even; a NaN stays a quiet NaN), then plus the output's residual value (where `c` has one) and rounded again.
/// The tile holds row `r` of `a` by weight row `j` at `j · 16 + r` where `transpose` (transposed in registers
/// first: the weight was the first operand), else at `r · 16 + j`; then a row at a time: the bias added, rounded,
/// the residual added and rounded, one masked store.
///
/// # Safety
/// The CPU has AVX-512F, BW, VL, DQ and BF16; those outputs lie inside `c` and no other task writes them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")]
pub(in crate::ops::gemm::bf16) unsafe fn store_sums(
    sum: &Tile,
    c: &super::SharedOut,
    (i0, j0): (usize, usize),
    (rows, cols): (usize, usize),
    transpose: bool,
) {
    use std::arch::x86_64::*;
    let mask: __mmask16 = ((1u32 << cols) - 1) as u16;
    // SAFETY: the bias holds n values (masked past column n).
    let bias = match c.bias.is_null() {
        true => _mm512_setzero_ps(),
        false => unsafe { _mm512_maskz_loadu_ps(mask, c.bias.add(j0)) },
    };
    // SAFETY: the CPU has AVX-512F.
    let sums = unsafe { by_rows(sum, transpose) };
    for (r, &v) in sums.iter().enumerate().take(rows) {
        let y = round16_bf16(match c.bias.is_null() {
            true => v,
            false => _mm512_add_ps(v, bias),
        });
        let at = (i0 + r) * c.n + j0;
        let bits = match c.residual.is_null() {
            true => y,
            // SAFETY: the residual holds the output's values (masked past column j0 + cols).
            false => round16_bf16(_mm512_add_ps(
                widen16(unsafe { _mm256_maskz_loadu_epi16(mask, c.residual.add(at).cast()) }),
                widen16(y),
            )),
        };
        // SAFETY: the store writes row i0 + r's columns j0 .. j0 + cols.
        unsafe { _mm256_mask_storeu_epi16(c.c.add(at).cast(), mask, bits) };
    }
}

/// An accumulator tile's 16 rows of 16 f32 in registers, transposed where `transpose`.
///
/// # Safety
/// The CPU has AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn by_rows(t: &Tile, transpose: bool) -> [std::arch::x86_64::__m512; TILE] {
    use std::arch::x86_64::*;
    match transpose {
        // SAFETY: the CPU has AVX-512F.
        true => unsafe { transposed(t) },
        // SAFETY: a tile is 16 rows of 16 f32, aligned to 64 bytes.
        false => {
            std::array::from_fn(|j| unsafe { _mm512_load_ps(t.0.as_ptr().add(j * TILE).cast()) })
        }
    }
}

/// An accumulator tile's 16 rows of 16 f32, transposed, in registers.
///
/// # Safety
/// The CPU has AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn transposed(t: &Tile) -> [std::arch::x86_64::__m512; TILE] {
    use std::arch::x86_64::*;
    let mut rows = [_mm512_setzero_ps(); TILE];
    for (j, row) in rows.iter_mut().enumerate() {
        // SAFETY: a tile is 16 rows of 16 f32, aligned to 64 bytes.
        *row = unsafe { _mm512_load_ps(t.0.as_ptr().add(j * TILE).cast()) };
    }
    // SAFETY: the CPU has AVX-512F.
    unsafe { crate::ops::gemm::packed::pack::transpose16(rows) }
}

/// The SwiGLU of a gate tile and an up tile (`tiles[0]`, `tiles[1]`: output column `j` by row `r` at `j · 16 + r`
/// where `transpose`, else at `r · 16 + j`) into `c` (m × I): `c[(i0 + r) · I + j0 + j]` for `r < rows`,
/// `j < cols`. Each half's sum plus its bias (where there is one: `bias`, from column `j0`) rounded to bf16; the
/// gate's SiLU as `elementwise::bf16::swiglu_packed` computes it (a whole tile through the same `silu16`, a partial
/// last tile through its `silu_row`, since tiles start at multiples of 16), rounded to bf16; times the up value,
/// rounded to bf16; one masked store per row.
///
/// # Safety
/// The CPU has AVX-512F, BW, VL, DQ and BF16, AVX2 and FMA; those outputs lie inside `c`, no other task writes
/// them, and each bias holds `cols` values.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")]
pub(super) unsafe fn store_swiglu(
    tiles: [&Tile; 2],
    bias: Option<(&[f32], &[f32])>,
    c: &super::SharedOut,
    (i0, j0): (usize, usize),
    (rows, cols): (usize, usize),
    transpose: bool,
) {
    use std::arch::x86_64::*;
    const ONES: [f32; TILE] = [1.0; TILE];
    let mask: __mmask16 = ((1u32 << cols) - 1) as u16;
    // SAFETY: the CPU has AVX-512F.
    let (gate, up) = unsafe { (by_rows(tiles[0], transpose), by_rows(tiles[1], transpose)) };
    // SAFETY: each bias holds cols values (masked past them).
    let bias = bias.map(|(g, u)| unsafe {
        (
            _mm512_maskz_loadu_ps(mask, g.as_ptr()),
            _mm512_maskz_loadu_ps(mask, u.as_ptr()),
        )
    });
    // A bf16 value (the rounding of an f32 sum) as f32.
    let rounded = |v: __m512| widen16(round16_bf16(v));
    for r in 0..rows {
        let (g, u) = match bias {
            Some((bg, bu)) => (_mm512_add_ps(gate[r], bg), _mm512_add_ps(up[r], bu)),
            None => (gate[r], up[r]),
        };
        let g = rounded(g);
        let silu = match cols == TILE {
            // SAFETY: the CPU has AVX-512F, AVX2 and FMA.
            true => unsafe { crate::ops::simd::avx512::silu16(g) },
            false => {
                let (mut g16, mut silu) = ([0f32; TILE], [0f32; TILE]);
                // SAFETY: 16 values.
                unsafe { _mm512_storeu_ps(g16.as_mut_ptr(), g) };
                crate::ops::elementwise::bf16::silu_row(
                    &g16[..cols],
                    &ONES[..cols],
                    &mut silu[..cols],
                    crate::ops::simd::Level::Avx512,
                );
                // SAFETY: 16 values.
                unsafe { _mm512_loadu_ps(silu.as_ptr()) }
            }
        };
        let silu = rounded(silu);
        let bits = round16_bf16(_mm512_mul_ps(silu, rounded(u)));
        // SAFETY: the store writes row i0 + r's columns j0 .. j0 + cols.
        unsafe { _mm256_mask_storeu_epi16(c.c.add((i0 + r) * c.n + j0).cast(), mask, bits) };
    }
}

/// 16 f32 lanes rounded to bf16 bits as `bf16::from_f32` rounds (to nearest, ties to even; a NaN stays a quiet
/// NaN), in integer lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn round16(v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m256i {
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

/// 16 bf16 values as f32 (exact: the bits shifted into the high half).
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn widen16(b: std::arch::x86_64::__m256i) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(b)))
}

/// [`round16`] by the CPU's own conversion (`vcvtneps2bf16`: to nearest, ties to even, a NaN quieted as
/// [`round16`] quiets it). The instruction reads subnormal inputs as zero, so a vector holding one goes through
/// [`round16`]: the bits are [`round16`]'s for every input.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")]
pub(crate) fn round16_bf16(v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    /// `vfpclassps` category: subnormal.
    const SUBNORMAL: i32 = 0x20;
    if _mm512_fpclass_ps_mask::<SUBNORMAL>(v) != 0 {
        return round16(v);
    }
    // SAFETY: both are 32 bytes of plain lanes.
    unsafe { std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(v)) }
}

/// 16 rows of `x` (row `r` from value `r · stride`) as second operands in depth pairs: row `p % 16` of
/// `tiles[p / 16]` holds pair `p` (values `2p`, `2p + 1`) of the 16 rows, for `p < pairs`. Whole tiles are the
/// 16 rows' 64 bytes transposed in registers; a last partial tile gathers a pair of the 16 rows at a time.
///
/// # Safety
/// The CPU has AVX-512F; `x` holds `15 · stride + 2 · pairs` values and `tiles` ⌈pairs / 16⌉ tiles.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn gather_pairs(
    x: &[half::bf16],
    stride: usize,
    pairs: usize,
    tiles: &mut [std::mem::MaybeUninit<Tile>],
) {
    use std::arch::x86_64::*;
    assert!(pairs == 0 || x.len() >= 15 * stride + 2 * pairs);
    assert!(tiles.len() >= pairs.div_ceil(TILE));
    let rows = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((2 * stride) as i32),
    );
    let whole = pairs / TILE;
    for (t, tile) in tiles.iter_mut().enumerate().take(whole) {
        // SAFETY: pairs 16t .. 16t + 16 of each of the 16 rows lie inside x (asserted); the stores fill the tile.
        unsafe {
            let mut rows = [_mm512_setzero_ps(); TILE];
            for (r, row) in rows.iter_mut().enumerate() {
                *row = _mm512_loadu_ps(x.as_ptr().add(r * stride + 2 * TILE * t).cast());
            }
            let pairs = crate::ops::gemm::packed::pack::transpose16(rows);
            for (p, v) in pairs.iter().enumerate() {
                _mm512_store_ps(tile.as_mut_ptr().cast::<f32>().add(p * TILE), *v);
            }
        }
    }
    for p in whole * TILE..pairs {
        // SAFETY: pair p of each of the 16 rows lies inside x (asserted); the store fills tile row p % 16.
        unsafe {
            let v = _mm512_i32gather_epi32::<1>(rows, x.as_ptr().add(2 * p).cast());
            _mm512_store_si512(
                tiles[p / TILE]
                    .as_mut_ptr()
                    .cast::<u32>()
                    .add(p % TILE * TILE)
                    .cast(),
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
/// at `a[r] + q`. Tiles 0–3 accumulate, 4–5 hold weight tiles, 6–7 activation tiles. `overlapped` runs once,
/// after all the chunks' loads and products are issued and before the sums are stored: vector work that runs
/// while the tiles work through the queued products (halfway through the chunks, the products issued after it
/// measured slower).
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
    overlapped: impl FnOnce(),
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
        overlapped();
        store!("tmm0", 0);
        store!("tmm1", 1);
        store!("tmm2", 2);
        store!("tmm3", 3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU's conversion gives [`round16`]'s bits on specials, subnormals, ties and random patterns.
    #[test]
    fn the_cpus_rounding_gives_round16s_bits() {
        if !super::super::supported() {
            eprintln!("skipped: no AMX here");
            return;
        }
        use std::arch::x86_64::*;
        let mut values: Vec<u32> = vec![
            0,
            0x8000_0000,
            1,
            0x8000_0001,
            0x007f_ffff,
            0x0080_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7f80_0001,
            0x7fc0_0000,
            0xffc0_1234,
            0x3f80_8000,
            0x3f81_8000,
            0x3f80_7fff,
            0x7f7f_ffff,
            0x0000_8000,
        ];
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..1 << 20 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            values.push(x);
            // Halfway between two bf16 values, and a subnormal among normal lanes.
            values.push(x & 0xffff_0000 | 0x8000);
            values.push(x & 0x807f_ffff);
        }
        values.resize(values.len().next_multiple_of(16), 0);
        for lanes in values.chunks_exact(16) {
            let (mut want, mut got) = ([0u16; 16], [0u16; 16]);
            // SAFETY: the CPU has what both need (supported()); 16 lanes each.
            unsafe {
                let v = _mm512_loadu_si512(lanes.as_ptr().cast());
                let v = _mm512_castsi512_ps(v);
                _mm256_storeu_si256(want.as_mut_ptr().cast(), round16(v));
                _mm256_storeu_si256(got.as_mut_ptr().cast(), round16_bf16(v));
            }
            assert_eq!(got, want, "{lanes:08x?}");
        }
    }
}
