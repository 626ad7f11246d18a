//! One step as the JSON object the report's script draws: the gold and predicted geometry in screen pixels
//! (boxes, points, the distance threshold's ellipse, swipe arrows, texts), the texts of the response and the
//! outcome. Every string goes to the page as data and is inserted as text, never as markup.

use serde_json::{json, Value};

use super::input::TokenCounts;
use crate::action::{Action, Point};
use crate::dataset::Trajectory;
use crate::parse::parse_response;
use crate::score::{ArgCheck, StepScore};
use crate::settings::RulePreset;

/// Points and texts of an action: `point`, `to` (a swipe's end) and `text`, in screen pixels.
fn geometry(a: &Action, map: impl Fn(Point) -> Point) -> Value {
    let mut g = json!({"type": a.action_type().as_str(), "desc": a.to_arguments().to_string()});
    match a {
        Action::Click { coordinate } | Action::LongPress { coordinate, .. } => {
            g["point"] = json!(map(*coordinate));
        }
        Action::Swipe {
            coordinate,
            coordinate2,
        } => {
            g["point"] = json!(map(*coordinate));
            g["to"] = json!(map(*coordinate2));
        }
        Action::Type { text } | Action::Open { text } | Action::Key { text } => {
            g["text"] = json!(text);
        }
        Action::SystemButton { button } => g["text"] = json!(button.to_string()),
        Action::Terminate { status } => g["text"] = json!(status.to_string()),
        Action::Wait { .. } => {}
    }
    g
}

/// A one-line account of the argument test.
fn check_text(check: &ArgCheck) -> String {
    match check {
        ArgCheck::Box {
            boxes,
            scale,
            inside,
            distance,
            threshold,
            ..
        } => {
            let mut s = match inside {
                Some(i) => format!("inside gold box {} of {boxes} (scale {scale})", i + 1),
                None => format!("outside all {boxes} gold boxes (scale {scale})"),
            };
            if let (Some(d), Some(t)) = (distance, threshold) {
                s.push_str(&format!("; distance {d:.3} vs threshold {t}"));
            }
            s
        }
        ArgCheck::Distance {
            distance,
            threshold,
            ..
        } => format!("normalised distance {distance:.3} vs threshold {threshold}"),
        ArgCheck::Direction { gold, predicted } => {
            let name = |d: &Option<crate::score::Direction>| {
                d.map_or_else(
                    || "none (no movement)".to_owned(),
                    |d| format!("{d:?}").to_lowercase(),
                )
            };
            format!(
                "swipe direction: gold {}, predicted {}",
                name(gold),
                name(predicted)
            )
        }
        ArgCheck::Text { rule } => format!("text compared with rule {rule:?}"),
        ArgCheck::Equal => "values compared for equality".into(),
        ArgCheck::TypeOnly => "type only".into(),
    }
}

/// The ellipse radii `[rx, ry]` of the distance threshold around a gold point, when a distance test applies.
fn threshold_radii(rules: &RulePreset, s: &StepScore, boxes: usize, screen: [u32; 2]) -> Value {
    let pointy = matches!(s.gold, Action::Click { .. } | Action::LongPress { .. });
    if pointy && (boxes == 0 || rules.distance_fallback_with_boxes) {
        json!(rules.distance_radii(screen, s.image_size))
    } else {
        Value::Null
    }
}

/// Where a step is: its global index among the steps and the URL of its thumbnail.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepPlace<'a> {
    /// Index of the step in the report.
    pub index: usize,
    /// Thumbnail URL relative to the page; `None` when the screenshot could not be read.
    pub thumb: Option<&'a str>,
}

/// The JSON object of one step for the page's script.
pub(crate) fn step_json(
    s: &StepScore,
    traj: &Trajectory,
    rules: &RulePreset,
    place: StepPlace<'_>,
    tokens: Option<&TokenCounts>,
) -> Value {
    let gold_step = &traj.steps[s.step];
    let screen = [traj.image_width, traj.image_height];
    let mut gold = geometry(&s.gold, |p| p);
    gold["boxes"] = json!(gold_step.bboxes);
    gold["scale"] = json!(rules.bbox_scale);
    gold["radii"] = threshold_radii(rules, s, gold_step.bboxes.len(), screen);
    let pred = s
        .predicted
        .as_ref()
        .map(|a| geometry(a, |p| s.frames(screen).to_screen(p)));
    let parsed = s.response.as_deref().map(parse_response);
    json!({
        "i": place.index,
        "step": s.step,
        "img": place.thumb,
        "image": gold_step.image,
        "w": screen[0],
        "h": screen[1],
        "gold": gold,
        "pred": pred,
        "outcome": s.outcome,
        "check": s.check.as_ref().map(check_text),
        "missing": s.missing,
        "parseError": s.parse_error.as_ref().map(|e| format!("{} ({})", e, e.kind())).or_else(|| {
            s.unsupported_action
                .map(|a| format!("action {a:?} is outside the mobile_use action space (unsupported_action)"))
        }),
        "response": s.response,
        "think": parsed.as_ref().and_then(|p| p.think.clone()),
        "subtask": gold_step.subtask,
        "promptTokens": tokens.and_then(|t| t.prompt),
        "generatedTokens": tokens.and_then(|t| t.generated),
        "error": tokens.and_then(|t| t.error.clone()),
    })
}
