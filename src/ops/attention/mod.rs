//! The attention ops and their selection: packed varlen attention (prefill, vision windows and full attention)
//! and decode attention, each on the fused CUDA kernel, the fused CPU path ([`cpu`]), or the composed fallback
//! ([`composed`]); their candle references ([`reference`](mod@reference)).

mod bf16;
pub mod composed;
pub(super) mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(target_arch = "x86_64")]
mod flash;
pub(super) mod reference;

use candle_core::{DType, Device, Result, Tensor};

use crate::records::DecodeAttention;

use super::Ops;

/// One layer's KV buffers of one sequence for decode attention: K and V of shape (kv_heads, capacity,
/// head_dim), contiguous, not shared with any other cache (the new position is written into them), and `len`
/// valid positions before this step (`len < capacity`).
#[derive(Clone, Copy, Debug)]
pub struct DecodeKv<'a> {
    /// K buffer.
    pub k: &'a Tensor,
    /// V buffer.
    pub v: &'a Tensor,
    /// Valid positions before this step.
    pub len: usize,
}

impl DecodeKv<'_> {
    /// Write row `i` of the step's new keys and values (B, kv_heads, d) at position `len` of these buffers.
    pub(crate) fn write_new(&self, i: usize, k_new: &Tensor, v_new: &Tensor) -> Result<()> {
        self.k
            .slice_set(&k_new.get(i)?.unsqueeze(1)?.contiguous()?, 1, self.len)?;
        self.v
            .slice_set(&v_new.get(i)?.unsqueeze(1)?.contiguous()?, 1, self.len)
    }
}

/// The fused decode attention of one step over all layers: the buffer tables are checked and uploaded once per
/// step instead of once per layer. CUDA only (where [`Ops::fused_decode_supported`] holds).
pub(crate) struct DecodePlan {
    #[cfg(feature = "cuda")]
    tables: cuda::DecodeTables,
}

impl DecodePlan {
    /// `layers[l][b]`: the buffers of sequence b in layer l, reserved for this step.
    pub fn new(dtype: DType, layers: &[Vec<DecodeKv<'_>>]) -> Result<Self> {
        #[cfg(feature = "cuda")]
        return Ok(Self {
            tables: cuda::DecodeTables::new(dtype, layers)?,
        });
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (dtype, layers);
            candle_core::bail!("the fused decode attention needs the `cuda` feature")
        }
    }

    /// The fused decode attention for layer `layer` of the plan.
    pub fn attend(
        &self,
        q: &Tensor,
        k_new: &Tensor,
        v_new: &Tensor,
        layer: usize,
        scale: f32,
    ) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        return cuda::decode_attention(
            &self.tables,
            cuda::DecodeCall {
                q,
                k_new,
                v_new,
                layer,
                scale,
            },
        );
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (q, k_new, v_new, layer, scale);
            candle_core::bail!("the fused decode attention needs the `cuda` feature")
        }
    }
}

/// The decode attention of one step over all layers ([`Ops::decode_step`]): for each layer, writes every
/// sequence's new K/V into its buffers and attends over them, on the implementation chosen for the step.
pub struct DecodeStep<'a> {
    layers: Vec<Vec<DecodeKv<'a>>>,
    how: StepPath,
    budget: usize,
    /// bf16 on the CPU with the fused ops on: the per-sequence attention runs on f32 copies ([`bf16`]).
    widen: bool,
}

enum StepPath {
    PerSequence,
    /// Longest length after this step and the (B, 1, lmax) additive mask hiding each sequence's tail.
    Padded(usize, Tensor),
    Fused(Box<DecodePlan>),
    /// The fused CPU decode attention ([`cpu::decode`]).
    FusedCpu,
}

impl DecodeStep<'_> {
    /// Which implementation the step runs.
    pub fn path(&self) -> DecodeAttention {
        match self.how {
            StepPath::PerSequence => DecodeAttention::PerSequence,
            StepPath::Padded(..) => DecodeAttention::Padded,
            StepPath::Fused(_) | StepPath::FusedCpu => DecodeAttention::Fused,
        }
    }

    /// Layer `layer`: queries `q` (B, heads, d), new K/V `k_new`/`v_new` (B, kv_heads, d), row i for sequence i.
    /// Returns (B, heads, d).
    pub fn attend(
        &self,
        layer: usize,
        q: &Tensor,
        k_new: &Tensor,
        v_new: &Tensor,
        scale: f32,
    ) -> Result<Tensor> {
        let kv = self
            .layers
            .get(layer)
            .ok_or_else(|| candle_core::Error::Msg(format!("decode step: no layer {layer}")))?;
        match &self.how {
            StepPath::Fused(plan) => plan.attend(q, k_new, v_new, layer, scale),
            StepPath::FusedCpu => cpu::decode::attention(q, (k_new, v_new), kv, scale),
            StepPath::PerSequence if self.widen => {
                bf16::decode_attention(q, (k_new, v_new), kv, scale, self.budget)
            }
            StepPath::PerSequence => {
                reference::decode_attention_budget(q, k_new, v_new, kv, scale, self.budget)
            }
            StepPath::Padded(lmax, mask) => {
                composed::decode_padded(q, k_new, v_new, kv, (*lmax, mask), scale, self.budget)
            }
        }
    }
}

