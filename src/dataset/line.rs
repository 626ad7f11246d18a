//! One line of `data.jsonl`: the serde type every writer of a benchmark folder fills in (`data import`,
//! `sample`) and the loader reads. A line written from it always loads; the loader also takes the forms released
//! files use besides it (sizes as strings, a numeric id, a screenshot as an image record, …: the field readers of
//! [`lenient`]), and checks what needs more than one field (boxes inside the screen, gold points on it) in `load`.

use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

/// One trajectory: a line of `data.jsonl`. Fields appear in this order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DataLine {
    /// The trajectory's id (a string, or an integer read as its digits); the line's 0-based index when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::id"
    )]
    pub id: Option<String>,
    /// The app the task runs in.
    #[serde(deserialize_with = "lenient::string")]
    pub app_name: String,
    /// `trajectory.len()`.
    #[serde(deserialize_with = "lenient::count")]
    pub trajectory_length: usize,
    /// The task.
    #[serde(deserialize_with = "lenient::string")]
    pub instruction: String,
    /// The system prompt the dataset's own prompts use (`--system-prompt data`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub system: Option<String>,
    /// The screen's width in pixels (the frame of the gold points and boxes).
    #[serde(deserialize_with = "lenient::positive")]
    pub image_width: u32,
    /// The screen's height in pixels.
    #[serde(deserialize_with = "lenient::positive")]
    pub image_height: u32,
    /// The steps, in order.
    #[serde(deserialize_with = "lenient::steps")]
    pub trajectory: Vec<DataStep>,
}

/// One step of a [`DataLine`]. Fields appear in this order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(expecting = "a step (an object)")]
pub(crate) struct DataStep {
    /// The screenshot, relative to the benchmark folder (read also from an image record `{"path": …}`).
    #[serde(deserialize_with = "lenient::image")]
    pub image: String,
    /// Annotated reasoning.
    #[serde(default, deserialize_with = "lenient::text")]
    pub thought: String,
    /// A one-line description of the step (the golden history text).
    #[serde(default, deserialize_with = "lenient::text")]
    pub subtask: String,
    /// The gold action: a `mobile_use` tool call, as an object or as its JSON text (its `arguments` too), or
    /// the bare arguments.
    #[serde(deserialize_with = "lenient::action")]
    pub action: Value,
    /// An annotated answer in the model's output format (empty when the source has none).
    #[serde(default, deserialize_with = "lenient::text")]
    pub response: String,
    /// The gold element boxes.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::boxes"
    )]
    pub bbox: Option<GoldBoxes>,
    /// The gold element boxes under the name some releases use (UI-S1's AndroidControl): read when `bbox` is
    /// absent; the writers leave it out.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::boxes"
    )]
    pub candidate_bbox: Option<GoldBoxes>,
    /// The step's own instruction (a low-level task description), when the source has one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient::opt_string"
    )]
    pub instruction: Option<String>,
}

/// A box `[x1, y1, x2, y2]` in screen pixels, each number written as given (integers without a fraction).
pub(crate) type BoxNumbers = [Number; 4];

/// The gold boxes of a step: one box, or a list of them (read by [`lenient`]'s `boxes`).
#[derive(Debug, Clone, PartialEq, Serialize)]
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

impl DataStep {
    /// The gold boxes with the name of the field they were read from: `bbox`, else `candidate_bbox`.
    pub(crate) fn gold_boxes(&self) -> (&'static str, &[BoxNumbers]) {
        match (&self.bbox, &self.candidate_bbox) {
            (Some(b), _) => ("bbox", b.boxes()),
            (None, Some(b)) => ("candidate_bbox", b.boxes()),
            (None, None) => ("bbox", &[]),
        }
    }
}

impl GoldBoxes {
    /// The boxes, one or many.
    pub(crate) fn boxes(&self) -> &[BoxNumbers] {
        match self {
            GoldBoxes::One(b) => std::slice::from_ref(b),
            GoldBoxes::Many(v) => v,
        }
    }
}

/// The message of a required field that is absent or null.
pub(super) const MISSING: &str = "missing";

