//! CUDA launchers of the attention kernels: decode attention over the per-sequence KV caches (with its per-step
//! buffer tables) and varlen attention on CUDA cores or tensor cores.

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, PushKernelArg};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{bail, CudaDevice, DType, Result, Storage, Tensor};
use half::{bf16, f16};

use super::{DecodeKv, Varlen};
use crate::ops::cuda::kernels::{config, cuda_device, kernel, tensor_of, with_view};
use crate::ops::cuda::launch;

/// The per-step tables of the fused decode attention, uploaded once per decode step for all layers: each
/// sequence's K and V buffer addresses per layer (layer-major), its capacity and its length before the step.
pub(crate) struct DecodeTables {
    k_ptrs: CudaSlice<u64>,
    v_ptrs: CudaSlice<u64>,
    caps: CudaSlice<i32>,
    lens: CudaSlice<i32>,
    batch: usize,
    layers: usize,
    /// (kv_heads, head_dim) every buffer has.
    dims: (usize, usize),
    /// The dtype the tables were checked for.
    dtype: DType,
    /// The K/V buffers whose addresses the tables hold, kept alive as long as the tables (one stream: the launches
    /// that write into them through these addresses are ordered after every earlier use of the buffers).
    _buffers: Vec<Tensor>,
}

impl DecodeTables {
    /// Check and upload `layers[l][b]`, the buffers of sequence b in layer l (every layer lists the same
    /// sequences, with the same capacity and length).
    pub fn new(dtype: DType, layers: &[Vec<DecodeKv<'_>>]) -> Result<Self> {
        match dtype {
            DType::F32 => Self::new_t::<f32>(dtype, layers),
            DType::BF16 => Self::new_t::<bf16>(dtype, layers),
            DType::F16 => Self::new_t::<f16>(dtype, layers),
            other => bail!("decode_attention: no kernel for {other:?}"),
        }
    }

    fn new_t<T: CudaDType + DeviceRepr>(
        dtype: DType,
        layers: &[Vec<DecodeKv<'_>>],
    ) -> Result<Self> {
        let Some(first) = layers.first().and_then(|l| l.first()) else {
            bail!("decode_attention: no sequences");
        };
        let dev = cuda_device(first.k)?;
        let batch = layers[0].len();
        let (mut kp, mut vp, mut caps, mut lens) = (vec![], vec![], vec![], vec![]);
        let mut buffers = Vec::new();
        let mut dims = None;
        for (l, layer) in layers.iter().enumerate() {
            if layer.len() != batch {
                bail!(
                    "decode_attention: layer {l} lists {} sequences, layer 0 {batch}",
                    layer.len()
                );
            }
            for (b, c) in layer.iter().enumerate() {
                let (k, (kh, cap, kd)) = buffer_ptr::<T>(c.k, &dev)?;
                let (v, vdims) = buffer_ptr::<T>(c.v, &dev)?;
                let same_step = l == 0 || (caps[b] as usize == cap && lens[b] as usize == c.len);
                if vdims != (kh, cap, kd)
                    || c.len >= cap
                    || dims.is_some_and(|d| d != (kh, kd))
                    || !same_step
                {
                    bail!("decode_attention: layer {l} sequence {b}: KV buffer ({kh}, {cap}, {kd}) for length {}", c.len);
                }
                dims = Some((kh, kd));
                buffers.extend([c.k.clone(), c.v.clone()]);
                kp.push(k);
                vp.push(v);
                if l == 0 {
                    caps.push(i32::try_from(cap).map_err(candle_core::Error::wrap)?);
                    lens.push(c.len as i32);
                }
            }
        }
        Ok(Self {
            k_ptrs: dev.clone_htod(&kp)?,
            v_ptrs: dev.clone_htod(&vp)?,
            caps: dev.clone_htod(&caps)?,
            lens: dev.clone_htod(&lens)?,
            batch,
            layers: layers.len(),
            dims: dims.expect("at least one sequence"),
            dtype,
            _buffers: buffers,
        })
    }
}

/// One layer's step of [`crate::ops::Ops::decode_attention`] on a plan's tables.
#[derive(Clone, Copy)]
pub(crate) struct DecodeCall<'a> {
    pub q: &'a Tensor,
    pub k_new: &'a Tensor,
    pub v_new: &'a Tensor,
    pub layer: usize,
    pub scale: f32,
}

/// See [`crate::ops::Ops::decode_attention`]: layer `c.layer` of `tables`.
pub fn decode_attention(tables: &DecodeTables, c: DecodeCall<'_>) -> Result<Tensor> {
    match c.q.dtype() {
        DType::F32 => decode_t::<f32>(tables, c),
        DType::BF16 => decode_t::<bf16>(tables, c),
        DType::F16 => decode_t::<f16>(tables, c),
        other => bail!("decode_attention: no kernel for {other:?}"),
    }
}

/// Device address of the first element of a contiguous CUDA buffer and its (kv_heads, capacity, head_dim).
/// The kernels read and write the buffer through this raw address, which no CUDA event records: that is sound
/// because candle runs every op of a device on one stream (`Device::new_cuda`), which orders the launches.
fn buffer_ptr<T: CudaDType + DeviceRepr>(
    t: &Tensor,
    dev: &CudaDevice,
) -> Result<(u64, (usize, usize, usize))> {
    let dims = t.dims3()?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        bail!("expected a CUDA KV buffer");
    };
    if !layout.is_contiguous() {
        bail!("decode_attention: KV buffer {dims:?} is not contiguous");
    }
    let stream = dev.cuda_stream();
    let (base, _sync) = cs.as_cuda_slice::<T>()?.device_ptr(&stream);
    Ok((
        base + (layout.start_offset() * std::mem::size_of::<T>()) as u64,
        dims,
    ))
}

