//! bf16 attention of packed segments (with or without a cached prefix, causal or not), its products on AMX tiles
//! or, on CPUs without them, by AVX512-BF16 dot products on the same operands ([`Products`]), in the order torch's
//! CPU flash attention computes bf16: the scores `q·kᵀ` as f32 sums of bf16 products, times the scale;
//! then per block of [`KEY_BLOCK`] keys (counted from the sequence's first key, the cached ones included) the
//! block's maximum, `exp(s − max)` in f32, summed in f32 and rounded to bf16 as the weights, the running maximum
//! rescaling the f32 sum and the f32 output; `weights · v` as f32 sums of bf16 products added to that output; at
//! the end the output times the reciprocal of the sum, rounded to bf16 once. A causal query's later keys count
//! as -inf inside their block, as torch masks them.
//!
//! Per (segment, KV head) the keys are packed once as second operands of `q·kᵀ` (depth pairs by 16 keys) and
//! the values as second operands of `weights · v` (key pairs by 16 head dimensions); per block of 32 queries
//! the queries are first operands, copied with the head dimension padded to a whole tile, and the weights
//! (32 queries by a block's keys) are written straight in the first operand's layout.

use std::mem::MaybeUninit;

use half::bf16;
use rayon::prelude::*;

use crate::ops::cpu_data::{written, zeroed};
use crate::ops::elementwise::bf16::round;
use crate::ops::gemm::bf16::amx::{self as gemm_amx, round16_bf16, Tile, ZERO_TILE};

mod dots;
mod item;
mod pack;
mod rows;
mod tiles;

use item::{Item, OutPtr, SCRATCH};

/// Rows of every tile.
const TILE: usize = 16;
/// bf16 values per tile row (depths, or keys).
const CHUNK: usize = 32;
/// Keys per block of the online softmax: torch's split of the keys.
pub(crate) const KEY_BLOCK: usize = 512;
/// Queries per work item: two tiles.
const QUERY_BLOCK: usize = 2 * TILE;
/// Largest head dimension served.
pub(crate) const MAX_HEAD_DIM: usize = 256;

/// Head counts and head dimension of one call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub d: usize,
}

impl Heads {
    /// Depth chunks of a query or key row (32 depths each, the last zero-padded).
    fn chunks(&self) -> usize {
        self.d.div_ceil(CHUNK)
    }

    /// Tiles of 16 head dimensions of a value row.
    fn dim_tiles(&self) -> usize {
        self.d.div_ceil(TILE)
    }
}

pub(crate) use super::Products;

impl Products {
    /// Whether this CPU (and OS) runs them: AMX for the tiles, AVX512-BF16 with AVX-512 F, BW, VL and DQ for
    /// the dot products (and for the softmax either way).
    pub(crate) fn supported(self) -> bool {
        match self {
            Self::Tiles => gemm_amx::supported(),
            Self::Dots => crate::ops::gemm::bf16::supported(),
        }
    }
}

/// Whether this kernel runs calls of these shapes here with `products`: [`Products::supported`] (with AVX2 and FMA
/// for the softmax), an even head dimension up to [`MAX_HEAD_DIM`], whole groups of query heads per KV head.
pub(crate) fn covers(h: Heads, products: Products) -> bool {
    products.supported()
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && h.d > 0
        && h.d.is_multiple_of(2)
        && h.d <= MAX_HEAD_DIM
        && h.kv_heads > 0
        && h.heads.is_multiple_of(h.kv_heads)
}

/// A segment of rows: its queries attend to its cached prefix's keys (where it continues a cached sequence),
/// then to its own rows' keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seg<'a> {
    /// First row and row count in q, k and v.
    pub start: usize,
    pub len: usize,
    /// The cache's keys and values (kv_heads × capacity × d each), the capacity and the valid positions, which
    /// come before the segment's rows.
    pub prefix: Option<(&'a [bf16], &'a [bf16], usize, usize)>,
}

impl Seg<'_> {
    /// Cached positions before the segment's rows.
    fn cached(&self) -> usize {
        self.prefix.map_or(0, |p| p.3)
    }

    /// Keys every query of the segment may see: the cached ones and the segment's own.
    fn keys(&self) -> usize {
        self.cached() + self.len
    }
}

