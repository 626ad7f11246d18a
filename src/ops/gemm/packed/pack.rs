//! Packing with AVX-512: a panel is the transpose of up to 16 source rows over the depths, done 16 depths at
//! a time as a 16 × 16 transpose in registers (unpack, in-lane shuffle, lane shuffle) instead of one value at a
//! time. Only data moves, so the packed panels are the scalar packing's, bit for bit.

/// Write the transpose of `rows` (at most 16 source rows, each holding at least `kc` values from its pointer;
/// missing rows count as zeros) into `dst`: depth `p` of row `r` at `dst[p * stride + r]`, for the lanes of
/// `lanes` only (a mask of the 16 rows; `stride` ≥ its highest row + 1).
///
/// # Safety
/// The CPU has AVX-512F; `dst` has room for `kc` rows of `stride` values, and the masked lanes of the last one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn transpose_into(
    rows: &[*const f32],
    kc: usize,
    dst: *mut f32,
    stride: usize,
    lanes: u16,
) {
    use std::arch::x86_64::*;
    debug_assert!(rows.len() <= 16);
    let mut p0 = 0;
    while p0 < kc {
        let len = (kc - p0).min(16);
        let load_mask: u16 = if len == 16 {
            u16::MAX
        } else {
            (1u16 << len) - 1
        };
        let mut r = [_mm512_setzero_ps(); 16];
        for (v, &src) in r.iter_mut().zip(rows) {
            *v = _mm512_maskz_loadu_ps(load_mask, src.add(p0));
        }
        let t = transpose16(r);
        for (q, v) in t.iter().take(len).enumerate() {
            _mm512_mask_storeu_ps(dst.add((p0 + q) * stride), lanes, *v);
        }
        p0 += 16;
    }
}

/// The transpose of a 16 × 16 block held as 16 rows (also the AMX bf16 GEMM's accumulator tiles). Inlined, so
/// that the 16 rows stay in registers instead of passing through memory.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn transpose16(
    r: [std::arch::x86_64::__m512; 16],
) -> [std::arch::x86_64::__m512; 16] {
    use std::arch::x86_64::*;
    let z = _mm512_setzero_ps();
    // Pairs of rows interleaved: in each 128-bit lane, values 0-1 (lo) or 2-3 (hi) of two rows.
    let mut t = [z; 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // Groups of four rows: u[4g + j] holds, in lane l, column 4l + j of rows 4g..4g+4.
    let mut u = [z; 16];
    for g in 0..4 {
        let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        u[4 * g] = _mm512_shuffle_ps::<0x44>(a, c);
        u[4 * g + 1] = _mm512_shuffle_ps::<0xEE>(a, c);
        u[4 * g + 2] = _mm512_shuffle_ps::<0x44>(b, d);
        u[4 * g + 3] = _mm512_shuffle_ps::<0xEE>(b, d);
    }
    // The four groups' lanes gathered: column 4l + j from lane l of u[j], u[4 + j], u[8 + j], u[12 + j].
    let mut out = [z; 16];
    for j in 0..4 {
        let v0 = _mm512_shuffle_f32x4::<0x88>(u[j], u[4 + j]);
        let v1 = _mm512_shuffle_f32x4::<0xDD>(u[j], u[4 + j]);
        let w0 = _mm512_shuffle_f32x4::<0x88>(u[8 + j], u[12 + j]);
        let w1 = _mm512_shuffle_f32x4::<0xDD>(u[8 + j], u[12 + j]);
        out[j] = _mm512_shuffle_f32x4::<0x88>(v0, w0);
        out[4 + j] = _mm512_shuffle_f32x4::<0x88>(v1, w1);
        out[8 + j] = _mm512_shuffle_f32x4::<0xDD>(v0, w0);
        out[12 + j] = _mm512_shuffle_f32x4::<0xDD>(v1, w1);
    }
    out
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn transpose_into(_: &[*const f32], _: usize, _: *mut f32, _: usize, _: u16) {
    unreachable!("Isa::detect() is None off x86-64")
}

#[cfg(test)]
mod tests {
    use super::super::check::skip_without_avx512;

    /// Fewer rows than lanes, depths not a multiple of 16, and the lanes masked: each value lands at its place,
    /// missing rows as zeros, lanes outside the mask untouched.
    #[test]
    fn transposes_ragged_rows_and_depths_into_the_masked_lanes() {
        if skip_without_avx512() {
            return;
        }
        for (rows, kc, stride, lanes) in [
            (14, 37, 14, 0x3FFF_u16),
            (5, 16, 32, u16::MAX),
            (16, 3, 16, u16::MAX),
            (4, 20, 16, 0x00FF),
        ] {
            let src: Vec<Vec<f32>> = (0..rows)
                .map(|r| (0..kc).map(|p| (r * 1000 + p) as f32).collect())
                .collect();
            let ptrs: Vec<*const f32> = src.iter().map(|r| r.as_ptr()).collect();
            let mut dst = vec![-1f32; kc * stride + 16];
            // SAFETY: AVX-512F checked; each row holds kc values; dst has kc rows of stride and 16 to spare.
            unsafe { super::transpose_into(&ptrs, kc, dst.as_mut_ptr(), stride, lanes) };
            for p in 0..kc {
                for r in 0..stride {
                    let want = if r >= 16 || lanes >> r & 1 == 0 {
                        -1.0
                    } else if r < rows {
                        (r * 1000 + p) as f32
                    } else {
                        0.0
                    };
                    assert_eq!(
                        dst[p * stride + r],
                        want,
                        "rows {rows} kc {kc}: depth {p} row {r}"
                    );
                }
            }
        }
    }
}
