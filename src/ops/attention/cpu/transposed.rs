//! Attention of long segments on the packed kernel with the scores transposed: the keys are the register tile's
//! rows and the queries its columns, so that no product needs a packing pass over the scores.
//!
//! For each (segment, KV head) the keys are packed once as the tile's row panels (depth: the head dimension) and
//! the values, transposed, as row panels over the keys. A work item is a head and a group of query panels (the
//! tile's columns, [`Micro::NR`] queries each): its scaled queries are packed as column panels; the first product
//! (keys × queries) writes each panel's scores key after key, `NR` queries per key, which is the layout of a
//! column panel over the keys, so the second product (valuesᵀ × probabilities) reads the scores where they lie.
//! The softmax runs down the columns (each query's maximum and sum are whole-register maxima and additions, no
//! horizontal reductions), and each output column is divided by its sum at the end. Causal attention takes each
//! panel over the keys its last query sees and hides the later keys from the earlier queries.
//!
//! Each query's result depends only on its segment and head (every column of the products and of the softmax is
//! computed on its own, in a fixed order, and the keys a query does not see add exact zeros), so it does not depend
//! on the batch or on the query's place in a panel.

use rayon::prelude::*;

use super::tiled::{kv_row, Inputs};
use super::Dims;
use crate::ops::gemm::packed::{pack_panel, pack_rows, Avx2, Avx512, Isa, Micro};
use crate::ops::simd::Level;

/// Scores one work item holds (floats: 1 MiB, in the L2 of the cores the packed kernel runs on): as many query
/// panels as fit, at least one.
const SCORES: usize = 256 * 1024;
/// Fewest keys of a full-attention segment attended with transposed scores on the AVX-512 tile (`timing` on an
/// AVX-512 Xeon: 1.1× the `gemm` crate's query-block tiles at 512 keys, 0.7× for a window's 64).
pub(crate) const MIN_KEYS_AVX512: usize = 512;
/// Most query panels in one work item.
const MAX_PANELS: usize = 4;

/// Attention of segment `si` into `out` (N, heads, d) on the tile of `isa`.
pub(super) fn attend(inp: &Inputs<'_>, si: usize, dims: Dims, isa: Isa, out: &mut [f32]) {
    match isa {
        Isa::Avx2 => attend_with::<Avx2>(inp, si, dims, out),
        Isa::Avx512 => attend_with::<Avx512>(inp, si, dims, out),
    }
}

/// One (segment, KV head)'s keys and values, packed.
struct KeysValues {
    /// Keys as row panels of `MR` keys over the head dimension (the last panel padded with zero keys).
    keys: Vec<f32>,
    /// Valuesᵀ: for each block of `KC` keys, row panels of `MR` value dimensions over the block's keys (the last
    /// panel padded with zero rows).
    values_t: Vec<f32>,
}

/// Shapes of one segment's products.
#[derive(Clone, Copy)]
struct Shape {
    /// Keys the segment's queries see.
    keys: usize,
    /// `keys` rounded up to whole row panels.
    keys_pad: usize,
    /// The head dimension.
    d: usize,
    /// `d` rounded up to whole row panels.
    d_pad: usize,
    /// The vector path of the softmax.
    level: Level,
}

fn attend_with<M: Micro>(inp: &Inputs<'_>, si: usize, dims: Dims, out: &mut [f32]) {
    let keys = inp.keys(si);
    let shape = Shape {
        keys,
        keys_pad: keys.div_ceil(M::MR) * M::MR,
        d: dims.d,
        d_pad: dims.d.div_ceil(M::MR) * M::MR,
        level: dims.level,
    };
    let kv: Vec<KeysValues> = (0..dims.kv_heads)
        .into_par_iter()
        .map(|kh| pack::<M>(inp, (si, kh), dims, shape))
        .collect();
    let len = inp.segs[si].len;
    let per_item = (SCORES / (shape.keys_pad * M::NR)).clamp(1, MAX_PANELS) * M::NR;
    let items: Vec<(usize, usize)> = (0..dims.heads)
        .flat_map(|h| (0..len).step_by(per_item).map(move |q0| (h, q0)))
        .collect();
    let group = dims.heads / dims.kv_heads;
    let blocks: Vec<Vec<f32>> = items
        .par_iter()
        .map(|&(h, q0)| {
            let rows = per_item.min(len - q0);
            let queries = scaled_queries(inp, (si, h, q0, rows), dims);
            let first = inp.causal.then(|| keys - len + q0);
            block::<M>(&queries, (rows, first), &kv[h / group], shape)
        })
        .collect();
    let (start, d) = (inp.segs[si].start, dims.d);
    for (&(h, q0), o) in items.iter().zip(blocks) {
        for (i, row) in o.chunks_exact(d).enumerate() {
            let at = ((start + q0 + i) * dims.heads + h) * d;
            out[at..at + d].copy_from_slice(row);
        }
    }
}

