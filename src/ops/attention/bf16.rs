//! bf16 attention on the CPU. Where the bf16 GEMMs run on this project's kernels, the varlen attention runs in
//! torch's CPU flash attention order ([`super::flash`]: the softmax weights rounded to bf16 in blocks of 512 keys),
//! its products on AMX tiles where the GEMMs run on them, else by AVX512-BF16 dot products ([`Products`]).
//! Elsewhere, and for decode: the bf16 queries, keys and values widened to f32 (exactly), scores, softmax and the
//! weighted sum in f32, the output rounded to bf16 once, by the f32 implementations on f32 copies: the fused
//! varlen attention ([`super::cpu`]) and the per-sequence decode attention ([`super::reference`]); candle's
//! composed bf16 attention would round the scores to bf16 before the softmax.

use candle_core::{DType, Result, Tensor};

use super::{cpu, reference, DecodeKv, Products, Varlen, VarlenSeg};

/// Whether a call in `dtype` on `device` with this head_dim runs here: CPU, bf16, and the fused f32 path covers
/// the head_dim.
pub(super) fn covers(device: &candle_core::Device, dtype: DType, head_dim: usize) -> bool {
    dtype == DType::BF16 && cpu::supported(device, DType::F32, head_dim)
}

fn f32s(t: &Tensor) -> Result<Tensor> {
    crate::ops::elementwise::bf16::to_f32(t)
}

/// The f32 result rounded to `dtype` (bf16 in one parallel pass).
fn narrow(t: &Tensor, dtype: DType) -> Result<Tensor> {
    match dtype {
        DType::BF16 => crate::ops::elementwise::bf16::to_bf16(t),
        other => t.to_dtype(other),
    }
}

/// What computes the bf16 varlen attention on the CPU with the flash order's products `flash` (none: not that
/// order), in words for the manifest (the flash order serves every varlen call whose shapes it covers).
pub(crate) fn describe(flash: Option<Products>) -> String {
    let wide = "f32 attention on f32 copies (widened exactly), the output rounded to bf16 once";
    let products = match flash {
        None => return format!("the {wide}"),
        Some(Products::Tiles) => "AMX tiles",
        Some(Products::Dots) => "AVX512-BF16 dot products (vdpbf16ps)",
    };
    #[cfg(target_arch = "x86_64")]
    let (max_d, block) = (super::flash::MAX_HEAD_DIM, super::flash::KEY_BLOCK);
    #[cfg(not(target_arch = "x86_64"))]
    let (max_d, block) = (0, 0);
    format!(
        "{products} where the head dimension is even and at most {max_d} (torch's CPU flash attention order: f32 \
         scores of bf16 products, softmax in blocks of {block} keys counted from the first cached position, \
         weights rounded to bf16); else the {wide}"
    )
}

/// No flash attention off x86-64.
#[cfg(not(target_arch = "x86_64"))]
fn on_tiles(_: &Varlen<'_>, _: Products) -> Result<Option<Tensor>> {
    Ok(None)
}