fn decode_t<T: CudaDType + DeviceRepr>(tables: &DecodeTables, c: DecodeCall<'_>) -> Result<Tensor> {
    let DecodeCall {
        q,
        k_new,
        v_new,
        layer,
        scale,
    } = c;
    let dev = cuda_device(q)?;
    let (b, heads, d) = q.dims3()?;
    let (b2, kv_heads, d2) = k_new.dims3()?;
    if b2 != b
        || d2 != d
        || v_new.dims() != k_new.dims()
        || tables.batch != b
        || tables.dtype != q.dtype()
        || tables.dims != (kv_heads, d)
        || layer >= tables.layers
        || heads % kv_heads != 0
        || heads / kv_heads > 8
    {
        bail!(
            "decode_attention: q {:?}, k_new {:?}, v_new {:?}, layer {layer} of {} with {} caches of {:?}",
            q.dims(),
            k_new.dims(),
            v_new.dims(),
            tables.layers,
            tables.batch,
            tables.dims
        );
    }
    let rows = layer * b..(layer + 1) * b;
    let (kp, vp) = (tables.k_ptrs.slice(rows.clone()), tables.v_ptrs.slice(rows));
    let (q, k_new, v_new) = (q.contiguous()?, k_new.contiguous()?, v_new.contiguous()?);
    let name = launch::kernel_name(&launch::decode_family(d)?, q.dtype())?;
    let func = kernel(&dev, &name)?;
    let out = unsafe { dev.alloc::<T>(q.elem_count())? };
    with_view::<T, _>(&q, |qs| {
        with_view::<T, _>(&k_new, |ks| {
            with_view::<T, _>(&v_new, |vs| {
                let cfg = config(launch::decode(b, kv_heads));
                let (kvh, group) = (kv_heads as i32, (heads / kv_heads) as i32);
                let mut bld = func.builder();
                bld.arg(&qs)
                    .arg(&ks)
                    .arg(&vs)
                    .arg(&kp)
                    .arg(&vp)
                    .arg(&tables.caps)
                    .arg(&tables.lens);
                bld.arg(&out).arg(&kvh).arg(&group).arg(&scale);
                // SAFETY: every address in the tables is a buffer checked by DecodeTables::new: (kv_heads, cap,
                // d) per sequence with len < cap; q/out (b, heads, d); k_new/v_new (b, kv_heads, d).
                unsafe { bld.launch(cfg) }.w()?;
                Ok(())
            })
        })
    })?;
    Ok(tensor_of(out, &dev, q.shape().clone()))
}

/// See [`crate::ops::Ops::varlen_attention`]; `mma` picks the tensor-core kernel (bf16/f16 only).
pub fn varlen_attention(a: Varlen<'_>, mma: bool) -> Result<Tensor> {
    match a.q.dtype() {
        DType::F32 if !mma => varlen_t::<f32>(a, mma),
        DType::BF16 => varlen_t::<bf16>(a, mma),
        DType::F16 => varlen_t::<f16>(a, mma),
        other => bail!("varlen_attention: no kernel for {other:?} (tensor cores: {mma})"),
    }
}

