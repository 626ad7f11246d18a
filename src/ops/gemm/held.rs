//! Linear layers' weights held in the AMX GEMM's tile layout from load ([`HeldWeight`]): for weights that only
//! row segments multiply (the vision tower's), on CPUs whose bf16 segments run on AMX, the weight is laid out
//! once as its tile pairs instead of being read in place on every product.

use std::sync::Arc;

use candle_core::{DType, Result, Tensor};

use super::bf16::{self, amx::TileWeight};
use crate::ops::Ops;

/// A linear layer's bf16 weight (out, in) held in tiles: a plain weight, or a packed gate-up weight [g | u] whose
/// product is the SwiGLU of its halves. Shared by the clones of a model.
#[derive(Debug, Clone)]
pub struct HeldWeight(Arc<TileWeight>);

impl HeldWeight {
    /// Whether it is a gate-up weight (its product is the SwiGLU).
    pub fn gate_up(&self) -> bool {
        self.0.gate_up()
    }
}

impl Ops {
    /// `w` (out, in) held in tiles (as a gate-up weight [g | u] where `gate_up`), where its products run faster so:
    /// a bf16 CPU weight, bf16 segments on the AMX kernel, the fused ops on (the bias joins the sums); `None`
    /// elsewhere (the layer keeps `w`).
    pub fn hold_weight(&self, w: &Tensor, gate_up: bool) -> Result<Option<HeldWeight>> {
        let (n, k) = w.dims2()?;
        let eligible = w.device().is_cpu()
            && w.dtype() == DType::BF16
            && self.bf16.amx()
            && self.config.fused_kernels
            && k > 0
            && (!gate_up || n.is_multiple_of(2));
        if !eligible {
            return Ok(None);
        }
        let held = bf16::with_bf16(w, |w| Ok(TileWeight::new(w, (n, k), gate_up)))?;
        Ok(Some(HeldWeight(Arc::new(held))))
    }

    /// `x · wᵀ + b` for bf16 `x` (…, in) and a held weight with its bias `b` (out), the bias added to the f32 sums
    /// before their one rounding (as [`Ops::matmul_nt_bias`] adds it); for a gate-up weight the SwiGLU of the two
    /// halves (as [`Ops::matmul_swiglu`]), (…, out / 2). Every row's bits stand alone, whatever rows come with it.
    pub fn matmul_held(&self, x: &Tensor, w: &HeldWeight, b: Option<&Tensor>) -> Result<Tensor> {
        held_product(x, w, b, None)
    }

    /// `r + (x · wᵀ + b)` for a held plain weight: [`Ops::matmul_held`] with the residual add in the product's
    /// store, the bits of [`Ops::residual_add`] after the product. `r` is shaped as the product.
    pub fn matmul_held_residual(
        &self,
        x: &Tensor,
        w: &HeldWeight,
        b: Option<&Tensor>,
        r: &Tensor,
    ) -> Result<Tensor> {
        held_product(x, w, b, Some(r))
    }
}

/// [`Ops::matmul_held`], with the residual `r` where given.
fn held_product(
    x: &Tensor,
    w: &HeldWeight,
    b: Option<&Tensor>,
    r: Option<&Tensor>,
) -> Result<Tensor> {
    let (n, k) = w.0.dims();
    let mut dims = x.dims().to_vec();
    match dims.last_mut() {
        Some(last) if *last == k => *last = w.0.out_cols(),
        _ => candle_core::bail!("matmul_held: x {:?} for a weight of {n} x {k}", x.dims()),
    }
    if x.dtype() != DType::BF16 || !x.device().is_cpu() {
        candle_core::bail!(
            "matmul_held: a held weight multiplies bf16 CPU rows, not {:?}",
            x.dtype()
        );
    }
    let count = x.elem_count() / k;
    let r = match r {
        Some(_) if w.gate_up() => {
            candle_core::bail!("matmul_held: a residual after a gate-up (SwiGLU) product")
        }
        Some(r) if r.dims() != dims.as_slice() => {
            candle_core::bail!(
                "matmul_held: residual {:?} for a product {dims:?}",
                r.dims()
            )
        }
        Some(r) => Some(r.reshape((count, w.0.out_cols()))?),
        None => None,
    };
    bf16::matmul_held(&x.reshape((count, k))?, &w.0, b, r.as_ref())?.reshape(dims)
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use crate::ops::{Ops, OpsConfig};

    /// A residual of another shape, or after a gate-up product, is an error naming it, not a panic in the kernel.
    #[test]
    fn a_residual_that_does_not_fit_is_an_error() {
        let dev = Device::Cpu;
        let ops = Ops::new(&OpsConfig::default(), &dev, DType::BF16).unwrap();
        let w = Tensor::ones((32, 16), DType::BF16, &dev).unwrap();
        let (Some(plain), Some(gate_up)) = (
            ops.hold_weight(&w, false).unwrap(),
            ops.hold_weight(&w, true).unwrap(),
        ) else {
            eprintln!(
                "skipped: the ops hold no weights here (no AMX, or another bf16 GEMM chosen)"
            );
            return;
        };
        let x = Tensor::ones((5, 16), DType::BF16, &dev).unwrap();
        let r = |rows, cols| Tensor::ones((rows, cols), DType::BF16, &dev).unwrap();
        let sum = ops
            .matmul_held_residual(&x, &plain, None, &r(5, 32))
            .unwrap();
        assert_eq!(
            sum.to_dtype(DType::F32)
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap(),
            17.0
        );
        let err = ops
            .matmul_held_residual(&x, &plain, None, &r(32, 5))
            .unwrap_err();
        assert!(err.to_string().contains("residual [32, 5]"), "{err}");
        let err = ops
            .matmul_held_residual(&x, &gate_up, None, &r(5, 16))
            .unwrap_err();
        assert!(err.to_string().contains("gate-up"), "{err}");
    }
}
