//! Argument matching of one predicted action against the gold action of the same type.

use serde::Serialize;

pub use super::geometry::Frames;
use super::geometry::Geo;
use crate::action::{Action, Point};
use crate::dataset::BBox;
use crate::settings::{
    CoordinateFrame, DirectionSpace, PointSpace, RulePreset, SwipeRule, TextRule, ZeroMove,
};

/// A swipe direction: the way the finger moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Finger moves up (y decreases).
    Up,
    /// Finger moves down.
    Down,
    /// Finger moves left (x decreases).
    Left,
    /// Finger moves right.
    Right,
}

impl Direction {
    /// The dominant axis of `to - from` and its sign, ties to the vertical axis; a zero move as `zero` says.
    pub fn dominant(from: Point, to: Point, zero: ZeroMove) -> Option<Direction> {
        let (dx, dy) = (to[0] - from[0], to[1] - from[1]);
        if dx.abs() > dy.abs() {
            Some(if dx > 0.0 {
                Direction::Right
            } else {
                Direction::Left
            })
        } else if dy > 0.0 {
            Some(Direction::Down)
        } else if dy < 0.0 {
            Some(Direction::Up)
        } else {
            match zero {
                ZeroMove::NoDirection => None,
                ZeroMove::Up => Some(Direction::Up),
                ZeroMove::Down => Some(Direction::Down),
            }
        }
    }

    /// The dominant axis of `to - from` and its sign; `None` for a zero move. Ties go to the vertical axis.
    pub fn of(from: Point, to: Point) -> Option<Direction> {
        let (dx, dy) = (to[0] - from[0], to[1] - from[1]);
        if dx == 0.0 && dy == 0.0 {
            None
        } else if dy.abs() >= dx.abs() {
            Some(if dy < 0.0 {
                Direction::Up
            } else {
                Direction::Down
            })
        } else {
            Some(if dx < 0.0 {
                Direction::Left
            } else {
                Direction::Right
            })
        }
    }
}

/// The argument test that decided a step, with its numbers (written into `steps.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "test", rename_all = "snake_case")]
pub enum ArgCheck {
    /// Containment in the gold boxes (optionally followed by the distance test).
    Box {
        /// The predicted point in screen pixels.
        point: Point,
        /// Number of gold boxes.
        boxes: usize,
        /// Box scale factor about the centre.
        scale: f64,
        /// Index of the first box containing the point.
        inside: Option<usize>,
        /// Normalised distance to the gold point, when the fallback was evaluated.
        #[serde(skip_serializing_if = "Option::is_none")]
        distance: Option<f64>,
        /// Distance threshold, when the fallback was evaluated.
        #[serde(skip_serializing_if = "Option::is_none")]
        threshold: Option<f64>,
    },
    /// Normalised distance to the gold point.
    Distance {
        /// The predicted point in screen pixels.
        point: Point,
        /// The gold point.
        gold: Point,
        /// `sqrt((dx/W)^2 + (dy/H)^2)`.
        distance: f64,
        /// The threshold.
        threshold: f64,
    },
    /// Swipe directions.
    Direction {
        /// Gold direction.
        gold: Option<Direction>,
        /// Predicted direction (after mapping to screen pixels).
        predicted: Option<Direction>,
    },
    /// Text comparison.
    Text {
        /// The rule.
        rule: TextRule,
    },
    /// Button or status equality.
    Equal,
    /// Only the type is compared (wait).
    TypeOnly,
}

/// Tolerance of the box and distance comparisons (absorbs floating-point rounding at exact boundaries).
pub(crate) const EPS: f64 = 1e-9;

