//! The sink that writes the episodes of an import into the staging folder (`data.jsonl` line by line,
//! screenshots under `images/`), leaving out what `data validate` would refuse, and counts what was written and
//! what was left out.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::checks::check_draft;
use super::episode::{data_step, skip_location, Episode, ImageData, StepDraft, IMAGES_DIR};
use super::{io_err, ImportError};
use crate::dataset::{DataLine, ImportCounts, DATA_FILE};

/// The sink: receives episodes, writes them, counts.
pub(super) struct Sink {
    staging: PathBuf,
    data: BufWriter<File>,
    strict: bool,
    limit: Option<usize>,
    counts: ImportCounts,
    examples: BTreeMap<String, String>,
    ids: HashSet<String>,
    dirs: HashSet<String>,
    warnings: Vec<String>,
}

/// What a finished sink hands back.
pub(super) struct Finished {
    /// The counts for `benchmark.json`.
    pub counts: ImportCounts,
    /// The first source location of each kind left out.
    pub examples: BTreeMap<String, String>,
    /// Warnings for the summary.
    pub warnings: Vec<String>,
}

impl Sink {
    /// A sink writing into `staging` (an empty folder).
    pub fn new(staging: &Path, strict: bool, limit: Option<usize>) -> Result<Sink, ImportError> {
        let path = staging.join(DATA_FILE);
        let file = File::create(&path).map_err(io_err(&path))?;
        Ok(Sink {
            staging: staging.to_path_buf(),
            data: BufWriter::new(file),
            strict,
            limit,
            counts: ImportCounts::default(),
            examples: BTreeMap::new(),
            ids: HashSet::new(),
            dirs: HashSet::new(),
            warnings: Vec::new(),
        })
    }

    /// Whether `--limit` episodes have been written (importers stop reading then).
    pub fn full(&self) -> bool {
        self.limit.is_some_and(|l| self.counts.episodes >= l)
    }

    fn record(&mut self, kind: &str, location: String) -> Result<(), ImportError> {
        if self.strict {
            return Err(ImportError::Strict {
                kind: kind.to_string(),
                location,
            });
        }
        self.examples.entry(kind.to_string()).or_insert(location);
        Ok(())
    }

    /// A source step that cannot be imported (an error under `--strict`).
    pub(crate) fn skip_step(&mut self, kind: &str, location: String) -> Result<(), ImportError> {
        self.record(kind, location)?;
        *self
            .counts
            .steps_not_imported
            .entry(kind.to_string())
            .or_default() += 1;
        Ok(())
    }

    /// A source episode that cannot be imported at all (an error under `--strict`).
    pub(crate) fn skip_episode(&mut self, kind: &str, location: String) -> Result<(), ImportError> {
        self.record(kind, location)?;
        *self
            .counts
            .episodes_not_imported
            .entry(kind.to_string())
            .or_default() += 1;
        Ok(())
    }

    /// A step imported with a documented change.
    pub(crate) fn adjusted(&mut self, kind: &str) {
        *self.counts.adjusted.entry(kind.to_string()).or_default() += 1;
    }

    /// How many of this kind were counted so far (steps not imported or imported with a change).
    pub(crate) fn count_of(&self, kind: &str) -> usize {
        let c = &self.counts;
        [&c.steps_not_imported, &c.adjusted]
            .iter()
            .filter_map(|m| m.get(kind))
            .sum()
    }

    /// A warning printed with the summary.
    pub(crate) fn warn(&mut self, warning: String) {
        tracing::debug!("import warning: {warning}");
        self.warnings.push(warning);
    }

