//! `benchmark.json`: what a benchmark folder says about itself, beside `data.jsonl` — where it was imported from,
//! the matching-rule preset its reference evaluator uses, and its counts. Written by `data import`, read by
//! [`super::Benchmark::load`] and by the commands that pick a rule preset. Optional: a folder without it is a plain
//! benchmark. One serde type for the writer and every reader.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::DatasetError;
use crate::settings::{RuleName, RulePreset};

/// The file name inside a benchmark folder.
pub(crate) const INFO_FILE: &str = "benchmark.json";

/// The version of `benchmark.json` this program writes; it reads this version and older ones.
pub(crate) const INFO_SCHEMA_VERSION: u32 = 1;

/// The contents of `benchmark.json`. Every field but `schema_version` is optional, so a hand-written file may
/// hold only a suggested `rules` preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkInfo {
    /// Version of this file's layout ([`INFO_SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Where the benchmark was imported from (absent for a benchmark made otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceInfo>,
    /// The rule preset the source's reference evaluator corresponds to (`--rules` default for this folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<String>,
    /// What the import wrote and what it left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<ImportCounts>,
    /// Version of the program that wrote the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_version: Option<String>,
}

/// The import that made a benchmark folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// The source format (`--format`), e.g. `aitz`.
    pub format: String,
    /// The source path as given (`--source`), made absolute.
    pub path: PathBuf,
    /// The split chosen (`--split`), if any.
    #[serde(default)]
    pub split: Option<String>,
    /// The instruction level (`high` or `low`) where the format has one.
    #[serde(default)]
    pub level: Option<String>,
    /// The episode limit (`--limit`), if any.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Counts of one import.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImportCounts {
    /// Trajectories written.
    pub episodes: usize,
    /// Steps written.
    pub steps: usize,
    /// Steps written with at least one gold box.
    pub steps_with_boxes: usize,
    /// Steps written per `mobile_use` action type.
    pub action_types: BTreeMap<String, usize>,
    /// Source steps not imported, by reason.
    #[serde(default)]
    pub steps_not_imported: BTreeMap<String, usize>,
    /// Source episodes not imported, by reason.
    #[serde(default)]
    pub episodes_not_imported: BTreeMap<String, usize>,
    /// Steps imported with a documented change (e.g. a swipe reoriented), by kind.
    #[serde(default)]
    pub adjusted: BTreeMap<String, usize>,
}

impl BenchmarkInfo {
    /// Read `DIR/benchmark.json`: `Ok(None)` when the file does not exist.
    pub fn read(dir: &Path) -> Result<Option<BenchmarkInfo>, DatasetError> {
        super::check_folder(dir)?;
        let file = dir.join(INFO_FILE);
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(DatasetError::Io { path: file, source }),
        };
        Self::parse(&text, &file).map(Some)
    }

    /// The rule preset `DIR/benchmark.json` suggests (an unknown name is an error naming the file), else the
    /// default (`mobile-r1`).
    pub fn suggested_rules(dir: &Path) -> Result<RulePreset, DatasetError> {
        let Some(name) = Self::read(dir)?.and_then(|i| i.rules) else {
            return Ok(RulePreset::default());
        };
        name.parse::<RuleName>()
            .map(RuleName::preset)
            .map_err(|_| DatasetError::Info {
                file: dir.join(INFO_FILE),
                message: format!(
                    "suggested rule preset {name:?} is not one this program knows (known: {}); pass --rules",
                    RulePreset::NAMES.join(", ")
                ),
            })
    }

    /// Parse the text of a `benchmark.json`; `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<BenchmarkInfo, DatasetError> {
        let bad = |message: String| DatasetError::Info {
            file: file.to_path_buf(),
            message,
        };
        let info: BenchmarkInfo = serde_json::from_str(crate::safe_io::strip_bom(text))
            .map_err(|e| bad(format!("malformed: {e}")))?;
        if info.schema_version == 0 || info.schema_version > INFO_SCHEMA_VERSION {
            return Err(bad(format!(
                "schema_version {} is not one this program reads (1..={INFO_SCHEMA_VERSION})",
                info.schema_version
            )));
        }
        Ok(info)
    }

    /// The file as written: pretty JSON with a final newline.
    pub(crate) fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("BenchmarkInfo serializes");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_minimal_file() {
        let info = BenchmarkInfo {
            schema_version: INFO_SCHEMA_VERSION,
            source: Some(SourceInfo {
                format: "aitz".into(),
                path: "/data/aitz".into(),
                split: None,
                level: None,
                limit: Some(3),
            }),
            rules: Some("aitw".into()),
            counts: Some(ImportCounts::default()),
            program_version: Some("0.1.0".into()),
        };
        let f = Path::new("benchmark.json");
        assert_eq!(BenchmarkInfo::parse(&info.to_json(), f).unwrap(), info);
        let minimal =
            BenchmarkInfo::parse(r#"{"schema_version": 1, "rules": "qwen-ac"}"#, f).unwrap();
        assert_eq!(minimal.rules.as_deref(), Some("qwen-ac"));
        assert!(minimal.source.is_none());
    }

    #[test]
    fn errors_name_the_file() {
        let f = Path::new("x/benchmark.json");
        let e = BenchmarkInfo::parse("{", f).unwrap_err().to_string();
        assert!(e.starts_with("x/benchmark.json: malformed"), "{e}");
        let e = BenchmarkInfo::parse(r#"{"schema_version": 9}"#, f)
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema_version 9"), "{e}");
    }
}