/// The attention of `q` (N × heads × d) to `k`, `v` (N × kv_heads × d) within each segment of rows (after its
/// cached prefix), each query seeing all of its segment's keys or, `causal`, those up to its own position;
/// returns (N × heads × d), rows outside every segment zero; the products by `products`. Panics unless [`covers`] holds and the slices hold
/// N rows (the caches their capacity).
pub(crate) fn attend(
    (q, k, v): (&[bf16], &[bf16], &[bf16]),
    segs: &[Seg<'_>],
    h: Heads,
    (scale, causal): (f32, bool),
    products: Products,
) -> Vec<bf16> {
    assert!(
        covers(h, products),
        "the flash attention does not cover {h:?} with {products:?} here"
    );
    assert!(scale > 0.0 && scale.is_finite(), "attention scale {scale}");
    let n = q.len() / (h.heads * h.d);
    assert!(k.len() >= n * h.kv_heads * h.d && v.len() >= n * h.kv_heads * h.d);
    for s in segs {
        assert!(s.start + s.len <= n);
        if let Some((pk, pv, cap, p)) = s.prefix {
            let whole = h.kv_heads * cap * h.d;
            assert!(p <= cap && pk.len() >= whole && pv.len() >= whole);
        }
    }
    let groups: Vec<(usize, usize)> = (0..segs.len())
        .flat_map(|s| (0..h.kv_heads).map(move |g| (s, g)))
        .collect();
    let packed: Vec<(Vec<Tile>, Vec<Tile>)> = groups
        .par_iter()
        .map(|&(s, g)| {
            let (seg, cache) = (&segs[s], segs[s].prefix);
            let (keys, values) = (
                Rows::of(k, cache.map(|c| c.0), seg, g, h),
                Rows::of(v, cache.map(|c| c.1), seg, g, h),
            );
            // SAFETY: covers() holds (AVX-512 with BW and VL come with AMX's check); the rows lie in the slices.
            unsafe { (pack::pack_keys(&keys, h), pack::pack_values(&values, h)) }
        })
        .collect();
    let per_group = h.heads / h.kv_heads;
    let items: Vec<(usize, usize, usize)> = groups
        .iter()
        .enumerate()
        .flat_map(|(i, &(s, _))| {
            let blocks = segs[s].len.div_ceil(QUERY_BLOCK);
            (0..per_group).flat_map(move |j| (0..blocks).map(move |b| (i, j, b)))
        })
        .collect();
    let row_len = h.heads * h.d;
    let mut covered = vec![false; n];
    for s in segs {
        covered[s.start..s.start + s.len].fill(true);
    }
    let fill = |out: &mut [MaybeUninit<bf16>]| {
        for (row, _) in out.chunks_mut(row_len).zip(&covered).filter(|c| !*c.1) {
            zeroed(row);
        }
        let out_ptr = OutPtr(out.as_mut_ptr().cast());
        items.into_par_iter().for_each(|(i, j, b)| {
            let (seg, g) = (&segs[groups[i].0], groups[i].1);
            let item = Item {
                q,
                head: g * per_group + j,
                rows: (
                    seg.start + b * QUERY_BLOCK,
                    QUERY_BLOCK.min(seg.len - b * QUERY_BLOCK),
                ),
                position: seg.cached() + b * QUERY_BLOCK,
                keys: seg.keys(),
                causal,
                packed: &packed[i],
                products,
            };
            // SAFETY: covers() holds; this item alone writes its rows' outputs of this head.
            SCRATCH.with_borrow_mut(|scratch| unsafe { item.run(h, scale, scratch, &out_ptr) });
        });
    };
    // SAFETY: the rows outside every segment are zeroed; the items write every head of each segment's rows.
    unsafe { written(n * row_len, fill) }
}

/// Where key (or value) `n` of one KV head of a segment lies: the cache's first `cached` positions, then the
/// segment's rows.
struct Rows<'a> {
    rows: &'a [bf16],
    /// The cache (its KV head's positions, each `d` values) and its valid positions.
    cache: Option<(&'a [bf16], usize)>,
    /// Offset of the segment's first row for this KV head, and the row stride (kv_heads · d).
    first: usize,
    stride: usize,
    /// All keys: cached and the segment's.
    len: usize,
    d: usize,
}

impl<'a> Rows<'a> {
    /// Keys (or values) of KV head `g` of `seg` in `x`, its cached prefix in `cache` (kv_heads × capacity × d).
    fn of(x: &'a [bf16], cache: Option<&'a [bf16]>, seg: &Seg<'a>, g: usize, h: Heads) -> Self {
        let cache = cache
            .zip(seg.prefix)
            .map(|(buf, (_, _, cap, p))| (&buf[g * cap * h.d..][..p * h.d], p));
        Self {
            rows: x,
            cache,
            first: seg.start * h.kv_heads * h.d + g * h.d,
            stride: h.kv_heads * h.d,
            len: seg.keys(),
            d: h.d,
        }
    }

    /// The offset in its slice and the slice of key `n`, with the stride to the next key of the same source.
    fn at(&self, n: usize) -> (&'a [bf16], usize, usize) {
        match self.cache {
            Some((c, p)) if n < p => (c, n * self.d, self.d),
            _ => {
                let cached = self.cache.map_or(0, |c| c.1);
                (
                    self.rows,
                    self.first + (n - cached) * self.stride,
                    self.stride,
                )
            }
        }
    }

    /// Key `n`'s `d` values.
    fn row(&self, n: usize) -> &'a [bf16] {
        let (x, at, _) = self.at(n);
        &x[at..][..self.d]
    }

    /// Keys `n .. n + 16` as (slice, offset of the first, stride) where all 16 exist and come from one source.
    fn tile(&self, n: usize) -> Option<(&'a [bf16], usize, usize)> {
        let cached = self.cache.map_or(0, |c| c.1);
        let one_source = n + TILE <= cached || n >= cached;
        (n + TILE <= self.len && one_source).then(|| self.at(n))
    }
}

