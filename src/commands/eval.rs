//! (in progress)
use crate::cli::EvalArgs;

/// Entry point.
pub fn run(_args: EvalArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
