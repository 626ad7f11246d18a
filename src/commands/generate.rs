//! (in progress)
use crate::cli::GenerateArgs;

/// Entry point.
pub fn run(_args: GenerateArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
