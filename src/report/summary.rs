//! The Markdown summary of the metrics (`summary.md` and the table `score` and `eval` print).

use std::fmt::Write as _;

use crate::score::{Figure, Interval, RunMetrics};

fn figure_text(f: Figure) -> String {
    match f {
        Figure::Percent(Some(p)) => fmt_num(p),
        Figure::Percent(None) => "n/a".into(),
        Figure::Count(n) => n.to_string(),
    }
}

fn fmt_num(f: f64) -> String {
    if f.fract() == 0.0 {
        format!("{f:.0}")
    } else {
        format!("{f:.2}")
    }
}

/// Render the metrics as a Markdown summary: headline table, per-action table, per-app table.
pub(crate) fn render_summary(m: &RunMetrics) -> String {
    let mut s = String::new();
    let r = &m.rules;
    let _ = writeln!(s, "# Mobile-R1 evaluation\n");
    let _ = writeln!(
        s,
        "Rules: `{}` v{} (box scale {}, distance {}, distance with boxes: {}, text: {:?})\n",
        r.name,
        r.version,
        r.bbox_scale,
        r.distance_threshold,
        r.distance_fallback_with_boxes,
        r.text
    );
    let _ = writeln!(s, "| metric | value | 95% interval |\n|---|---|---|");
    let rows = headline_rows(m);
    for (k, v) in rows {
        let _ = writeln!(s, "| {k} | {v} |");
    }
    for f in m.extra_figures() {
        // A count needs no interval, and a percentage of nothing has none.
        let ci = match f.value {
            Figure::Percent(Some(_)) => interval_text(m, f.key, 2),
            _ => String::new(),
        };
        let _ = writeln!(s, "| {} | {}{ci} |", f.key, figure_text(f.value));
    }
    for r in super::semi_online::rows(m) {
        let ci = if r.interval {
            interval_text(m, r.key, 2)
        } else {
            String::new()
        };
        let _ = writeln!(s, "| {} | {}{ci} |", r.label, r.value);
    }
    s.push_str(&group_tables(m));
    if let Some(iv) = &m.intervals {
        let _ = writeln!(
            s,
            "\nIntervals: {:.0}% {}, {} resamples, seed {}.",
            iv.confidence * 100.0,
            iv.method,
            iv.resamples,
            iv.seed
        );
    }
    if !m.format_error_kinds.is_empty() {
        let kinds: Vec<String> = m
            .format_error_kinds
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(s, "\nFormat errors by kind: {}", kinds.join(", "));
    }
    s
}

/// ` | low – high` (a third table cell) for a metric with a bootstrap interval, else empty.
fn interval_text(m: &RunMetrics, key: &str, digits: usize) -> String {
    match m.intervals.as_ref().and_then(|iv| iv.metrics.get(key)) {
        Some(Interval { low, high }) => format!(" | {low:.digits$} – {high:.digits$}"),
        None => String::new(),
    }
}

/// The headline rows of the summary table, with the bootstrap intervals where computed.
fn headline_rows(m: &RunMetrics) -> [(&'static str, String); 12] {
    let ci = |key: &str, digits: usize| interval_text(m, key, digits);
    [
        ("steps (N)", m.steps.to_string()),
        ("trajectories (T)", m.trajectories.to_string()),
        (
            "accuracy %",
            format!("{:.2}{}", m.accuracy, ci("accuracy", 2)),
        ),
        (
            "task success %",
            format!("{:.2}{}", m.task_success, ci("task_success", 2)),
        ),
        (
            "tail success %",
            format!("{:.2}{}", m.tail_success, ci("tail_success", 2)),
        ),
        (
            "type accuracy %",
            format!("{:.2}{}", m.type_accuracy, ci("type_accuracy", 2)),
        ),
        ("args errors (Avg Err)", m.args_errors.to_string()),
        (
            "avg args errors / trajectory",
            format!("{:.3}{}", m.avg_args_errors, ci("avg_args_errors", 3)),
        ),
        ("format errors", m.format_errors.to_string()),
        ("type errors", m.type_errors.to_string()),
        (
            "full three-tag format %",
            format!("{:.2}", m.full_format_rate),
        ),
        (
            "missing / unknown / malformed predictions",
            format!(
                "{} / {} / {}",
                m.missing_predictions, m.unknown_predictions, m.malformed_prediction_lines
            ),
        ),
    ]
}

/// The per-action and per-app tables.
fn group_tables(m: &RunMetrics) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n| action | steps | type acc % | exact acc % |\n|---|---|---|---|"
    );
    for a in &m.per_action {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.2} |",
            a.action, a.count, a.type_accuracy, a.exact_accuracy
        );
    }
    let _ = writeln!(
        s,
        "\n| app | trajectories | steps | accuracy % | task success % |\n|---|---|---|---|---|"
    );
    for g in &m.per_app {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {:.2} |",
            g.key,
            g.trajectories,
            g.steps,
            g.accuracy,
            g.task_success.unwrap_or(0.0)
        );
    }
    s
}
