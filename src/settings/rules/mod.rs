//! Matching-rule presets: every choice the scorer makes is a typed field, so the preset written into
//! `metrics.json` records exactly how steps were judged. The built-in presets are in [`presets`]; each one that
//! names a published evaluator reproduces it step for step (proved on the probe sets under `tests/data/probes/`,
//! departures listed in `docs/rules.md`).
//!
//! Every field added after the first version has a serde default equal to the behaviour of that first version,
//! so a `manifest.json` or `metrics.json` written earlier still reads and re-scores exactly as it was scored.
//! What no preset changes is fixed in the scorer: buttons are parsed case-insensitively and compared, and
//! `long_press.time` / `wait.time` are never compared.

mod presets;
mod text;

use serde::{Deserialize, Serialize};

pub use text::{levenshtein, py_strip, TextRule};

/// How the scorer computes with points and boxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointSpace {
    /// Screen pixels: a predicted point is mapped to the screen (`x·W/w`, `y·H/h`), boxes are in screen pixels and
    /// comparisons allow [`RulePreset::tolerance`].
    #[default]
    ScreenPixels,
    /// Each point divided by its own frame: a gold point or box by the screen size, a predicted point by the size
    /// of the image the model saw (by the screen without `image_size`), as the Qwen AndroidControl ports do.
    Normalised,
    /// Gold normalised as above; a predicted point written on AgentCPM-GUI's 0–1000 grid (`x/w·1000`) and read
    /// back by its evaluator (`/1000`).
    PredThousandths,
    /// As [`PointSpace::PredThousandths`], the grid value truncated to an integer first, as AgentCPM-GUI's Qwen2.5-VL
    /// conversion (`int(x/w·1000)`) does; a point whose grid value falls outside 0–1000 fails the action schema and
    /// matches nothing.
    PredThousandthsTruncated,
    /// Both sides on GUI-Odyssey's 0–1000 grid (`x/W·1000`, boxes too); distances on the grid values `/1000`.
    Thousandths,
}

/// How gold boxes are enlarged before the containment test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoxGrowth {
    /// Scaled by [`RulePreset::bbox_scale`] about the centre.
    #[default]
    AboutCentre,
    /// AITW / AgentCPM-GUI: the box as normalised `[top, left, height, width]` grows by `(scale − 1)·size`, its top
    /// and left move by half of that but not below 0, its height and width are capped at 1 (so a box near the top
    /// or left edge grows downwards or rightwards only).
    Clipped,
    /// Used as given (GUI-Odyssey's SAM2 box).
    AsGiven,
}

/// Which (enlarged) gold boxes a predicted point may fall in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoxChoice {
    /// Any gold box.
    #[default]
    Any,
    /// Only boxes that contain the gold point (AITW: "both taps in the same box"; AgentCPM-GUI `obtain_gt_bbox`).
    ContainingGold,
    /// The first gold box only (GUI-Odyssey has one SAM2 box per step).
    First,
    /// The `count` boxes whose centres are nearest the gold point (AgentCPM-GUI's AndroidControl mode).
    NearestToGold {
        /// How many boxes are kept.
        count: usize,
    },
}

/// How the distance between a predicted and the gold point is measured against
/// [`RulePreset::distance_threshold`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DistanceMetric {
    /// `sqrt((dx/W)² + (dy/H)²) ≤ t`: each axis normalised by its own side.
    #[default]
    Normalised,
    /// InfiGUI-R1's port: the normalised offsets scaled back to pixels of the image the model saw,
    /// `sqrt((dx·w)² + (dy·h)²) ≤ t·max(w, h)`.
    ImageMaxSide,
}

/// The floating-point precision of the point, box and distance arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// 64-bit floats (Python and NumPy).
    #[default]
    Double,
    /// 32-bit floats: AITW's matcher runs in JAX, whose arrays default to 32 bits, so every normalised coordinate,
    /// box edge, difference and distance is rounded to a 32-bit float, as are its thresholds.
    Single,
}