/// How the fields of a line are read: besides the form this program writes, the forms released files use (sizes
/// and lengths as strings or as floats without a fraction, numeric ids, a screenshot as an image record
/// `{"path": …}`, null for an absent text). Each reader refuses a value with what is wrong in the loader's words;
/// the deserializer that calls it adds the field's path (`trajectory[2].image`). Checks that need more than the
/// field (a box inside the screen, a gold point on it) come after, in `load`.
mod lenient {
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer};
    use serde_json::{Number, Value};

    use super::{BoxNumbers, DataStep, GoldBoxes, MISSING};

    /// A value that must be there: null counts as absent.
    fn required<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        match Value::deserialize(d)? {
            Value::Null => Err(D::Error::custom(MISSING)),
            v => Ok(v),
        }
    }

    /// A string that must be there.
    pub(super) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        match required(d)? {
            Value::String(s) => Ok(s),
            _ => Err(D::Error::custom("must be a string")),
        }
    }

    /// An optional string: absent or null is `None`.
    pub(super) fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        match Value::deserialize(d)? {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s)),
            _ => Err(D::Error::custom("must be a string")),
        }
    }

    /// A text that may be left out: absent or null is empty.
    pub(super) fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        opt_string(d).map(Option::unwrap_or_default)
    }

    /// A trajectory id: a string or an integer (written as its digits); absent or null is `None`.
    pub(super) fn id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        match Value::deserialize(d)? {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s)),
            Value::Number(n) if n.is_u64() || n.is_i64() => Ok(Some(n.to_string())),
            _ => Err(D::Error::custom("must be a string or an integer")),
        }
    }

    /// A non-negative whole number written as a JSON integer, a float with no fraction (`1080.0`) or a string of
    /// digits (`"1080"`): releases store sizes and lengths each way.
    fn whole_number(v: &Value) -> Option<u64> {
        match v {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.0e15)
                    .map(|f| f as u64)
            }),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        }
    }

    /// A screen side in pixels: a positive whole number.
    pub(super) fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        let v = required(d)?;
        match whole_number(&v) {
            Some(n) if n > 0 && n <= u32::MAX as u64 => Ok(n as u32),
            _ => Err(D::Error::custom(format!(
                "must be a positive integer, found {v}"
            ))),
        }
    }

    /// A count: a non-negative whole number.
    pub(super) fn count<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        let v = required(d)?;
        whole_number(&v)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| D::Error::custom("must be a non-negative integer"))
    }

    /// The steps: a list, each step read in place (so an error names its index).
    pub(super) fn steps<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<DataStep>, D::Error> {
        struct Steps;
        impl<'de> Visitor<'de> for Steps {
            type Value = Vec<DataStep>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of steps")
            }
            fn visit_unit<E: Error>(self) -> Result<Vec<DataStep>, E> {
                Err(E::custom(MISSING))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<DataStep>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(step) = seq.next_element()? {
                    out.push(step);
                }
                Ok(out)
            }
        }
        d.deserialize_any(Steps)
    }

    /// The screenshot of a step: a path string, or an image record `{"path": …}` as dataset tools write them.
    pub(super) fn image<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        match required(d)? {
            Value::String(s) => Ok(s),
            Value::Object(o) => match o.get("path") {
                Some(Value::String(s)) => Ok(s.clone()),
                _ => Err(D::Error::custom("an image record needs a `path` string")),
            },
            _ => Err(D::Error::custom("must be a string")),
        }
    }

    /// The gold action: any value but null (a tool call as an object or as JSON text, or bare arguments; `load`
    /// reads it).
    pub(super) fn action<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        required(d)
    }

    /// One box: four numbers.
    fn a_box(v: &Value) -> Result<BoxNumbers, String> {
        let arr = v
            .as_array()
            .filter(|a| a.len() == 4)
            .ok_or_else(|| format!("a box must be [x1, y1, x2, y2], found {v}"))?;
        let number = |x: &Value| match x {
            Value::Number(n) if n.as_f64().is_some_and(f64::is_finite) => Some(n.clone()),
            _ => None,
        };
        let numbers: Option<Vec<Number>> = arr.iter().map(number).collect();
        numbers
            .and_then(|n| <BoxNumbers>::try_from(n).ok())
            .ok_or_else(|| format!("box coordinates must be numbers, found {v}"))
    }

    /// Gold boxes: one box `[x1, y1, x2, y2]` or a list of boxes; absent or null is `None`.
    pub(super) fn boxes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<GoldBoxes>, D::Error> {
        let v = Value::deserialize(d)?;
        let arr = match &v {
            Value::Null => return Ok(None),
            Value::Array(a) => a,
            _ => {
                return Err(D::Error::custom(format!(
                    "must be a box or a list of boxes, found {v}"
                )))
            }
        };
        let boxes = if !arr.is_empty() && arr.iter().all(Value::is_number) {
            a_box(&v).map(GoldBoxes::One)
        } else {
            arr.iter()
                .map(a_box)
                .collect::<Result<_, _>>()
                .map(GoldBoxes::Many)
        };
        boxes.map(Some).map_err(D::Error::custom)
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
                candidate_bbox: None,
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
