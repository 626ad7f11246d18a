//! Varlen attention on the CPU in f32, fused: for each (segment, KV head) the segment's keys are gathered once,
//! transposed, and its values into contiguous rows; then the query rows of that head group take their scores,
//! softmax and weighted sum four rows at a time, so each key/value load serves four queries.
//! No score matrix is materialised, no mask tensor is built, and windows need no padding. Work items run on
//! rayon; the inner products use AVX-512 or AVX2/FMA when the CPU has them (checked at run time), both giving the
//! same bits. Segments of at least [`TILED_MIN_KEYS`] keys, whose keys outgrow the caches, go through GEMM tiles
//! instead ([`tiled`]).

use candle_core::{DType, Result, Tensor};
use rayon::prelude::*;

use super::VarlenSeg;
use crate::ops::cpu_data::{with_f32, zeros};
use crate::ops::gemm::packed::{active, Isa};
use crate::ops::simd::Level;

/// Query rows processed together against each key row.
const ROWS: usize = 4;
/// Keys scored together (two AVX registers); the transposed keys are padded to a multiple of it.
const KEY_BLOCK: usize = 16;
/// Fewest keys (prefix included) of a segment attended through GEMM tiles rather than the four-row kernel.
pub(crate) const TILED_MIN_KEYS: usize = 64;

/// Whether the fused CPU path covers tensors of `dtype` on `device`: CPU, f32, head_dim a multiple of 8.
pub fn supported(device: &candle_core::Device, dtype: DType, head_dim: usize) -> bool {
    device.is_cpu() && dtype == DType::F32 && head_dim.is_multiple_of(8) && head_dim > 0
}

/// A cached prefix copied out of its buffers: K and V (kv_heads, cap, d) data, cap, valid positions.
type Prefix = (Vec<f32>, Vec<f32>, usize, usize);

/// Shapes of one call.
#[derive(Clone, Copy)]
struct Dims {
    heads: usize,
    kv_heads: usize,
    d: usize,
    /// The vector path of the inner loops.
    level: Level,
}

/// See [`Ops::varlen_attention`](crate::ops::Ops::varlen_attention); `q` (N, H, d), `k`/`v` (N, KV, d), all f32 on the CPU. The GEMM tiles of
/// long segments run on the kernel `tiles` names.
pub fn varlen_attention(a: super::Varlen<'_>, tiles: Tiles) -> Result<Tensor> {
    varlen_attention_at(a, Level::detect(), (TILED_MIN_KEYS, packed_plan(tiles)))
}

/// What runs the GEMM tiles of long segments ([`packed_plan`]), chosen apart from the run's built-in GEMM:
/// the packed kernel wherever the CPU runs it, since its tiles beat the `gemm` crate's there (`timing` below: on
/// a Zen 3 with its AVX2 tile 1.1–1.4× from 2,304 keys; on an AVX-512 Xeon with its AVX-512 tile, where the
/// `gemm` crate stays the built-in GEMM, 1.1–1.2× over the 3,864 keys of a Qwen3-VL screenshot, even over
/// 5,088).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiles {
    /// The `gemm` crate's products, 512 keys at a time with an online softmax.
    GemmCrate,
    /// The packed kernel ([`crate::ops::gemm::packed`]), each KV head's keys and values packed once.
    Packed,
}

impl Tiles {
    /// The packed kernel where the CPU runs it (AVX2 and FMA) unless `gemm_crate_only`, else the `gemm` crate.
    pub fn for_this_cpu(gemm_crate_only: bool) -> Self {
        if crate::ops::gemm::packed::supported() && !gemm_crate_only {
            Self::Packed
        } else {
            Self::GemmCrate
        }
    }
}

/// Which long segments attend on the packed kernel ([`Tiles::Packed`]): those of at least `min_keys` keys, and
/// how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackedPlan {
    /// Fewest keys of a segment (its cached prefix's included).
    pub min_keys: usize,
    /// The tile on which the segments run with the scores transposed ([`transposed`]); `None`: in query blocks
    /// ([`tiled`]).
    pub transposed: Option<Isa>,
}

