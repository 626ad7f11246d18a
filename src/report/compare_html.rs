//! `compare.html`: the deltas, McNemar's test, per-group tables and the flipped steps with both predictions
//! drawn on one screenshot (A red, B violet).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::compare_types::{Comparison, GroupDelta};
use super::escape::html;
use super::html::page;
use super::input::RunData;
use super::overlay::{step_json, StepPlace};
use super::{thumbs, write_atomic, ReportError};

fn group_table(title: &str, rows: &[GroupDelta]) -> String {
    let mut s = format!(
        "<h3>{}</h3><table class=\"metrics\"><tr><th></th><th>steps</th><th>A %</th><th>B %</th><th>B − A</th></tr>\n",
        html(title)
    );
    for g in rows {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2}</td><td class=\"num\">{:.2}</td>\
             <td class=\"num\">{:+.2}</td></tr>",
            html(&g.key),
            g.steps,
            g.a,
            g.b,
            g.delta
        );
    }
    s.push_str("</table>\n");
    s
}

fn headline(c: &Comparison) -> String {
    let mut s = format!(
        "<section id=\"headline\"><h2>B − A</h2><p>A: <code>{}</code><br>B: <code>{}</code><br>\
         benchmark sha256 <code>{}</code>, {} trajectories, {} steps, rules <code>{}</code></p>\
         <table class=\"metrics\"><tr><th>metric</th><th>A</th><th>B</th><th>B − A</th><th>{:.0}% interval</th></tr>\n",
        html(&c.run_a),
        html(&c.run_b),
        html(&c.benchmark_hash),
        c.trajectories,
        c.steps,
        html(&c.rules),
        c.confidence * 100.0
    );
    if let Some([a, b]) = &c.history {
        let _ = writeln!(
            s,
            "<tr data-metric=\"history\"><td>history</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td></td><td></td></tr>",
            html(a),
            html(b)
        );
    }
    for m in &c.metrics {
        let _ = writeln!(
            s,
            "<tr data-metric=\"{}\"><td>{}</td><td class=\"num\">{:.3}</td><td class=\"num\">{:.3}</td>\
             <td class=\"num\">{:+.3}</td><td class=\"ci\">{:+.3} – {:+.3}</td></tr>",
            html(&m.metric),
            html(&m.metric),
            m.a,
            m.b,
            m.delta,
            m.low,
            m.high
        );
    }
    let _ = writeln!(
        s,
        "</table><p class=\"note\">Intervals: {}, {} resamples, seed {}.</p>\
         <p id=\"mcnemar\">McNemar's exact test on step correctness: {} steps right only in A, {} right only in B, \
         two-sided p = {:.4}.</p></section>",
        html(&c.interval_method),
        c.resamples,
        c.seed,
        c.mcnemar.a_only,
        c.mcnemar.b_only,
        c.mcnemar.p_value
    );
    s
}

fn filters() -> &'static str {
    "<div id=\"filters\" role=\"search\">\
     <label>flip <select id=\"f-flip\"><option value=\"\">all</option>\
     <option value=\"right_to_wrong\">right → wrong</option><option value=\"wrong_to_right\">wrong → right</option>\
     </select></label>\
     <label>search <input type=\"search\" id=\"f-search\" placeholder=\"instruction…\"></label>\
     <span id=\"f-count\"></span><span class=\"legend\"><span><i class=\"sw\" style=\"background:#16a34a\"></i>gold</span>\
     <span><i class=\"sw\" style=\"background:#dc2626\"></i>A</span><span><i class=\"sw\" style=\"background:#7c3aed\"></i>B</span></span>\
     <span class=\"note\">keys: j / k next / previous step</span></div>\n"
}

/// The flipped steps, grouped by trajectory, as the page's data block.
fn flipped_data(a: &RunData, b: &RunData, thumbs: &HashMap<String, Option<String>>) -> Value {
    let mut trajs: Vec<Value> = Vec::new();
    let mut last_traj = usize::MAX;
    for (index, (sa, sb)) in a.steps.iter().zip(&b.steps).enumerate() {
        if sa.correct == sb.correct {
            continue;
        }
        let t = &a.bench.trajectories[sa.traj_index];
        let thumb = thumbs
            .get(&t.steps[sa.step].image)
            .and_then(|u| u.as_deref());
        let place = StepPlace { index, thumb };
        let key = (t.id.clone(), sa.step);
        let mut step = step_json(sa, t, &a.metrics.rules, place, a.tokens.get(&key));
        let other = step_json(sb, t, &b.metrics.rules, place, b.tokens.get(&key));
        step["pred2"] = other["pred"].clone();
        step["outcome2"] = other["outcome"].clone();
        step["check2"] = other["check"].clone();
        step["response2"] = other["response"].clone();
        step["flip"] = json!(if sa.correct {
            "right_to_wrong"
        } else {
            "wrong_to_right"
        });
        if last_traj != sa.traj_index {
            last_traj = sa.traj_index;
            trajs.push(json!({"id": t.id, "app": t.app_name, "instruction": t.instruction, "judge": null, "steps": []}));
        }
        if let Some(Value::Array(steps)) = trajs.last_mut().and_then(|t| t.get_mut("steps")) {
            steps.push(step);
        }
    }
    json!({"kind": "compare", "trajectories": trajs})
}

/// Write `out/compare.html` with thumbnails of the flipped steps in `out/report/`.
/// The settings in which A and B differ (what the comparison is about), or a line saying there are none.
fn settings_table(c: &Comparison) -> String {
    let mut s = String::from("<section id=\"settings\"><h2>Settings that differ</h2>\n");
    if c.settings.is_empty() {
        s.push_str("<p>None: both runs were made with the same settings.</p></section>\n");
        return s;
    }
    s.push_str("<table class=\"kv\"><tr><th>setting</th><th>A</th><th>B</th></tr>\n");
    let cell = |v: &Option<String>| v.as_deref().map_or_else(|| "(absent)".into(), html);
    for d in &c.settings {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            html(&d.key),
            cell(&d.a),
            cell(&d.b)
        );
    }
    s.push_str("</table></section>\n");
    s
}

pub fn write(out: &Path, c: &Comparison, a: &RunData, b: &RunData) -> Result<PathBuf, ReportError> {
    let images = a
        .steps
        .iter()
        .zip(&b.steps)
        .filter(|(x, y)| x.correct != y.correct)
        .map(|(s, _)| {
            a.bench.trajectories[s.traj_index].steps[s.step]
                .image
                .as_str()
        });
    let thumbs = thumbs::make_thumbnails(&a.bench.root, images, out)?;
    let title = "Mobile-R1 comparison";
    let body = format!(
        "<header><h1>{title}</h1></header>\n<main>\n{}{}<section id=\"groups\"><h2>Step accuracy by group</h2>\
         <div class=\"charts\"><div>{}</div><div>{}</div></div></section>\n\
         <section id=\"browser\"><h2>Flipped steps ({})</h2>\n{}<div id=\"trajectories\"></div></section>\n</main>",
        headline(c),
        settings_table(c),
        group_table("by app", &c.per_app),
        group_table("by gold action", &c.per_action),
        c.flipped.len(),
        filters(),
    );
    let path = out.join("compare.html");
    write_atomic(
        &path,
        page(title, &body, &flipped_data(a, b, &thumbs)).as_bytes(),
    )?;
    Ok(path)
}
