//! Small building blocks shaped like the checkpoint: `Linear`, HF-order `RmsNorm`, and a weight getter whose
//! errors name the tensor.

use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

use crate::ops::{HeldWeight, Ops, Rows};

/// Load `name` under `vb` with the expected `shape`, cast to the builder's dtype; errors name the full tensor.
pub fn weight<S: Into<candle_core::Shape>>(
    vb: &VarBuilder,
    shape: S,
    name: &str,
) -> Result<Tensor> {
    let shape = shape.into();
    let full = if vb.prefix().is_empty() {
        name.to_string()
    } else {
        format!("{}.{name}", vb.prefix())
    };
    if !vb.contains_tensor(name) {
        candle_core::bail!("missing tensor `{full}` (expected shape {shape:?})");
    }
    vb.get(shape.clone(), name).map_err(|e| {
        candle_core::Error::Msg(format!("tensor `{full}` (expected shape {shape:?}): {e}"))
    })
}

/// `y = x·Wᵀ + b` for 2-D `x` (rows, in).
#[derive(Debug, Clone)]
pub struct Linear {
    w: Weight,
    b: Option<Tensor>,
}

/// A linear layer's weight (out, in): a tensor, or held by the ops in their tile layout ([`Linear::hold`]).
#[derive(Debug, Clone)]
enum Weight {
    Tensor(Tensor),
    Held(HeldWeight),
}

impl Linear {
    /// Load `weight` (out, in) and, when `bias`, `bias` (out).
    pub fn new(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> Result<Self> {
        let w = weight(&vb, (out_dim, in_dim), "weight")?;
        let b = if bias {
            Some(weight(&vb, out_dim, "bias")?)
        } else {
            None
        };
        Ok(Self {
            w: Weight::Tensor(w),
            b,
        })
    }
    /// One layer computing the given layers' outputs side by side (their weights stacked along `out`): one GEMM
    /// instead of several. All parts must agree on having a bias.
    pub fn concat(parts: &[Linear]) -> Result<Self> {
        let w = parts
            .iter()
            .map(|p| p.tensor("Linear::concat"))
            .collect::<Result<Vec<_>>>()?;
        let b: Option<Vec<&Tensor>> = parts.iter().map(|p| p.b.as_ref()).collect();
        if b.is_none() && parts.iter().any(|p| p.b.is_some()) {
            candle_core::bail!("Linear::concat: some parts have a bias and some do not");
        }
        Ok(Self {
            w: Weight::Tensor(Tensor::cat(&w, 0)?),
            b: b.map(|b| Tensor::cat(&b, 0)).transpose()?,
        })
    }

    /// Wrap an existing weight (out, in), e.g. the tied embedding.
    pub(crate) fn from_weight(w: Tensor) -> Self {
        Self {
            w: Weight::Tensor(w),
            b: None,
        }
    }

    /// Wrap an existing weight (out, in) and bias (out), e.g. a reshaped convolution.
    pub(crate) fn from_parts(w: Tensor, b: Option<Tensor>) -> Self {
        Self {
            w: Weight::Tensor(w),
            b,
        }
    }

    /// Hand the weight to the ops to hold in their tile layout where its products run faster so
    /// ([`Ops::hold_weight`]; as a packed gate-up weight [G | U] where `gate_up`, whose product is then only the
    /// SwiGLU: [`Self::matmul_swiglu`]). For layers whose rows are never decoded one at a time (the vision
    /// tower's): the tensor is dropped.
    pub(crate) fn hold(&mut self, ops: &Ops, gate_up: bool) -> Result<()> {
        if let Weight::Tensor(w) = &self.w {
            if let Some(held) = ops.hold_weight(w, gate_up)? {
                self.w = Weight::Held(held);
            }
        }
        Ok(())
    }

    /// The weight as a tensor, or an error naming `what` where the ops hold it.
    fn tensor(&self, what: &str) -> Result<&Tensor> {
        match &self.w {
            Weight::Tensor(w) => Ok(w),
            Weight::Held(_) => candle_core::bail!("{what}: the weight is held in tiles"),
        }
    }
}

/// How one forward pass runs its GEMMs: the ops' context and how the rows of the activations group (one
/// segment per prompt or image, or independent rows), so that each row's result is batch-invariant.
#[derive(Debug, Clone, Copy)]
pub struct Pass<'a> {
    /// The ops' context.
    pub ops: &'a Ops,
    /// The grouping of the activations' rows.
    pub rows: Rows<'a>,
}

impl Linear {
    /// `x·Wᵀ` without the bias.
    pub fn matmul(&self, p: Pass<'_>, x: &Tensor) -> Result<Tensor> {
        p.ops
            .section("linear.matmul", x.device(), || match &self.w {
                Weight::Held(w) if !w.gate_up() => p.ops.matmul_held(x, w, None),
                _ => p.ops.matmul_nt(x, self.tensor("matmul")?, p.rows),
            })
    }