/// What multiplies the flash attention's products ([`flash`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Products {
    /// AMX tiles (`tdpbf16ps`).
    Tiles,
    /// AVX512-BF16 dot products (`vdpbf16ps`) on the tiles' operands in memory.
    Dots,
}

impl Products {
    /// The choice that goes with the bf16 GEMMs' `gemm`: tiles where they run on AMX, dot products where they
    /// run on this project's other kernels (the CPU has AVX512-BF16); none (the f32 attention on f32 copies)
    /// where candle's matmul runs them.
    pub(crate) fn of(gemm: crate::ops::gemm::bf16::Bf16Gemm) -> Option<Self> {
        match (gemm.amx(), gemm.row_kernel()) {
            (true, _) => Some(Self::Tiles),
            (false, true) => Some(Self::Dots),
            (false, false) => None,
        }
    }
}

/// What computes the bf16 varlen attention on the CPU, in words for the manifest ([`bf16::describe`]).
pub(crate) fn describe_bf16(gemm: crate::ops::gemm::bf16::Bf16Gemm) -> String {
    bf16::describe(Products::of(gemm))
}

/// The bf16 decode attention on f32 copies, for the fused CPU path's timing.
#[cfg(test)]
pub(crate) fn bf16_decode_for_timing(
    q: &Tensor,
    new: (&Tensor, &Tensor),
    kv: &[DecodeKv<'_>],
    scale: f32,
) -> Tensor {
    bf16::decode_attention(q, new, kv, scale, composed::DEFAULT_MAX_SCORE_ELEMS).unwrap()
}

/// One segment of a packed varlen attention: rows `start..start+len` of q/k/v, optionally continuing a cached
/// prefix whose K/V buffers are (kv_heads, capacity ≥ prefix_len, head_dim).
#[derive(Clone, Copy, Debug)]
pub struct VarlenSeg<'a> {
    /// First packed row.
    pub start: usize,
    /// Number of rows.
    pub len: usize,
    /// `(K buffer, V buffer, prefix_len)` of a cached prefix the segment's queries also attend to.
    pub prefix: Option<(&'a Tensor, &'a Tensor, usize)>,
}

/// One packed varlen attention call: queries `q` (N, heads, d), keys/values `k`/`v` (N, kv_heads, d), the
/// segments (in order, covering every row), causal or not, and the score scale.
#[derive(Clone, Copy, Debug)]
pub struct Varlen<'a> {
    /// Queries (N, heads, d).
    pub q: &'a Tensor,
    /// Keys (N, kv_heads, d).
    pub k: &'a Tensor,
    /// Values (N, kv_heads, d).
    pub v: &'a Tensor,
    /// The segments, in order.
    pub segs: &'a [VarlenSeg<'a>],
    /// Whether each query sees only the keys up to its own position.
    pub causal: bool,
    /// Score scale (1/√d).
    pub scale: f32,
}

impl Ops {
    /// Whether [`Self::varlen_attention`] runs a fused implementation for tensors of `dtype` on `device` with
    /// this head_dim: CUDA with head_dim 64, 80 or 128, or the CPU in f32 with head_dim a multiple of 8.
    pub(crate) fn varlen_supported(&self, device: &Device, dtype: DType, head_dim: usize) -> bool {
        (self.on_kernel_path(device, dtype) && matches!(head_dim, 64 | 80 | 128))
            || (self.config.fused_kernels && cpu::supported(device, dtype, head_dim))
    }

    /// Attention of packed segments: the queries of each segment (its rows of `q`) attend to the segment's keys
    /// (its prefix, then its rows of `k`/`v`), causally or not. Returns (N, heads, d). One launch on CUDA and
    /// the fused f32 path on the CPU where [`Self::varlen_supported`] holds (bf16 on the CPU with the fused ops on:
    /// torch's flash order where the bf16 GEMMs run on this project's kernels, else that path on f32 copies,
    /// [`bf16`]), else
    /// [`composed::varlen`] within the attention budget.
    pub fn varlen_attention(&self, a: Varlen<'_>) -> Result<Tensor> {
        let q = a.q;
        // Empty inputs take the composed path: the kernels would launch an empty grid.
        if self.varlen_supported(q.device(), q.dtype(), q.dim(2)?) && q.elem_count() > 0 {
            #[cfg(feature = "cuda")]
            if q.device().is_cuda() {
                // The tensor-core kernel covers bf16/f16 only.
                let mma = self.config.tensor_core_attention && q.dtype() != DType::F32;
                return cuda::varlen_attention(a, mma);
            }
            return cpu::varlen_attention(a, self.attention_tiles);
        }
        if self.config.fused_kernels
            && bf16::covers(q.device(), q.dtype(), q.dim(2)?)
            && q.elem_count() > 0
        {
            return bf16::varlen_attention(a, self.attention_tiles, Products::of(self.bf16));
        }
        composed::varlen(a, self.attention_budget)
    }

