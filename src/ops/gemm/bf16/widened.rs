//! bf16 row segments by the f32 GEMM on exact f32 copies: the weight widened once per call, the rows a block at a
//! time, each block's f32 sums (the `gemm` crate's, as candle's f32 matmul computes them) plus the bias rounded to
//! bf16 once. A bf16 product is exact in f32, so this is the bf16 GEMM with f32 sums, as the other kernels compute
//! it, in another order of the sums. It serves CPUs where `vdpbf16ps` runs at half the f32 FMA's rate or less (Intel's
//! AVX512-BF16 cores without AMX): there the f32 FMA on the copies multiplies faster than the dot products, and
//! faster than candle's bf16 matmul, which widens its operands while packing them for every block it multiplies.
//! The weights stay in bf16 in memory; the copies (of one weight, of one block of rows, and that block's sums) are
//! buffers kept between calls, as large as the largest call's: up to about 100 MB for the `small` checkpoint.

use std::mem::MaybeUninit;

use half::bf16;
use rayon::prelude::*;

use crate::ops::cpu_data::{as_storage, zeroed};
use crate::ops::elementwise::bf16::{map_into, round, swiglu_row};
use crate::ops::simd::{vectorised, Level};

/// Most rows of a segment multiplied at a time, so that their f32 copy and sums stay tens of MB however long the
/// segment (a screenshot's 5,088 rows in five blocks); a text prompt's thousand-odd rows are one or two blocks.
const BLOCK_ROWS: usize = 1024;

/// The rows of each block of a segment of `m` rows: as few blocks as [`BLOCK_ROWS`] allows, of equal lengths (the
/// last shorter), since the `gemm` crate multiplies a short block at a lower rate.
fn block_len(m: usize) -> usize {
    m.div_ceil(m.div_ceil(BLOCK_ROWS).max(1))
}

/// Values stored per rayon task, at least.
const CHUNK: usize = 1 << 14;

/// `c = a · wᵀ + bias` for bf16 `a` (m × k), `w` (n × k) and `bias` (n values or empty) into `c` (m × n), which it
/// writes without reading ([`super::Kernel`]). A row's bits depend on the segment's length (its block), not on the
/// threads.
pub fn gemm_nt(
    a: &[bf16],
    w: &[bf16],
    bias: &[f32],
    (m, k, n): (usize, usize, usize),
    c: &mut [MaybeUninit<bf16>],
) {
    assert!(a.len() >= m * k && w.len() >= n * k && c.len() >= m * n);
    assert!(
        bias.is_empty() || bias.len() == n,
        "bias of {} for {n}",
        bias.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        return super::no_depth(c, (m, n), bias);
    }
    by_blocks(a, w, (m, k, n), |r0, sums, rows| {
        let c = &mut c[r0 * n..(r0 + rows) * n];
        c.par_chunks_mut(n)
            .zip(sums.par_chunks(n))
            .with_min_len(CHUNK.div_ceil(n))
            .for_each(|(o, s)| vectorised(|| store_row(s, bias, o)));
    });
}

/// `silu(a · gᵀ + b_g) · (a · uᵀ + b_u)` for the gate-up weight `w` = [g | u] (2I × k) and its bias (2I values or
/// empty) into `c` (m × I): the bits of [`gemm_nt`]'s product followed by the bf16 SwiGLU pass
/// (`elementwise::bf16::swiglu_packed`), without the m × 2I product in memory. Panics where `k` is 0.
pub fn gemm_nt_swiglu(
    a: &[bf16],
    w: &[bf16],
    bias: &[f32],
    (m, k, i): (usize, usize, usize),
    c: &mut [MaybeUninit<bf16>],
) {
    if !super::swiglu_has_work(a, w, bias, (m, k, i), c) {
        return;
    }
    let (bg, bu) = match bias.is_empty() {
        true => (&[][..], &[][..]),
        false => bias.split_at(i),
    };
    let (level, ones) = (Level::detect(), vec![1f32; i]);
    by_blocks(a, w, (m, k, 2 * i), |r0, sums, rows| {
        let c = &mut c[r0 * i..(r0 + rows) * i];
        let scratch = || (vec![0f32; i], vec![0f32; i], vec![0f32; i]);
        c.par_chunks_mut(i)
            .zip(sums.par_chunks(2 * i))
            .with_min_len(8)
            .for_each_init(scratch, |(g, u, silu), (o, s)| {
                vectorised(
                    #[inline(always)]
                    || {
                        let (sg, su) = s.split_at(i);
                        rounded_sums(sg, bg, g);
                        rounded_sums(su, bu, u);
                        swiglu_row((g, u), &ones, silu, level, zeroed(o));
                    },
                )
            });
    });
}

