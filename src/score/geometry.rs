//! Point, box and distance arithmetic of the presets that reproduce a reference evaluator.
//!
//! Each operation is written in the order the reference performs it (divide by the frame, then scale to the
//! 0–1000 grid; enlarge; compare with `<=`), so a point exactly on an edge or a threshold falls on the same side
//! as in the reference. The first-version arithmetic ([`PointSpace::ScreenPixels`]) lives in `matching.rs`.

use crate::action::Point;
use crate::dataset::BBox;
use crate::settings::{
    BoxChoice, BoxGrowth, CoordinateFrame, DistanceMetric, PointSpace, Precision, RulePreset,
};

/// Where a step is judged: the screen (gold pixels), the image the model saw and the frame of its coordinates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Frames {
    /// The device screen `[w, h]` (gold pixels).
    pub screen: [u32; 2],
    /// The image the model saw; `None`: the screen itself.
    pub image_size: Option<[u32; 2]>,
    /// The frame the predicted coordinates are given in.
    pub coordinates: CoordinateFrame,
}

impl Frames {
    /// The extent predicted coordinates are given in; `None` when they are screen pixels already.
    pub fn points(&self) -> Option<[u32; 2]> {
        self.coordinates.extent(self.image_size)
    }

    /// A predicted point in screen pixels.
    pub fn to_screen(&self, p: Point) -> Point {
        map_point(p, self.screen, self.points())
    }
}

/// Map a point from the model's image pixels to screen pixels.
pub fn map_point(p: Point, screen: [u32; 2], image_size: Option<[u32; 2]>) -> Point {
    match image_size {
        Some([w, h]) if w > 0 && h > 0 => [
            p[0] * screen[0] as f64 / w as f64,
            p[1] * screen[1] as f64 / h as f64,
        ],
        _ => p,
    }
}

/// A rule applied to one step: the preset and the frames of the gold (screen) and predicted (image) points.
pub(crate) struct Geo<'a> {
    pub rules: &'a RulePreset,
    /// Screen size (gold pixels).
    pub screen: [f64; 2],
    /// Size of the image the model saw (the screen without `image_size`).
    pub image: [f64; 2],
    /// The extent predicted coordinates are given in: the image, or a relative grid `[N, N]`.
    pub points: [f64; 2],
}

/// A box after enlargement, as `[left, top, right, bottom]` in the rule's space.
pub(crate) type Rect = [f64; 4];