    /// `silu(x·Gᵀ + b_G) · (x·Uᵀ + b_U)` of a packed gate-up layer (W = [G | U]) in one pass where the ops have one
    /// ([`Ops::matmul_swiglu`]), with the bits of [`Self::matmul_bias`] followed by `swiglu_packed`; `None`
    /// elsewhere.
    pub fn matmul_swiglu(&self, p: Pass<'_>, x: &Tensor) -> Result<Option<Tensor>> {
        p.ops
            .section("linear.matmul", x.device(), || match &self.w {
                Weight::Held(w) if w.gate_up() => {
                    p.ops.matmul_held(x, w, self.b.as_ref()).map(Some)
                }
                _ => p
                    .ops
                    .matmul_swiglu(x, self.tensor("matmul_swiglu")?, self.b.as_ref(), p.rows),
            })
    }

    /// `x·Wᵀ` and the bias still to add: the biased product and `None` where the ops add the bias inside a bf16
    /// product, before its one rounding (torch's order: [`Ops::matmul_nt_bias`]), else the product and the bias.
    pub fn matmul_bias(&self, p: Pass<'_>, x: &Tensor) -> Result<(Tensor, Option<&Tensor>)> {
        if let Some(b) = &self.b {
            let folded = p
                .ops
                .section("linear.matmul", x.device(), || match &self.w {
                    Weight::Held(w) if !w.gate_up() => p.ops.matmul_held(x, w, Some(b)).map(Some),
                    _ => p
                        .ops
                        .matmul_nt_bias(x, self.tensor("matmul_bias")?, b, p.rows),
                })?;
            if let Some(y) = folded {
                return Ok((y, None));
            }
        }
        Ok((self.matmul(p, x)?, self.b.as_ref()))
    }

    /// [`Self::matmul_bias`] for a layer whose next op adds the bias: the product and the bias still to add,
    /// zeros where the product holds it already (`+0` is exact). An error names `what` where there is no bias.
    pub fn matmul_bias_or_zeros(
        &self,
        p: Pass<'_>,
        x: &Tensor,
        what: &str,
    ) -> Result<(Tensor, Tensor)> {
        let (y, rest) = self.matmul_bias(p, x)?;
        let b = match (rest, &self.b) {
            (Some(b), _) => b.clone(),
            (None, Some(b)) => b.zeros_like()?,
            (None, None) => candle_core::bail!("{what} without bias"),
        };
        Ok((y, b))
    }

    /// `x·Wᵀ + b`.
    pub fn forward(&self, p: Pass<'_>, x: &Tensor) -> Result<Tensor> {
        let (y, b) = self.matmul_bias(p, x)?;
        match b {
            Some(b) => p
                .ops
                .section("linear.bias_add", x.device(), || p.ops.bias_add(&y, b)),
            None => Ok(y),
        }
    }

    /// `r + (x·Wᵀ + b)`: the layer closing a residual branch, bias and residual in one pass
    /// ([`Ops::bias_residual`]), or in the product's store for a held weight ([`Ops::matmul_held_residual`]).
    pub(crate) fn forward_residual(&self, p: Pass<'_>, x: &Tensor, r: &Tensor) -> Result<Tensor> {
        if let Weight::Held(w) = &self.w {
            if !w.gate_up() {
                // The residual joins the product's store: no pass of its own.
                return p.ops.section("linear.matmul", x.device(), || {
                    p.ops.matmul_held_residual(x, w, self.b.as_ref(), r)
                });
            }
        }
        let (y, b) = self.matmul_bias(p, x)?;
        p.ops
            .section("linear.bias_residual", x.device(), || match b {
                Some(b) => p.ops.bias_residual(&y, b, r),
                None => p.ops.residual_add(&y, r),
            })
    }
}

/// Qwen2 RMSNorm in HF's cast order: normalise in f32, cast to the activation dtype, then multiply by the weight
/// ([`Ops::rms_norm_hf`]: one kernel on CUDA).
#[derive(Debug, Clone)]
pub(crate) struct RmsNorm {
    w: Tensor,
    eps: f32,
}

impl RmsNorm {
    /// Load `weight` (dim).
    pub fn new(dim: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        let w = weight(&vb, dim, "weight")?;
        Ok(Self { w, eps: eps as f32 })
    }
}

impl RmsNorm {
    /// Normalise `x` over its last dimension.
    pub fn forward(&self, ops: &Ops, x: &Tensor) -> Result<Tensor> {
        ops.rms_norm_hf(x, &self.w, self.eps)
    }

    /// Its weight and epsilon, for the ops that fuse the norm into a larger pass.
    pub fn parts(&self) -> (&Tensor, f32) {
        (&self.w, self.eps)
    }
}