/// Where a swipe's direction is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DirectionSpace {
    /// Screen pixels (the predicted swipe mapped to the screen): the physical direction of the finger.
    #[default]
    ScreenPixels,
    /// The preset's [`PointSpace`] before any truncation: normalised coordinates (or their 0–1000 grid values),
    /// where each axis is divided by its own side.
    Points,
}

/// The direction of a swipe that does not move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroMove {
    /// No direction: it matches only another swipe without one.
    #[default]
    NoDirection,
    /// "up" (the Qwen ports' `predict_direction` falls through to its last branch).
    Up,
    /// "down" (GUI-Odyssey's `decode_action`).
    Down,
}

/// How swipes are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwipeRule {
    /// Same direction: the dominant axis of `coordinate2 − coordinate` and its sign; ties go to the vertical axis.
    Direction {
        /// Where the direction is measured.
        space: DirectionSpace,
        /// The direction of a zero-length swipe.
        zero: ZeroMove,
    },
    /// Same main axis only, up and down (left and right) not distinguished (AITW `_check_drag_actions_match`).
    Axis,
    /// Any swipe matches a swipe (UI-S1's evaluator, whose direction check is commented out).
    TypeOnly,
}

impl Default for SwipeRule {
    fn default() -> Self {
        SwipeRule::Direction {
            space: DirectionSpace::ScreenPixels,
            zero: ZeroMove::NoDirection,
        }
    }
}

/// How a response is read into an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading {
    /// This program's reader (`src/parse.rs`): tags or bare JSON anywhere, a fence removed, names in any case.
    #[default]
    Lenient,
    /// The Qwen AndroidControl evaluator's (InfiGUI-R1 `compute_scores`, UI-S1): the first `<tool_call>` anywhere,
    /// else the literal bare prefix `{"name": "mobile_use", "arguments":`; `json.loads`; action names compared
    /// exactly; every `coordinate` and `coordinate2` divided first; texts and buttons must be strings.
    QwenEvaluator,
    /// The same extraction, each action read only for what GUI-Odyssey's conversion uses (a typed text required,
    /// written as Python's `str()` writes any value; `open` and `key` texts not read).
    QwenConverted,
    /// The same extraction, each action read only for what AITW's conversion uses (no text read at all).
    AitwConverted,
    /// AgentCPM-GUI's Qwen2.5-VL conversion (`qwen2_5_2_minicpm`) and action schema: the text between
    /// `"<tool_call>\n"` and `"\n</tool_call>"`, points of exactly two numbers, `time` required for a long press and
    /// a wait, buttons as written, no `open` or `key`.
    #[serde(rename = "agentcpm")]
    AgentCpm,
}

fn legacy_tolerance() -> f64 {
    1e-9
}

fn yes() -> bool {
    true
}