/// The attention in torch's flash order ([`super::flash`]) by `products` where it covers the shapes
/// (segments with or without a cached prefix, causal or not); `None` elsewhere.
#[cfg(target_arch = "x86_64")]
fn on_tiles(a: &Varlen<'_>, products: Products) -> Result<Option<Tensor>> {
    use crate::ops::cpu_data::cpu_slice;
    let (n, heads, d) = a.q.dims3()?;
    let h = super::flash::Heads {
        heads,
        kv_heads: a.k.dim(1)?,
        d,
    };
    if !super::flash::covers(h, products) {
        return Ok(None);
    }
    let (q, k, v) = (a.q.contiguous()?, a.k.contiguous()?, a.v.contiguous()?);
    let (qs, ql) = q.storage_and_layout();
    let (ks, kl) = k.storage_and_layout();
    let (vs, vl) = v.storage_and_layout();
    let slices = (
        cpu_slice::<half::bf16>(&qs, ql, q.elem_count())?,
        cpu_slice::<half::bf16>(&ks, kl, k.elem_count())?,
        cpu_slice::<half::bf16>(&vs, vl, v.elem_count())?,
    );
    // The caches (kv_heads, capacity, d), made contiguous and held while their slices are read.
    let caches = a
        .segs
        .iter()
        .map(|s| {
            s.prefix
                .map(|(pk, pv, p)| {
                    Ok::<_, candle_core::Error>((pk.contiguous()?, pv.contiguous()?, p))
                })
                .transpose()
        })
        .collect::<Result<Vec<_>>>()?;
    let guards: Vec<_> = caches
        .iter()
        .map(|c| {
            c.as_ref()
                .map(|(k, v, _)| (k.storage_and_layout(), v.storage_and_layout()))
        })
        .collect();
    let mut segs = Vec::with_capacity(a.segs.len());
    for ((s, c), g) in a.segs.iter().zip(&caches).zip(&guards) {
        let prefix = match (c, g) {
            (Some((pk, pv, p)), Some(((ks, kl), (vs, vl)))) => Some((
                cpu_slice::<half::bf16>(ks, kl, pk.elem_count())?,
                cpu_slice::<half::bf16>(vs, vl, pv.elem_count())?,
                pk.dim(1)?,
                *p,
            )),
            _ => None,
        };
        segs.push(super::flash::Seg {
            start: s.start,
            len: s.len,
            prefix,
        });
    }
    let out = super::flash::attend(slices, &segs, h, (a.scale, a.causal), products);
    Ok(Some(Tensor::from_vec(out, (n, heads, d), a.q.device())?))
}

/// The attention in torch's flash order where `flash` (the bf16 GEMMs' choice) and [`on_tiles`] serve `a`; else
/// [`cpu::varlen_attention`] on f32 copies of `a`'s tensors (a cached prefix: its valid positions), the result
/// in `a.q`'s dtype.
pub(super) fn varlen_attention(
    a: Varlen<'_>,
    tiles: cpu::Tiles,
    flash: Option<Products>,
) -> Result<Tensor> {
    if let Some(out) = flash.map(|p| on_tiles(&a, p)).transpose()?.flatten() {
        return Ok(out);
    }
    let (q, k, v) = (f32s(a.q)?, f32s(a.k)?, f32s(a.v)?);
    let prefixes = a
        .segs
        .iter()
        .map(|s| match s.prefix {
            Some((pk, pv, p)) => Ok(Some((
                f32s(&pk.narrow(1, 0, p)?)?,
                f32s(&pv.narrow(1, 0, p)?)?,
                p,
            ))),
            None => Ok(None),
        })
        .collect::<Result<Vec<_>>>()?;
    let segs: Vec<VarlenSeg<'_>> = a
        .segs
        .iter()
        .zip(&prefixes)
        .map(|(s, p)| VarlenSeg {
            prefix: p.as_ref().map(|(k, v, p)| (k, v, *p)),
            ..*s
        })
        .collect();
    let wide = Varlen {
        q: &q,
        k: &k,
        v: &v,
        segs: &segs,
        ..a
    };
    narrow(&cpu::varlen_attention(wide, tiles)?, a.q.dtype())
}

