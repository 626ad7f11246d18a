//! `data validate`: check a benchmark folder completely (images included) and print a summary; `data import`: turn
//! another benchmark into a benchmark folder.
use std::collections::BTreeMap;

use crate::action::ActionType;
use crate::cli::{ImportArgs, ValidateArgs};
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
    if let Some(info) = &bench.info {
        if let Some(src) = &info.source {
            out.push_str(&format!(
                "  imported from: {} {}\n",
                src.format,
                src.path.display()
            ));
        }
        if let Some(r) = &info.rules {
            let known = r.parse::<crate::settings::RuleName>().is_ok();
            out.push_str(&format!(
                "  suggested rule preset: {r}{}\n",
                if known {
                    ""
                } else {
                    " (not a preset this program knows: pass --rules to eval, score and report)"
                }
            ));
        }
    }
    out
}

/// Entry point of `data import`.
pub fn import(args: ImportArgs) -> anyhow::Result<()> {
    let opts = crate::import::ImportOptions {
        format: args.format,
        source: args.source,
        out: args.out,
        split: args.split,
        level: args.level,
        limit: args.limit,
        strict: args.strict,
        images: args.images,
        program_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let report = crate::import::run(&opts)?;
    print!("{}", report.render());
    Ok(())
}

/// Entry point.
pub fn validate(args: ValidateArgs) -> anyhow::Result<()> {
    let hub = super::setup::hub(&args.hub, crate::interrupt::Cancel::new());
    let (data, source) = super::setup::resolve_data(args.data, &hub)?;
    if let Some(s) = &source {
        println!(
            "Hub dataset {} at {} (commit {})",
            s.repo, s.revision, s.commit
        );
    }
    let bench = super::setup::load_benchmark(data.as_deref())?;
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
