//! `data validate`: check a benchmark folder completely (images included) and print a summary.
use std::collections::BTreeMap;

use crate::action::ActionType;
use crate::cli::ValidateArgs;
use crate::dataset::Benchmark;

/// Render the summary of a benchmark: trajectories, steps, apps, action-type counts, boxes.
pub fn summary(bench: &Benchmark) -> String {
    let mut apps: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut types: BTreeMap<ActionType, usize> = BTreeMap::new();
    let mut boxed = 0;
    for t in &bench.trajectories {
        let e = apps.entry(&t.app_name).or_default();
        e.0 += 1;
        e.1 += t.steps.len();
        for s in &t.steps {
            *types.entry(s.action.action_type()).or_default() += 1;
            boxed += usize::from(!s.bboxes.is_empty());
        }
    }
    let mut out = format!(
        "Benchmark {}\n  trajectories: {}\n  steps: {}\n  steps with gold boxes: {}\n  apps: {}\n",
        bench.root.display(),
        bench.trajectories.len(),
        bench.num_steps(),
        boxed,
        apps.len()
    );
    for (app, (t, s)) in &apps {
        out.push_str(&format!("    {app}: {t} trajectories, {s} steps\n"));
    }
    out.push_str("  action types:\n");
    for (ty, n) in &types {
        out.push_str(&format!("    {ty}: {n}\n"));
    }
    out
}

/// Entry point.
pub fn validate(args: ValidateArgs) -> anyhow::Result<()> {
    let hub = super::hub::hub(&args.hub, crate::interrupt::Cancel::new());
    let (data, source) = super::hub::resolve_data(args.data, &hub)?;
    if let Some(s) = &source {
        println!(
            "Hub dataset {} at {} (commit {})",
            s.repo, s.revision, s.commit
        );
    }
    let bench = super::score::load_benchmark(data.as_deref())?;
    print!("{}", summary(&bench));
    let report = bench.validate_images();
    println!(
        "  screenshots checked: {} ({} resized from the screen size)",
        report.checked, report.resized
    );
    if report.ok() {
        println!("OK");
        return Ok(());
    }
    for p in &report.problems {
        eprintln!("error: {p}");
    }
    anyhow::bail!(
        "{} of {} screenshots have problems",
        report.problems.len(),
        report.checked
    )
}