/// Where segments attend on the packed kernel with `tiles` (causal or not); `None` where none does.
/// With the AVX-512 tile segments of at least [`transposed::MIN_KEYS_AVX512`] keys run on it with the scores
/// transposed (`timing` on an AVX-512 Xeon: 1.3–1.5× the `gemm` crate's tiles for full attention from 1,272 keys to
/// 5,088, 1.2× at 512, 0.7× for a window's 64; 1.15–1.55× for causal prompts of 1,306 and 4,096 keys, where the
/// query-block tiles ran at 1.0–1.3×); with the AVX2 tile every segment of at least [`tiled::PACKED_MIN_KEYS`], in
/// query blocks (there the transposed scores ran at 0.7× the query blocks).
pub(crate) fn packed_plan(tiles: Tiles) -> Option<PackedPlan> {
    match (tiles, active()) {
        (Tiles::GemmCrate, _) | (_, None) => None,
        (Tiles::Packed, Some(Isa::Avx512)) => Some(PackedPlan {
            min_keys: transposed::MIN_KEYS_AVX512,
            transposed: Some(Isa::Avx512),
        }),
        (Tiles::Packed, Some(Isa::Avx2)) => Some(PackedPlan {
            min_keys: tiled::PACKED_MIN_KEYS,
            transposed: None,
        }),
    }
}

/// The packed kernel's plan, in words for the manifest.
pub(crate) fn describe_packed_plan(tiles: Tiles) -> Option<String> {
    packed_plan(tiles).map(|p| match p.transposed {
        Some(isa) => format!(
            "attention of {} keys or more with transposed scores on the packed kernel's {}",
            p.min_keys,
            isa.describe()
        ),
        None => format!(
            "attention of {} keys or more in query blocks on the packed kernel",
            p.min_keys
        ),
    })
}

/// The segments `long` through GEMM tiles: those the plan puts on transposed scores one at a time (only that
/// segment's keys and values are held packed), the rest in query blocks.
fn attend_long(inputs: &tiled::Inputs<'_>, long: Vec<usize>, dims: Dims, out: &mut [f32]) {
    let mut blocks = long;
    if let Some(PackedPlan {
        min_keys,
        transposed: Some(isa),
    }) = inputs.packed
    {
        let wide;
        (wide, blocks) = blocks
            .into_iter()
            .partition(|&s| inputs.keys(s) >= min_keys);
        for si in wide {
            transposed::attend(inputs, si, dims, isa, out);
        }
    }
    tiled::attend(inputs, &blocks, dims, out);
}

/// [`varlen_attention`] on the vector path `level`, which must be one the CPU supports (at most [`Level::detect`]),
/// with segments of at least `tiled` keys through GEMM tiles, and those `packed` names (where given) through tiles
/// on the packed kernel, which needs AVX2/FMA.
fn varlen_attention_at(
    a: super::Varlen<'_>,
    level: Level,
    (tiled_min_keys, packed): (usize, Option<PackedPlan>),
) -> Result<Tensor> {
    let (q, k, v, segs, causal, scale) = (a.q, a.k, a.v, a.segs, a.causal, a.scale);
    let (n, heads, d) = q.dims3()?;
    let (_, kv_heads, _) = k.dims3()?;
    let dims = Dims {
        heads,
        kv_heads,
        d,
        level,
    };
    let prefixes: Vec<Option<Prefix>> = segs
        .iter()
        .map(|s| {
            s.prefix
                .map(|(pk, pv, p)| {
                    let cap = pk.dim(1)?;
                    let kv = with_f32(pk, |x| Ok(x.to_vec()))?;
                    let vv = with_f32(pv, |x| Ok(x.to_vec()))?;
                    Ok::<_, candle_core::Error>((kv, vv, cap, p))
                })
                .transpose()
        })
        .collect::<Result<_>>()?;
    let mut out = zeros(n * heads * d);
    with_f32(q, |qs| {
        with_f32(k, |ks| {
            with_f32(v, |vs| {
                let inputs = tiled::Inputs {
                    qs,
                    ks,
                    vs,
                    segs,
                    prefixes: &prefixes,
                    causal,
                    scale,
                    packed,
                };
                let (long, short): (Vec<usize>, Vec<usize>) =
                    (0..segs.len()).partition(|&s| inputs.keys(s) >= tiled_min_keys);
                attend_long(&inputs, long, dims, &mut out);
                let items: Vec<(usize, usize)> = short
                    .iter()
                    .flat_map(|&s| (0..kv_heads).map(move |h| (s, h)))
                    .collect();
                let blocks: Vec<(usize, usize, Vec<f32>)> = items
                    .par_iter()
                    .map(|&(si, kh)| {
                        let seg = &segs[si];
                        let (kt, vc) = gather(ks, vs, seg, prefixes[si].as_ref(), kh, dims);
                        let p = prefixes[si].as_ref().map_or(0, |x| x.3);
                        let o = attend_group(qs, &kt, &vc, seg, p, kh, dims, causal, scale);
                        (si, kh, o)
                    })
                    .collect();
                scatter(&mut out, &blocks, segs, dims);
                Ok(())
            })
        })
    })?;
    Tensor::from_vec(out, (n, heads, d), q.device())
}

