//! The ops as the model runs them on a device: the [`Executor`] of `self-test`.

use candle_core::{DType, Device, Result, Tensor};

use super::{DecodeOut, Executor, Ran};
use crate::ops::{DecodeKv, Ops, QkvRope, Varlen, VarlenSeg};

/// The fused ops on this device (inputs copied there, outputs left there), run as `ops` says.
pub(crate) struct OnDevice<'a> {
    /// Where the ops run.
    pub device: &'a Device,
    /// The ops' context (which fused paths are on).
    pub ops: &'a Ops,
}

impl OnDevice<'_> {
    fn on(&self, t: &Tensor) -> Result<Tensor> {
        t.to_device(self.device)
    }

    /// CUDA with the kernels on: every op is a kernel.
    fn cuda_kernels(&self) -> bool {
        self.device.is_cuda() && self.ops.config().fused_kernels
    }

    /// The CPU's fused f32 paths (SwiGLU, q/k/v + rotary).
    fn cpu_fused(&self, dtype: DType) -> bool {
        self.device.is_cpu() && self.ops.config().fused_kernels && dtype == DType::F32
    }
}

impl Executor for OnDevice<'_> {
    fn has_mma(&self, dtype: DType) -> bool {
        self.cuda_kernels() && dtype != DType::F32
    }

    fn rms_norm_hf(&self, x: &Tensor, w: &Tensor, eps: f32) -> Result<Ran<Tensor>> {
        Ok(Ran {
            out: self.ops.rms_norm_hf(&self.on(x)?, &self.on(w)?, eps)?,
            kernel: self.cuda_kernels(),
        })
    }

    fn swiglu_packed(&self, gu: &Tensor, bias: Option<&Tensor>) -> Result<Ran<Tensor>> {
        let bias = bias.map(|b| self.on(b)).transpose()?;
        Ok(Ran {
            out: self.ops.swiglu_packed(&self.on(gu)?, bias.as_ref())?,
            kernel: self.cuda_kernels() || self.cpu_fused(gu.dtype()),
        })
    }

    fn bias_add(&self, y: &Tensor, b: &Tensor) -> Result<Ran<Tensor>> {
        Ok(Ran {
            out: self.ops.bias_add(&self.on(y)?, &self.on(b)?)?,
            kernel: self.cuda_kernels(),
        })
    }

    fn bias_residual(&self, y: &Tensor, b: &Tensor, r: &Tensor) -> Result<Ran<Tensor>> {
        Ok(Ran {
            out: self
                .ops
                .bias_residual(&self.on(y)?, &self.on(b)?, &self.on(r)?)?,
            kernel: self.cuda_kernels(),
        })
    }

    fn qkv_rope(&self, a: QkvRope<'_>) -> Result<Ran<(Tensor, Tensor, Tensor)>> {
        let (y, bias, cos, sin) = (
            self.on(a.y)?,
            self.on(a.bias)?,
            self.on(a.cos)?,
            self.on(a.sin)?,
        );
        let kernel = self.cuda_kernels() || self.cpu_fused(a.y.dtype());
        let out = self.ops.qkv_rope(QkvRope {
            y: &y,
            bias: &bias,
            cos: &cos,
            sin: &sin,
            ..a
        })?;
        Ok(Ran { out, kernel })
    }

    fn decode_attention(
        &self,
        q: &Tensor,
        k_new: &Tensor,
        v_new: &Tensor,
        kv: &[DecodeKv<'_>],
        scale: f32,
    ) -> Result<Ran<DecodeOut>> {
        // Fresh buffers on the device: the op writes the new position into them.
        let bufs: Vec<(Tensor, Tensor)> = kv
            .iter()
            .map(|c| Ok((self.on(c.k)?.copy()?, self.on(c.v)?.copy()?)))
            .collect::<Result<_>>()?;
        let on_device: Vec<DecodeKv<'_>> = bufs
            .iter()
            .zip(kv)
            .map(|((k, v), c)| DecodeKv { k, v, len: c.len })
            .collect();
        let (d, group) = (q.dim(2)?, q.dim(1)? / k_new.dim(1)?.max(1));
        let kernel = self
            .ops
            .fused_decode_supported(self.device, q.dtype(), d, group);
        let out = self.ops.decode_attention(
            &self.on(q)?,
            &self.on(k_new)?,
            &self.on(v_new)?,
            &on_device,
            scale,
        )?;
        Ok(Ran {
            out: (out, bufs),
            kernel,
        })
    }

    fn varlen_attention(&self, a: Varlen<'_>, mma: bool) -> Result<Ran<Tensor>> {
        let (q, k, v) = (self.on(a.q)?, self.on(a.k)?, self.on(a.v)?);
        let prefixes: Vec<Option<(Tensor, Tensor, usize)>> = a
            .segs
            .iter()
            .map(|s| {
                s.prefix
                    .map(|(k, v, p)| Ok((self.on(k)?, self.on(v)?, p)))
                    .transpose()
            })
            .collect::<Result<_>>()?;
        let segs: Vec<VarlenSeg<'_>> = a
            .segs
            .iter()
            .zip(&prefixes)
            .map(|(s, p)| VarlenSeg {
                prefix: p.as_ref().map(|(k, v, n)| (k, v, *n)),
                ..*s
            })
            .collect();
        let d = a.q.dim(2)?;
        let kernel = self.ops.varlen_supported(self.device, a.q.dtype(), d);
        let call = Varlen {
            q: &q,
            k: &k,
            v: &v,
            segs: &segs,
            ..a
        };
        let out = if self.device.is_cuda() && kernel {
            #[cfg(not(feature = "cuda"))]
            unreachable!("varlen_supported holds on CUDA only with the cuda feature");
            #[cfg(feature = "cuda")]
            Ops::varlen_attention_cuda(call, mma)?
        } else {
            let _ = mma;
            self.ops.varlen_attention(call)?
        };
        Ok(Ran { out, kernel })
    }
}
