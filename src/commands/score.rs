//! `score`: judge a predictions file against a benchmark and write `metrics.json`, `steps.jsonl`, `summary.md`
//! and `report.html` (the program is [`crate::rescore`]).

use crate::cli::ScoreArgs;
use crate::rescore::{score_predictions_file, ScoreJob};

/// Entry point.
pub fn run(args: ScoreArgs) -> anyhow::Result<()> {
    let hub = super::setup::hub(&args.hub, crate::interrupt::Cancel::new());
    let (data, _) = super::setup::resolve_data(args.data.clone(), &hub)?;
    let job = ScoreJob {
        predictions: args.predictions,
        out: args.out,
        data,
        rules: args.rules.map(crate::settings::RuleName::preset),
        lenient_reading: args.lenient_reading,
        coordinate_frame: args.coordinate_frame,
    };
    let scored = score_predictions_file(&job)?;
    print!("{}", crate::report::render_summary(&scored.metrics));
    if let Some(w) = scored.metrics.frame_warning() {
        eprintln!("warning: {w}");
    }
    println!(
        "\nWrote {}, {}, {} and {}",
        scored.paths.metrics.display(),
        scored.paths.steps.display(),
        scored.paths.summary.display(),
        scored.page.display()
    );
    Ok(())
}