/// The f32 product of `a` (m × k) and `w` (n × k, k > 0, m and n > 0) a block of [`block_len`] rows at a time:
/// `store(first row, sums, rows)` with the block's row-major sums (rows × n).
fn by_blocks(
    a: &[bf16],
    w: &[bf16],
    (m, k, n): (usize, usize, usize),
    mut store: impl FnMut(usize, &[f32], usize),
) {
    let block = block_len(m);
    let mut scratch = Scratch::take();
    let [wide, rows_f32, sums] = &mut scratch.0;
    // SAFETY (all three): widen_into and the product write f32 values only.
    widen_into(&w[..n * k], unsafe { as_storage(sized(wide, n * k)) });
    let (rows_f32, sums) = (sized(rows_f32, block * k), sized(sums, block * n));
    let threads = candle_core::utils::get_num_threads();
    for r0 in (0..m).step_by(block) {
        let rows = block.min(m - r0);
        // SAFETY: as above.
        let copy = unsafe { as_storage(&mut rows_f32[..rows * k]) };
        widen_into(&a[r0 * k..(r0 + rows) * k], copy);
        // SAFETY: the operands hold rows × k and n × k values, the sums rows × n.
        unsafe {
            crate::ops::gemm::gemm_crate_nt(
                &rows_f32[..rows * k],
                &wide[..n * k],
                (rows, k, n),
                sums.as_mut_ptr(),
                threads,
            )
        };
        store(r0, &sums[..rows * n], rows);
    }
    scratch.give_back();
}

/// The f32 copies and sums of [`by_blocks`], kept between calls: fresh buffers of tens of MB cost a page fault per
/// 4 KiB on their first writes at every call (a quarter of a product's time at the text model's sizes). The pool
/// holds the buffers of the calls that ran at once, each as large as the largest call that used it.
struct Scratch([Vec<f32>; 3]);

static POOL: std::sync::Mutex<Vec<Scratch>> = std::sync::Mutex::new(Vec::new());

impl Scratch {
    fn take() -> Self {
        let pooled = POOL.lock().unwrap_or_else(|e| e.into_inner()).pop();
        pooled.unwrap_or(Self([Vec::new(), Vec::new(), Vec::new()]))
    }

    fn give_back(self) {
        POOL.lock().unwrap_or_else(|e| e.into_inner()).push(self);
    }
}

/// The first `len` values of `buf`, grown (with zeros, to exactly `len`) where it is shorter.
fn sized(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buf.len() < len {
        buf.reserve_exact(len - buf.len());
        buf.resize(len, 0.0);
    }
    &mut buf[..len]
}

/// `o = x` widened to f32 (exactly), in parallel chunks.
fn widen_into(x: &[bf16], o: &mut [MaybeUninit<f32>]) {
    map_into(x, o, |x| x.to_f32());
}

/// One output row: `o[j] = bf16(s[j] + bias[j])` (no bias where `bias` is empty).
#[inline(always)]
fn store_row(s: &[f32], bias: &[f32], o: &mut [MaybeUninit<bf16>]) {
    match bias.is_empty() {
        true => o.iter_mut().zip(s).for_each(|(o, s)| {
            o.write(round(*s));
        }),
        false => {
            for ((o, s), b) in o.iter_mut().zip(s).zip(bias) {
                o.write(round(s + b));
            }
        }
    }
}

/// `o[j] = bf16(s[j] + bias[j])` widened back to f32: the product's bits as the SwiGLU pass reads them.
#[inline(always)]
fn rounded_sums(s: &[f32], bias: &[f32], o: &mut [f32]) {
    match bias.is_empty() {
        true => o
            .iter_mut()
            .zip(s)
            .for_each(|(o, s)| *o = round(*s).to_f32()),
        false => {
            for ((o, s), b) in o.iter_mut().zip(s).zip(bias) {
                *o = round(s + b).to_f32();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::check;
    use super::*;

    #[test]
    fn matches_a_float64_reference_on_odd_shapes_and_several_blocks() {
        check::matches_reference(
            &gemm_nt,
            &[
                (1, 1, 1),
                (3, 17, 5),
                (40, 70, 33),
                (2 * BLOCK_ROWS + 7, 24, 9),
            ],
        );
    }

    #[test]
    fn swiglu_matches_the_product_then_the_swiglu_pass() {
        check::swiglu_matches_product_then_pass(
            &gemm_nt,
            &gemm_nt_swiglu,
            &[(1, 3, 1), (9, 40, 21), (BLOCK_ROWS + 3, 16, 24)],
        );
    }

    /// A block's rows get the bits of the same rows multiplied alone (the blocks are products of their own), and
    /// one thread gives the bits of two.
    #[test]
    fn blocks_stand_alone_and_the_bits_do_not_depend_on_the_threads() {
        let (m, k, n) = (2 * BLOCK_ROWS + 40, 96, 50);
        let b = block_len(m);
        assert_eq!(
            (b, block_len(b)),
            (696, 696),
            "three blocks of equal length"
        );
        check::rows_stand_alone(&gemm_nt, (m, k, n), &[0..b, b..2 * b, 2 * b..m]);
    }

    #[test]
    fn no_depth_gives_the_bias() {
        let bias = [1.5f32, -2.0, 0.25];
        let mut c = vec![bf16::NAN; 2 * 3];
        gemm_nt(&[], &[], &bias, (2, 0, 3), check::storage(&mut c));
        let want: Vec<bf16> = [bias, bias]
            .concat()
            .iter()
            .map(|&b| bf16::from_f32(b))
            .collect();
        assert_eq!(c, want);
    }
}
