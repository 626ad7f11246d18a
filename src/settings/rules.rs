//! Matching-rule presets: every threshold the scorer reads is a field, so the preset written into
//! `metrics.json` records exactly how steps were judged. What no preset changes is fixed in the scorer and
//! documented there: swipes match by direction (`Direction::of`), buttons and statuses are parsed
//! case-insensitively and compared, and `long_press.time` / `wait.time` are not compared.

use serde::{Deserialize, Serialize};

/// How `type` / `open` / `key` texts are compared (both sides trimmed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextRule {
    /// Equal after trimming.
    Exact,
    /// Equal after trimming, ignoring case.
    IgnoreCase,
    /// Case-insensitive containment in either direction (an empty text matches only an empty text).
    Contains,
}

impl TextRule {
    /// Whether `pred` matches `gold` under this rule.
    pub fn matches(self, gold: &str, pred: &str) -> bool {
        let (g, p) = (gold.trim(), pred.trim());
        match self {
            TextRule::Exact => g == p,
            TextRule::IgnoreCase => g.to_lowercase() == p.to_lowercase(),
            TextRule::Contains => {
                let (g, p) = (g.to_lowercase(), p.to_lowercase());
                if g.is_empty() || p.is_empty() {
                    g == p
                } else {
                    g.contains(&p) || p.contains(&g)
                }
            }
        }
    }
}

/// A named, versioned matching rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RulePreset {
    /// Preset name (`mobile-r1`, `qwen-ac`).
    pub name: String,
    /// Version of the preset's definition; bumped whenever a threshold or test changes.
    pub version: u32,
    /// One-line description.
    pub description: String,
    /// Gold boxes are scaled by this factor about their centre before the containment test (1.0 = as is).
    pub bbox_scale: f64,
    /// Point-distance threshold: `sqrt((dx/W)^2 + (dy/H)^2)` with W, H the screen size.
    pub distance_threshold: f64,
    /// With gold boxes, a point outside every box may still pass the distance test.
    pub distance_fallback_with_boxes: bool,
    /// Box edges count as inside.
    pub box_edges_inside: bool,
    /// Rule for `type` and `open` texts.
    pub text: TextRule,
    /// Rule for `key` names.
    pub key: TextRule,
}

impl RulePreset {
    /// Names of the built-in presets.
    pub const NAMES: &'static [&'static str] = &["mobile-r1", "qwen-ac"];

    /// The Mobile-R1 rule (default): strict box containment, else a 0.14 normalised distance; exact texts.
    pub fn mobile_r1() -> RulePreset {
        RulePreset {
            name: "mobile-r1".into(),
            version: 1,
            description: "Mobile-R1 action reward: point inside a gold box (edges included, no enlargement); \
                          without boxes normalised distance <= 0.14; swipe direction; exact text after trim"
                .into(),
            bbox_scale: 1.0,
            distance_threshold: 0.14,
            distance_fallback_with_boxes: false,
            box_edges_inside: true,
            text: TextRule::Exact,
            key: TextRule::IgnoreCase,
        }
    }

    /// The Qwen2.5-VL AndroidControl rule: boxes ×1.2 about their centre, else normalised distance ≤ 0.04;
    /// texts by case-insensitive containment either way.
    pub fn qwen_ac() -> RulePreset {
        RulePreset {
            name: "qwen-ac".into(),
            version: 1,
            description: "Qwen2.5-VL AndroidControl rule: point inside a gold box enlarged x1.2, else normalised \
                          distance <= 0.04; swipe direction; text containment either way"
                .into(),
            bbox_scale: 1.2,
            distance_threshold: 0.04,
            distance_fallback_with_boxes: true,
            box_edges_inside: true,
            text: TextRule::Contains,
            key: TextRule::Contains,
        }
    }

    /// A built-in preset by name (case-insensitive; `_` and `-` are interchangeable).
    pub fn by_name(name: &str) -> Option<RulePreset> {
        name.parse::<RuleName>().ok().map(RuleName::preset)
    }
}

/// The name of a built-in preset (`--rules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleName {
    /// [`RulePreset::mobile_r1`].
    MobileR1,
    /// [`RulePreset::qwen_ac`].
    QwenAc,
}

impl RuleName {
    /// The preset.
    pub fn preset(self) -> RulePreset {
        match self {
            RuleName::MobileR1 => RulePreset::mobile_r1(),
            RuleName::QwenAc => RulePreset::qwen_ac(),
        }
    }
}

impl std::str::FromStr for RuleName {
    type Err = String;
    /// Case-insensitive; `_` and `-` are interchangeable.
    fn from_str(name: &str) -> Result<Self, String> {
        match name.trim().to_lowercase().replace('_', "-").as_str() {
            "mobile-r1" | "mobiler1" => Ok(RuleName::MobileR1),
            "qwen-ac" | "qwen" => Ok(RuleName::QwenAc),
            other => Err(format!(
                "unknown rule preset {other:?} (known: {})",
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
