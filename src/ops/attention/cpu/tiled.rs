//! Attention of long segments through GEMM tiles: for each query head and block of [`TILE`] query rows, the keys
//! are taken [`KEY_CHUNK`] at a time; a chunk's scores are one product (queries × keysᵀ, the `gemm` crate), `exp`
//! runs along each row, the chunk's output is a second product (exponentials × values), and an online softmax
//! merges the chunks, each row divided by its sum of exponentials at the end. The products read the keys and
//! values where they lie, through strides (a cached prefix is a second product into the same rows), and the
//! `gemm` crate blocks them for the caches, which the four-row fused kernel cannot do once a segment's keys
//! outgrow them (a full-attention layer of the vision tower sees 5,088 keys per 1080×2400 screenshot).
//!
//! Where the run attends on the packed kernel ([`crate::ops::gemm::packed`], [`super::Tiles`]), segments of at
//! least the plan's keys run on it instead ([`super::PackedPlan`]; those whose plan transposes the scores go to
//! `super::transposed` before this module sees them): each KV head's keys and values are packed once per segment,
//! blocks of query rows (a whole number of register tiles) sized so that their scores stay in L2 take their scores
//! from the packed keys into a per-thread buffer, and each output row is divided by its sum of exponentials at the
//! end.
//!
//! Each (segment, head, block) is computed on its own, with shapes that depend only on that segment, so a
//! sequence's result does not depend on the batch around it.

use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use super::{kernels, Dims, PackedPlan, Prefix};
use crate::ops::gemm::packed::{active, gemm_nt_packed, Isa, PackedW};
use crate::ops::VarlenSeg;

/// Query rows per product.
pub(crate) const TILE: usize = 128;
/// Keys per chunk of a block on the `gemm` crate: the chunk's scores (128 rows × 512, 256 KiB) and its keys and
/// values stay in L2 between the products and the `exp` pass, instead of a whole segment's scores (2.5 MiB for the
/// 5,088 keys of a screenshot) streaming through memory three times.
pub(crate) const KEY_CHUNK: usize = 512;
/// Scores of one block on the packed kernel's AVX2 tile (512 KiB, the L2 of a Zen 3 core): 18 query rows of
/// 5,088 keys.
const PACKED_SCORES_AVX2: usize = 128 * 1024;
/// Scores of one block on its AVX-512 tile (1.6 MB of the 2 MiB L2 of a recent Xeon core): 98 query rows of the
/// 3,864 keys of a Qwen3-VL screenshot, 70 of 5,088 (`timing` on such a Xeon: 1.2× the rate of 28 and 14 rows
/// at 3,864 keys; 1 MiB or 4 MiB of scores ran slower than 1.6 MB).
const PACKED_SCORES_AVX512: usize = 400_000;
/// Fewest keys of a segment attended on the packed kernel's AVX2 tile where the run attends on it
/// (`ops::attention::cpu::timing` on a Zen 3: 1.1–1.4× the `gemm` crate's tiles from 2,304 keys, even at 1,272,
/// 0.6× for a window's 64).
pub(crate) const PACKED_MIN_KEYS: usize = 2048;

/// A row-major f32 matrix view: `rows` × `cols` at `data[at + r·rs + c·cs]`.
#[derive(Clone, Copy)]
struct View<'a> {
    data: &'a [f32],
    at: usize,
    rs: usize,
    cs: usize,
}

impl<'a> View<'a> {
    fn ptr(&self) -> *const f32 {
        self.data[self.at..].as_ptr()
    }

    /// The transposed matrix.
    fn t(self) -> View<'a> {
        View {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// One query block: segment `si`, head `head`, rows `r0..r0 + rows` of the segment.
#[derive(Clone, Copy)]
struct Item {
    si: usize,
    head: usize,
    r0: usize,
    rows: usize,
}

/// The inputs every block reads.
pub(crate) struct Inputs<'a> {
    /// Queries (N, heads, d).
    pub qs: &'a [f32],
    /// Keys (N, kv_heads, d).
    pub ks: &'a [f32],
    /// Values (N, kv_heads, d).
    pub vs: &'a [f32],
    /// The segments.
    pub segs: &'a [VarlenSeg<'a>],
    /// Their cached prefixes, copied out.
    pub prefixes: &'a [Option<Prefix>],
    /// Whether each query sees only the keys up to its own position.
    pub causal: bool,
    /// Score scale.
    pub scale: f32,
    /// The segments that run on the packed kernel, with each (segment, KV head)'s keys and values packed once,
    /// and how; `None`: every segment's products run on the `gemm` crate.
    pub packed: Option<PackedPlan>,
}

