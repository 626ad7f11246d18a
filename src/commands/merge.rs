//! `merge`: join the shard folders of a sharded run into the files one unsharded run writes.

use anyhow::Result;

use crate::cli::MergeArgs;
use crate::merge::{merge_run, MergeOptions};

/// Entry point of `merge`.
pub fn run(a: MergeArgs) -> Result<()> {
    let rules = a.rules.map(|r| r.preset());
    let opts = MergeOptions {
        run: a.run,
        data: a.data,
        rules,
        allow_partial: a.allow_partial,
    };
    let outcome = merge_run(&opts)?;
    let incomplete: Vec<String> = outcome
        .shards
        .iter()
        .filter(|s| !s.complete())
        .map(|s| s.spec.to_string())
        .collect();
    println!("{}", outcome.summary);
    if !incomplete.is_empty() {
        println!(
            "Partial merge: shards {} are missing or unfinished; their steps count as missing predictions.",
            incomplete.join(", ")
        );
    }
    println!(
        "Merged {} shards into {}",
        outcome.shards.len(),
        opts.run.display()
    );
    Ok(())
}
