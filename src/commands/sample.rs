//! `sample`: write the embedded sample benchmark into a folder.
use crate::cli::SampleArgs;
use crate::dataset::Benchmark;

/// Entry point.
pub fn run(args: SampleArgs) -> anyhow::Result<()> {
    crate::sample::write_out(&args.out)?;
    let bench = Benchmark::load(&args.out)?;
    println!(
        "Wrote the sample benchmark to {}: {} trajectories, {} steps",
        args.out.display(),
        bench.trajectories.len(),
        bench.num_steps()
    );
    Ok(())
}
