//! The model families this program runs, and the coordinate frame an agent answers in.
//!
//! A family is detected from a checkpoint's `config.json` (`model_type`, else `architectures`); it decides the
//! model code that loads the weights, the default system prompt and the default [`CoordinateFrame`]. Pure: the
//! model layer reads the file and passes the parsed JSON here.

use serde::{Deserialize, Serialize};

/// A supported vision-language model family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelFamily {
    /// Qwen2.5-VL (`qwen2_5_vl`, `Qwen2_5_VLForConditionalGeneration`).
    #[serde(rename = "qwen2_5_vl")]
    Qwen25Vl,
    /// Qwen3-VL, dense (`qwen3_vl`, `Qwen3VLForConditionalGeneration`).
    Qwen3Vl,
}

impl ModelFamily {
    /// Every supported family, in the order error messages list them.
    pub const ALL: [ModelFamily; 2] = [ModelFamily::Qwen25Vl, ModelFamily::Qwen3Vl];

    /// The `model_type` of the family's `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Qwen25Vl => "qwen2_5_vl",
            Self::Qwen3Vl => "qwen3_vl",
        }
    }

    /// The class names of the family's `architectures` (a fine-tune keeps them).
    pub fn architectures(self) -> &'static [&'static str] {
        match self {
            Self::Qwen25Vl => &["Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLModel"],
            Self::Qwen3Vl => &["Qwen3VLForConditionalGeneration", "Qwen3VLModel"],
        }
    }

    /// The family's name for people.
    pub fn display_name(self) -> &'static str {
        match self {
            Self::Qwen25Vl => "Qwen2.5-VL",
            Self::Qwen3Vl => "Qwen3-VL",
        }
    }

    /// The frame the family's agents answer coordinates in, unless a flag says otherwise.
    pub fn default_coordinate_frame(self) -> CoordinateFrame {
        match self {
            Self::Qwen25Vl => CoordinateFrame::ImagePixels,
            Self::Qwen3Vl => CoordinateFrame::Relative(999),
        }
    }
}

impl std::fmt::Display for ModelFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.display_name())
    }
}

/// How a predicted point maps to screen pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "max")]
pub enum CoordinateFrame {
    /// Pixels of the (resized) image the model saw: `x · screen_w / image_w` (Qwen2.5-VL).
    ImagePixels,
    /// A relative grid `0..=N` on both axes: `x · screen_w / N` (Qwen3-VL: N = 999; some fine-tunes 1000).
    Relative(u32),
}

impl Default for CoordinateFrame {
    /// Image pixels: what every run made before the setting existed answered in.
    fn default() -> Self {
        Self::ImagePixels
    }
}

/// Why a `--coordinate-frame` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown coordinate frame {0:?}: expected image-pixels, relative-999, relative-1000 or relative:N (N ≥ 1)"
)]
pub struct CoordinateFrameError(pub String);

impl std::str::FromStr for CoordinateFrame {
    type Err = CoordinateFrameError;

    /// `image-pixels`, `relative-999`, `relative-1000` or `relative:N` (N ≥ 1); case-insensitive.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.trim().to_ascii_lowercase().replace('_', "-");
        let relative = key
            .strip_prefix("relative:")
            .or_else(|| key.strip_prefix("relative-"));
        match (key.as_str(), relative) {
            ("image-pixels" | "pixels", _) => Ok(Self::ImagePixels),
            (_, Some(n)) => match n.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(Self::Relative(n)),
                _ => Err(CoordinateFrameError(s.to_owned())),
            },
            _ => Err(CoordinateFrameError(s.to_owned())),
        }
    }
}

impl std::fmt::Display for CoordinateFrame {
    /// The flag's spelling: `image-pixels`, `relative-999`, `relative-1000`, else `relative:N`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ImagePixels => f.write_str("image-pixels"),
            Self::Relative(n @ (999 | 1000)) => write!(f, "relative-{n}"),
            Self::Relative(n) => write!(f, "relative:{n}"),
        }
    }
}

impl CoordinateFrame {
    /// The `[w, h]` extent predicted coordinates are given in: the image the model saw (`image_size`; `None`:
    /// the points are already screen pixels) or the grid `[N, N]`. A point maps to the screen by
    /// `x · screen_w / w`.
    pub fn extent(self, image_size: Option<[u32; 2]>) -> Option<[u32; 2]> {
        match self {
            Self::ImagePixels => image_size,
            Self::Relative(n) => Some([n, n]),
        }
    }

    /// Whether a predicted point lies inside the frame (`0..=w`, `0..=h` of [`Self::extent`], the screen without
    /// one); a point outside it suggests the agent answers in another frame.
    pub fn contains(self, p: [f64; 2], image_size: Option<[u32; 2]>, screen: [u32; 2]) -> bool {
        let [w, h] = self.extent(image_size).unwrap_or(screen);
        (0.0..=w as f64).contains(&p[0]) && (0.0..=h as f64).contains(&p[1])
    }

    /// The frame to suggest when many points fall outside this one.
    pub fn suggested_alternative(self) -> CoordinateFrame {
        match self {
            Self::ImagePixels => Self::Relative(999),
            Self::Relative(_) => Self::ImagePixels,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_and_print_as_the_flag_spells_them() {
        for (text, frame) in [
            ("image-pixels", CoordinateFrame::ImagePixels),
            ("relative-999", CoordinateFrame::Relative(999)),
            ("relative-1000", CoordinateFrame::Relative(1000)),
            ("relative:100", CoordinateFrame::Relative(100)),
        ] {
            assert_eq!(text.parse::<CoordinateFrame>(), Ok(frame));
            assert_eq!(frame.to_string(), text);
        }
        assert_eq!("Relative:999".parse(), Ok(CoordinateFrame::Relative(999)));
        for bad in ["relative:0", "relative", "grid", "relative:-3"] {
            let e = bad.parse::<CoordinateFrame>().unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn extent_and_containment_follow_the_frame() {
        let rel = CoordinateFrame::Relative(999);
        assert_eq!(rel.extent(Some([280, 644])), Some([999, 999]));
        assert_eq!(CoordinateFrame::ImagePixels.extent(None), None);
        assert!(rel.contains([999.0, 0.0], None, [10, 10]));
        assert!(!rel.contains([1000.0, 5.0], None, [10, 10]));
        let px = CoordinateFrame::ImagePixels;
        assert!(px.contains([500.0, 500.0], None, [1080, 2400]));
        assert!(!px.contains([500.0, 500.0], Some([280, 644]), [1080, 2400]));
        assert_eq!(
            serde_json::to_value(rel).unwrap(),
            serde_json::json!({"kind": "relative", "max": 999})
        );
        assert_eq!(
            serde_json::to_value(px).unwrap(),
            serde_json::json!({"kind": "image_pixels"})
        );
    }

    #[test]
    fn a_family_is_written_as_its_model_type() {
        for family in ModelFamily::ALL {
            let json = serde_json::to_value(family).unwrap();
            assert_eq!(json, serde_json::json!(family.model_type()));
            assert_eq!(serde_json::from_value::<ModelFamily>(json).unwrap(), family);
        }
    }
}
