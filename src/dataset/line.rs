//! One line of `data.jsonl` as the program writes it (`data import`, `sample`): the serde type every writer of a
//! benchmark folder fills in, and the form the loader reads most strictly. The loader accepts more than this form
//! (released files store sizes as strings, a trajectory as JSON text, a screenshot as an image record), so it
//! reads each field leniently into [`super::Trajectory`] and names the field when one is wrong; a line written
//! from this type always loads (checked by its tests).

use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

/// One trajectory: a line of `data.jsonl`. Fields appear in this order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DataLine {
    /// The trajectory's id; the line's 0-based index when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The app the task runs in.
    pub app_name: String,
    /// `trajectory.len()`.
    pub trajectory_length: usize,
    /// The task.
    pub instruction: String,
    /// The system prompt the dataset's own prompts use (`--system-prompt data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The screen's width in pixels (the frame of the gold points and boxes).
    pub image_width: u32,
    /// The screen's height in pixels.
    pub image_height: u32,
    /// The steps, in order.
    pub trajectory: Vec<DataStep>,
}

/// One step of a [`DataLine`]. Fields appear in this order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DataStep {
    /// The screenshot, relative to the benchmark folder.
    pub image: String,
    /// Annotated reasoning.
    #[serde(default)]
    pub thought: String,
    /// A one-line description of the step (the golden history text).
    #[serde(default)]
    pub subtask: String,
    /// The gold action: a `mobile_use` tool call, as an object or as its JSON text.
    pub action: Value,
    /// An annotated answer in the model's output format (empty when the source has none).
    #[serde(default)]
    pub response: String,
    /// The gold element boxes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbox: Option<GoldBoxes>,
    /// The step's own instruction (a low-level task description), when the source has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
}

/// A box `[x1, y1, x2, y2]` in screen pixels, each number written as given (integers without a fraction).
pub(crate) type BoxNumbers = [Number; 4];

/// The gold boxes of a step: one box, or a list of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum GoldBoxes {
    /// A single box.
    One(BoxNumbers),
    /// Several boxes (or one, in a list).
    Many(Vec<BoxNumbers>),
}

/// A pixel value as a JSON number: integral values without a fraction.
pub(crate) fn pixel(x: f64) -> Number {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        Number::from(x as i64)
    } else {
        Number::from_f64(x).unwrap_or_else(|| Number::from(0))
    }
}

impl DataLine {
    /// The line's JSON text (one line, no newline).
    pub(crate) fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a data line is plain data")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line() -> DataLine {
        DataLine {
            id: Some("e1".into()),
            app_name: "闲鱼".into(),
            trajectory_length: 1,
            instruction: "open it".into(),
            system: None,
            image_width: 100,
            image_height: 200,
            trajectory: vec![DataStep {
                image: "images/e1/0.png".into(),
                thought: String::new(),
                subtask: "tap".into(),
                action: serde_json::json!({"name": "mobile_use",
                    "arguments": {"action": "click", "coordinate": [50, 60]}}),
                response: String::new(),
                bbox: Some(GoldBoxes::Many(vec![[40, 50, 60, 70].map(Number::from)])),
                instruction: None,
            }],
        }
    }

    #[test]
    fn a_written_line_reads_back_as_itself_and_loads() {
        let text = line().to_line();
        assert_eq!(serde_json::from_str::<DataLine>(&text).unwrap(), line());
        let trajectories =
            super::super::load::parse_jsonl(&text, std::path::Path::new("data.jsonl")).unwrap();
        assert_eq!(trajectories[0].id, "e1");
        assert_eq!(
            trajectories[0].steps[0].bboxes,
            vec![[40.0, 50.0, 60.0, 70.0]]
        );
    }

    #[test]
    fn pixels_are_written_without_a_fraction_when_whole() {
        assert_eq!(pixel(12.0).to_string(), "12");
        assert_eq!(pixel(12.5).to_string(), "12.5");
    }
}
