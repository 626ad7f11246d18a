//! Plain typed values chosen on the command line and recorded in a run's manifest, shared by every layer that
//! needs them: devices and dtypes, the system-prompt source, batch limits and the matching-rule presets. Pure: no
//! I/O and nothing above this module; turning a [`DeviceSpec`] into a device is the backend's job, computing
//! automatic [`BatchLimits`] the engine's.

mod family;
mod rules;

use serde::{Deserialize, Serialize};

pub use family::{CoordinateFrame, CoordinateFrameError, ModelFamily};
pub use rules::{
    levenshtein, py_strip, BoxChoice, BoxGrowth, DirectionSpace, DistanceMetric, PointSpace,
    Precision, Reading, RuleName, RulePreset, SwipeRule, TextRule, ZeroMove,
};

/// Where a model runs (`--device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The first CUDA GPU in a CUDA build, Metal in a Metal build, else the CPU.
    #[default]
    Auto,
    /// The CPU.
    Cpu,
    /// CUDA GPU N.
    Cuda(usize),
    /// The Metal GPU.
    Metal,
}

impl std::str::FromStr for DeviceSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            "metal" => Ok(Self::Metal),
            s => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Self::Cuda)
                .ok_or_else(|| format!("`{s}` is not a device (auto, cpu, cuda, cuda:N, metal)")),
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
            Self::Metal => f.write_str("metal"),
        }
    }
}

/// Activation and weight dtype (`--dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DTypeSpec {
    /// 32-bit float (the CPU's default).
    F32,
    /// bfloat16 (a GPU's default).
    Bf16,
    /// float16.
    F16,
}

impl std::str::FromStr for DTypeSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "f32" => Ok(Self::F32),
            "bf16" => Ok(Self::Bf16),
            "f16" => Ok(Self::F16),
            s => Err(format!("`{s}` is not a dtype (f32, bf16, f16)")),
        }
    }
}

impl std::fmt::Display for DTypeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::F16 => "f16",
        })
    }
}

/// Where the step prompt's system message comes from (`--system-prompt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SystemPrompt {
    /// `prompts/system_mobile_use.jinja` with the resized screen size.
    Default,
    /// Each trajectory's own `system` field (the default template when a trajectory has none).
    Data,
}

impl std::str::FromStr for SystemPrompt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "default" => Ok(Self::Default),
            "data" => Ok(Self::Data),
            other => Err(format!(
                "--system-prompt must be `default` or `data`, not `{other}`"
            )),
        }
    }
}

/// The limits a batch of sequences runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchLimits {
    /// Most sequences decoded together (`--batch-size`).
    pub max_seqs: usize,
    /// Token budget: the sum of every running sequence's reserved KV tokens (`--max-batch-tokens`).
    pub max_batch_tokens: usize,
    /// Most new tokens per sequence.
    pub max_new_tokens: usize,
}

/// A preset of the shapes `bench` builds with random weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapePreset {
    /// The tiny test shapes.
    Tiny,
    /// Qwen2.5-0.5B text dimensions with the real 3B vision tower.
    Small,
    /// Qwen2.5-VL-3B.
    Qwen3B,
    /// Qwen2.5-VL-7B.
    Qwen7B,
    /// Qwen3-VL-2B.
    Qwen3Vl2B,
    /// Qwen3-VL-4B.
    Qwen3Vl4B,
    /// Qwen3-VL-8B.
    Qwen3Vl8B,
}

impl ShapePreset {
    /// The presets' names.
    pub const NAMES: [&'static str; 7] = [
        "tiny", "small", "3b", "7b", "qwen3-2b", "qwen3-4b", "qwen3-8b",
    ];

    /// Its name (`tiny`, `small`, `3b`, `7b`, `qwen3-2b`, `qwen3-4b`, `qwen3-8b`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Tiny => "tiny",
            Self::Small => "small",
            Self::Qwen3B => "3b",
            Self::Qwen7B => "7b",
            Self::Qwen3Vl2B => "qwen3-2b",
            Self::Qwen3Vl4B => "qwen3-4b",
            Self::Qwen3Vl8B => "qwen3-8b",
        }
    }
}

/// The model `bench` builds with random weights (`--config`): a preset, or a `config.json` (or a model folder
/// holding one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BenchModel {
    /// A preset of real shapes.
    Preset(ShapePreset),
    /// A `config.json`, or a folder with one.
    Config(std::path::PathBuf),
}

impl std::str::FromStr for BenchModel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let preset = match s.trim().to_ascii_lowercase().as_str() {
            "tiny" => ShapePreset::Tiny,
            "small" => ShapePreset::Small,
            "3b" => ShapePreset::Qwen3B,
            "7b" => ShapePreset::Qwen7B,
            "qwen3-2b" => ShapePreset::Qwen3Vl2B,
            "qwen3-4b" => ShapePreset::Qwen3Vl4B,
            "qwen3-8b" => ShapePreset::Qwen3Vl8B,
            _ => return Ok(Self::Config(s.into())),
        };
        Ok(Self::Preset(preset))
    }
}

impl std::fmt::Display for BenchModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Preset(p) => f.write_str(p.name()),
            Self::Config(path) => write!(f, "{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_specs_round_trip_and_errors_name_the_choices() {
        for s in ["auto", "cpu", "cuda:0", "cuda:3", "metal"] {
            assert_eq!(s.parse::<DeviceSpec>().unwrap().to_string(), s);
        }
        assert_eq!("cuda".parse::<DeviceSpec>(), Ok(DeviceSpec::Cuda(0)));
        let err = "cuda:abc".parse::<DeviceSpec>().unwrap_err();
        assert!(err.contains("cuda:N"), "{err}");
        assert!("f64".parse::<DTypeSpec>().unwrap_err().contains("bf16"));
    }
}
