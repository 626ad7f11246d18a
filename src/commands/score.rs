//! (in progress)
use crate::cli::ScoreArgs;

/// Entry point.
pub fn run(_args: ScoreArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
