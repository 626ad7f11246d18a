//! `report.html`: a self-contained page (no network: a Content-Security-Policy forbids it) with the headline
//! metrics and their intervals, the charts as inline SVG, and a trajectory browser whose cards the page's
//! script builds from a JSON data block, inserting every string as text.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::escape::{csp, html, json_script};
use super::input::ReportInput;
use super::overlay::{step_json, StepPlace};
use super::{charts, thumbs, write_atomic, ReportError};
use crate::action::ActionType;
use crate::rundir::{self, RunDir};
use crate::score::{Figure, Predicted, RunMetrics};

/// The page's stylesheet (shared with `compare.html`).
pub(crate) const STYLE: &str = include_str!("assets/report.css");
/// The drawing and browsing script (shared with `compare.html`).
pub(crate) const SCRIPT: &str = include_str!("assets/report.js");

/// A whole page: head with the CSP, the stylesheet, `body`, the JSON data block and the script.
pub(crate) fn page(title: &str, body: &str, data: &Value) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n<title>{title}</title>\n<style>{STYLE}</style></head>\n\
         <body>\n{body}\n<script type=\"application/json\" id=\"report-data\">{data}</script>\n\
         <script>{SCRIPT}</script>\n</body></html>\n",
        csp = html(&csp(SCRIPT)),
        title = html(title),
        data = json_script(data),
    )
}

/// `v` with its interval as `low – high`, or an empty cell.
fn interval_cell(m: &RunMetrics, key: &str, digits: usize) -> String {
    match m.intervals.as_ref().and_then(|iv| iv.metrics.get(key)) {
        Some(i) => format!("{:.digits$} – {:.digits$}", i.low, i.high),
        None => String::new(),
    }
}

/// The rows of the metrics that have intervals.
fn metric_rows(m: &RunMetrics) -> String {
    let mut s = String::new();
    let rows: [(&str, &str, f64, usize); 9] = [
        ("accuracy %", "accuracy", m.accuracy, 2),
        ("task success %", "task_success", m.task_success, 2),
        ("tail success %", "tail_success", m.tail_success, 2),
        ("type accuracy %", "type_accuracy", m.type_accuracy, 2),
        (
            "args errors per trajectory",
            "avg_args_errors",
            m.avg_args_errors,
            3,
        ),
        (
            "full three-tag format %",
            "full_format_rate",
            m.full_format_rate,
            2,
        ),
        ("args errors", "args_errors", m.args_errors as f64, 0),
        ("type errors", "type_errors", m.type_errors as f64, 0),
        ("format errors", "format_errors", m.format_errors as f64, 0),
    ];
    for (label, key, v, d) in rows {
        // A count (no decimals) needs no interval on the page; `metrics.json` and the comparison keep it.
        let ci = if d == 0 {
            String::new()
        } else {
            interval_cell(m, key, d)
        };
        let _ = writeln!(
            s,
            "<tr data-metric=\"{key}\"><td>{label}</td><td class=\"num\">{v:.d$}</td><td class=\"ci\">{ci}</td></tr>"
        );
    }
    s
}

/// The rows of the counts and of the extra keys (judge success).
fn count_rows(m: &RunMetrics) -> String {
    let mut s = String::new();
    let counts = [
        (
            "steps / trajectories",
            format!("{} / {}", m.steps, m.trajectories),
        ),
        ("correct steps", m.correct.to_string()),
        (
            "missing / unknown / malformed predictions",
            format!(
                "{} / {} / {}",
                m.missing_predictions, m.unknown_predictions, m.malformed_prediction_lines
            ),
        ),
    ];
    for (label, v) in counts {
        let _ = writeln!(
            s,
            "<tr><td>{label}</td><td class=\"num\">{v}</td><td></td></tr>"
        );
    }
    for f in m.extra_figures() {
        let label = if f.key == "judge_success" {
            "judge success %"
        } else {
            f.key
        };
        // Only a percentage gets an interval cell (judge success, when a verdict was read); counts do not.
        let (value, ci) = match f.value {
            Figure::Percent(Some(p)) => (format!("{p:.2}"), interval_cell(m, f.key, 2)),
            Figure::Percent(None) => ("n/a".to_string(), String::new()),
            Figure::Count(n) => (n.to_string(), String::new()),
        };
        let ci = if ci.is_empty() {
            "<td></td>".to_string()
        } else {
            format!("<td class=\"ci\">{ci}</td>")
        };
        let _ = writeln!(
            s,
            "<tr data-metric=\"{}\"><td>{}</td><td class=\"num\">{}</td>{ci}</tr>",
            html(f.key),
            html(label),
            html(&value),
        );
    }
    for r in super::semi_online::rows(m) {
        let ci = if r.interval {
            interval_cell(m, r.key, 2)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "<tr data-metric=\"semi_online.{}\"><td>{}</td><td class=\"num\">{}</td><td class=\"ci\">{ci}</td></tr>",
            html(r.key),
            html(r.label),
            html(&r.value),
        );
    }
    s
}

