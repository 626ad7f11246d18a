//! The x86 vector paths of [`super`]: 16 lanes (AVX-512) and 8 lanes (AVX2).

use std::arch::x86_64::*;

/// [`super::max`] in 16 lanes.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn max16(s: &[f32]) -> f32 {
    let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut blocks = s.chunks_exact(16);
    for b in &mut blocks {
        m = _mm512_max_ps(m, _mm512_loadu_ps(b.as_ptr()));
    }
    let tail = blocks.remainder().iter().copied();
    tail.fold(_mm512_reduce_max_ps(m), f32::max)
}

/// The sum of 8 lanes: the halves added, then pairs, then the last two.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum8(a: __m256) -> f32 {
    let t = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
    let t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps::<1>(t, t)))
}

/// Each score of `s` (rows of `k` of q.len() dims): per 16 dims one FMA into the low and one into the high
/// 8-lane accumulator (a last 8 dims into the low one), the two added, then [`sum8`].
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn scores8(q: &[f32], k: &[f32], s: &mut [f32]) {
    let d = q.len();
    let qp = q.as_ptr();
    for (j, sj) in s.iter_mut().enumerate() {
        let kp = k.as_ptr().add(j * d);
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut c = 0;
        while c + 16 <= d {
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(c)), _mm256_loadu_ps(kp.add(c)), lo);
            let (q8, k8) = (qp.add(c + 8), kp.add(c + 8));
            hi = _mm256_fmadd_ps(_mm256_loadu_ps(q8), _mm256_loadu_ps(k8), hi);
            c += 16;
        }
        if c < d {
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(c)), _mm256_loadu_ps(kp.add(c)), lo);
        }
        *sj = sum8(_mm256_add_ps(lo, hi));
    }
}

/// [`scores8`] for 8 keys at once (`k` 8 rows of q.len() dims, `s` their 8 scores): the same FMA chains per key,
/// and the 8 reductions done together (each key's additions in [`sum8`]'s order), four keys per [`quad8`].
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn scores8_block(q: &[f32], k: &[f32], s: &mut [f32]) {
    let (h0, h1) = (quad8(q, k, 0), quad8(q, k, 4));
    // Lane 4h + i: the score of key 2i + h.
    let e = _mm256_add_ps(
        _mm256_shuffle_ps::<0x88>(h0, h1),
        _mm256_shuffle_ps::<0xDD>(h0, h1),
    );
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_ps(s.as_mut_ptr(), _mm256_permutevar8x32_ps(e, order));
}

/// Keys `j0..j0 + 4` of `k`: their low and high chains, added, then the 4-lane halves of each added and the pair
/// sums (lanes 0 + 2, 1 + 3) of the result: in 128-bit half h those of key j0 + h, then of key j0 + 2 + h.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn quad8(q: &[f32], k: &[f32], j0: usize) -> __m256 {
    let d = q.len();
    let (qp, kp) = (q.as_ptr(), k.as_ptr().add(j0 * d));
    let (mut lo, mut hi) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
    let mut c = 0;
    while c + 16 <= d {
        let (ql, qh) = (_mm256_loadu_ps(qp.add(c)), _mm256_loadu_ps(qp.add(c + 8)));
        for (j, (l, h)) in lo.iter_mut().zip(&mut hi).enumerate() {
            let kr = kp.add(j * d + c);
            *l = _mm256_fmadd_ps(ql, _mm256_loadu_ps(kr), *l);
            *h = _mm256_fmadd_ps(qh, _mm256_loadu_ps(kr.add(8)), *h);
        }
        c += 16;
    }
    if c < d {
        let ql = _mm256_loadu_ps(qp.add(c));
        for (j, l) in lo.iter_mut().enumerate() {
            *l = _mm256_fmadd_ps(ql, _mm256_loadu_ps(kp.add(j * d + c)), *l);
        }
    }
    let mut a = [_mm256_setzero_ps(); 4];
    for (x, (l, h)) in a.iter_mut().zip(lo.iter().zip(&hi)) {
        *x = _mm256_add_ps(*l, *h);
    }
    // b[m]: key j0 + 2m's four sums lane i + lane i + 4 in the low half, key j0 + 2m + 1's in the high one.
    let mut b = [_mm256_setzero_ps(); 2];
    for (m, x) in b.iter_mut().enumerate() {
        let (p, r) = (a[2 * m], a[2 * m + 1]);
        let low = _mm256_permute2f128_ps::<0x20>(p, r);
        *x = _mm256_add_ps(low, _mm256_permute2f128_ps::<0x31>(p, r));
    }
    _mm256_add_ps(
        _mm256_shuffle_ps::<0x44>(b[0], b[1]),
        _mm256_shuffle_ps::<0xEE>(b[0], b[1]),
    )
}