impl Inputs<'_> {
    /// The keys segment `si` attends to: its cached prefix's, then its own.
    pub(super) fn keys(&self, si: usize) -> usize {
        self.segs[si].len + self.prefixes[si].as_ref().map_or(0, |x| x.3)
    }
}

/// Attention of segments `which` into `out` (N, heads, d).
pub(super) fn attend(inp: &Inputs<'_>, which: &[usize], dims: Dims, out: &mut [f32]) {
    let (packed, by_crate): (Vec<usize>, Vec<usize>) = which
        .iter()
        .partition(|&&si| inp.packed.is_some_and(|p| inp.keys(si) >= p.min_keys));
    // One segment at a time, so that only its keys and values are held packed.
    for si in packed {
        let kv: Vec<(PackedW, PackedW)> = (0..dims.kv_heads)
            .into_par_iter()
            .map(|kh| pack_kv(inp, si, kh, dims))
            .collect();
        let group = dims.heads / dims.kv_heads;
        // As many query rows as keep their scores within the budget, a whole number of register tiles.
        let (mr, budget) = packed_blocking();
        let tile = (budget / inp.keys(si)).clamp(mr, TILE) / mr * mr;
        run_items(inp, &[si], tile, dims, out, |it| {
            block_packed(inp, it, dims, &kv[it.head / group])
        });
    }
    run_items(inp, &by_crate, TILE, dims, out, |it| block(inp, it, dims));
}

/// The rows of the packed kernel's register tile on this CPU ([`Isa::describe`]: 14 × 32 with AVX-512F, 6 × 16
/// with AVX2), of which a block of query rows is a whole number so that no tile runs mostly on padding rows, and
/// the scores a block may hold.
fn packed_blocking() -> (usize, usize) {
    match active() {
        Some(Isa::Avx512) => (14, PACKED_SCORES_AVX512),
        _ => (6, PACKED_SCORES_AVX2),
    }
}

/// Every (segment of `which`, head, block of `tile` query rows) through `f` on rayon, scattered into `out`.
fn run_items(
    inp: &Inputs<'_>,
    which: &[usize],
    tile: usize,
    dims: Dims,
    out: &mut [f32],
    f: impl Fn(Item) -> Vec<f32> + Sync,
) {
    let items: Vec<Item> = which
        .iter()
        .flat_map(|&si| {
            let len = inp.segs[si].len;
            (0..dims.heads).flat_map(move |head| {
                (0..len).step_by(tile).map(move |r0| Item {
                    si,
                    head,
                    r0,
                    rows: tile.min(len - r0),
                })
            })
        })
        .collect();
    let blocks: Vec<(Item, Vec<f32>)> = items.par_iter().map(|&it| (it, f(it))).collect();
    let d = dims.d;
    for (it, o) in blocks {
        let start = inp.segs[it.si].start + it.r0;
        for i in 0..it.rows {
            let at = ((start + i) * dims.heads + it.head) * d;
            out[at..at + d].copy_from_slice(&o[i * d..(i + 1) * d]);
        }
    }
}

/// Segment `si`'s keys (the cached prefix's first) packed as `w` rows, and its values as `w` columns, for KV
/// head `kh`.
fn pack_kv(inp: &Inputs<'_>, si: usize, kh: usize, dims: Dims) -> (PackedW, PackedW) {
    let keys = inp.keys(si);
    (
        PackedW::rows(keys, dims.d, kv_row(inp, (si, kh), dims, false)),
        PackedW::columns(dims.d, keys, kv_row(inp, (si, kh), dims, true)),
    )
}

/// Key (or value) `j` of segment `si`'s KV head `kh`, counting the cached prefix's first: its `d` values.
pub(super) fn kv_row<'a>(
    inp: &Inputs<'a>,
    (si, kh): (usize, usize),
    dims: Dims,
    values: bool,
) -> impl Fn(usize) -> &'a [f32] + Sync {
    let p = inp.prefixes[si].as_ref().map_or(0, |x| x.3);
    let (prefix, rows) = kv_views(inp, (si, kh), dims, values);
    move |j: usize| {
        let (v, j) = if j < p { (prefix, j) } else { (rows, j - p) };
        &v.data[v.at + j * v.rs..][..dims.d]
    }
}

/// The keys (or values) of segment `si`'s KV head `kh`: the cached prefix's `p` rows, then the segment's rows.
fn kv_views<'a>(
    inp: &Inputs<'a>,
    (si, kh): (usize, usize),
    dims: Dims,
    values: bool,
) -> (View<'a>, View<'a>) {
    let seg = &inp.segs[si];
    let prefix = match &inp.prefixes[si] {
        Some((pk, pv, cap, _)) => View {
            data: if values { pv } else { pk },
            at: kh * cap * dims.d,
            rs: dims.d,
            cs: 1,
        },
        None => View {
            data: &[0.0],
            at: 0,
            rs: dims.d,
            cs: 1,
        },
    };
    let rows = View {
        data: if values { inp.vs } else { inp.ks },
        at: (seg.start * dims.kv_heads + kh) * dims.d,
        rs: dims.kv_heads * dims.d,
        cs: 1,
    };
    (prefix, rows)
}

