//! `report`: write `report.html` for a run folder, or `compare.html` / `compare.json` for two runs.
use anyhow::Context;

use crate::cli::ReportArgs;
use crate::report::{self, RunData, RunOverrides};
use crate::rundir::RunDir;

/// Entry point.
pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let hub = super::setup::hub(&args.hub, crate::interrupt::Cancel::new());
    let (data, _) = super::setup::resolve_data(args.data.clone(), &hub)?;
    let rules = match args.rules {
        Some(r) => Some(r.preset()),
        None => suggested_rules(args.run.as_deref(), data.as_deref())?,
    };
    let overrides = RunOverrides { data, rules };
    if let Some(runs) = args.compare {
        let out = args.out.context("--compare needs --out DIR")?;
        let a = RunData::load(&RunDir::new(&runs[0]), &overrides)
            .with_context(|| format!("loading run {}", runs[0].display()))?;
        // Both runs are judged by the same rules: those of run A unless --rules says otherwise.
        let b_overrides = RunOverrides {
            rules: Some(a.metrics.rules.clone()),
            ..overrides
        };
        let b = RunData::load(&RunDir::new(&runs[1]), &b_overrides)
            .with_context(|| format!("loading run {}", runs[1].display()))?;
        let written = report::compare::write(&out, &a, &b)?;
        print!("{}", written.summary);
        println!(
            "Wrote {} and {}",
            written.html.display(),
            written.json.display()
        );
        return Ok(());
    }
    if let Some(out) = &args.out {
        anyhow::bail!(
            "--out {} is for --compare; the report of a run is written into the run folder",
            out.display()
        );
    }
    let dir = args
        .run
        .context("give a run folder, or --compare RUN_A RUN_B")?;
    let dir = RunDir::new(dir);
    let run = RunData::load(&dir, &overrides)
        .with_context(|| format!("loading run {}", dir.root().display()))?;
    let path = report::html::write(&dir, &run.input())?;
    println!("Wrote {}", path.display());
    Ok(())
}

/// A folder that records its rules (a run's manifest, a scored folder's `scored.json`) keeps them; one that does
/// not, reported against `--data`, takes the benchmark's suggested preset (its `benchmark.json`).
fn suggested_rules(
    run: Option<&std::path::Path>,
    data: Option<&std::path::Path>,
) -> anyhow::Result<Option<crate::settings::RulePreset>> {
    let (Some(run), Some(data)) = (run, data) else {
        return Ok(None);
    };
    if !matches!(RunDir::new(run).origin(), Ok(None)) {
        return Ok(None);
    }
    Ok(Some(super::rules_for(None, data)?))
}