/// [`scores8`] with the two halves of each 16 dims in one 16-lane accumulator.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn scores16(q: &[f32], k: &[f32], s: &mut [f32]) {
    let d = q.len();
    let qp = q.as_ptr();
    for (j, sj) in s.iter_mut().enumerate() {
        let kp = k.as_ptr().add(j * d);
        let mut acc = _mm512_setzero_ps();
        let mut c = 0;
        while c + 16 <= d {
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(qp.add(c)), _mm512_loadu_ps(kp.add(c)), acc);
            c += 16;
        }
        let mut lo = _mm512_castps512_ps256(acc);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc)));
        if c < d {
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(c)), _mm256_loadu_ps(kp.add(c)), lo);
        }
        *sj = sum8(_mm256_add_ps(lo, hi));
    }
}

/// [`scores16`] for 16 keys at once (`k` 16 rows of q.len() dims, `s` their 16 scores): the same FMA chain per
/// key in its own accumulator, and the 16 reductions done together by [`reduce16`].
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn scores16_block(q: &[f32], k: &[f32], s: &mut [f32]) {
    let d = q.len();
    let (qp, kp) = (q.as_ptr(), k.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 16];
    let mut c = 0;
    while c + 16 <= d {
        let qv = _mm512_loadu_ps(qp.add(c));
        for (j, a) in acc.iter_mut().enumerate() {
            *a = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kp.add(j * d + c)), *a);
        }
        c += 16;
    }
    if c < d {
        // The last 8 dims into the low halves only, as `scores16` adds them to its low accumulator.
        let qv = _mm512_maskz_loadu_ps(0xff, qp.add(c));
        for (j, a) in acc.iter_mut().enumerate() {
            let kv = _mm512_maskz_loadu_ps(0xff, kp.add(j * d + c));
            *a = _mm512_mask3_fmadd_ps(qv, kv, *a, 0xff);
        }
    }
    _mm512_storeu_ps(s.as_mut_ptr(), reduce16(&acc));
}

/// The 16 lanes of each of 16 accumulators summed as [`scores16`] sums one (lane i plus lane i + 8, then the
/// two 4-lane halves of those, then pairs, then the last two), lane j of the result the sum of `a[j]`. Each step
/// puts the two operands of every addition of several accumulators into two vectors by shuffles and adds them
/// once.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn reduce16(a: &[__m512; 16]) -> __m512 {
    // b[m]: a[2m]'s and a[2m + 1]'s eight sums lane i + lane i + 8.
    let mut b = [_mm512_setzero_ps(); 8];
    for (m, x) in b.iter_mut().enumerate() {
        let (p, q) = (a[2 * m], a[2 * m + 1]);
        *x = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(p, q),
            _mm512_shuffle_f32x4::<0xEE>(p, q),
        );
    }
    // c[m]: in 128-bit block r the four sums of a[4m + r] (its eight, lane i plus lane i + 4).
    let mut c = [_mm512_setzero_ps(); 4];
    for (m, x) in c.iter_mut().enumerate() {
        let (p, q) = (b[2 * m], b[2 * m + 1]);
        *x = _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(p, q),
            _mm512_shuffle_f32x4::<0xDD>(p, q),
        );
    }
    // d[m]: in block r the two pair sums (lanes 0 + 2, 1 + 3) of a[8m + r], then of a[8m + 4 + r].
    let mut d = [_mm512_setzero_ps(); 2];
    for (m, x) in d.iter_mut().enumerate() {
        let (p, q) = (c[2 * m], c[2 * m + 1]);
        *x = _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(p, q),
            _mm512_shuffle_ps::<0xEE>(p, q),
        );
    }
    // Lane 4r + i: the sum of a[4i + r]; put back in key order.
    let e = _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(d[0], d[1]),
        _mm512_shuffle_ps::<0xDD>(d[0], d[1]),
    );
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(order, e)
}

/// One block of Q queries' weighted sums over the dims `c..c + W·N` of `o` ([`super::weighted_sums`]): the
/// queries' weights and running sums, the value rows and how many.
struct Block<const Q: usize> {
    p: [*const f32; Q],
    o: [*mut f32; Q],
    v: *const f32,
    n: usize,
    d: usize,
}

impl<const Q: usize> Block<Q> {
    /// Queries `i0..i0 + Q` of `o` (group × d), their weights from `w`.
    fn new<'a>(
        w: &impl Fn(usize) -> &'a [f32],
        v: &[f32],
        o: &mut [f32],
        i0: usize,
        d: usize,
    ) -> Self {
        let mut b = Block {
            p: [std::ptr::null(); Q],
            o: [std::ptr::null_mut(); Q],
            v: v.as_ptr(),
            n: v.len() / d,
            d,
        };
        for i in 0..Q {
            b.p[i] = w(i0 + i).as_ptr();
            b.o[i] = o[(i0 + i) * d..].as_mut_ptr();
        }
        b
    }
}

