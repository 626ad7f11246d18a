//! Attention of long segments through GEMM tiles: for each query head and block of [`TILE`] query rows, the
//! scores of every visible key are one product (queries × keysᵀ, the `gemm` crate), softmax runs along each
//! row, and the output is a second product (probabilities × values). The products read the keys and values
//! where they lie, through strides (a cached prefix is a second product into the same rows), and the `gemm`
//! crate blocks them for the caches, which the four-row fused kernel cannot do once a segment's keys outgrow
//! them (a full-attention layer of the vision tower sees 5,088 keys per 1080×2400 screenshot).
//!
//! Where the packed AVX2 kernel is the built-in GEMM ([`crate::ops::gemm::packed`]), segments of at least
//! [`PACKED_MIN_KEYS`] keys run on it instead: each KV head's keys and values are packed once per segment, blocks
//! of query rows sized so that their scores stay in L2 take their scores from the packed keys, and each output row
//! is divided by its sum of exponentials at the end.
//!
//! Each (segment, head, block) is computed on its own, with shapes that depend only on that segment, so a
//! sequence's result does not depend on the batch around it.

use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use super::{kernels, Dims, Prefix};
use crate::ops::gemm::packed::{gemm_nt_packed, PackedW};
use crate::ops::VarlenSeg;

/// Query rows per product.
pub(crate) const TILE: usize = 128;
/// Scores of one block on the packed kernel (512 KiB, an L2's worth): 24 query rows of 5,088 keys.
const PACKED_SCORES: usize = 128 * 1024;
/// Fewest keys of a segment attended on the packed kernel where it is the built-in GEMM
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
    /// Fewest keys of a segment whose products run on the packed AVX2 kernel, with each (segment, KV head)'s keys
    /// and values packed once ([`PackedW`]); `None`: every segment's run on the `gemm` crate.
    pub packed_min_keys: Option<usize>,
}

/// Attention of segments `which` into `out` (N, heads, d).
pub(super) fn attend(inp: &Inputs<'_>, which: &[usize], dims: Dims, out: &mut [f32]) {
    let keys = |si: usize| inp.segs[si].len + inp.prefixes[si].as_ref().map_or(0, |x| x.3);
    let (packed, by_crate): (Vec<usize>, Vec<usize>) = which
        .iter()
        .partition(|&&si| inp.packed_min_keys.is_some_and(|min| keys(si) >= min));
    // One segment at a time, so that only its keys and values are held packed.
    for si in packed {
        let kv: Vec<(PackedW, PackedW)> = (0..dims.kv_heads)
            .into_par_iter()
            .map(|kh| pack_kv(inp, si, kh, dims))
            .collect();
        let group = dims.heads / dims.kv_heads;
        // As many query rows as keep their scores within the budget, a whole number of register tiles.
        let tile = (PACKED_SCORES / keys(si)).clamp(6, TILE) / 6 * 6;
        run_items(inp, &[si], tile, dims, out, |it| {
            block_packed(inp, it, dims, &kv[it.head / group])
        });
    }
    run_items(inp, &by_crate, TILE, dims, out, |it| block(inp, it, dims));
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
    let d = dims.d;
    let p = inp.prefixes[si].as_ref().map_or(0, |x| x.3);
    let keys = p + inp.segs[si].len;
    let row = |values: bool| {
        let (prefix, rows) = kv_views(inp, (si, kh), dims, values);
        move |j: usize| {
            let (v, j) = if j < p { (prefix, j) } else { (rows, j - p) };
            &v.data[v.at + j * v.rs..][..d]
        }
    };
    (
        PackedW::rows(keys, d, row(false)),
        PackedW::columns(d, keys, row(true)),
    )
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

/// The attention output (rows × d) of one query block.
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
    let (kp, ks) = kv_views(inp, kv_head, dims, false);
    let mut s = vec![0f32; it.rows * width];
    product(&mut s, width, it.rows, p, d, q, kp.t(), false, inp.scale);
    product(
        &mut s[p..],
        width,
        it.rows,
        width - p,
        d,
        q,
        ks.t(),
        false,
        inp.scale,
    );
    probabilities(inp, it, (p, width), dims, &mut s);
    let (vp, vs) = kv_views(inp, kv_head, dims, true);
    let mut o = vec![0f32; it.rows * d];
    let probs = |at: usize| View {
        data: &s,
        at,
        rs: width,
        cs: 1,
    };
    product(&mut o, d, it.rows, d, p, probs(0), vp, false, 1.0);
    product(&mut o, d, it.rows, d, width - p, probs(p), vs, p > 0, 1.0);
    o
}

/// Softmax along each row of the block's scores `s` (rows × `width`, the prefix's `p` keys first) over the keys
/// the row sees; the keys it does not see get 0.
fn probabilities(
    inp: &Inputs<'_>,
    it: Item,
    (p, width): (usize, usize),
    dims: Dims,
    s: &mut [f32],
) {
    for (i, row) in s.chunks_exact_mut(width).enumerate() {
        let visible = if inp.causal { p + it.r0 + i + 1 } else { width };
        let (seen, rest) = row.split_at_mut(visible);
        kernels::softmax(seen, dims.level);
        rest.fill(0.0);
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
    let (p, width) = keys_seen(inp, it);
    let q: Vec<f32> = (0..it.rows)
        .flat_map(|i| {
            let at = ((seg.start + it.r0 + i) * dims.heads + it.head) * d;
            inp.qs[at..at + d].iter().map(|x| x * inp.scale)
        })
        .collect();
    let mut s = vec![0f32; it.rows * width];
    gemm_nt_packed(
        it.rows,
        (d, width),
        |i| &q[i * d..(i + 1) * d],
        keys,
        &mut s,
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