    /// Whether decode attention has a fused kernel for these shapes on this device, the fused ops on: CUDA with
    /// head_dim 32, 64 or 128 and at most 8 query heads per KV head, or the CPU in f32 or bf16 with head_dim a
    /// multiple of 8 ([`cpu::decode`]).
    pub(crate) fn fused_decode_supported(
        &self,
        device: &Device,
        dtype: DType,
        head_dim: usize,
        group: usize,
    ) -> bool {
        (self.on_kernel_path(device, dtype)
            && matches!(head_dim, 32 | 64 | 128)
            && (1..=8).contains(&group))
            || (self.config.fused_kernels && cpu::decode::supported(device, dtype, head_dim))
    }

    /// The decode attention chosen for this device and shape: the fused kernel where it covers them, else one
    /// composed attention per sequence on the CPU and a padded batch elsewhere.
    pub(crate) fn decode_attention_path(
        &self,
        device: &Device,
        dtype: DType,
        head_dim: usize,
        group: usize,
    ) -> DecodeAttention {
        if self.fused_decode_supported(device, dtype, head_dim, group) {
            DecodeAttention::Fused
        } else if device.is_cpu() {
            DecodeAttention::PerSequence
        } else {
            DecodeAttention::Padded
        }
    }

    /// Prepare one decode step: `layers[l][b]` are the buffers of sequence b in layer l, reserved for this step,
    /// on `device` in `dtype` with this head shape; `path` overrides the choice of
    /// [`Self::decode_attention_path`] (a fused path where the kernel does not cover the call is not taken).
    pub fn decode_step<'a>(
        &self,
        layers: Vec<Vec<DecodeKv<'a>>>,
        (device, dtype): (&Device, DType),
        (head_dim, group): (usize, usize),
        path: Option<DecodeAttention>,
    ) -> Result<DecodeStep<'a>> {
        let auto = self.decode_attention_path(device, dtype, head_dim, group);
        let path = match path {
            Some(DecodeAttention::Fused) if auto != DecodeAttention::Fused => auto,
            Some(p) => p,
            None => auto,
        };
        let how = match path {
            DecodeAttention::Fused if device.is_cpu() => StepPath::FusedCpu,
            DecodeAttention::Fused => StepPath::Fused(Box::new(DecodePlan::new(dtype, &layers)?)),
            DecodeAttention::PerSequence => StepPath::PerSequence,
            DecodeAttention::Padded => {
                let lens: Vec<usize> = layers
                    .first()
                    .map_or(Vec::new(), |l| l.iter().map(|c| c.len).collect());
                let (lmax, mask) = composed::length_mask(&lens, device)?;
                StepPath::Padded(lmax, mask)
            }
        };
        Ok(DecodeStep {
            layers,
            how,
            budget: self.attention_budget,
            widen: self.config.fused_kernels && bf16::covers(device, dtype, head_dim),
        })
    }

    /// One decode step of attention for B sequences with separate KV buffers (one layer): writes each
    /// sequence's new K/V (`k_new`, `v_new`: (B, kv_heads, head_dim)) at position `len` of its buffers, then
    /// attends its queries `q` (B, kv_heads·group, head_dim) over positions `0..=len`. Returns
    /// (B, heads, head_dim). One fused call where [`Self::fused_decode_supported`] holds.
    pub fn decode_attention(
        &self,
        q: &Tensor,
        k_new: &Tensor,
        v_new: &Tensor,
        kv: &[DecodeKv<'_>],
        scale: f32,
    ) -> Result<Tensor> {
        let group = q.dim(1)? / k_new.dim(1)?.max(1);
        let step = self.decode_step(
            vec![kv.to_vec()],
            (q.device(), q.dtype()),
            (q.dim(2)?, group),
            None,
        )?;
        step.attend(0, q, k_new, v_new, scale)
    }

    /// [`Self::varlen_attention`] on CUDA with the kernel chosen by the caller (`mma`: tensor cores, bf16/f16
    /// only), for `self-test` to check both kernels whatever the settings say.
    #[cfg(feature = "cuda")]
    pub(crate) fn varlen_attention_cuda(a: Varlen<'_>, mma: bool) -> Result<Tensor> {
        cuda::varlen_attention(a, mma)
    }
}