/// A block kernel of [`queries16`] / [`queries8`] at one vector width: the Q queries' sums over the W·N dims from
/// `c` (W lanes a vector), per value row N loads, one weight broadcast per query and Q·N FMAs, each sum's chain
/// continued from the value `o` holds.
macro_rules! sums_block {
    ($(#[$doc:meta])* $name:ident, $features:literal, $lanes:literal,
     $zero:ident, $load:ident, $set1:ident, $fma:ident, $store:ident) => {
        $(#[$doc])*
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn $name<const Q: usize, const N: usize>(b: &Block<Q>, c: usize) {
            let mut acc = [[$zero(); N]; Q];
            for (a, o) in acc.iter_mut().zip(b.o) {
                for (l, x) in a.iter_mut().enumerate() {
                    *x = $load(o.add(c + $lanes * l));
                }
            }
            for j in 0..b.n {
                let vp = b.v.add(j * b.d + c);
                let mut vs = [$zero(); N];
                for (l, x) in vs.iter_mut().enumerate() {
                    *x = $load(vp.add($lanes * l));
                }
                for (a, p) in acc.iter_mut().zip(b.p) {
                    let w = $set1(*p.add(j));
                    for (x, y) in a.iter_mut().zip(vs) {
                        *x = $fma(w, y, *x);
                    }
                }
            }
            for (a, o) in acc.iter().zip(b.o) {
                for (l, x) in a.iter().enumerate() {
                    $store(o.add(c + $lanes * l), *x);
                }
            }
        }
    };
}

sums_block!(
    /// The block kernel in 16 lanes (16·N dims).
    block16, "avx512f,avx2,fma", 16,
    _mm512_setzero_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_storeu_ps
);
sums_block!(
    /// The block kernel in 8 lanes (8·N dims).
    block8, "avx2,fma", 8,
    _mm256_setzero_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_storeu_ps
);

/// Q queries' sums over all dims: 64 at a time, then 16, then 8.
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn queries16<const Q: usize>(b: &Block<Q>) {
    let mut c = 0;
    while c + 64 <= b.d {
        block16::<Q, 4>(b, c);
        c += 64;
    }
    while c + 16 <= b.d {
        block16::<Q, 1>(b, c);
        c += 16;
    }
    if c < b.d {
        block8::<Q, 1>(b, c);
    }
}

/// Q queries' sums over all dims: 32 at a time, then 8.
#[target_feature(enable = "avx2,fma")]
unsafe fn queries8<const Q: usize>(b: &Block<Q>) {
    let mut c = 0;
    while c + 32 <= b.d {
        block8::<Q, 4>(b, c);
        c += 32;
    }
    while c < b.d {
        block8::<Q, 1>(b, c);
        c += 8;
    }
}

/// Queries `0..group` in blocks of at most `max`: `run(first, count)` for each, in order.
fn query_blocks(group: usize, max: usize, mut run: impl FnMut(usize, usize)) {
    let mut i = 0;
    while i < group {
        let q = (group - i).min(max);
        run(i, q);
        i += q;
    }
}

/// [`super::weighted_sums`] in 16 lanes, four queries at a time (16 accumulators).
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and FMA; as [`super::weighted_sums`] requires of its operands.
pub(super) unsafe fn weighted_sums16<'a>(
    w: &impl Fn(usize) -> &'a [f32],
    v: &[f32],
    o: &mut [f32],
    d: usize,
) {
    // SAFETY (every arm): the caller's.
    query_blocks(o.len() / d, 4, |i, q| unsafe {
        match q {
            1 => queries16(&Block::<1>::new(w, v, o, i, d)),
            2 => queries16(&Block::<2>::new(w, v, o, i, d)),
            3 => queries16(&Block::<3>::new(w, v, o, i, d)),
            _ => queries16(&Block::<4>::new(w, v, o, i, d)),
        }
    });
}

/// [`super::weighted_sums`] in 8 lanes, two queries at a time (8 accumulators of the 16 registers).
///
/// # Safety
/// The CPU has AVX2 and FMA; as [`super::weighted_sums`] requires of its operands.
pub(super) unsafe fn weighted_sums8<'a>(
    w: &impl Fn(usize) -> &'a [f32],
    v: &[f32],
    o: &mut [f32],
    d: usize,
) {
    // SAFETY (both arms): the caller's.
    query_blocks(o.len() / d, 2, |i, q| unsafe {
        match q {
            1 => queries8(&Block::<1>::new(w, v, o, i, d)),
            _ => queries8(&Block::<2>::new(w, v, o, i, d)),
        }
    });
}
