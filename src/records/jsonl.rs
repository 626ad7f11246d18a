//! Reading JSONL files of records under one policy, shared by every reader of `predictions.jsonl` and
//! `judgements.jsonl`: a leading byte-order mark and blank lines are skipped, and a line that does not read as the
//! record type is reported with its 1-based number and what is wrong, never fatal.

use std::path::Path;

use serde::de::DeserializeOwned;

/// A line that could not be read as a record.
#[derive(Debug, Clone, PartialEq)]
pub struct BadLine {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for BadLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// The records of a JSONL text, in order, and the lines that were not records.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonLines<T> {
    /// Every line that read as a record.
    pub records: Vec<T>,
    /// Every other non-blank line.
    pub bad: Vec<BadLine>,
}

impl<T> Default for JsonLines<T> {
    fn default() -> Self {
        Self {
            records: Vec::new(),
            bad: Vec::new(),
        }
    }
}

/// Read JSONL text as records of `T` (see the module documentation).
pub(crate) fn parse_lines<T: DeserializeOwned>(text: &str) -> JsonLines<T> {
    let mut out = JsonLines::default();
    for (i, line) in crate::safe_io::strip_bom(text).lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(r) => out.records.push(r),
            Err(e) => out.bad.push(BadLine {
                line: i + 1,
                message: describe(line, e),
            }),
        }
    }
    out
}

/// Tell a line that is not JSON (or not an object) from a JSON object with a bad field.
fn describe(line: &str, e: serde_json::Error) -> String {
    match serde_json::from_str::<serde_json::Value>(line) {
        Err(e) => format!("malformed JSON: {e}"),
        Ok(v) if !v.is_object() => "not a JSON object".into(),
        Ok(_) => e.to_string(),
    }
}

/// Read a JSONL file as records of `T`; a missing file has none.
pub(crate) fn read_lines<T: DeserializeOwned>(path: &Path) -> std::io::Result<JsonLines<T>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(parse_lines(&text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(JsonLines::default()),
        Err(e) => Err(e),
    }
}

/// The whole, newline-terminated lines of a JSONL text: a torn last line (a writer killed mid-line, or one still
/// writing) is left out, as the writer itself cuts it off when it resumes.
pub(crate) fn whole_lines(text: &str) -> Vec<&str> {
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    complete.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct R {
        a: u32,
    }

    #[test]
    fn bad_lines_are_numbered_and_described() {
        let text = "\u{feff}{\"a\": 1}\n\nnot json\n\"s\"\n{\"b\": 2}\n{\"a\": 3}";
        let lines = parse_lines::<R>(text);
        assert_eq!(lines.records, vec![R { a: 1 }, R { a: 3 }]);
        let numbers: Vec<usize> = lines.bad.iter().map(|b| b.line).collect();
        assert_eq!(numbers, vec![3, 4, 5]);
        assert!(lines.bad[0].message.starts_with("malformed JSON"));
        assert_eq!(lines.bad[1].message, "not a JSON object");
        assert!(lines.bad[2].message.contains("missing field `a`"));
    }

    #[test]
    fn torn_last_line_is_left_out() {
        assert_eq!(whole_lines("{\"a\":1}\n\n{\"b\""), vec!["{\"a\":1}"]);
        assert!(whole_lines("{\"a\"").is_empty());
    }

    #[test]
    fn a_missing_file_has_no_records() {
        let dir = tempfile::tempdir().unwrap();
        let lines = read_lines::<R>(&dir.path().join("absent.jsonl")).unwrap();
        assert!(lines.records.is_empty() && lines.bad.is_empty());
    }
}