fn headline(input: &ReportInput<'_>) -> String {
    let m = input.metrics;
    let mut s = String::from(
        "<section id=\"headline\"><h2>Metrics</h2><table class=\"metrics\">\
         <tr><th>metric</th><th>value</th><th>95% interval</th></tr>\n",
    );
    s.push_str(&metric_rows(m));
    s.push_str(&count_rows(m));
    s.push_str("</table>\n");
    if let Some(iv) = &m.intervals {
        let _ = writeln!(
            s,
            "<p class=\"note\" id=\"interval-method\">Intervals: {:.0}% {}, {} resamples, seed {}.</p>",
            iv.confidence * 100.0,
            html(&iv.method),
            iv.resamples,
            iv.seed
        );
    }
    s.push_str("</section>\n");
    s
}

fn run_section(input: &ReportInput<'_>) -> String {
    let r = &input.metrics.rules;
    let run = input.run;
    let mut s = String::from("<section id=\"run\"><h2>Run</h2><table class=\"kv\">\n");
    let rows = [
        (
            "model",
            run.model.clone().unwrap_or_else(|| "(not recorded)".into()),
        ),
        ("data", run.data.clone()),
        (
            "rules",
            format!("{} v{}: {}", r.name, r.version, r.description),
        ),
        ("box scale", r.bbox_scale.to_string()),
        ("distance threshold", r.distance_threshold.to_string()),
        (
            "distance test with boxes",
            r.distance_fallback_with_boxes.to_string(),
        ),
        ("box edges inside", r.box_edges_inside.to_string()),
        ("text / key rule", format!("{:?} / {:?}", r.text, r.key)),
    ];
    for (k, v) in rows {
        let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", html(k), html(&v));
    }
    s.push_str("</table>\n");
    if !run.settings.is_empty() {
        s.push_str("<details><summary>All settings</summary><table class=\"kv\">\n");
        for (k, v) in &run.settings {
            let _ = writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", html(k), html(v));
        }
        s.push_str("</table></details>\n");
    }
    s.push_str("</section>\n");
    s
}

/// The type confusion as a matrix over the gold types present × all types and `none`.
fn confusion_chart(m: &RunMetrics) -> String {
    let rows: Vec<String> = m.confusion.keys().map(|t| t.as_str().to_owned()).collect();
    let predicted: Vec<Predicted> = ActionType::ALL
        .iter()
        .map(|&t| Predicted::Type(t))
        .chain([Predicted::None])
        .collect();
    let cols: Vec<String> = predicted.iter().map(|p| p.as_str().to_owned()).collect();
    let cells: Vec<Vec<usize>> = m
        .confusion
        .values()
        .map(|row| {
            predicted
                .iter()
                .map(|p| row.get(p).copied().unwrap_or(0))
                .collect()
        })
        .collect();
    charts::heatmap(
        "Type confusion (rows gold, columns predicted)",
        &rows,
        &cols,
        &cells,
    )
}

fn charts_section(input: &ReportInput<'_>) -> String {
    let m = input.metrics;
    let keys = |g: &[crate::score::GroupStats]| g.iter().map(|g| g.key.clone()).collect::<Vec<_>>();
    let acc = |g: &[crate::score::GroupStats]| g.iter().map(|g| g.accuracy).collect::<Vec<_>>();
    let actions: Vec<String> = m.per_action.iter().map(|a| a.action.to_string()).collect();
    let exact: Vec<f64> = m.per_action.iter().map(|a| a.exact_accuracy).collect();
    let typed: Vec<f64> = m.per_action.iter().map(|a| a.type_accuracy).collect();
    let kinds: Vec<String> = m.format_error_kinds.keys().cloned().collect();
    let kind_counts: Vec<f64> = m.format_error_kinds.values().map(|&n| n as f64).collect();
    let mut figs = vec![
        charts::accuracy_bars(
            "Accuracy by step index",
            &keys(&m.per_step_index),
            &acc(&m.per_step_index),
            None,
        ),
        charts::accuracy_bars("Accuracy by app", &keys(&m.per_app), &acc(&m.per_app), None),
        charts::accuracy_bars(
            "Accuracy by gold action (light: type right)",
            &actions,
            &exact,
            Some(&typed),
        ),
        confusion_chart(m),
    ];
    if kinds.is_empty() {
        figs.push("<p class=\"note\">No format errors.</p>".into());
    } else {
        figs.push(charts::count_bars(
            "Format errors by kind",
            &kinds,
            &kind_counts,
        ));
    }
    let generated: Vec<u64> = input.tokens.values().filter_map(|t| t.generated).collect();
    let prompt: Vec<u64> = input.tokens.values().filter_map(|t| t.prompt).collect();
    if generated.is_empty() {
        figs.push("<p class=\"note\">The predictions carry no token counts.</p>".into());
    } else {
        figs.push(charts::histogram(
            "Generated tokens per step",
            &generated,
            "tokens",
        ));
        figs.push(charts::histogram("Prompt size per step", &prompt, "tokens"));
    }
    let mut s = String::from("<section id=\"charts\"><h2>Charts</h2><div class=\"charts\">\n");
    for f in figs {
        let _ = writeln!(s, "<figure>{f}</figure>");
    }
    s.push_str("</div></section>\n");
    s
}

