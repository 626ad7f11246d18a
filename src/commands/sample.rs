//! (in progress)
use crate::cli::SampleArgs;

/// Entry point.
pub fn run(_args: SampleArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