/// `t` contiguous and starting at an even element: the kernels read 16-bit types two at a time (32-bit words).
fn word_aligned(t: &Tensor) -> Result<Tensor> {
    if t.is_contiguous() && t.layout().start_offset().is_multiple_of(2) {
        Ok(t.clone())
    } else {
        t.force_contiguous() // a fresh buffer, offset 0
    }
}

fn varlen_t<T: CudaDType + DeviceRepr>(a: Varlen<'_>, mma: bool) -> Result<Tensor> {
    let (q, k, v, segs, causal, scale) = (a.q, a.k, a.v, a.segs, a.causal, a.scale);
    let dev = cuda_device(q)?;
    let (n, heads, d) = q.dims3()?;
    let (nk, kv_heads, dk) = k.dims3()?;
    if nk != n || dk != d || v.dims() != k.dims() || kv_heads == 0 || heads % kv_heads != 0 {
        bail!(
            "varlen_attention: q {:?}, k {:?}, v {:?}",
            q.dims(),
            k.dims(),
            v.dims()
        );
    }
    // Prefix buffers must be contiguous (kv_heads, cap, d); copies are kept alive until the launch is queued.
    let mut keep = Vec::new();
    let (mut ptrs_k, mut ptrs_v, mut metas) = (vec![], vec![], vec![]);
    for s in segs {
        let mut meta = launch::SegmentMeta {
            start: s.start,
            len: s.len,
            prefix_len: 0,
            prefix_cap: 0,
        };
        let Some((pk, pv, p)) = s.prefix else {
            ptrs_k.push(0u64);
            ptrs_v.push(0u64);
            metas.push(meta);
            continue;
        };
        let (pk, pv) = (word_aligned(pk)?, word_aligned(pv)?);
        let (kp, (kh, cap, kd)) = buffer_ptr::<T>(&pk, &dev)?;
        let (vp, vdims) = buffer_ptr::<T>(&pv, &dev)?;
        if kh != kv_heads || kd != d || vdims != (kh, cap, kd) || p > cap {
            bail!("varlen_attention: prefix buffer ({kh}, {cap}, {kd}) holding {p} positions");
        }
        ptrs_k.push(kp);
        ptrs_v.push(vp);
        (meta.prefix_len, meta.prefix_cap) = (p, cap);
        metas.push(meta);
        keep.push((pk, pv));
    }
    let (meta, tiles) = launch::varlen_meta(&metas, n, launch::varlen_tile_rows(mma))?;
    let out = unsafe { dev.alloc::<T>(q.elem_count())? };
    if tiles == 0 {
        return Ok(tensor_of(out, &dev, q.shape().clone()));
    }
    let meta = dev.clone_htod(&meta)?;
    let ptrs = dev.clone_htod(&[ptrs_k, ptrs_v].concat())?;
    let (q, k, v) = (word_aligned(q)?, word_aligned(k)?, word_aligned(v)?);
    let kind = if mma { "mma" } else { "attn" };
    let name = launch::kernel_name(&format!("varlen_{kind}_d{d}"), q.dtype())?;
    let func = kernel(&dev, &name)?;
    with_view::<T, _>(&q, |qs| {
        with_view::<T, _>(&k, |ks| {
            with_view::<T, _>(&v, |vs| {
                let cfg = config(launch::varlen(tiles, heads, mma));
                let (n_seg, n_tiles) = (segs.len() as i32, tiles as i32);
                let (h, kvh, causal) = (heads as i32, kv_heads as i32, causal as i32);
                let mut b = func.builder();
                b.arg(&qs).arg(&ks).arg(&vs).arg(&meta).arg(&ptrs).arg(&out);
                b.arg(&n_seg)
                    .arg(&n_tiles)
                    .arg(&h)
                    .arg(&kvh)
                    .arg(&causal)
                    .arg(&scale);
                // SAFETY: the segments tile rows 0..n of q/k/v/out (checked by varlen_meta); every prefix pointer
                // addresses a contiguous (kv_heads, cap, d) buffer holding at least prefix_len positions.
                unsafe { b.launch(cfg) }.w()?;
                Ok(())
            })
        })
    })?;
    drop(keep);
    Ok(tensor_of(out, &dev, q.shape().clone()))
}
