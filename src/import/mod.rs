//! `data import`: other mobile-agent benchmarks turned into a benchmark folder of this project (`data.jsonl` in the
//! Mobile-R1 schema, the screenshots under `images/`, and `benchmark.json`).
//!
//! One file per source format (`androidcontrol`, `mobile_use`, `aitz`, `gui_odyssey`, `cagui`) turns source
//! episodes into [`Episode`](episode::Episode)s; shared pieces: the AITW dual-point rules (`aitw`), the TFRecord
//! reader (`tfrecord`), the protobuf messages (`proto`), the accessibility-tree lookup (`a11y`), the episode and
//! its `data.jsonl` steps (`episode`), the sink that writes episodes and counts them (`sink`), the checks a step
//! passes before it is written (`checks`) and the output folder (`writer`). Every source step that cannot be imported is
//! counted by kind (an error under `--strict`), never dropped silently. Pure: no candle. The conventions of each
//! format, with their sources, are in `docs/importers.md`.

mod a11y;
mod aitw;
mod aitz;
mod androidcontrol;
mod cagui;
mod checks;
mod episode;
mod gui_odyssey;
mod mobile_use;
mod proto;
mod report;
mod sink;
mod tfrecord;
mod writer;

/// The output folder of an import, also used by `sample`: one rule for replacing a benchmark folder.
pub(crate) use writer::Target as OutputFolder;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::dataset::{BenchmarkInfo, SourceInfo, INFO_SCHEMA_VERSION};

pub(crate) use report::ImportReport;

/// A source format of `data import --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportFormat {
    /// Google's AndroidControl: GZIP TFRecord files of `tf.train.Example` episodes.
    AndroidControl,
    /// AndroidControl converted to `mobile_use` JSONL (UI-S1 / Mobile-Agent-v3 layout).
    AndroidControlMobileUse,
    /// Android-in-the-Zoo: one JSON list of steps per episode, PNG screenshots.
    Aitz,
    /// GUI-Odyssey: `annotations/*.json`, `screenshots/`, `splits/*.json`.
    GuiOdyssey,
    /// CAGUI (AgentCPM-GUI's Chinese benchmark): AITZ-style episode JSON with JPEG screenshots.
    Cagui,
}

impl ImportFormat {
    /// Every format, in the order of the documentation.
    pub(crate) const ALL: &'static [ImportFormat] = &[
        ImportFormat::AndroidControl,
        ImportFormat::AndroidControlMobileUse,
        ImportFormat::Aitz,
        ImportFormat::GuiOdyssey,
        ImportFormat::Cagui,
    ];

    /// The name used on the command line and in `benchmark.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            ImportFormat::AndroidControl => "androidcontrol",
            ImportFormat::AndroidControlMobileUse => "androidcontrol-mobile-use",
            ImportFormat::Aitz => "aitz",
            ImportFormat::GuiOdyssey => "gui-odyssey",
            ImportFormat::Cagui => "cagui",
        }
    }

    /// The rule preset that corresponds to the format's reference evaluator (written into `benchmark.json`).
    pub(crate) fn suggested_rules(self) -> &'static str {
        match self {
            ImportFormat::AndroidControl | ImportFormat::AndroidControlMobileUse => {
                "androidcontrol"
            }
            ImportFormat::Aitz => "aitw",
            ImportFormat::GuiOdyssey => "gui-odyssey",
            ImportFormat::Cagui => "cagui",
        }
    }

    /// Whether `--split` means something for this format.
    fn takes_split(self) -> bool {
        matches!(
            self,
            ImportFormat::AndroidControl | ImportFormat::GuiOdyssey
        )
    }

    /// Whether the source has per-step instructions, so that `--level low` means something.
    fn takes_level(self) -> bool {
        matches!(
            self,
            ImportFormat::AndroidControl
                | ImportFormat::AndroidControlMobileUse
                | ImportFormat::GuiOdyssey
        )
    }
}

impl std::fmt::Display for ImportFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ImportFormat {
    type Err = String;
    /// Case-insensitive; `_` and `-` are interchangeable.
    fn from_str(s: &str) -> Result<Self, String> {
        let key = s.trim().to_lowercase().replace('_', "-");
        ImportFormat::ALL
            .iter()
            .copied()
            .find(|f| f.as_str() == key)
            .ok_or_else(|| {
                let known: Vec<&str> = ImportFormat::ALL.iter().map(|f| f.as_str()).collect();
                format!("unknown format {s:?} (known: {})", known.join(", "))
            })
    }
}

/// The instruction a step is given: the episode's goal only, or the goal and the step's own instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Level {
    /// The goal only.
    #[default]
    High,
    /// The goal plus the step's low-level instruction.
    Low,
}

impl Level {
    /// `high` or `low`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::High => "high",
            Level::Low => "low",
        }
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_lowercase().as_str() {
            "high" => Ok(Level::High),
            "low" => Ok(Level::Low),
            other => Err(format!("unknown level {other:?} (high or low)")),
        }
    }
}