/// Keys and values of one segment for KV head `kh`: keys transposed to (d, lpad) with lpad the key count
/// (prefix first) rounded up to [`KEY_BLOCK`] and zero columns after it, values as (P + len, d) rows.
fn gather(
    ks: &[f32],
    vs: &[f32],
    seg: &VarlenSeg<'_>,
    prefix: Option<&Prefix>,
    kh: usize,
    dims: Dims,
) -> (Vec<f32>, Vec<f32>) {
    let d = dims.d;
    let p = prefix.map_or(0, |x| x.3);
    let total = p + seg.len;
    let lpad = total.div_ceil(KEY_BLOCK) * KEY_BLOCK;
    let mut kt = vec![0f32; d * lpad];
    let mut vc = Vec::with_capacity(total * d);
    let mut put_key = |j: usize, row: &[f32]| {
        for (c, x) in row.iter().enumerate() {
            kt[c * lpad + j] = *x;
        }
    };
    if let Some((pk, pv, cap, _)) = prefix {
        for j in 0..p {
            put_key(j, &pk[(kh * cap + j) * d..][..d]);
        }
        vc.extend_from_slice(&pv[kh * cap * d..(kh * cap + p) * d]);
    }
    for (j, r) in (seg.start..seg.start + seg.len).enumerate() {
        let at = (r * dims.kv_heads + kh) * d;
        put_key(p + j, &ks[at..at + d]);
        vc.extend_from_slice(&vs[at..at + d]);
    }
    (kt, vc)
}

/// Attention of every query head served by KV head `kh` over one segment; returns (len, group, d).
#[allow(clippy::too_many_arguments)]
fn attend_group(
    qs: &[f32],
    kt: &[f32],
    vc: &[f32],
    seg: &VarlenSeg<'_>,
    p: usize,
    kh: usize,
    dims: Dims,
    causal: bool,
    scale: f32,
) -> Vec<f32> {
    let (d, group) = (dims.d, dims.heads / dims.kv_heads);
    let total = p + seg.len;
    let lpad = total.div_ceil(KEY_BLOCK) * KEY_BLOCK;
    let mut out = vec![0f32; seg.len * group * d];
    let mut q_rows = vec![0f32; ROWS * d];
    let mut scores = vec![0f32; ROWS * lpad];
    let mut o = vec![0f32; ROWS * d];
    for g in 0..group {
        let head = kh * group + g;
        for r0 in (0..seg.len).step_by(ROWS) {
            let rows = ROWS.min(seg.len - r0);
            q_rows.fill(0.0);
            for i in 0..rows {
                let at = ((seg.start + r0 + i) * dims.heads + head) * d;
                for (dst, src) in q_rows[i * d..(i + 1) * d].iter_mut().zip(&qs[at..at + d]) {
                    *dst = src * scale;
                }
            }
            let visible: [usize; ROWS] = std::array::from_fn(|i| match (i < rows, causal) {
                (false, _) => 0,
                (true, true) => (p + r0 + i + 1).min(total),
                (true, false) => total,
            });
            let blk = kernels::Block {
                q: &q_rows,
                kt,
                lpad,
                v: vc,
                d,
                visible,
            };
            kernels::run(&blk, &mut scores, &mut o, dims.level);
            for i in 0..rows {
                let at = ((r0 + i) * group + g) * d;
                out[at..at + d].copy_from_slice(&o[i * d..(i + 1) * d]);
            }
        }
    }
    out
}