/// One decode step of attention for B sequences ([`reference::decode_attention_budget`]): the new K/V written
/// into the bf16 buffers, then the attention on f32 copies of each sequence's valid positions; the result in
/// `q`'s dtype.
pub(super) fn decode_attention(
    q: &Tensor,
    (k_new, v_new): (&Tensor, &Tensor),
    kv: &[DecodeKv<'_>],
    scale: f32,
    budget: usize,
) -> Result<Tensor> {
    let mut copies = Vec::with_capacity(kv.len());
    for (i, c) in kv.iter().enumerate() {
        c.write_new(i, k_new, v_new)?;
        let wide = |t: &Tensor| f32s(&t.narrow(1, 0, c.len + 1)?);
        copies.push((wide(c.k)?, wide(c.v)?, c.len));
    }
    // The f32 attention writes the new K/V again into the copies (the same values, widened).
    let kv32: Vec<DecodeKv<'_>> = copies
        .iter()
        .map(|(k, v, len)| DecodeKv { k, v, len: *len })
        .collect();
    let (k_new, v_new) = (f32s(k_new)?, f32s(v_new)?);
    let out = reference::decode_attention_budget(&f32s(q)?, &k_new, &v_new, &kv32, scale, budget)?;
    narrow(&out, q.dtype())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn ramp(shape: &[usize], seed: usize) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 + seed * 104_729) % 2000) as f32 / 1000.0 - 1.0)
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    /// The bf16 varlen attention (with a cached prefix) and decode step equal the f32 attention of the same
    /// (bf16-exact) values rounded to bf16, and the decode step writes the new K/V into the bf16 buffers.
    #[test]
    fn bf16_attention_is_the_f32_attention_of_the_same_values_rounded_once() {
        let (n, heads, kv_heads, d) = (9, 4, 2, 16);
        let bf = |t: Tensor| t.to_dtype(DType::BF16).unwrap();
        let (q, k, v) = (
            bf(ramp(&[n, heads, d], 1)),
            bf(ramp(&[n, kv_heads, d], 2)),
            bf(ramp(&[n, kv_heads, d], 3)),
        );
        let (pk, pv) = (
            bf(ramp(&[kv_heads, 8, d], 4)),
            bf(ramp(&[kv_heads, 8, d], 5)),
        );
        let segs = [
            VarlenSeg {
                start: 0,
                len: 4,
                prefix: Some((&pk, &pv, 5)),
            },
            VarlenSeg {
                start: 4,
                len: 5,
                prefix: None,
            },
        ];
        let a = Varlen {
            q: &q,
            k: &k,
            v: &v,
            segs: &segs,
            causal: true,
            scale: 0.25,
        };
        let bits = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<half::bf16>().unwrap();
        let got = varlen_attention(a, cpu::Tiles::GemmCrate, None).unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        // Causal with a cached prefix in the flash order (where the CPU runs it): the weights rounded to bf16,
        // within 2⁻⁸ of the f32 attention of values in [-1, 1].
        #[cfg(target_arch = "x86_64")]
        for products in [Products::Tiles, Products::Dots] {
            if !super::super::flash::covers(
                super::super::flash::Heads { heads, kv_heads, d },
                products,
            ) {
                continue;
            }
            let tiles = varlen_attention(a, cpu::Tiles::GemmCrate, Some(products)).unwrap();
            let f = |t: &Tensor| {
                t.flatten_all()
                    .unwrap()
                    .to_dtype(DType::F32)
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
            };
            for (t, w) in f(&tiles).iter().zip(f(&got)) {
                assert!((t - w).abs() <= 1.0 / 256.0, "{t} vs {w}");
            }
        }
        let (q32, k32, v32, pk32, pv32) = (
            f32s(&q).unwrap(),
            f32s(&k).unwrap(),
            f32s(&v).unwrap(),
            f32s(&pk).unwrap(),
            f32s(&pv).unwrap(),
        );
        let segs32 = [
            VarlenSeg {
                start: 0,
                len: 4,
                prefix: Some((&pk32, &pv32, 5)),
            },
            VarlenSeg {
                start: 4,
                len: 5,
                prefix: None,
            },
        ];
        let a32 = Varlen {
            q: &q32,
            k: &k32,
            v: &v32,
            segs: &segs32,
            ..a
        };
        let want = cpu::varlen_attention(a32, cpu::Tiles::GemmCrate)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        assert_eq!(bits(&got), bits(&want));

        // Decode: one step of two sequences over their buffers (capacity 8, 5 and 2 valid positions).
        let (qd, kn, vn) = (
            bf(ramp(&[2, heads, d], 6)),
            bf(ramp(&[2, kv_heads, d], 7)),
            bf(ramp(&[2, kv_heads, d], 8)),
        );
        let bufs: Vec<(Tensor, Tensor)> = (0..2)
            .map(|s| {
                (
                    bf(ramp(&[kv_heads, 8, d], 9 + s)),
                    bf(ramp(&[kv_heads, 8, d], 11 + s)),
                )
            })
            .collect();
        let kv: Vec<DecodeKv<'_>> = bufs
            .iter()
            .zip([5, 2])
            .map(|((k, v), len)| DecodeKv { k, v, len })
            .collect();
        let got = decode_attention(&qd, (&kn, &vn), &kv, 0.25, usize::MAX).unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        assert_eq!(
            bits(&bufs[1].0.narrow(1, 2, 1).unwrap()),
            bits(&kn.get(1).unwrap())
        );
        let bufs32: Vec<(Tensor, Tensor)> = bufs
            .iter()
            .map(|(k, v)| (f32s(k).unwrap(), f32s(v).unwrap()))
            .collect();
        let kv32: Vec<DecodeKv<'_>> = bufs32
            .iter()
            .zip([5, 2])
            .map(|((k, v), len)| DecodeKv { k, v, len })
            .collect();
        let want = reference::decode_attention_budget(
            &f32s(&qd).unwrap(),
            &f32s(&kn).unwrap(),
            &f32s(&vn).unwrap(),
            &kv32,
            0.25,
            usize::MAX,
        );
        assert_eq!(
            bits(&got),
            bits(&want.unwrap().to_dtype(DType::BF16).unwrap())
        );
    }

    /// Whole segments, not causal, in the flash order with each choice of products the CPU runs: the flash
    /// attention's output, within the weights' bf16 rounding of the f32 attention of the same values.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn whole_segments_attend_in_the_flash_order_where_asked() {
        let mut ran = false;
        for products in [Products::Tiles, Products::Dots] {
            ran |= whole_segments_with(products);
        }
        if !ran {
            eprintln!("skipped: no AVX512-BF16 here");
        }
    }

    /// [`whole_segments_attend_in_the_flash_order_where_asked`] with `products`; false where the CPU lacks them.
    #[cfg(target_arch = "x86_64")]
    fn whole_segments_with(products: Products) -> bool {
        let (n, heads, kv_heads, d) = (40, 4, 2, 16);
        let h = super::super::flash::Heads { heads, kv_heads, d };
        if !super::super::flash::covers(h, products) {
            return false;
        }
        let bf = |t: Tensor| t.to_dtype(DType::BF16).unwrap();
        let (q, k, v) = (
            bf(ramp(&[n, heads, d], 1)),
            bf(ramp(&[n, kv_heads, d], 2)),
            bf(ramp(&[n, kv_heads, d], 3)),
        );
        let seg = |start, len| VarlenSeg {
            start,
            len,
            prefix: None,
        };
        let segs = [seg(0, 7), seg(7, 33)];
        let a = Varlen {
            q: &q,
            k: &k,
            v: &v,
            segs: &segs,
            causal: false,
            scale: 0.25,
        };
        let vals = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<half::bf16>().unwrap();
        let seg_at = |start, len| super::super::flash::Seg {
            start,
            len,
            prefix: None,
        };
        let tiles = super::super::flash::attend(
            (&vals(&q), &vals(&k), &vals(&v)),
            &[seg_at(0, 7), seg_at(7, 33)],
            h,
            (0.25, false),
            products,
        );
        assert_eq!(
            vals(&varlen_attention(a, cpu::Tiles::GemmCrate, Some(products)).unwrap()),
            tiles
        );
        let wide = vals(&varlen_attention(a, cpu::Tiles::GemmCrate, None).unwrap());
        // Each weight rounded to bf16 moves it by at most 2⁻⁹ of itself: the output by 2⁻⁹ of |v| ≤ 1, plus the
        // output's own rounding.
        for (t, w) in tiles.iter().zip(&wide) {
            assert!((t.to_f32() - w.to_f32()).abs() <= 1.0 / 256.0, "{t} vs {w}");
        }
        true
    }
}