/// A named, versioned matching rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RulePreset {
    /// Preset name (`mobile-r1`, `qwen-ac-infigui`, …).
    pub name: String,
    /// Version of the preset's definition; bumped whenever a threshold or test changes.
    pub version: u32,
    /// One-line description, naming the source of each threshold.
    pub description: String,
    /// The evaluator the preset reproduces (repository and file), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Gold boxes are enlarged by this factor ([`BoxGrowth`]; 1.0 = as is).
    pub bbox_scale: f64,
    /// Point-distance threshold ([`DistanceMetric`]).
    pub distance_threshold: f64,
    /// With gold boxes, a point outside every box may still pass the distance test.
    pub distance_fallback_with_boxes: bool,
    /// Box edges count as inside.
    pub box_edges_inside: bool,
    /// Rule for `type` and `open` texts.
    pub text: TextRule,
    /// Rule for `key` names.
    pub key: TextRule,
    /// How points and boxes are computed with.
    #[serde(default)]
    pub points: PointSpace,
    /// How gold boxes are enlarged.
    #[serde(default)]
    pub box_growth: BoxGrowth,
    /// Which gold boxes count.
    #[serde(default)]
    pub box_choice: BoxChoice,
    /// How the point distance is measured.
    #[serde(default)]
    pub distance: DistanceMetric,
    /// Precision of the arithmetic.
    #[serde(default)]
    pub precision: Precision,
    /// Slack of the box and distance comparisons (0: exact floating-point comparisons, as the references make).
    #[serde(default = "legacy_tolerance")]
    pub tolerance: f64,
    /// How swipes are compared.
    #[serde(default)]
    pub swipe: SwipeRule,
    /// A gold `open` step also accepts a `click` inside one of its (enlarged) boxes, or within the distance of the
    /// first box's centre (the Qwen AndroidControl ports: the app icon).
    #[serde(default)]
    pub open_by_click: bool,
    /// `terminate` statuses must be equal (otherwise any `terminate` matches any `terminate`).
    #[serde(default = "yes")]
    pub terminate_status: bool,
    /// `wait` and `terminate` are one type (AgentCPM-GUI maps both to "stop").
    #[serde(default)]
    pub wait_is_terminate: bool,
    /// A swipe whose normalised length is at most this is a tap at its start point, on either side (AITW
    /// `is_tap_action`, 0.04).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_swipe_is_tap: Option<f64>,
    /// How responses are read (the lenient reader in files written before this field existed).
    #[serde(default)]
    pub reading: Reading,
}

impl RulePreset {
    /// Names of the built-in presets (`qwen-ac` and `qwen` are accepted as `qwen-ac-infigui`).
    pub const NAMES: &'static [&'static str] = &[
        "mobile-r1",
        "qwen-ac-infigui",
        "qwen-ac-uis1",
        "androidcontrol",
        "androidcontrol-strict",
        "aitw",
        "gui-odyssey",
        "cagui",
        "androidcontrol-agentcpm",
    ];

    /// A built-in preset by name (case-insensitive; `_` and `-` are interchangeable).
    pub fn by_name(name: &str) -> Option<RulePreset> {
        name.parse::<RuleName>().ok().map(RuleName::preset)
    }

    /// The ellipse radii `[rx, ry]`, in screen pixels, of the distance test around a gold point, for a prediction
    /// made on an image of `image_size` (for drawing the threshold; the decision itself is made by the scorer).
    pub(crate) fn distance_radii(
        &self,
        screen: [u32; 2],
        image_size: Option<[u32; 2]>,
    ) -> [f64; 2] {
        let (sw, sh) = (screen[0].max(1) as f64, screen[1].max(1) as f64);
        let t = self.distance_threshold;
        match self.distance {
            DistanceMetric::Normalised => [t * sw, t * sh],
            DistanceMetric::ImageMaxSide => {
                let [w, h] = image_size
                    .filter(|s| s[0] > 0 && s[1] > 0)
                    .unwrap_or(screen);
                let r = t * w.max(h) as f64;
                [r * sw / w.max(1) as f64, r * sh / h.max(1) as f64]
            }
        }
    }
}

/// The name of a built-in preset (`--rules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleName {
    /// [`RulePreset::mobile_r1`].
    MobileR1,
    /// [`RulePreset::qwen_ac_infigui`] (also `qwen-ac`).
    QwenAcInfigui,
    /// [`RulePreset::qwen_ac_uis1`].
    QwenAcUis1,
    /// [`RulePreset::androidcontrol`].
    AndroidControl,
    /// [`RulePreset::androidcontrol_strict`].
    AndroidControlStrict,
    /// [`RulePreset::aitw`].
    Aitw,
    /// [`RulePreset::gui_odyssey`].
    GuiOdyssey,
    /// [`RulePreset::cagui`].
    Cagui,
    /// [`RulePreset::androidcontrol_agentcpm`].
    AndroidControlAgentCpm,
}

