//! What the summary and the HTML report show of a semi-online run: its figures as table rows, and where each
//! trajectory's run of correct steps ended (the trajectory browser marks the stop and the steps never reached).

use serde_json::{json, Value};

use crate::score::{RunMetrics, SemiOnlineSummary, StepScore, TrajectoryRun};

/// One row of the semi-online figures.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    /// Its label.
    pub label: &'static str,
    /// Its key in `metrics.json` (`semi_online.<key>`) and, for percentages, in `intervals.metrics`.
    pub key: &'static str,
    /// The value as shown.
    pub value: String,
    /// Whether it is a percentage with a bootstrap interval.
    pub interval: bool,
}

/// The rows of `m`'s semi-online figures (none for a gold-history run).
pub fn rows(m: &RunMetrics) -> Vec<Row> {
    let Some(s) = &m.semi_online else {
        return Vec::new();
    };
    let row = |label, key, value: String, interval| Row {
        label,
        key,
        value,
        interval,
    };
    let mut out = vec![
        row(
            "semi-online procedure",
            "procedure",
            format!(
                "{} ({} screenshot{} per prompt)",
                s.procedure,
                s.images,
                if s.images == 1 { "" } else { "s" }
            ),
            false,
        ),
        row(
            "success rate %",
            "success_rate",
            format!("{:.2}", s.success_rate),
            true,
        ),
        row(
            "average progress %",
            "average_progress",
            format!("{:.2}", s.average_progress),
            true,
        ),
    ];
    if let Some(z) = s.average_progress_zeroed {
        out.push(row(
            "average progress, stop at an unparsable reply = 0 (UI-S1's code) %",
            "average_progress_zeroed",
            format!("{z:.2}"),
            true,
        ));
    }
    out.push(row("steps reached", "steps_reached", reached(s), false));
    if let Some(n) = s.gold_history_entries {
        out.push(row(
            "history entries filled with the gold action",
            "gold_history_entries",
            n.to_string(),
            false,
        ));
    }
    out.push(row(
        "trajectories stopped at an unparsable reply",
        "stopped_unparsable",
        s.stopped_unparsable.to_string(),
        false,
    ));
    out
}

fn reached(s: &SemiOnlineSummary) -> String {
    match s.steps_not_reached {
        Some(n) => format!("{} ({n} after a stop, never prompted)", s.steps_reached),
        None => s.steps_reached.to_string(),
    }
}

/// Where each trajectory's run of correct steps ended, by `traj_index`: the browser's `stop` of a trajectory
/// (`step`: its first step that is not correct, null when every step is; `progress`: correct steps before it;
/// `reachedAll`: whether a `uis1-sop` run prompted every step).
pub fn stops(steps: &[StepScore], m: &RunMetrics) -> std::collections::HashMap<usize, Value> {
    let stops_early = m
        .semi_online
        .as_ref()
        .is_some_and(|s| s.procedure.stops_at_first_error());
    crate::score::trajectory_runs(steps)
        .into_iter()
        .map(|r: TrajectoryRun| {
            let stop = (!r.success()).then_some(r.correct_prefix);
            let v = json!({
                "step": stop,
                "progress": r.correct_prefix,
                "steps": r.steps,
                "unparsable": r.stopped_unparsable,
                "stopsEarly": stops_early,
            });
            (r.traj_index, v)
        })
        .collect()
}
