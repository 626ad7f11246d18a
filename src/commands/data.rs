//! (in progress)
use crate::cli::ValidateArgs;

/// Entry point.
pub fn validate(_args: ValidateArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