impl RuleName {
    /// The preset.
    pub fn preset(self) -> RulePreset {
        match self {
            RuleName::MobileR1 => RulePreset::mobile_r1(),
            RuleName::QwenAcInfigui => RulePreset::qwen_ac_infigui(),
            RuleName::QwenAcUis1 => RulePreset::qwen_ac_uis1(),
            RuleName::AndroidControl => RulePreset::androidcontrol(),
            RuleName::AndroidControlStrict => RulePreset::androidcontrol_strict(),
            RuleName::Aitw => RulePreset::aitw(),
            RuleName::GuiOdyssey => RulePreset::gui_odyssey(),
            RuleName::Cagui => RulePreset::cagui(),
            RuleName::AndroidControlAgentCpm => RulePreset::androidcontrol_agentcpm(),
        }
    }
}

impl std::str::FromStr for RuleName {
    type Err = String;
    /// Case-insensitive; `_` and `-` are interchangeable.
    fn from_str(name: &str) -> Result<Self, String> {
        match name.trim().to_lowercase().replace('_', "-").as_str() {
            "mobile-r1" | "mobiler1" => Ok(RuleName::MobileR1),
            "qwen-ac-infigui" | "qwen-ac" | "qwen" => Ok(RuleName::QwenAcInfigui),
            "qwen-ac-uis1" | "qwen-ac-ui-s1" => Ok(RuleName::QwenAcUis1),
            "androidcontrol" | "android-control" => Ok(RuleName::AndroidControl),
            "androidcontrol-strict" | "android-control-strict" => {
                Ok(RuleName::AndroidControlStrict)
            }
            "aitw" => Ok(RuleName::Aitw),
            "gui-odyssey" | "guiodyssey" | "odyssey" => Ok(RuleName::GuiOdyssey),
            "cagui" => Ok(RuleName::Cagui),
            "androidcontrol-agentcpm" | "android-control-agentcpm" => {
                Ok(RuleName::AndroidControlAgentCpm)
            }
            other => Err(format!(
                "unknown rule preset {other:?} (known: {}; qwen-ac = qwen-ac-infigui)",
                RulePreset::NAMES.join(", ")
            )),
        }
    }
}

impl Default for RulePreset {
    fn default() -> Self {
        RulePreset::mobile_r1()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_resolves_to_its_preset() {
        for name in RulePreset::NAMES {
            let p = RulePreset::by_name(name).expect(name);
            assert_eq!(&p.name, name);
            let back: RulePreset =
                serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
            assert_eq!(back, p);
        }
        assert_eq!(
            RulePreset::by_name("QWEN_AC").map(|p| p.name),
            Some("qwen-ac-infigui".into())
        );
        assert!(RulePreset::by_name("nope").is_none());
    }

    #[test]
    fn a_first_version_preset_reads_with_its_old_behaviour() {
        let old = r#"{"name":"qwen-ac","version":1,"description":"d","bbox_scale":1.2,
            "distance_threshold":0.04,"distance_fallback_with_boxes":true,"box_edges_inside":true,
            "text":"contains","key":"contains"}"#;
        let p: RulePreset = serde_json::from_str(old).unwrap();
        assert_eq!(p.points, PointSpace::ScreenPixels);
        assert_eq!(p.swipe, SwipeRule::default());
        assert_eq!(p.tolerance, 1e-9);
        assert!(p.terminate_status && !p.open_by_click && !p.wait_is_terminate);
        assert_eq!(p.short_swipe_is_tap, None);
        assert_eq!(p.reading, Reading::Lenient);
    }

    #[test]
    fn radii_follow_the_distance_metric() {
        let m = RulePreset::mobile_r1();
        assert_eq!(m.distance_radii([1000, 2000], None), [140.0, 280.0]);
        let q = RulePreset::qwen_ac_infigui();
        // 0.04 of the longer image side, mapped to the screen.
        let r = q.distance_radii([1080, 2400], Some([540, 1200]));
        assert!((r[0] - 96.0).abs() < 1e-9 && (r[1] - 96.0).abs() < 1e-9);
    }
}
