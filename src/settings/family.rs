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