/// Pack segment `si`'s KV head `kh`.
fn pack<M: Micro>(inp: &Inputs<'_>, sk: (usize, usize), dims: Dims, s: Shape) -> KeysValues {
    let mut keys = vec![0f32; s.keys_pad * s.d];
    pack_rows::<M>(
        kv_row(inp, sk, dims, false),
        (0, s.keys),
        (0, s.d),
        &mut keys,
    );
    let value = kv_row(inp, sk, dims, true);
    let mut values_t = vec![0f32; s.d_pad * s.keys];
    for pc in (0..s.keys).step_by(M::KC) {
        let kc = M::KC.min(s.keys - pc);
        let block = &mut values_t[pc * s.d_pad..][..s.d_pad * kc];
        for p in 0..kc {
            let v = value(pc + p);
            for (t, panel) in block.chunks_exact_mut(M::MR * kc).enumerate() {
                let rows = t * M::MR..s.d.min((t + 1) * M::MR);
                panel[p * M::MR..][..rows.len()].copy_from_slice(&v[rows]);
            }
        }
    }
    KeysValues { keys, values_t }
}

/// Rows `q0..q0 + rows` of head `h` of segment `si`'s queries, times the score scale (rows × d).
fn scaled_queries(
    inp: &Inputs<'_>,
    (si, h, q0, rows): (usize, usize, usize, usize),
    dims: Dims,
) -> Vec<f32> {
    let (d, start) = (dims.d, inp.segs[si].start + q0);
    let mut q = Vec::with_capacity(rows * d);
    for i in 0..rows {
        let at = ((start + i) * dims.heads + h) * d;
        q.extend(inp.qs[at..at + d].iter().map(|x| x * inp.scale));
    }
    q
}

