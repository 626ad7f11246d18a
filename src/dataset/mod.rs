//! Benchmark data in the Mobile-R1 schema: a folder with `data.jsonl` (one trajectory per line) and screenshots.
//!
//! Loading reads `data.jsonl` only; screenshots are opened by [`Benchmark::validate_images`] and by the
//! commands that need pixels. Every error names the file, the 1-based line and the field.

mod images;
mod info;
mod line;
mod load;
#[cfg(test)]
pub(crate) mod testing;

use std::path::{Path, PathBuf};

pub(crate) use images::{check_size as check_screenshot_size, ImageReport};
pub(crate) use info::{BenchmarkInfo, ImportCounts, SourceInfo, INFO_FILE, INFO_SCHEMA_VERSION};
pub(crate) use line::{pixel, BoxNumbers, DataLine, DataStep, GoldBoxes};
pub(crate) use load::{check_step, OFF_SCREEN};

use crate::action::Action;

/// The file name of the trajectories inside a benchmark folder.
pub(crate) const DATA_FILE: &str = "data.jsonl";

/// The folder the Mobile-R1 release keeps its screenshots in; a step's bare file name is looked up there too.
pub(crate) const IMAGES_DIR: &str = "images";

/// A gold box `[x1, y1, x2, y2]` in screen pixels.
pub(crate) type BBox = [f64; 4];

/// Why a benchmark could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not a JSON object.
    #[error("{}:{line}: malformed JSON: {message}", file.display())]
    Json {
        /// The file.
        file: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parser's message.
        message: String,
    },
    /// A field is absent or invalid.
    #[error("{}:{line}: field `{field}`: {message}", file.display())]
    Field {
        /// The file.
        file: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The field path, e.g. `trajectory[2].action`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The file holds no trajectory.
    #[error("{}: no trajectories", file.display())]
    Empty {
        /// The file.
        file: PathBuf,
    },
    /// A file was given where the benchmark folder was expected.
    #[error(
        "{} is a file; a benchmark is the folder holding data.jsonl and the screenshots (here: {})",
        path.display(), folder.display()
    )]
    NotAFolder {
        /// The file given.
        path: PathBuf,
        /// The folder it lies in.
        folder: PathBuf,
    },
    /// `benchmark.json` is malformed or of a newer layout.
    #[error("{}: {message}", file.display())]
    Info {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl DatasetError {
    /// The 1-based line number the error is about, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            DatasetError::Json { line, .. } | DatasetError::Field { line, .. } => Some(*line),
            _ => None,
        }
    }

    /// The field path the error is about, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            DatasetError::Field { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// One step of a trajectory.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Screenshot path relative to the benchmark folder.
    pub image: String,
    /// Annotated reasoning (empty when absent).
    pub thought: String,
    /// The one-sentence sub-goal (the `<action>` text; empty when absent).
    pub subtask: String,
    /// The gold action.
    pub action: Action,
    /// The annotated full response (empty when absent).
    pub response: String,
    /// Gold element boxes in screen pixels (empty when none).
    pub bboxes: Vec<BBox>,
    /// This step's own instruction (the low-level instruction of AndroidControl-style data), shown after the
    /// trajectory's instruction; `None` for most benchmarks.
    pub instruction: Option<String>,
}

/// One trajectory (one line of `data.jsonl`).
#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    /// The `id` field (number or string), else the 0-based line number.
    pub id: String,
    /// 1-based line number in `data.jsonl`.
    pub line: usize,
    /// App name.
    pub app_name: String,
    /// The user instruction.
    pub instruction: String,
    /// The trajectory's system prompt, if stored.
    pub system: Option<String>,
    /// Device screen width in pixels.
    pub image_width: u32,
    /// Device screen height in pixels.
    pub image_height: u32,
    /// The steps, in order (0-based).
    pub steps: Vec<Step>,
}

/// A loaded benchmark.
#[derive(Debug, Clone)]
pub struct Benchmark {
    /// The benchmark folder.
    pub root: PathBuf,
    /// The trajectories in file order.
    pub trajectories: Vec<Trajectory>,
    /// `benchmark.json`, when the folder has one.
    pub info: Option<BenchmarkInfo>,
}

/// A step's screenshot given as a bare name that the folder keeps under `images/` (as the Mobile-R1 release
/// does) is read from there: its path becomes `images/<name>` (only when the name itself is absent).
fn find_bare_images(root: &Path, trajectories: &mut [Trajectory]) {
    for step in trajectories.iter_mut().flat_map(|t| t.steps.iter_mut()) {
        if !root.join(&step.image).exists() {
            let under = Path::new(IMAGES_DIR).join(&step.image);
            if root.join(&under).is_file() {
                step.image = format!("{IMAGES_DIR}/{}", step.image);
            }
        }
    }
}

/// A benchmark is a folder: a file given in its place (its `data.jsonl`, say) is named, with its folder.
fn check_folder(dir: &Path) -> Result<(), DatasetError> {
    if !dir.is_file() {
        return Ok(());
    }
    let folder = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Err(DatasetError::NotAFolder {
        path: dir.to_path_buf(),
        folder,
    })
}

impl Benchmark {
    /// Load `DIR/data.jsonl` and, when present, `DIR/benchmark.json` (no image is opened; a bare screenshot
    /// name is looked up under `images/`).
    pub fn load(dir: impl AsRef<Path>) -> Result<Benchmark, DatasetError> {
        let root = dir.as_ref().to_path_buf();
        check_folder(&root)?;
        let file = root.join(DATA_FILE);
        let text = std::fs::read_to_string(&file).map_err(|source| DatasetError::Io {
            path: file.clone(),
            source,
        })?;
        let mut trajectories = load::parse_jsonl(&text, &file)?;
        find_bare_images(&root, &mut trajectories);
        let info = BenchmarkInfo::read(&root)?;
        Ok(Benchmark {
            root,
            trajectories,
            info,
        })
    }

    /// Parse `data.jsonl` text (`benchmark.json` is not read); `root` is where images are resolved, `file` names
    /// the source in errors.
    pub fn from_jsonl(
        text: &str,
        root: impl Into<PathBuf>,
        file: &Path,
    ) -> Result<Benchmark, DatasetError> {
        Ok(Benchmark {
            root: root.into(),
            trajectories: load::parse_jsonl(text, file)?,
            info: None,
        })
    }

    /// The screenshot path of step `step` of trajectory number `traj` (indices into the vectors).
    ///
    /// # Panics
    /// When an index is out of range (a programming error, not a data error).
    pub fn image_path(&self, traj: usize, step: usize) -> PathBuf {
        self.resolve(&self.trajectories[traj].steps[step].image)
    }

    /// Resolve a relative image path against the benchmark folder.
    pub fn resolve(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    /// Total number of steps.
    pub fn num_steps(&self) -> usize {
        self.trajectories.iter().map(|t| t.steps.len()).sum()
    }

    /// The trajectory with this id.
    pub fn trajectory(&self, id: &str) -> Option<&Trajectory> {
        self.trajectories.iter().find(|t| t.id == id)
    }

    /// Check every screenshot: it exists, decodes, and has the screen's aspect ratio.
    pub fn validate_images(&self) -> ImageReport {
        images::validate(self)
    }
}