/// What to import and where.
#[derive(Debug, Clone)]
pub(crate) struct ImportOptions {
    /// The source format.
    pub format: ImportFormat,
    /// The source file or folder, as published.
    pub source: PathBuf,
    /// The benchmark folder to write (new, empty, or an earlier import of the same source).
    pub out: PathBuf,
    /// The split (AndroidControl: a key of `splits.json` or `test_subsplits.json`; GUI-Odyssey: a split file).
    pub split: Option<String>,
    /// The instruction level (formats with step instructions; default high).
    pub level: Option<Level>,
    /// Import at most this many episodes.
    pub limit: Option<usize>,
    /// Fail on the first source step or episode that cannot be imported.
    pub strict: bool,
    /// Where the screenshots of `androidcontrol-mobile-use` are (default: the JSONL file's folder).
    pub images: Option<PathBuf>,
    /// The program version written into `benchmark.json`.
    pub program_version: String,
}

impl ImportOptions {
    fn level(&self) -> Level {
        self.level.unwrap_or_default()
    }
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImportError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A flag does not fit the format or the source.
    #[error("{flag}: {message}")]
    Option {
        /// The flag, e.g. `--split`.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The source is not in the format's published layout.
    #[error("{}: {message}", path.display())]
    Source {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The output folder cannot be written (not empty and not an earlier import of the same source).
    #[error("--out {}: {message}", path.display())]
    Out {
        /// The folder.
        path: PathBuf,
        /// Why it is refused.
        message: String,
    },
    /// `--strict`: a source step or episode could not be imported.
    #[error("--strict: {location}: {kind}")]
    Strict {
        /// What could not be imported and why.
        kind: String,
        /// Where in the source.
        location: String,
    },
    /// Nothing could be imported.
    #[error("no episode could be imported from {}{details}", path.display())]
    Nothing {
        /// The source.
        path: PathBuf,
        /// The reasons, one per line.
        details: String,
    },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ImportError + '_ {
    move |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn check_options(o: &ImportOptions) -> Result<(), ImportError> {
    let opt = |flag, message: String| Err(ImportError::Option { flag, message });
    if o.split.is_some() && !o.format.takes_split() {
        return opt("--split", format!("the {} format has no splits", o.format));
    }
    if o.level.is_some() && !o.format.takes_level() {
        return opt(
            "--level",
            format!("the {} format has no step instructions", o.format),
        );
    }
    if o.images.is_some() && o.format != ImportFormat::AndroidControlMobileUse {
        return opt(
            "--images",
            format!("only for androidcontrol-mobile-use, not {}", o.format),
        );
    }
    if o.limit == Some(0) {
        return opt("--limit", "must be at least 1".into());
    }
    if !o.source.exists() {
        return opt("--source", format!("{} does not exist", o.source.display()));
    }
    Ok(())
}

/// The `source` record of `benchmark.json` for these options (the path made absolute).
fn source_info(o: &ImportOptions) -> SourceInfo {
    SourceInfo {
        format: o.format.as_str().into(),
        path: std::path::absolute(&o.source).unwrap_or_else(|_| o.source.clone()),
        split: o.split.clone(),
        level: o.format.takes_level().then(|| o.level().as_str().into()),
        limit: o.limit,
    }
}

/// Import `opts.source` into `opts.out`: the folder appears complete or not at all.
pub fn run(opts: &ImportOptions) -> Result<ImportReport, ImportError> {
    check_options(opts)?;
    let source = source_info(opts);
    let target = writer::Target::prepare(&opts.out, &source)?;
    let mut sink = sink::Sink::new(target.staging(), opts.strict, opts.limit)?;
    match opts.format {
        ImportFormat::AndroidControl => androidcontrol::import(opts, &mut sink)?,
        ImportFormat::AndroidControlMobileUse => mobile_use::import(opts, &mut sink)?,
        ImportFormat::Aitz => aitz::import(opts, &mut sink)?,
        ImportFormat::GuiOdyssey => gui_odyssey::import(opts, &mut sink)?,
        ImportFormat::Cagui => cagui::import(opts, &mut sink)?,
    }
    let sink::Finished {
        counts,
        examples,
        warnings,
    } = sink.finish()?;
    if counts.episodes == 0 {
        let mut details = String::new();
        for (kind, n) in counts
            .episodes_not_imported
            .iter()
            .chain(&counts.steps_not_imported)
        {
            details.push_str(&format!("\n  {kind}: {n}"));
            if let Some(e) = examples.get(kind) {
                details.push_str(&format!(" (first: {e})"));
            }
        }
        return Err(ImportError::Nothing {
            path: opts.source.clone(),
            details,
        });
    }
    let info = BenchmarkInfo {
        schema_version: INFO_SCHEMA_VERSION,
        source: Some(source),
        rules: Some(opts.format.suggested_rules().into()),
        counts: Some(counts),
        program_version: Some(opts.program_version.clone()),
    };
    let replaced = target.commit(&info)?;
    Ok(ImportReport {
        out: opts.out.clone(),
        info,
        examples,
        replaced,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_by_name_and_suggest_known_presets() {
        for f in ImportFormat::ALL {
            assert_eq!(f.as_str().parse::<ImportFormat>(), Ok(*f));
            let preset = f.suggested_rules().parse::<crate::settings::RuleName>();
            assert_eq!(
                preset.map(|r| r.preset().name),
                Ok(f.suggested_rules().to_string())
            );
        }
        assert_eq!("GUI_Odyssey".parse(), Ok(ImportFormat::GuiOdyssey));
        assert!("aitw"
            .parse::<ImportFormat>()
            .unwrap_err()
            .contains("known: androidcontrol"));
        assert_eq!("LOW".parse(), Ok(Level::Low));
    }
}