fn options(values: impl IntoIterator<Item = String>) -> String {
    values
        .into_iter()
        .map(|v| format!("<option value=\"{0}\">{0}</option>", html(&v)))
        .collect()
}

fn filters(input: &ReportInput<'_>) -> String {
    let apps = options(input.metrics.per_app.iter().map(|g| g.key.clone()));
    let types = options(
        input
            .metrics
            .per_action
            .iter()
            .map(|a| a.action.to_string()),
    );
    format!(
        "<div id=\"filters\" role=\"search\">\
         <label><input type=\"checkbox\" id=\"f-wrong\"> only wrong steps</label>\
         <label>app <select id=\"f-app\"><option value=\"\">all</option>{apps}</select></label>\
         <label>gold action <select id=\"f-type\"><option value=\"\">all</option>{types}</select></label>\
         <label>outcome <select id=\"f-outcome\"><option value=\"\">all</option>\
         <option value=\"correct\">correct</option><option value=\"args_error\">wrong args</option>\
         <option value=\"type_error\">wrong type</option><option value=\"format_error\">format error</option>\
         </select></label>\
         <label>search <input type=\"search\" id=\"f-search\" placeholder=\"instruction…\"></label>\
         <span id=\"f-count\"></span><span class=\"note\">keys: j / k next / previous step, / search</span></div>\n"
    )
}

/// The trajectories and steps as the page's data block.
fn browser_data(
    input: &ReportInput<'_>,
    thumbs: &std::collections::HashMap<String, Option<String>>,
) -> Value {
    let mut trajs: Vec<Value> = Vec::with_capacity(input.bench.trajectories.len());
    // Where each trajectory's run of correct steps ended, shown for a semi-online run.
    let stops = match input.metrics.semi_online {
        Some(_) => super::semi_online::stops(input.steps, input.metrics),
        None => Default::default(),
    };
    for (index, s) in input.steps.iter().enumerate() {
        let t = &input.bench.trajectories[s.traj_index];
        if trajs.len() <= s.traj_index {
            let judge = input
                .judgements
                .get(&t.id)
                .map(|j| json!({"success": j.success, "reason": j.reason}));
            trajs.resize(s.traj_index, Value::Null);
            let mut traj = json!({"id": t.id, "app": t.app_name, "instruction": t.instruction, "judge": judge, "steps": []});
            if let Some(stop) = stops.get(&s.traj_index) {
                traj["stop"] = stop.clone();
            }
            trajs.push(traj);
        }
        let place = StepPlace {
            index,
            thumb: thumbs
                .get(&t.steps[s.step].image)
                .and_then(|u| u.as_deref()),
        };
        let tokens = input.tokens.get(&(t.id.clone(), s.step));
        let step = step_json(s, t, &input.metrics.rules, place, tokens);
        if let Some(Value::Array(steps)) = trajs[s.traj_index].get_mut("steps") {
            steps.push(step);
        }
    }
    trajs.retain(|t| !t.is_null());
    json!({"kind": "report", "trajectories": trajs})
}

/// Render the page (the thumbnails must already be in `report/`).
pub fn render(
    input: &ReportInput<'_>,
    thumbs: &std::collections::HashMap<String, Option<String>>,
) -> String {
    let title = format!("Mobile-R1 report: {}", input.run.title);
    let body = format!(
        "<header><h1>{}</h1></header>\n<main>\n<div class=\"top\">{}{}</div>{}<section id=\"browser\"><h2>Trajectories</h2>\n{}\
         <div id=\"trajectories\"></div></section>\n</main>",
        html(&title),
        headline(input),
        run_section(input),
        charts_section(input),
        filters(input),
    );
    page(&title, &body, &browser_data(input, thumbs))
}

/// Write `DIR/report.html` and its thumbnails in `DIR/report/`; returns the page's path.
pub fn write(dir: &RunDir, input: &ReportInput<'_>) -> Result<PathBuf, ReportError> {
    let images = input.steps.iter().map(|s| {
        input.bench.trajectories[s.traj_index].steps[s.step]
            .image
            .as_str()
    });
    let thumbs = thumbs::make_thumbnails(&input.bench.root, images, dir.root())?;
    let path = dir.path(rundir::REPORT_HTML);
    write_atomic(&path, render(input, &thumbs).as_bytes())?;
    Ok(path)
}

/// Rebuild the report of a run folder (or a scored folder) from its files and write it there: what `eval`,
/// `score` and `merge` call at their end, and what `report` does.
pub(crate) fn write_run(dir: &RunDir) -> Result<PathBuf, ReportError> {
    let run = super::RunData::load(dir, &super::RunOverrides::default())?;
    write(dir, &run.input())
}