/// `dst (m × n) (+)= beta · a (m × k) · b (k × n)`, single-threaded (the blocks run in parallel).
#[allow(clippy::too_many_arguments)]
fn product(
    dst: &mut [f32],
    dst_rs: usize,
    m: usize,
    n: usize,
    k: usize,
    a: View<'_>,
    b: View<'_>,
    add: bool,
    beta: f32,
) {
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    // SAFETY: every view covers its m × k or k × n elements (built from the segment's rows and the prefix's
    // valid positions), and `dst` holds m rows of `dst_rs` ≥ n elements.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            add,
            a.ptr(),
            a.cs as isize,
            a.rs as isize,
            b.ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            beta,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// The keys of the item's segment's cached prefix, and the keys any row of the block sees (the prefix's first).
fn keys_seen(inp: &Inputs<'_>, it: Item) -> (usize, usize) {
    let p = inp.prefixes[it.si].as_ref().map_or(0, |x| x.3);
    let width = if inp.causal {
        p + it.r0 + it.rows
    } else {
        p + inp.segs[it.si].len
    };
    (p, width)
}

/// The view `v` from its row `r` on.
fn from_row(v: View<'_>, r: usize) -> View<'_> {
    View {
        at: v.at + r * v.rs,
        ..v
    }
}

/// Running softmax state of a block's rows over the key chunks seen so far: each row's largest score, its sum of
/// exponentials (relative to that score) and its unnormalised output.
struct Online {
    max: Vec<f32>,
    sum: Vec<f32>,
    out: Vec<f32>,
}

/// The attention output (rows × d) of one query block, its keys taken [`KEY_CHUNK`] at a time: each chunk's scores
/// (one product per part, cached prefix and segment), `exp` of each row's visible scores less the chunk's largest,
/// their product with the chunk's values, merged into the running output with the rescaling of an online softmax;
/// each row is divided by its sum of exponentials at the end.
fn block(inp: &Inputs<'_>, it: Item, dims: Dims) -> Vec<f32> {
    let (d, seg) = (dims.d, &inp.segs[it.si]);
    let (p, width) = keys_seen(inp, it);
    let q = View {
        data: inp.qs,
        at: ((seg.start + it.r0) * dims.heads + it.head) * d,
        rs: dims.heads * d,
        cs: 1,
    };
    let kv_head = (it.si, it.head / (dims.heads / dims.kv_heads));
    let keys = kv_views(inp, kv_head, dims, false);
    let values = kv_views(inp, kv_head, dims, true);
    let mut run = Online {
        max: vec![f32::NEG_INFINITY; it.rows],
        sum: vec![0f32; it.rows],
        out: vec![0f32; it.rows * d],
    };
    let mut s = vec![0f32; it.rows * KEY_CHUNK.min(width)];
    let mut t = vec![0f32; it.rows * d];
    for c0 in (0..width).step_by(KEY_CHUNK) {
        let cw = KEY_CHUNK.min(width - c0);
        let s = &mut s[..it.rows * cw];
        // The chunk's keys c0..c0 + cw: the prefix's first (up to p), then the segment's.
        let (pre, own) = (p.saturating_sub(c0).min(cw), c0.saturating_sub(p));
        let (rows, scale) = (it.rows, inp.scale);
        product(
            s,
            cw,
            rows,
            pre,
            d,
            q,
            from_row(keys.0, c0).t(),
            false,
            scale,
        );
        let (ks, vs) = (from_row(keys.1, own).t(), from_row(values.1, own));
        product(&mut s[pre..], cw, rows, cw - pre, d, q, ks, false, scale);
        let (maxes, sums) = chunk_exp(inp, it, (p, c0), dims, s);
        let probs = |at: usize| View {
            data: s,
            at,
            rs: cw,
            cs: 1,
        };
        product(
            &mut t,
            d,
            rows,
            d,
            pre,
            probs(0),
            from_row(values.0, c0),
            false,
            1.0,
        );
        product(&mut t, d, rows, d, cw - pre, probs(pre), vs, pre > 0, 1.0);
        merge(&mut run, &t, &maxes, &sums, d);
    }
    for (row, sum) in run.out.chunks_exact_mut(d).zip(&run.sum) {
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|x| *x *= inv);
    }
    run.out
}

/// `exp(score − the row's largest visible score of the chunk)` over each row of the chunk's scores `s` (rows ×
/// width, the chunk's first key at `c0` of the `p`-key prefix and the segment), the keys the row does not see set
/// to 0; returns each row's largest score (−∞ where the row sees none of the chunk's keys) and its sum.
fn chunk_exp(
    inp: &Inputs<'_>,
    it: Item,
    (p, c0): (usize, usize),
    dims: Dims,
    s: &mut [f32],
) -> (Vec<f32>, Vec<f32>) {
    let width = s.len() / it.rows;
    s.chunks_exact_mut(width)
        .enumerate()
        .map(|(i, row)| {
            let visible = if inp.causal {
                (p + it.r0 + i + 1).saturating_sub(c0).min(width)
            } else {
                width
            };
            let (seen, rest) = row.split_at_mut(visible);
            rest.fill(0.0);
            if seen.is_empty() {
                return (f32::NEG_INFINITY, 0.0);
            }
            let m = row_max(seen);
            (m, kernels::exp_shifted(seen, dims.level))
        })
        .unzip()
}

/// The largest value of a non-empty row, in 16 interleaved lanes (so that the loop vectorises).
fn row_max(row: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let chunks = row.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    rest.iter()
        .chain(&acc)
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

/// Merge a chunk's output `t` (rows × d, against `exp(score − maxes[i])`, summing to `sums[i]`) into the running
/// state: both sides rescaled to the larger of the two maxima.
fn merge(run: &mut Online, t: &[f32], maxes: &[f32], sums: &[f32], d: usize) {
    for (i, (&mc, &sc)) in maxes.iter().zip(sums).enumerate() {
        if mc == f32::NEG_INFINITY {
            continue;
        }
        let m = run.max[i].max(mc);
        let (a, b) = ((run.max[i] - m).exp(), (mc - m).exp());
        run.max[i] = m;
        run.sum[i] = run.sum[i] * a + sc * b;
        let o = &mut run.out[i * d..(i + 1) * d];
        for (x, y) in o.iter_mut().zip(&t[i * d..(i + 1) * d]) {
            *x = *x * a + y * b;
        }
    }
}

/// [`block`] on the packed kernel, with the keys and values of the item's KV head packed ([`pack_kv`]): the
/// scale is applied to the queries, and each output row divided by its row's sum of exponentials at the end
/// rather than each probability (fewer passes over the scores).
fn block_packed(
    inp: &Inputs<'_>,
    it: Item,
    dims: Dims,
    (keys, values): &(PackedW, PackedW),
) -> Vec<f32> {
    let (d, seg) = (dims.d, &inp.segs[it.si]);
    let width = keys_seen(inp, it).1;
    let q: Vec<f32> = (0..it.rows)
        .flat_map(|i| {
            let at = ((seg.start + it.r0 + i) * dims.heads + it.head) * d;
            inp.qs[at..at + d].iter().map(|x| x * inp.scale)
        })
        .collect();
    SCORES.with_borrow_mut(|s| {
        if s.len() < it.rows * width {
            s.resize(it.rows * width, 0.0);
        }
        let s = &mut s[..it.rows * width];
        attend_packed(inp, it, dims, (&q, keys, values), s)
    })
}

thread_local! {
    /// Each thread's scores of its packed blocks, kept between blocks: a block's megabyte of scores taken fresh
    /// from the allocator would be zeroed (and its pages faulted in) once per block.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The rest of [`block_packed`] with the block's scaled queries `q` (rows × d) and its scores buffer `s` (rows ×
/// the keys the block sees).
fn attend_packed(
    inp: &Inputs<'_>,
    it: Item,
    dims: Dims,
    (q, keys, values): (&[f32], &PackedW, &PackedW),
    s: &mut [f32],
) -> Vec<f32> {
    let d = dims.d;
    let (p, width) = keys_seen(inp, it);
    gemm_nt_packed(
        it.rows,
        (d, width),
        |i| &q[i * d..(i + 1) * d],
        keys,
        s,
        width,
    );
    let sums: Vec<f32> = s
        .chunks_exact_mut(width)
        .enumerate()
        .map(|(i, row)| {
            let visible = if inp.causal { p + it.r0 + i + 1 } else { width };
            let (seen, rest) = row.split_at_mut(visible);
            rest.fill(0.0);
            kernels::exp_shifted(seen, dims.level)
        })
        .collect();
    let mut o = vec![0f32; it.rows * d];
    let probs = |i: usize| &s[i * width..(i + 1) * width];
    gemm_nt_packed(it.rows, (width, d), probs, values, &mut o, d);
    for (row, sum) in o.chunks_exact_mut(d).zip(sums) {
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|x| *x *= inv);
    }
    o
}