impl<'a> Geo<'a> {
    pub fn new(rules: &'a RulePreset, screen: [u32; 2], image: Option<[u32; 2]>) -> Geo<'a> {
        let image = image.filter(|s| s[0] > 0 && s[1] > 0).unwrap_or(screen);
        Geo {
            rules,
            screen: [screen[0] as f64, screen[1] as f64],
            image: [image[0] as f64, image[1] as f64],
            points: [image[0] as f64, image[1] as f64],
        }
    }

    /// The rule applied in `f`: predicted points are read in its coordinate frame.
    pub fn framed(rules: &'a RulePreset, f: &Frames) -> Geo<'a> {
        let mut geo = Geo::new(rules, f.screen, f.image_size);
        if let Some([w, h]) = f.points().filter(|s| s[0] > 0 && s[1] > 0) {
            geo.points = [w as f64, h as f64];
        }
        geo
    }

    /// A value as the rule's arithmetic holds it: rounded to a 32-bit float under [`Precision::Single`]. Each
    /// operation is done in 64 bits and rounded, which gives the correctly rounded 32-bit result.
    pub fn q(&self, x: f64) -> f64 {
        match self.rules.precision {
            Precision::Double => x,
            Precision::Single => x as f32 as f64,
        }
    }

    fn grid(&self) -> bool {
        self.rules.points == PointSpace::Thousandths
    }

    /// A gold point in the rule's space.
    pub fn gold(&self, p: Point) -> Point {
        let n = [self.q(p[0] / self.screen[0]), self.q(p[1] / self.screen[1])];
        if self.grid() {
            [n[0] * 1000.0, n[1] * 1000.0]
        } else {
            n
        }
    }

    /// A predicted point as the reference would write it before any truncation (also where swipe directions are
    /// measured).
    pub(crate) fn pred_raw(&self, p: Point) -> Point {
        let n = [self.q(p[0] / self.points[0]), self.q(p[1] / self.points[1])];
        match self.rules.points {
            PointSpace::Normalised | PointSpace::ScreenPixels => n,
            _ => [n[0] * 1000.0, n[1] * 1000.0],
        }
    }

    /// A gold point where swipe directions are measured.
    pub(crate) fn gold_raw(&self, p: Point) -> Point {
        self.gold(p)
    }

    /// A predicted point in the rule's space; `None` when the reference's schema refuses it (a truncated grid value
    /// outside 0–1000).
    pub fn pred(&self, p: Point) -> Option<Point> {
        let r = self.pred_raw(p);
        match self.rules.points {
            PointSpace::PredThousandths => Some([r[0] / 1000.0, r[1] / 1000.0]),
            PointSpace::PredThousandthsTruncated => {
                let q = [r[0].trunc(), r[1].trunc()];
                let ok = q.iter().all(|v| (0.0..=1000.0).contains(v));
                ok.then(|| [q[0] / 1000.0, q[1] / 1000.0])
            }
            _ => Some(r),
        }
    }

    /// A gold box, enlarged, in the rule's space, with its centre.
    pub(crate) fn rect(&self, b: &BBox) -> (Rect, Point) {
        let [w, h] = self.screen;
        let scale = self.rules.bbox_scale;
        match self.rules.box_growth {
            BoxGrowth::AboutCentre => {
                let (x1, y1, x2, y2) = (b[0] / w, b[1] / h, b[2] / w, b[3] / h);
                let (cx, cy) = ((x1 + x2) / 2.0, (y1 + y2) / 2.0);
                let (bw, bh) = ((x2 - x1) * scale, (y2 - y1) * scale);
                let r = [cx - bw / 2.0, cy - bh / 2.0, cx + bw / 2.0, cy + bh / 2.0];
                (r, [cx, cy])
            }
            BoxGrowth::Clipped => {
                // Normalised [top, left, height, width], as AITW annotations and AgentCPM-GUI ui_positions are.
                let (top, left, bh, bw) =
                    (b[1] / h, b[0] / w, (b[3] - b[1]) / h, (b[2] - b[0]) / w);
                let (dh, dw) = ((scale - 1.0) * bh, (scale - 1.0) * bw);
                // AITW grows the boxes in NumPy (64 bits) and clips them in JAX (32 bits).
                let top = self.q((top - dh / 2.0).max(0.0));
                let left = self.q((left - dw / 2.0).max(0.0));
                let (bh, bw) = (self.q((bh + dh).min(1.0)), self.q((bw + dw).min(1.0)));
                let r = [left, top, self.q(left + bw), self.q(top + bh)];
                (r, [left + bw / 2.0, top + bh / 2.0])
            }
            BoxGrowth::AsGiven => {
                let k = if self.grid() { 1000.0 } else { 1.0 };
                let r = [b[0] / w * k, b[1] / h * k, b[2] / w * k, b[3] / h * k];
                (r, [(r[0] + r[2]) / 2.0, (r[1] + r[3]) / 2.0])
            }
        }
    }

    /// Whether `p` (in the rule's space) lies in `r`.
    pub fn inside(&self, p: Point, r: &Rect) -> bool {
        let t = self.rules.tolerance;
        if self.rules.box_edges_inside {
            r[0] - t <= p[0] && p[0] <= r[2] + t && r[1] - t <= p[1] && p[1] <= r[3] + t
        } else {
            r[0] + t < p[0] && p[0] < r[2] - t && r[1] + t < p[1] && p[1] < r[3] - t
        }
    }

    /// The enlarged gold boxes a predicted point may fall in, with their indices among the gold boxes.
    pub(crate) fn candidates(&self, boxes: &[BBox], gold: Point) -> Vec<(usize, Rect)> {
        let rects = boxes.iter().map(|b| self.rect(b)).enumerate();
        match self.rules.box_choice {
            BoxChoice::Any => rects.map(|(i, (r, _))| (i, r)).collect(),
            BoxChoice::First => rects.take(1).map(|(i, (r, _))| (i, r)).collect(),
            BoxChoice::ContainingGold => rects
                .filter(|(_, (r, _))| self.inside(gold, r))
                .map(|(i, (r, _))| (i, r))
                .collect(),
            BoxChoice::NearestToGold { count } => {
                let centre_distance =
                    |c: Point| ((c[1] - gold[1]).powi(2) + (c[0] - gold[0]).powi(2)).sqrt();
                let mut v: Vec<(usize, Rect, f64)> = rects
                    .map(|(i, (r, c))| (i, r, centre_distance(c)))
                    .collect();
                // A stable sort, as Python's `sorted`.
                v.sort_by(|a, b| a.2.total_cmp(&b.2));
                v.into_iter().take(count).map(|(i, r, _)| (i, r)).collect()
            }
        }
    }

    /// The distance between a gold and a predicted point (both in the rule's space), and whether it passes.
    /// The distance is reported as a fraction comparable with the threshold.
    pub fn distance(&self, gold: Point, pred: Point) -> (f64, bool) {
        let t = self.rules.distance_threshold;
        match self.rules.distance {
            DistanceMetric::Normalised => {
                let (g, p) = if self.grid() {
                    (
                        [gold[0] / 1000.0, gold[1] / 1000.0],
                        [pred[0] / 1000.0, pred[1] / 1000.0],
                    )
                } else {
                    (gold, pred)
                };
                let (dx, dy) = (self.q(g[0] - p[0]), self.q(g[1] - p[1]));
                let d = self.norm(dx, dy);
                (d, d <= self.q(t) + self.rules.tolerance)
            }
            DistanceMetric::ImageMaxSide => {
                let [w, h] = self.image;
                let (dx, dy) = ((gold[0] - pred[0]) * w, (gold[1] - pred[1]) * h);
                let d = (dx * dx + dy * dy).sqrt();
                let side = w.max(h);
                (d / side, d <= t * side + self.rules.tolerance)
            }
        }
    }

    /// The length of the offset `(dx, dy)` as the references compute a norm on a CPU with fused multiply-add:
    /// numpy's `np.linalg.norm([dx, dy])` is a BLAS dot, `sqrt(fma(dy, dy, dx·dx))` in 64 bits; JAX's float32 norm
    /// over AITW's `(y, x)` vectors is `sqrt(fma(dx, dx, dy·dy))` in 32 bits. `mul_add` is the exactly rounded
    /// fused operation on every CPU, so the result is the reference's on FMA machines everywhere.
    fn norm(&self, dx: f64, dy: f64) -> f64 {
        match self.rules.precision {
            Precision::Double => dy.mul_add(dy, dx * dx).sqrt(),
            Precision::Single => {
                let (dx, dy) = (dx as f32, dy as f32);
                f64::from(dx.mul_add(dx, dy * dy).sqrt())
            }
        }
    }

    /// Whether a swipe given in `frame` pixels is no longer than `limit`, normalised (AITW's tap test).
    pub(crate) fn is_short(&self, from: Point, to: Point, frame: [f64; 2], limit: f64) -> bool {
        let n = |v: f64, side: f64| self.q(v / side);
        let dy = self.q(n(from[1], frame[1]) - n(to[1], frame[1]));
        let dx = self.q(n(from[0], frame[0]) - n(to[0], frame[0]));
        let d = self.norm(dx, dy);
        d <= self.q(limit)
    }

    /// The main axis of a move between two points of the rule's space: 0 (vertical) when `|dy| >= |dx|`, else 1
    /// (AITW `np.argmax` over `|(dy, dx)|`, the first on a tie).
    pub(crate) fn main_axis(&self, from: Point, to: Point) -> u8 {
        let dx = self.q(to[0] - from[0]).abs();
        let dy = self.q(to[1] - from[1]).abs();
        u8::from(dx > dy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipped_growth_moves_a_box_at_the_corner() {
        let r = RulePreset::androidcontrol();
        let g = Geo::new(&r, [1000, 1000], None);
        // [0, 0, 100, 100] grows by 0.2 of its size: top and left stay at 0, the box reaches 120.
        let (rect, _) = g.rect(&[0.0, 0.0, 100.0, 100.0]);
        assert_eq!(rect[0], 0.0);
        assert!((rect[2] - 0.12).abs() < 1e-12);
        let centred = RulePreset::qwen_ac_infigui();
        let (rect, _) = Geo::new(&centred, [1000, 1000], None).rect(&[0.0, 0.0, 100.0, 100.0]);
        assert!((rect[0] + 0.01).abs() < 1e-12 && (rect[2] - 0.11).abs() < 1e-12);
    }

    #[test]
    fn truncated_grid_refuses_points_off_the_image() {
        let r = RulePreset::cagui();
        let g = Geo::new(&r, [1000, 2000], Some([500, 1000]));
        assert_eq!(g.pred([250.9, 500.0]), Some([0.501, 0.5]));
        assert_eq!(g.pred([-0.4, 500.0]), Some([0.0, 0.5]), "int(-0.8) is 0");
        assert_eq!(g.pred([-0.6, 500.0]), None);
        assert_eq!(g.pred([500.9, 500.0]), None);
    }

    #[test]
    fn single_precision_rounds_like_32_bit_floats() {
        let r = RulePreset::aitw();
        let g = Geo::new(&r, [1080, 2400], None);
        assert_eq!(g.q(0.1), 0.1f32 as f64);
        // 151.2 px is 0.14 of 1080 plus 1e-7 relative: over 0.14 in 64 bits, not in 32.
        let (d, ok) = g.distance(
            g.gold([399.6, 1464.0]),
            g.pred([550.80001512, 1464.0]).unwrap(),
        );
        assert!(ok, "{d}");
        let double = RulePreset {
            precision: crate::settings::Precision::Double,
            ..r.clone()
        };
        let g = Geo::new(&double, [1080, 2400], None);
        assert!(
            !g.distance(
                g.gold([399.6, 1464.0]),
                g.pred([550.80001512, 1464.0]).unwrap()
            )
            .1
        );
    }

    #[test]
    fn distances_are_fused_as_the_references_compute_them() {
        // AITW, float32 (y, x): 0.14 exactly, where separate roundings give 0.14000002.
        let r = RulePreset::aitw();
        let g = Geo::new(&r, [1000, 1000], None);
        let (d, ok) = g.distance(g.gold([570.0, 550.0]), g.pred([486.0, 438.0]).unwrap());
        assert!(ok && d == 0.14f32 as f64, "{d}");
        // numpy, float64 (x, y): 0.04000000000000001, where separate roundings give 0.04.
        let r = RulePreset::qwen_ac_uis1();
        let g = Geo::new(&r, [1000, 1000], None);
        let (d, ok) = g.distance(g.gold([85.0, 56.0]), g.pred([53.0, 32.0]).unwrap());
        assert!(!ok && d == 0.04000000000000001, "{d}");
    }

    #[test]
    fn nearest_boxes_keep_the_closest_centres() {
        let r = RulePreset::androidcontrol_strict();
        let g = Geo::new(&r, [1000, 1000], None);
        let boxes: Vec<BBox> = (0..8)
            .map(|i| {
                let o = 100.0 * i as f64;
                [o, o, o + 50.0, o + 50.0]
            })
            .collect();
        let kept: Vec<usize> = g
            .candidates(&boxes, g.gold([25.0, 25.0]))
            .iter()
            .map(|c| c.0)
            .collect();
        assert_eq!(kept, vec![0, 1, 2, 3, 4]);
    }
}