    /// Write one episode: steps that `data validate` would refuse (a missing or unreadable screenshot, one whose
    /// size does not fit the screen, a gold point off the screen, …) and steps whose screen differs from the first
    /// step's are left out (counted); an episode left without steps is counted and not written.
    pub fn episode(&mut self, mut ep: Episode, location: &str) -> Result<(), ImportError> {
        if self.full() {
            return Ok(());
        }
        if self.ids.contains(&ep.id) {
            return self.skip_episode(
                "episode id already imported",
                format!("{location}: episode {}", ep.id),
            );
        }
        let steps = std::mem::take(&mut ep.steps);
        let mut kept = Vec::with_capacity(steps.len());
        let mut exts = Vec::with_capacity(steps.len());
        for s in steps {
            let at = || format!("{location}: episode {} step {}", ep.id, s.source_index);
            let ext = match check_draft(&s) {
                Ok(ext) => ext,
                Err((kind, detail)) => {
                    let image = match &s.image {
                        ImageData::File(p) => Some(p.display().to_string()),
                        ImageData::Bytes(_) => None,
                    };
                    let mut place = skip_location(at(), &kind, image.as_deref());
                    if let Some(d) = detail {
                        place = format!("{place}: {d}");
                    }
                    self.skip_step(&kind, place)?;
                    continue;
                }
            };
            let first = kept.first().map_or(s.screen, |f: &StepDraft| f.screen);
            if s.screen != first {
                self.skip_step("screen size differs from the episode's first step", at())?;
                continue;
            }
            kept.push(s);
            exts.push(ext);
        }
        if kept.is_empty() {
            return self.skip_episode(
                "episode without an importable step",
                format!("{location}: episode {}", ep.id),
            );
        }
        ep.steps = kept;
        let line = self.write_episode(&ep, &exts)?;
        let path = self.staging.join(DATA_FILE);
        writeln!(self.data, "{line}").map_err(io_err(&path))?;
        self.ids.insert(ep.id.clone());
        self.count(&ep);
        Ok(())
    }

    fn count(&mut self, ep: &Episode) {
        let c = &mut self.counts;
        c.episodes += 1;
        c.steps += ep.steps.len();
        for s in &ep.steps {
            *c.action_types
                .entry(s.action.action_type().as_str().to_string())
                .or_default() += 1;
            c.steps_with_boxes += usize::from(!s.bboxes.is_empty());
        }
    }

