//! Reading predictions JSONL ([`crate::records::PredictionLine`], one step per line) into a set keyed by
//! (trajectory, step), each response parsed once.
//!
//! Reading never fails on a bad line: malformed lines are returned with their line numbers. Unknown fields
//! are ignored; when a (trajectory, step) pair appears twice, the later line wins.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::parse::{parse_response, ParsedOutput};
use crate::records::PredictionLine;
use crate::settings::CoordinateFrame;

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
    /// The response, parsed.
    pub parsed: ParsedOutput,
    /// The step could not be run (its line has an `error`).
    pub failed: bool,
    /// The frame the response's coordinates are given in (image pixels unless the set says otherwise).
    pub frame: CoordinateFrame,
}

impl Prediction {
    /// A prediction from its line, its response parsed.
    pub fn from_line(line: PredictionLine) -> Self {
        Self {
            parsed: parse_response(&line.response),
            trajectory: line.trajectory,
            step: line.step,
            response: line.response,
            image_size: line.image_size,
            failed: line.error.is_some(),
            frame: CoordinateFrame::default(),
        }
    }
}

/// A line that could not be read.
pub(crate) type MalformedLine = crate::records::BadLine;

/// Errors of reading a predictions file (I/O only).
#[derive(Debug, thiserror::Error)]
pub enum PredictionsError {
    /// The file could not be read.
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
    /// Steps whose latest line has an `error` (they could not be run).
    pub errors: usize,
    /// The frame every prediction's coordinates are given in.
    pub frame: CoordinateFrame,
}

impl PredictionSet {
    /// Parse JSONL text (blank lines are skipped).
    pub fn parse(text: &str) -> PredictionSet {
        let lines = crate::records::parse_lines::<PredictionLine>(text);
        let mut set = PredictionSet {
            malformed: lines.bad,
            ..PredictionSet::default()
        };
        for p in lines.records {
            set.insert(Prediction::from_line(p));
        }
        set.errors = set.iter().filter(|p| p.failed).count();
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

    /// Read a predictions file, or an empty set when it does not exist.
    pub(crate) fn read_optional(path: impl AsRef<Path>) -> Result<PredictionSet, PredictionsError> {
        match PredictionSet::read(&path) {
            Err(PredictionsError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(PredictionSet::default())
            }
            other => other,
        }
    }

    /// The same predictions, their coordinates read in `frame` (the run's `--coordinate-frame`).
    pub fn in_frame(mut self, frame: CoordinateFrame) -> PredictionSet {
        self.frame = frame;
        for p in self.by_traj.values_mut().flat_map(HashMap::values_mut) {
            p.frame = frame;
        }
        self
    }

    /// Add a prediction, replacing an earlier one for the same step.
    pub fn insert(&mut self, mut p: Prediction) {
        p.frame = self.frame;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_redone_after_an_error_is_not_an_error() {
        let text = r#"{"trajectory": 0, "step": 0, "response": "", "error": "bad png"}
{"trajectory": 0, "step": 1, "response": "", "error": "bad png"}
{"trajectory": 0, "step": 0, "response": "ok"}"#;
        assert_eq!(PredictionSet::parse(text).errors, 1);
    }

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
        assert!(s.malformed[2].message.contains("missing field `response`"));
    }
}