/// Copy each (segment, KV head) result into the (N, H, d) output.
fn scatter(
    out: &mut [f32],
    blocks: &[(usize, usize, Vec<f32>)],
    segs: &[VarlenSeg<'_>],
    dims: Dims,
) {
    let (d, group) = (dims.d, dims.heads / dims.kv_heads);
    for (si, kh, o) in blocks {
        let seg = &segs[*si];
        for r in 0..seg.len {
            for g in 0..group {
                let src = &o[(r * group + g) * d..][..d];
                let at = ((seg.start + r) * dims.heads + kh * group + g) * d;
                out[at..at + d].copy_from_slice(src);
            }
        }
    }
}

pub(super) mod decode;
mod kernels;
mod tiled;
mod transposed;

#[cfg(test)]
mod tests;

/// Times of the CPU attention at each vector path this CPU supports, through the four-row kernel, GEMM tiles on
/// the `gemm` crate and (where the CPU runs it) tiles on the packed kernel, alternated, best of three: one
/// 1080×2400 screenshot at `max_pixels` 1,003,520 (5,088 rows, 16 heads of 80) as windows of 64 rows and as one
/// full-attention segment, a full-attention segment of 1,272 rows (`max_pixels` 250,880), and causal prompts of
/// 1,306 and 4,096 tokens (14 heads of 64 over 2 KV heads), and the Qwen3-VL-2B tower's full attention over one
/// such screenshot (3,864 rows, 16 heads of 64):
/// `cargo test --release --lib ops::attention::cpu::timing -- --ignored --nocapture`.
#[cfg(test)]
mod timing {
    use super::*;
    use crate::ops::{Varlen, VarlenSeg};
    use candle_core::Device;

    /// Each case on each vector path and attention path, best of three; `ATTN_CASE` and `ATTN_PATH` (a case's
    /// or a path's name as printed) keep only that one, for a profiler.
    #[test]
    #[ignore = "a timing run: use --release --ignored --nocapture"]
    fn levels_and_paths() {
        let seg = |start, len| VarlenSeg {
            start,
            len,
            prefix: None,
        };
        let windows: Vec<VarlenSeg<'_>> = (0..5088 / 64).map(|i| seg(64 * i, 64)).collect();
        let cases = [
            ("windows", (16, 16, 80), &windows[..], false),
            ("full", (16, 16, 80), &[seg(0, 5088)][..], false),
            ("full 512", (16, 16, 80), &[seg(0, 512)][..], false),
            ("full 1272", (16, 16, 80), &[seg(0, 1272)][..], false),
            ("full 2304", (16, 16, 80), &[seg(0, 2304)][..], false),
            ("qwen3 full 3864", (16, 16, 64), &[seg(0, 3864)][..], false),
            ("prompt 1306", (14, 2, 64), &[seg(0, 1306)][..], true),
            ("qwen3 prompt 1306", (16, 8, 128), &[seg(0, 1306)][..], true),
            ("prompt 4096", (14, 2, 64), &[seg(0, 4096)][..], true),
        ];
        let mut paths = vec![("kernel", (usize::MAX, None)), ("tiled", (1, None))];
        let plan = |transposed| {
            Some(PackedPlan {
                min_keys: 1,
                transposed,
            })
        };
        if crate::ops::gemm::packed::supported() {
            paths.push(("tiled packed", (1, plan(None))));
        }
        for isa in Isa::all_supported() {
            let name = match isa {
                Isa::Avx2 => "transposed AVX2 tile",
                Isa::Avx512 => "transposed AVX-512 tile",
            };
            paths.push((name, (1, plan(Some(isa)))));
        }
        for (name, (h, kv, d), segs, causal) in cases {
            if std::env::var("ATTN_CASE").is_ok_and(|c| c != name) {
                continue;
            }
            let n: usize = segs.iter().map(|s| s.len).sum();
            let t = |heads| Tensor::randn(0f32, 1.0, (n, heads, d), &Device::Cpu).unwrap();
            let (q, k, v) = (t(h), t(kv), t(kv));
            let a = Varlen {
                q: &q,
                k: &k,
                v: &v,
                segs,
                causal,
                scale: 0.11,
            };
            let keys: usize = segs
                .iter()
                .map(|s| {
                    if causal {
                        s.len * (s.len + 1) / 2
                    } else {
                        s.len * s.len
                    }
                })
                .sum();
            let flop = 4.0 * (keys * h * d) as f64;
            for level in Level::supported()
                .into_iter()
                .filter(|l| *l != Level::Portable)
            {
                let mut best = vec![f64::INFINITY; paths.len()];
                for _ in 0..3 {
                    for (i, (pn, path)) in paths.iter().enumerate() {
                        if std::env::var("ATTN_PATH").is_ok_and(|c| c != *pn) {
                            continue;
                        }
                        let t0 = std::time::Instant::now();
                        varlen_attention_at(a, level, *path).unwrap();
                        best[i] = best[i].min(t0.elapsed().as_secs_f64());
                    }
                }
                let times: Vec<String> = paths
                    .iter()
                    .zip(&best)
                    .map(|((p, _), s)| {
                        format!("{p} {:.1} ms ({:.1} GFLOP/s)", s * 1e3, flop / s / 1e9)
                    })
                    .collect();
                eprintln!("{name} at {level:?}: {}", times.join(", "));
            }
        }
    }
}
