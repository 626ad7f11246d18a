//! The packed kernel's register tiles, one per instruction set, and the cache blocking each is packed for: a
//! [`Micro`] fixes the tile's rows ([`Micro::MR`]) and columns ([`Micro::NR`]), the depth of a block
//! ([`Micro::KC`], which fixes the order of every sum) and the rows and columns packed at once.

/// The instruction set whose register tile the packed kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// AVX2 and FMA: [`Avx2`]'s 6 × 16 tile.
    Avx2,
    /// AVX-512F: [`Avx512`]'s 14 × 32 tile.
    Avx512,
}

impl Isa {
    /// The widest tile this CPU runs; `None` without AVX2/FMA.
    pub fn detect() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
                None
            } else if is_x86_feature_detected!("avx512f") {
                Some(Self::Avx512)
            } else {
                Some(Self::Avx2)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    /// Every tile this CPU runs, narrowest first (for tests that check each).
    #[cfg(test)]
    pub fn all_supported() -> Vec<Self> {
        match Self::detect() {
            None => vec![],
            Some(Self::Avx2) => vec![Self::Avx2],
            Some(Self::Avx512) => vec![Self::Avx2, Self::Avx512],
        }
    }

    /// The tile in words, for logs and the manifest.
    pub fn describe(self) -> String {
        match self {
            Self::Avx2 => format!("AVX2 {} x {} tile", Avx2::MR, Avx2::NR),
            Self::Avx512 => format!("AVX-512 {} x {} tile", Avx512::MR, Avx512::NR),
        }
    }
}

/// A register tile and the blocking its panels are packed for.
pub(crate) trait Micro {
    /// Rows of the register tile.
    const MR: usize;
    /// Columns of the register tile.
    const NR: usize;
    /// Depth of one block: one FMA chain per output over it.
    const KC: usize;
    /// Rows of `a` packed at once (a multiple of `MR`, kept in L2).
    const MC: usize;
    /// Columns of `w` packed at once (shared by the threads).
    const NC: usize;
    /// Whether panels are packed with AVX-512 16 × 16 transposes (`MR` ≤ 16, `NR` a multiple of 16; the CPU runs
    /// AVX-512F wherever the tile runs).
    const PACK16: bool = false;

    /// The `MR` × `NR` tile over `kc` depths of a packed `a` panel (value (p, r) at `p * MR + r`) and a packed `w`
    /// panel (value (p, j) at `p * NR + j`): one FMA chain from zero per output, then stored at `c` (row stride
    /// `ldc`), or added to what is there when `add`.
    ///
    /// # Safety
    /// The CPU has the tile's instructions; the panels hold `kc` × `MR` and `kc` × `NR` values; `c` points at
    /// `MR` rows of `NR` writable values `ldc` apart.
    unsafe fn kernel(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool);
}

/// The AVX2/FMA tile: 6 × 16, twelve accumulators (the layout of BLIS and OpenBLAS on Haswell and Zen).
pub(crate) struct Avx2;

impl Micro for Avx2 {
    const MR: usize = 6;
    const NR: usize = 16;
    /// A packed 16-column panel of 384 depths (24 KiB) stays in a 32 KiB L1.
    const KC: usize = 384;
    /// 96 × 384 × 4 B = 144 KiB, in a 512 KiB L2.
    const MC: usize = 96;
    /// 3 MiB, shared by the threads from L3.
    const NC: usize = 2048;

    unsafe fn kernel(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
        avx2_kernel(kc, a, b, c, ldc, add)
    }
}

/// The AVX-512 tile: 14 × 32, 28 zmm accumulators, two 16-lane loads of `w` and fourteen broadcasts of `a` per
/// depth, so 28 FMAs per two loads. Its products run in the loop order of BLIS ([`super::blis`]): the `a`
/// micro-panel stays in L1 while the `w` panels stream from L2, prefetched [`AVX512_PREFETCH`] depths ahead.
pub(crate) struct Avx512;

/// Depths ahead of the one being multiplied at which the AVX-512 tile prefetches its `w` panel into L1.
const AVX512_PREFETCH: usize = 8;

impl Micro for Avx512 {
    const MR: usize = 14;
    const NR: usize = 32;
    /// An `a` micro-panel of 384 depths (21 KiB) stays in a 48 KiB L1 while the `w` panels pass; fewer depth
    /// blocks than 256 also mean fewer passes over the output (the timing runs compare both).
    const KC: usize = 384;
    /// Not used by the BLIS loop order, which sizes its blocks from the caches ([`super::blis::Blocking`]); the
    /// blocking of the older order kept for the timing runs.
    const MC: usize = 168;
    /// As [`Avx512::MC`].
    const NC: usize = 4096;
    const PACK16: bool = true;

    unsafe fn kernel(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
        avx512_kernel::<AVX512_PREFETCH>(kc, a, b, c, ldc, add)
    }
}

