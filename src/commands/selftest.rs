//! `self-test`: the fused kernels of this build against their CPU references on the chosen device.

use anyhow::{bail, Result};
use serde_json::json;

use crate::cli::SelfTestArgs;
use crate::ops::selftest as check;

/// Run every comparison, print them, and fail when one is out of tolerance.
pub fn run(a: SelfTestArgs) -> Result<()> {
    let (device, spec) = crate::backend::choose_device(a.device)?;
    let ops = crate::ops::Ops::new(
        &super::ops_config(&a.ops),
        &device,
        candle_core::DType::BF16,
    )?;
    let results = check::run(&ops, &device)?;
    let failed = results.iter().filter(|r| !r.passed).count();
    if a.json {
        let report = json!({
            "device": spec.to_string(),
            "cuda_feature": cfg!(feature = "cuda"),
            "kernels_enabled": ops.config().fused_kernels,
            "passed": failed == 0,
            "results": results,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{:<48} {:<5} {:<9} {:>12} {:>12}  ok",
            "case", "dtype", "path", "max |diff|", "tolerance"
        );
        for r in &results {
            let path = if r.kernel { "fused" } else { "reference" };
            println!(
                "{:<48} {:<5} {:<9} {:>12.3e} {:>12.3e}  {}",
                r.case,
                r.dtype,
                path,
                r.max_abs_diff,
                r.tolerance,
                if r.passed { "yes" } else { "NO" }
            );
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of {} kernel checks out of tolerance",
            results.len()
        );
    }
    Ok(())
}