    /// The episode's screenshot folder name: its id made safe for a file name, unique in the import.
    fn image_dir(&mut self, id: &str) -> String {
        let safe: String = id
            .chars()
            .map(|c| match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
                _ => '_',
            })
            .collect();
        let safe = safe.trim_start_matches('.').to_string();
        let base = if safe.is_empty() {
            "episode".into()
        } else {
            safe
        };
        let mut name = base.clone();
        let mut n = 1;
        while !self.dirs.insert(name.clone()) {
            n += 1;
            name = format!("{base}-{n}");
        }
        name
    }

    /// Copy or write the screenshots and render the `data.jsonl` line.
    fn write_episode(&mut self, ep: &Episode, exts: &[String]) -> Result<String, ImportError> {
        let dir = self.image_dir(&ep.id);
        let abs_dir = self.staging.join(IMAGES_DIR).join(&dir);
        std::fs::create_dir_all(&abs_dir).map_err(io_err(&abs_dir))?;
        let mut steps = Vec::with_capacity(ep.steps.len());
        for (s, ext) in ep.steps.iter().zip(exts) {
            let name = format!("{}.{ext}", s.source_index);
            let dest = abs_dir.join(&name);
            match &s.image {
                ImageData::File(p) => {
                    std::fs::copy(p, &dest).map_err(io_err(p))?;
                }
                ImageData::Bytes(b) => std::fs::write(&dest, b).map_err(io_err(&dest))?,
            }
            steps.push(data_step(s, format!("{IMAGES_DIR}/{dir}/{name}")));
        }
        let [w, h] = ep.steps[0].screen;
        let line = DataLine {
            id: Some(ep.id.clone()),
            app_name: ep.app_name.clone(),
            trajectory_length: steps.len(),
            instruction: ep.instruction.clone(),
            system: None,
            image_width: w,
            image_height: h,
            trajectory: steps,
        };
        Ok(line.to_line())
    }

    /// Close `data.jsonl` (flushed and synced) and hand back the counts, one example location per kind and the
    /// warnings.
    pub fn finish(mut self) -> Result<Finished, ImportError> {
        let path = self.staging.join(DATA_FILE);
        self.data.flush().map_err(io_err(&path))?;
        self.data.get_ref().sync_all().map_err(io_err(&path))?;
        Ok(Finished {
            counts: self.counts,
            examples: self.examples,
            warnings: self.warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::checks::{SCREENSHOT_SIZE, UNREADABLE_SCREENSHOT};
    use super::*;
    use crate::action::Action;

    fn draft(i: usize, image: ImageData, screen: [u32; 2]) -> StepDraft {
        StepDraft {
            source_index: i,
            image,
            screen,
            action: Action::Wait { time: None },
            bboxes: vec![],
            thought: String::new(),
            subtask: String::new(),
            instruction: None,
        }
    }

    /// A grey PNG of `w`×`h` pixels.
    fn png_bytes(w: u32, h: u32) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        image::DynamicImage::ImageLuma8(image::GrayImage::new(w, h))
            .write_to(&mut out, image::ImageFormat::Png)
            .unwrap();
        out.into_inner()
    }

    #[test]
    fn sink_counts_missing_screenshots_and_screen_changes_and_honours_limit() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("a.png");
        std::fs::write(&png, png_bytes(10, 20)).unwrap();
        let staging = dir.path().join("stage");
        std::fs::create_dir(&staging).unwrap();
        let mut sink = Sink::new(&staging, false, Some(1)).unwrap();
        let ep = Episode {
            id: "e/1".into(),
            app_name: String::new(),
            instruction: "goal".into(),
            steps: vec![
                draft(0, ImageData::File(png.clone()), [10, 20]),
                draft(1, ImageData::File(dir.path().join("gone.png")), [10, 20]),
                draft(2, ImageData::Bytes(png_bytes(20, 10)), [20, 10]),
            ],
        };
        sink.episode(ep.clone(), "f.json").unwrap();
        assert!(sink.full());
        sink.episode(
            Episode {
                id: "2".into(),
                ..ep
            },
            "f.json",
        )
        .unwrap();
        let Finished {
            counts: c,
            examples,
            ..
        } = sink.finish().unwrap();
        assert_eq!((c.episodes, c.steps), (1, 1));
        assert_eq!(c.steps_not_imported["missing screenshot"], 1);
        assert_eq!(
            c.steps_not_imported["screen size differs from the episode's first step"],
            1
        );
        assert!(examples["missing screenshot"].contains("episode e/1 step 1"));
        let text = std::fs::read_to_string(staging.join(DATA_FILE)).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["trajectory"][0]["image"], "images/e_1/0.png");
        assert_eq!(
            line["trajectory"][0]["subtask"],
            r#"{"name":"mobile_use","arguments":{"action":"wait"}}"#
        );
        assert!(staging.join("images/e_1/0.png").is_file());
    }

    #[test]
    fn steps_data_validate_would_refuse_are_counted_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = Sink::new(dir.path(), false, None).unwrap();
        let click = |x: f64| Action::Click {
            coordinate: [x, 5.0],
        };
        let mut jpeg = std::io::Cursor::new(Vec::new());
        image::DynamicImage::ImageRgb8(image::RgbImage::new(10, 20))
            .write_to(&mut jpeg, image::ImageFormat::Jpeg)
            .unwrap();
        let steps = vec![
            StepDraft {
                action: click(5.0),
                ..draft(0, ImageData::Bytes(jpeg.into_inner()), [10, 20])
            },
            StepDraft {
                action: click(50.0),
                ..draft(1, ImageData::Bytes(png_bytes(10, 20)), [10, 20])
            },
            draft(
                2,
                ImageData::Bytes(b"<html>not an image".to_vec()),
                [10, 20],
            ),
            draft(3, ImageData::Bytes(png_bytes(30, 20)), [10, 20]),
        ];
        let ep = Episode {
            id: "e".into(),
            app_name: String::new(),
            instruction: "goal".into(),
            steps,
        };
        sink.episode(ep, "rec#0").unwrap();
        let f = sink.finish().unwrap();
        assert_eq!(f.counts.steps, 1);
        let n = |k: &str| f.counts.steps_not_imported.get(k).copied();
        assert_eq!(n(crate::dataset::OFF_SCREEN), Some(1));
        assert_eq!(n(UNREADABLE_SCREENSHOT), Some(1));
        assert_eq!(n(SCREENSHOT_SIZE), Some(1));
        let off = &f.examples[crate::dataset::OFF_SCREEN];
        assert!(
            off.starts_with("rec#0: episode e step 1: point [50, 5]"),
            "{off}"
        );
        // The JPEG bytes are written under the extension of their format.
        assert!(dir.path().join("images/e/0.jpg").is_file());
    }

    #[test]
    fn strict_turns_a_skip_into_an_error_naming_the_place() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = Sink::new(dir.path(), true, None).unwrap();
        let e = sink
            .skip_step("action type 8 is unused in AITW", "x.json: step 3".into())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--strict: x.json: step 3: action type 8 is unused in AITW"
        );
    }
}