/// Whether `p` lies in `b` scaled by `scale` about its centre (edges included when `edges`).
pub fn in_box(p: Point, b: &BBox, scale: f64, edges: bool) -> bool {
    let (cx, cy) = ((b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0);
    let (hw, hh) = ((b[2] - b[0]) / 2.0 * scale, (b[3] - b[1]) / 2.0 * scale);
    let (x0, x1, y0, y1) = (cx - hw - EPS, cx + hw + EPS, cy - hh - EPS, cy + hh + EPS);
    if edges {
        p[0] >= x0 && p[0] <= x1 && p[1] >= y0 && p[1] <= y1
    } else {
        let (x0, x1, y0, y1) = (
            x0 + 2.0 * EPS,
            x1 - 2.0 * EPS,
            y0 + 2.0 * EPS,
            y1 - 2.0 * EPS,
        );
        p[0] > x0 && p[0] < x1 && p[1] > y0 && p[1] < y1
    }
}

/// Normalised distance between two screen points.
pub fn norm_distance(a: Point, b: Point, screen: [u32; 2]) -> f64 {
    let dx = (a[0] - b[0]) / screen[0].max(1) as f64;
    let dy = (a[1] - b[1]) / screen[1].max(1) as f64;
    (dx * dx + dy * dy).sqrt()
}

fn point_match(
    rules: &RulePreset,
    gold: Point,
    boxes: &[BBox],
    pred: Point,
    screen: [u32; 2],
) -> (bool, ArgCheck) {
    let threshold = rules.distance_threshold;
    if boxes.is_empty() {
        let distance = norm_distance(pred, gold, screen);
        return (
            distance <= threshold + rules.tolerance,
            ArgCheck::Distance {
                point: pred,
                gold,
                distance,
                threshold,
            },
        );
    }
    let inside = boxes
        .iter()
        .position(|b| in_box(pred, b, rules.bbox_scale, rules.box_edges_inside));
    let mut check = ArgCheck::Box {
        point: pred,
        boxes: boxes.len(),
        scale: rules.bbox_scale,
        inside,
        distance: None,
        threshold: None,
    };
    if inside.is_some() {
        return (true, check);
    }
    if rules.distance_fallback_with_boxes {
        let d = norm_distance(pred, gold, screen);
        if let ArgCheck::Box {
            distance,
            threshold: t,
            ..
        } = &mut check
        {
            *distance = Some(d);
            *t = Some(threshold);
        }
        return (d <= threshold + rules.tolerance, check);
    }
    (false, check)
}

fn reference_point_match(
    geo: &Geo<'_>,
    gold: Point,
    boxes: &[BBox],
    pred: Point,
    shown: Point,
) -> (bool, ArgCheck) {
    let g = geo.gold(gold);
    let threshold = geo.rules.distance_threshold;
    let Some(p) = geo.pred(pred) else {
        // Refused by the reference's action schema: it matches nothing.
        let check = ArgCheck::Distance {
            point: shown,
            gold,
            distance: f64::INFINITY,
            threshold,
        };
        return (false, check);
    };
    if boxes.is_empty() {
        let (distance, ok) = geo.distance(g, p);
        let check = ArgCheck::Distance {
            point: shown,
            gold,
            distance,
            threshold,
        };
        return (ok, check);
    }
    let inside = geo
        .candidates(boxes, g)
        .into_iter()
        .find(|(_, r)| geo.inside(p, r))
        .map(|(i, _)| i);
    let mut check = ArgCheck::Box {
        point: shown,
        boxes: boxes.len(),
        scale: geo.rules.bbox_scale,
        inside,
        distance: None,
        threshold: None,
    };
    if inside.is_some() || !geo.rules.distance_fallback_with_boxes {
        return (inside.is_some(), check);
    }
    let (d, ok) = geo.distance(g, p);
    if let ArgCheck::Box {
        distance,
        threshold: t,
        ..
    } = &mut check
    {
        *distance = Some(d);
        *t = Some(threshold);
    }
    (ok, check)
}

/// A click answering a gold `open` (the Qwen ports): inside one of the enlarged icon boxes, or within the distance
/// of the first box's centre.
fn open_by_click(geo: &Geo<'_>, boxes: &[BBox], pred: Point, shown: Point) -> (bool, ArgCheck) {
    let (_, centre) = geo.rect(&boxes[0]);
    let mut check = ArgCheck::Box {
        point: shown,
        boxes: boxes.len(),
        scale: geo.rules.bbox_scale,
        inside: None,
        distance: None,
        threshold: None,
    };
    let Some(p) = geo.pred(pred) else {
        return (false, check);
    };
    let inside = boxes.iter().position(|b| geo.inside(p, &geo.rect(b).0));
    if inside.is_some() {
        if let ArgCheck::Box { inside: i, .. } = &mut check {
            *i = inside;
        }
        return (true, check);
    }
    let (d, ok) = geo.distance(centre, p);
    if let ArgCheck::Box {
        distance,
        threshold,
        ..
    } = &mut check
    {
        *distance = Some(d);
        *threshold = Some(geo.rules.distance_threshold);
    }
    (ok, check)
}

fn point_args(
    rules: &RulePreset,
    gold: Point,
    boxes: &[BBox],
    pred: Point,
    f: Frames,
) -> (bool, ArgCheck) {
    let shown = f.to_screen(pred);
    if rules.points == PointSpace::ScreenPixels {
        point_match(rules, gold, boxes, shown, f.screen)
    } else {
        let geo = Geo::framed(rules, &f);
        reference_point_match(&geo, gold, boxes, pred, shown)
    }
}

fn swipe_args(
    rules: &RulePreset,
    gold: [Point; 2],
    pred: [Point; 2],
    f: Frames,
) -> (bool, ArgCheck) {
    let geo = Geo::framed(rules, &f);
    let m = |p: Point| f.to_screen(p);
    let (zero, points) = match rules.swipe {
        SwipeRule::Direction { space, zero } => (zero, space == DirectionSpace::Points),
        _ => (
            ZeroMove::NoDirection,
            rules.points != PointSpace::ScreenPixels,
        ),
    };
    let (g, p) = if points {
        (
            [geo.gold_raw(gold[0]), geo.gold_raw(gold[1])],
            [geo.pred_raw(pred[0]), geo.pred_raw(pred[1])],
        )
    } else {
        (gold, [m(pred[0]), m(pred[1])])
    };
    let gold_dir = Direction::dominant(g[0], g[1], zero);
    let pred_dir = Direction::dominant(p[0], p[1], zero);
    let check = ArgCheck::Direction {
        gold: gold_dir,
        predicted: pred_dir,
    };
    if rules.points != PointSpace::ScreenPixels && geo.pred(pred[0]).is_none() {
        return (false, check);
    }
    let ok = match rules.swipe {
        SwipeRule::TypeOnly => true,
        SwipeRule::Axis => geo.main_axis(g[0], g[1]) == geo.main_axis(p[0], p[1]),
        SwipeRule::Direction { .. } => gold_dir == pred_dir,
    };
    (ok, check)
}

/// A swipe no longer than the preset's tap length becomes a click at its start (AITW `is_tap_action`).
fn as_tap(geo: &Geo<'_>, a: &Action, frame: [f64; 2]) -> Option<Action> {
    let limit = geo.rules.short_swipe_is_tap?;
    match a {
        Action::Swipe {
            coordinate,
            coordinate2,
        } => geo
            .is_short(*coordinate, *coordinate2, frame, limit)
            .then_some(Action::Click {
                coordinate: *coordinate,
            }),
        _ => None,
    }
}

/// Compare the arguments of `pred` with `gold`; `None` when the types differ under the preset.
///
/// `screen` is the device screen (gold pixels); predicted points are pixels of an `image_size` image.
pub fn match_args(
    rules: &RulePreset,
    gold: &Action,
    boxes: &[BBox],
    pred: &Action,
    screen: [u32; 2],
    image_size: Option<[u32; 2]>,
) -> Option<(bool, ArgCheck)> {
    let coordinates = CoordinateFrame::ImagePixels;
    let f = Frames {
        screen,
        image_size,
        coordinates,
    };
    match_args_in(rules, gold, boxes, pred, f)
}

/// [`match_args`] with the predicted points read in `f`'s coordinate frame.
pub fn match_args_in(
    rules: &RulePreset,
    gold: &Action,
    boxes: &[BBox],
    pred: &Action,
    f: Frames,
) -> Option<(bool, ArgCheck)> {
    let geo = Geo::framed(rules, &f);
    let gold_tap = as_tap(&geo, gold, geo.screen);
    let pred_tap = as_tap(&geo, pred, geo.points);
    let gold = gold_tap.as_ref().unwrap_or(gold);
    let pred = pred_tap.as_ref().unwrap_or(pred);
    let text = |rule: TextRule, g: &str, p: &str| (rule.matches(g, p), ArgCheck::Text { rule });
    Some(match (gold, pred) {
        (Action::Click { coordinate: g }, Action::Click { coordinate: p })
        | (Action::LongPress { coordinate: g, .. }, Action::LongPress { coordinate: p, .. }) => {
            point_args(rules, *g, boxes, *p, f)
        }
        (Action::Open { .. }, Action::Click { coordinate: p })
            if rules.open_by_click && !boxes.is_empty() =>
        {
            open_by_click(&geo, boxes, *p, f.to_screen(*p))
        }
        (
            Action::Swipe {
                coordinate: g1,
                coordinate2: g2,
            },
            Action::Swipe {
                coordinate: p1,
                coordinate2: p2,
            },
        ) => swipe_args(rules, [*g1, *g2], [*p1, *p2], f),
        (Action::Type { text: g }, Action::Type { text: p })
        | (Action::Open { text: g }, Action::Open { text: p }) => text(rules.text, g, p),
        (Action::Key { text: g }, Action::Key { text: p }) => text(rules.key, g, p),
        (Action::SystemButton { button: g }, Action::SystemButton { button: p }) => {
            (g == p, ArgCheck::Equal)
        }
        (Action::Terminate { status: g }, Action::Terminate { status: p }) => {
            if rules.terminate_status {
                (g == p, ArgCheck::Equal)
            } else {
                (true, ArgCheck::TypeOnly)
            }
        }
        (Action::Wait { .. }, Action::Wait { .. }) => (true, ArgCheck::TypeOnly),
        (Action::Wait { .. }, Action::Terminate { .. })
        | (Action::Terminate { .. }, Action::Wait { .. })
            if rules.wait_is_terminate =>
        {
            (true, ArgCheck::TypeOnly)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions() {
        assert_eq!(
            Direction::of([500.0, 1800.0], [500.0, 600.0]),
            Some(Direction::Up)
        );
        assert_eq!(
            Direction::of([100.0, 10.0], [400.0, 20.0]),
            Some(Direction::Right)
        );
        assert_eq!(Direction::of([1.0, 1.0], [1.0, 1.0]), None);
    }

    #[test]
    fn boxes_scale_about_centre() {
        let b = [100.0, 100.0, 200.0, 200.0];
        assert!(in_box([100.0, 200.0], &b, 1.0, true));
        assert!(!in_box([100.0, 200.0], &b, 1.0, false));
        assert!(!in_box([95.0, 150.0], &b, 1.0, true));
        assert!(in_box([95.0, 150.0], &b, 1.2, true));
        assert!(!in_box([89.0, 150.0], &b, 1.2, true));
    }
}
