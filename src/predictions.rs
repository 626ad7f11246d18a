//! Predictions JSONL: one `{"trajectory", "step", "response", "image_size"?}` object per line.
//!
//! Reading never fails on a bad line: malformed lines are returned with their line numbers. Unknown fields
//! are ignored; when a (trajectory, step) pair appears twice, the later line wins.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// One model prediction for one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// Trajectory id (a JSON number or string on input).
    pub trajectory: String,
    /// 0-based step index.
    pub step: usize,
    /// The raw model text.
    pub response: String,
    /// `[w, h]` of the image the model saw; `None` means predicted points are screen pixels.
    pub image_size: Option<[u32; 2]>,
}

/// A line that could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct MalformedLine {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for MalformedLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Errors of reading or writing a predictions file (I/O only).
#[derive(Debug, thiserror::Error)]
pub enum PredictionsError {
    /// The file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The predictions of a file, keyed by (trajectory, step).
#[derive(Debug, Clone, Default)]
pub struct PredictionSet {
    by_traj: HashMap<String, HashMap<usize, Prediction>>,
    /// Lines that could not be read.
    pub malformed: Vec<MalformedLine>,
    /// Lines replaced by a later line for the same step.
    pub duplicates: usize,
}

impl PredictionSet {
    /// Parse JSONL text (blank lines are skipped).
    pub fn parse(text: &str) -> PredictionSet {
        let mut set = PredictionSet::default();
        let text = crate::safe_io::strip_bom(text); // a leading UTF-8 BOM (Windows editors) is not data
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match parse_line(line) {
                Ok(p) => set.insert(p),
                Err(message) => set.malformed.push(MalformedLine {
                    line: i + 1,
                    message,
                }),
            }
        }
        set
    }

    /// Read a predictions file.
    pub fn read(path: impl AsRef<Path>) -> Result<PredictionSet, PredictionsError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| PredictionsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(PredictionSet::parse(&text))
    }

    /// Add a prediction, replacing an earlier one for the same step.
    pub fn insert(&mut self, p: Prediction) {
        let steps = self.by_traj.entry(p.trajectory.clone()).or_default();
        if steps.insert(p.step, p).is_some() {
            self.duplicates += 1;
        }
    }

    /// The prediction for a step.
    pub fn get(&self, trajectory: &str, step: usize) -> Option<&Prediction> {
        self.by_traj.get(trajectory)?.get(&step)
    }

    /// Number of distinct (trajectory, step) predictions.
    pub fn len(&self) -> usize {
        self.by_traj.values().map(HashMap::len).sum()
    }

    /// No prediction at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All predictions (unordered).
    pub fn iter(&self) -> impl Iterator<Item = &Prediction> {
        self.by_traj.values().flat_map(HashMap::values)
    }
}

fn parse_line(line: &str) -> Result<Prediction, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("malformed JSON: {e}"))?;
    let obj = v.as_object().ok_or("not a JSON object")?;
    let trajectory = match obj.get("trajectory") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => n.to_string(),
        Some(other) => {
            return Err(format!(
                "`trajectory` must be a string or an integer, found {other}"
            ))
        }
        None => return Err("missing `trajectory`".into()),
    };
    let step = match obj.get("step") {
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| format!("`step` must be a non-negative integer, found {n}"))?,
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map_err(|_| format!("`step` must be a non-negative integer, found {s:?}"))?,
        Some(other) => {
            return Err(format!(
                "`step` must be a non-negative integer, found {other}"
            ))
        }
        None => return Err("missing `step`".into()),
    } as usize;
    let response = match obj.get("response") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(format!("`response` must be a string, found {other}")),
        None => return Err("missing `response`".into()),
    };
    let image_size =
        match obj.get("image_size") {
            None | Some(Value::Null) => None,
            Some(v) => Some(parse_size(v).ok_or_else(|| {
                format!("`image_size` must be [w, h] positive integers, found {v}")
            })?),
        };
    Ok(Prediction {
        trajectory,
        step,
        response,
        image_size,
    })
}

fn parse_size(v: &Value) -> Option<[u32; 2]> {
    let a = v.as_array()?;
    let w = u32::try_from(a.first()?.as_u64()?).ok()?;
    let h = u32::try_from(a.get(1)?.as_u64()?).ok()?;
    (a.len() == 2 && w > 0 && h > 0).then_some([w, h])
}

/// The JSON object of a prediction line: the four fields first, then `extra` (e.g. token counts).
pub fn to_json(p: &Prediction, extra: &Map<String, Value>) -> Value {
    let mut m = Map::new();
    m.insert("trajectory".into(), p.trajectory.as_str().into());
    m.insert("step".into(), p.step.into());
    m.insert("response".into(), p.response.as_str().into());
    if let Some([w, h]) = p.image_size {
        m.insert("image_size".into(), Value::from(vec![w, h]));
    }
    for (k, v) in extra {
        if !m.contains_key(k) {
            m.insert(k.clone(), v.clone());
        }
    }
    Value::Object(m)
}

/// One line of JSONL (no trailing newline).
pub fn to_line(p: &Prediction, extra: &Map<String, Value>) -> String {
    to_json(p, extra).to_string()
}

/// Append one prediction line to `path` (created when absent), flushed before returning.
pub fn append(
    path: impl AsRef<Path>,
    p: &Prediction,
    extra: &Map<String, Value>,
) -> Result<(), PredictionsError> {
    let path = path.as_ref();
    let io = |source| PredictionsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    let mut line = to_line(p, extra);
    line.push('\n');
    f.write_all(line.as_bytes()).map_err(io)?;
    f.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_wins_and_malformed_reported() {
        let text = r#"{"trajectory": 0, "step": 0, "response": "a"}
{"trajectory": "0", "step": 0, "response": "b", "tokens": 12}
not json

{"trajectory": 1, "step": -1, "response": "c"}
{"trajectory": 1, "step": 1, "response": "d", "image_size": [28, 56]}
{"trajectory": 1, "step": 2}"#;
        let s = PredictionSet::parse(text);
        assert_eq!(s.get("0", 0).map(|p| p.response.as_str()), Some("b"));
        assert_eq!(s.get("1", 1).and_then(|p| p.image_size), Some([28, 56]));
        assert_eq!(s.duplicates, 1);
        assert_eq!(s.len(), 2);
        let lines: Vec<usize> = s.malformed.iter().map(|m| m.line).collect();
        assert_eq!(lines, vec![3, 5, 7]);
    }

    #[test]
    fn write_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        let p = Prediction {
            trajectory: "t1".into(),
            step: 3,
            response: "<tool_call>{}</tool_call>\n".into(),
            image_size: Some([10, 20]),
        };
        let mut extra = Map::new();
        extra.insert("new_tokens".into(), 7.into());
        append(&path, &p, &extra).unwrap();
        append(&path, &p, &Map::new()).unwrap();
        let s = PredictionSet::read(&path).unwrap();
        assert_eq!(s.get("t1", 3), Some(&p));
        assert!(s.malformed.is_empty());
    }
}