/// One query's block of scores `s` (its keys): the block maximum of `s · scale` folded into the running
/// maximum, `w ← bf16(exp(s · scale − max))` (zero past the block's keys to `w`'s end), the running sum updated as
/// `block sum + exp(old max − max) · sum`. Returns `exp(old max − max)`, the factor of the output so far.
/// As torch's kernel: whole vectors of 16 through [`exp_u20`] summed lane by lane and reduced by halves, the
/// last keys (fewer than 16) through libm's `exp` added in order. The maximum is taken before the scaling: with
/// `scale > 0` rounding keeps the order, so it is the scaled scores' maximum, and `s` is read, never written.
///
/// # Safety
/// The CPU has AVX-512F, BW, VL, DQ and BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")]
unsafe fn softmax_block(
    s: &[f32],
    w: &mut [half::bf16],
    scale: f32,
    (max, sum): (&mut f32, &mut f32),
) -> f32 {
    use std::arch::x86_64::*;
    let (n, whole) = (s.len(), s.len() / 16 * 16);
    let (p, wp) = (s.as_ptr(), w.as_mut_ptr());
    let mut vmax = _mm512_set1_ps(f32::NEG_INFINITY);
    for i in (0..whole).step_by(16) {
        // SAFETY: 16 values from i lie inside s.
        vmax = _mm512_max_ps(vmax, unsafe { _mm512_loadu_ps(p.add(i)) });
    }
    let mut block = _mm512_reduce_max_ps(vmax) * scale;
    for x in &s[whole..] {
        block = block.max(x * scale);
    }
    let new = max.max(block);
    if new == f32::NEG_INFINITY {
        // No key scored above -inf: zero weights, the running state unchanged (torch's guard against NaN).
        w.fill(half::bf16::ZERO);
        return 1.0;
    }
    let rescale = (*max - new).exp();
    let mut vsum = _mm512_setzero_ps();
    let (vs, vnew) = (_mm512_set1_ps(scale), _mm512_set1_ps(new));
    for i in (0..whole).step_by(16) {
        // SAFETY: 16 values from i lie inside s and w.
        unsafe {
            let x = _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), vs);
            let e = exp_u20(_mm512_sub_ps(x, vnew));
            vsum = _mm512_add_ps(vsum, e);
            _mm256_storeu_si256(wp.add(i).cast(), round16_bf16(e));
        }
    }
    let mut total = _mm512_reduce_add_ps(vsum);
    for (x, w) in s[whole..].iter().zip(&mut w[whole..n]) {
        let e = (x * scale - new).exp();
        total += e;
        *w = round(e);
    }
    w[n..].fill(half::bf16::ZERO);
    *sum = total + rescale * *sum;
    *max = new;
    rescale
}

/// `exp` of 16 lanes as torch's vectorised `exp_u20` computes it (about 20 ulp): inputs clamped to
/// [ln FLT_MIN, ln FLT_MAX], `n = ⌊x·log₂e + ½⌋` (one fused multiply-add, rounded down), `r = x − n·ln 2`
/// (fused), a degree-5 polynomial in `r` by fused Horner steps, times `2ⁿ⁻¹` built in the exponent bits (zero
/// below ln FLT_MIN) and times 2.
#[inline]
#[target_feature(enable = "avx512f,fma")]
fn exp_u20(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let bits = |b: u32| _mm512_castsi512_ps(_mm512_set1_epi32(b as i32));
    let (ln_min, ln_max) = (bits(0xc2ae_ac50), bits(0x42b1_7218));
    let below = _mm512_cmp_ps_mask::<_CMP_LT_OS>(x, ln_min);
    let x = _mm512_max_ps(_mm512_min_ps(x, ln_max), ln_min);
    let whole = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(
        _mm512_fmadd_ps(x, bits(0x3fb8_aa3b), _mm512_set1_ps(0.5)),
    );
    let n = _mm512_cvtepi32_ps(whole);
    let r = _mm512_fnmadd_ps(n, bits(0x3f31_7218), x);
    let mut y = _mm512_fmadd_ps(
        r,
        _mm512_set1_ps(0.008_289_291),
        _mm512_set1_ps(0.041_897_822),
    );
    for c in [0.166_676_52, 0.499_991_5, 0.999_999_7, 1.0] {
        y = _mm512_fmadd_ps(r, y, _mm512_set1_ps(c));
    }
    // 2ⁿ⁻¹: the biased exponent n − 1 + 127 from n's integer (n lies in [−126, 128], so n − 1 is exact either way).
    let pow = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(
        whole,
        _mm512_set1_epi32(126),
    )));
    let pow = _mm512_mask_blend_ps(below, pow, _mm512_setzero_ps());
    _mm512_mul_ps(_mm512_mul_ps(y, pow), _mm512_set1_ps(2.0))
}

#[cfg(test)]
mod tests;