/// Prefetch the tile's output rows (`rows` rows, two 64-byte lines per `lines` of them).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn prefetch_rows(c: *mut f32, rows: usize, ldc: usize, lines: usize) {
    use std::arch::x86_64::*;
    for r in 0..rows {
        let row = c.add(r * ldc) as *const i8;
        for l in 0..lines {
            _mm_prefetch::<_MM_HINT_T0>(row.add(l * 64));
        }
        _mm_prefetch::<_MM_HINT_T0>(row.add(lines * 64 - 1));
    }
}

/// [`Avx2::kernel`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_kernel(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
    use std::arch::x86_64::*;
    const MR: usize = Avx2::MR;
    const NR: usize = Avx2::NR;
    prefetch_rows(c, MR, ldc, 1);
    let z = _mm256_setzero_ps();
    let mut acc = [[z; 2]; MR];
    for p in 0..kc {
        let b0 = _mm256_loadu_ps(b.add(p * NR));
        let b1 = _mm256_loadu_ps(b.add(p * NR + 8));
        let ap = a.add(p * MR);
        for (r, row) in acc.iter_mut().enumerate() {
            let x = _mm256_broadcast_ss(&*ap.add(r));
            row[0] = _mm256_fmadd_ps(x, b0, row[0]);
            row[1] = _mm256_fmadd_ps(x, b1, row[1]);
        }
    }
    for (r, row) in acc.iter().enumerate() {
        let out = c.add(r * ldc);
        let (mut v0, mut v1) = (row[0], row[1]);
        if add {
            v0 = _mm256_add_ps(_mm256_loadu_ps(out), v0);
            v1 = _mm256_add_ps(_mm256_loadu_ps(out.add(8)), v1);
        }
        _mm256_storeu_ps(out, v0);
        _mm256_storeu_ps(out.add(8), v1);
    }
}

/// [`Avx512::kernel`], prefetching the `w` panel `PF` depths ahead (none for 0).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_kernel<const PF: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    use std::arch::x86_64::*;
    const MR: usize = Avx512::MR;
    const NR: usize = Avx512::NR;
    prefetch_rows(c, MR, ldc, 2);
    let z = _mm512_setzero_ps();
    let mut acc = [[z; 2]; MR];
    for p in 0..kc {
        if PF > 0 {
            // Past the panel's end near its last depths: a prefetch never faults, and the address is not read.
            let pf = b.wrapping_add((p + PF) * NR) as *const i8;
            _mm_prefetch::<_MM_HINT_T0>(pf);
            _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(64));
        }
        let b0 = _mm512_loadu_ps(b.add(p * NR));
        let b1 = _mm512_loadu_ps(b.add(p * NR + 16));
        let ap = a.add(p * MR);
        for (r, row) in acc.iter_mut().enumerate() {
            let x = _mm512_set1_ps(*ap.add(r));
            row[0] = _mm512_fmadd_ps(x, b0, row[0]);
            row[1] = _mm512_fmadd_ps(x, b1, row[1]);
        }
    }
    for (r, row) in acc.iter().enumerate() {
        let out = c.add(r * ldc);
        let (mut v0, mut v1) = (row[0], row[1]);
        if add {
            v0 = _mm512_add_ps(_mm512_loadu_ps(out), v0);
            v1 = _mm512_add_ps(_mm512_loadu_ps(out.add(16)), v1);
        }
        _mm512_storeu_ps(out, v0);
        _mm512_storeu_ps(out.add(16), v1);
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn avx2_kernel(_: usize, _: *const f32, _: *const f32, _: *mut f32, _: usize, _: bool) {
    unreachable!("Isa::detect() is None off x86-64")
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn avx512_kernel<const PF: usize>(
    _: usize,
    _: *const f32,
    _: *const f32,
    _: *mut f32,
    _: usize,
    _: bool,
) {
    unreachable!("Isa::detect() is None off x86-64")
}

/// [`Avx512`]'s tile with depth blocks of `K`, `w` prefetched `PF` depths ahead (and `MC` rows, `NC` columns for
/// the older loop order) instead: the timing runs compare the blockings.
#[cfg(test)]
pub(super) struct Avx512Blocked<
    const K: usize,
    const PF: usize,
    const MC: usize = 168,
    const NC: usize = 4096,
>;

#[cfg(test)]
impl<const K: usize, const PF: usize, const MC: usize, const NC: usize> Micro
    for Avx512Blocked<K, PF, MC, NC>
{
    const MR: usize = Avx512::MR;
    const NR: usize = Avx512::NR;
    const KC: usize = K;
    const MC: usize = MC;
    const NC: usize = NC;
    const PACK16: bool = true;

    unsafe fn kernel(kc: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
        avx512_kernel::<PF>(kc, a, b, c, ldc, add)
    }
}