thread_local! {
    /// Each thread's scores and transposed outputs, kept between work items (a megabyte taken fresh from the
    /// allocator would be zeroed and faulted in once per item).
    static BUFFERS: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// The attention output (rows × d) of the scaled queries `q` (rows × d) against one KV head; causal attention
/// where `first` is given (the first query's place in the sequence, counted with the prefix: it sees the keys up to
/// its own).
fn block<M: Micro>(
    q: &[f32],
    (rows, first): (usize, Option<usize>),
    kv: &KeysValues,
    s: Shape,
) -> Vec<f32> {
    let (nr, panels) = (M::NR, rows.div_ceil(M::NR));
    let mut qp = vec![0f32; panels * nr * s.d];
    for (g, panel) in qp.chunks_exact_mut(nr * s.d).enumerate() {
        let cols = (g * nr, rows.min((g + 1) * nr));
        pack_panel::<M>(|i| &q[i * s.d..(i + 1) * s.d], cols, (0, s.d), panel);
    }
    // The keys each panel's queries see, and the first query of each panel's place.
    let depths: Vec<usize> = (0..panels)
        .map(|g| first.map_or(s.keys, |f| f + rows.min((g + 1) * nr)))
        .collect();
    let hide = |scores: &mut [f32], value: f32| {
        if let Some(f) = first {
            let panels = scores.chunks_exact_mut(s.keys_pad * nr).zip(&depths);
            for (g, (panel, &depth)) in panels.enumerate() {
                hide_future(panel, (f + g * nr, depth), nr, value);
            }
        }
    };
    BUFFERS.with_borrow_mut(|(scores, out_t)| {
        grow(scores, panels * s.keys_pad * nr);
        grow(out_t, panels * s.d_pad * nr);
        let scores = &mut scores[..panels * s.keys_pad * nr];
        let out_t = &mut out_t[..panels * s.d_pad * nr];
        score::<M>(&qp, kv, (s, &depths), scores);
        hide(scores, f32::NEG_INFINITY);
        // Each column's largest score is a key it sees, so its sum is at least 1 before the hidden keys' (clamped)
        // exponentials of about 1e-38 join it, which leaves it as it was; the hidden keys are then weighed by 0.
        let sums: Vec<f32> = scores
            .chunks_exact_mut(s.keys_pad * nr)
            .zip(&depths)
            .flat_map(|(panel, &depth)| softmax_columns(&mut panel[..depth * nr], nr, s.level))
            .collect();
        hide(scores, 0.0);
        weigh::<M>(scores, kv, (s, &depths), out_t);
        let mut o = vec![0f32; rows * s.d];
        for (i, row) in o.chunks_exact_mut(s.d).enumerate() {
            let (g, c) = (i / nr, i % nr);
            let col = &out_t[g * s.d_pad * nr + c..];
            let inv = 1.0 / sums[i];
            for (r, x) in row.iter_mut().enumerate() {
                *x = col[r * nr] * inv;
            }
        }
        o
    })
}

fn grow(v: &mut Vec<f32>, len: usize) {
    if v.len() < len {
        v.resize(len, 0.0);
    }
}

/// The scores of the keys (rows, `MR` at a time) against every packed query panel `qp` (columns), panel `g` over
/// its first `depths[g]` keys (rounded up to whole key panels): its scores at `scores[g · keys_pad · NR..]`, key
/// `j`'s `NR` queries at `j · NR`.
fn score<M: Micro>(
    qp: &[f32],
    kv: &KeysValues,
    (s, depths): (Shape, &[usize]),
    scores: &mut [f32],
) {
    let nr = M::NR;
    for (t, keys) in kv.keys.chunks_exact(M::MR * s.d).enumerate() {
        let panels = qp
            .chunks_exact(nr * s.d)
            .zip(scores.chunks_exact_mut(s.keys_pad * nr));
        for ((panel, sp), _) in panels.zip(depths).filter(|x| t * M::MR < *x.1) {
            // SAFETY: the packed kernel's tile runs on this CPU (the caller's `Isa`); the key panel holds d × MR
            // values, the query panel d × NR, and the scores MR rows of NR from the panel's key t · MR.
            unsafe {
                M::kernel(
                    s.d,
                    keys.as_ptr(),
                    panel.as_ptr(),
                    sp[t * M::MR * nr..].as_mut_ptr(),
                    nr,
                    false,
                )
            };
        }
    }
}

/// Each panel's output transposed (value dimensions × NR queries, `d_pad` rows) at `out_t[g · d_pad · NR..]`:
/// valuesᵀ × the panel's probabilities over its first `depths[g]` keys, in blocks of `KC` keys added in order.
fn weigh<M: Micro>(
    scores: &[f32],
    kv: &KeysValues,
    (s, depths): (Shape, &[usize]),
    out_t: &mut [f32],
) {
    let nr = M::NR;
    for pc in (0..s.keys).step_by(M::KC) {
        let kc = M::KC.min(s.keys - pc);
        let block = &kv.values_t[pc * s.d_pad..][..s.d_pad * kc];
        for (t, values) in block.chunks_exact(M::MR * kc).enumerate() {
            let panels = scores
                .chunks_exact(s.keys_pad * nr)
                .zip(out_t.chunks_exact_mut(s.d_pad * nr));
            for ((sp, op), &depth) in panels.zip(depths).filter(|x| pc < *x.1) {
                // SAFETY: as in `score`; the values panel holds kc × MR values (its first depths are those of a
                // shorter block), the probabilities from key pc hold kc rows of NR (pc + kc ≤ keys), the output MR
                // rows of NR from row t · MR.
                unsafe {
                    M::kernel(
                        kc.min(depth - pc),
                        values.as_ptr(),
                        sp[pc * nr..].as_ptr(),
                        op[t * M::MR * nr..].as_mut_ptr(),
                        nr,
                        pc > 0,
                    )
                };
            }
        }
    }
}

/// Set the scores of the keys that causal attention hides from each query of a panel to `value`: the panel's
/// column `c` (query `first + c` of the sequence, keys counted with the prefix) sees keys up to `first + c`, and
/// the panel holds `depth` keys.
fn hide_future(panel: &mut [f32], (first, depth): (usize, usize), nr: usize, value: f32) {
    for j in first + 1..depth {
        let hidden = (j - first).min(nr);
        panel[j * nr..j * nr + hidden].fill(value);
    }
}

/// `x ← exp(x − the column's largest)` down each of the `nr` columns of `panel` (rows of `nr`), returning each
/// column's sum of exponentials, on the vector path `level` (the same bits on each: the AVX-512 `exp` is the
/// AVX2 one lane for lane, and every column's sum runs down the rows in order).
fn softmax_columns(panel: &mut [f32], nr: usize, level: Level) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && nr.is_multiple_of(16) && nr <= 64 {
            // SAFETY: the CPU supports `level` (AVX-512F, AVX2 and FMA).
            return unsafe { vector::softmax_columns_avx512(panel, nr) };
        }
        if level != Level::Portable && nr.is_multiple_of(8) && nr <= 32 {
            // SAFETY: the CPU supports `level`, AVX2 and FMA at least.
            return unsafe { vector::softmax_columns_avx2(panel, nr) };
        }
    }
    let mut max = vec![f32::NEG_INFINITY; nr];
    for row in panel.chunks_exact(nr) {
        max.iter_mut().zip(row).for_each(|(m, &x)| *m = m.max(x));
    }
    let mut sum = vec![0f32; nr];
    for row in panel.chunks_exact_mut(nr) {
        for ((x, m), s) in row.iter_mut().zip(&max).zip(&mut sum) {
            *x = (*x - m).exp();
            *s += *x;
        }
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod vector {
    use std::arch::x86_64::*;

    use crate::ops::simd::{avx2::exp8, avx512::exp16};

    /// [`super::softmax_columns`] 16 columns at a time, a row's registers side by side.
    ///
    /// # Safety
    /// The CPU has AVX-512F, AVX2 and FMA; `nr` is a multiple of 16, at most 64, and `panel` whole rows of it.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn softmax_columns_avx512(panel: &mut [f32], nr: usize) -> Vec<f32> {
        let (rows, regs, p) = (panel.len() / nr, nr / 16, panel.as_mut_ptr());
        let mut m = [_mm512_set1_ps(f32::NEG_INFINITY); 4];
        for r in 0..rows {
            for (g, m) in m.iter_mut().take(regs).enumerate() {
                *m = _mm512_max_ps(*m, _mm512_loadu_ps(p.add(r * nr + g * 16)));
            }
        }
        let mut s = [_mm512_setzero_ps(); 4];
        for r in 0..rows {
            for (g, (s, m)) in s.iter_mut().zip(&m).take(regs).enumerate() {
                let x = p.add(r * nr + g * 16);
                let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x), *m));
                _mm512_storeu_ps(x, e);
                *s = _mm512_add_ps(*s, e);
            }
        }
        let mut sums = vec![0f32; nr];
        for (g, s) in s.iter().take(regs).enumerate() {
            _mm512_storeu_ps(sums.as_mut_ptr().add(g * 16), *s);
        }
        sums
    }

    /// [`super::softmax_columns`] 8 columns at a time, a row's registers side by side.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `nr` is a multiple of 8, at most 32, and `panel` whole rows of it.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax_columns_avx2(panel: &mut [f32], nr: usize) -> Vec<f32> {
        let (rows, regs, p) = (panel.len() / nr, nr / 8, panel.as_mut_ptr());
        let mut m = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
        for r in 0..rows {
            for (g, m) in m.iter_mut().take(regs).enumerate() {
                *m = _mm256_max_ps(*m, _mm256_loadu_ps(p.add(r * nr + g * 8)));
            }
        }
        let mut s = [_mm256_setzero_ps(); 4];
        for r in 0..rows {
            for (g, (s, m)) in s.iter_mut().zip(&m).take(regs).enumerate() {
                let x = p.add(r * nr + g * 8);
                let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x), *m));
                _mm256_storeu_ps(x, e);
                *s = _mm256_add_ps(*s, e);
            }
        }
        let mut sums = vec![0f32; nr];
        for (g, s) in s.iter().take(regs).enumerate() {
            _mm256_storeu_ps(sums.as_mut_ptr().add(g * 8), *s);
        }
        sums
    }
}

#[cfg(test)]
mod tests;
