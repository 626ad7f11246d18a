//! The embedded sample benchmark, generated deterministically in code: five Chinese-app trajectories
//! (30 steps, every action type) on a 720×1600 screen, with drawn screenshots and gold boxes.
//!
//! [`write()`] writes it into a folder; [`materialize_default`] writes it once into a cache folder under the
//! system temporary directory (atomically, so concurrent callers never see a partial copy).

mod draw;
mod script;

use std::path::{Path, PathBuf};

use image::Rgb;
use serde_json::{json, Number};
use sha2::{Digest, Sha256};

use crate::action::{Action, Point};
use crate::dataset::{BoxNumbers, DataLine, DataStep, GoldBoxes};
use draw::{Page, Rect};

/// Bumped whenever the generated content changes (part of the cache folder's name).
pub(crate) const SAMPLE_VERSION: u32 = 1;

/// The marker file written last into a complete cache folder.
const COMPLETE_MARKER: &str = ".complete";

/// Errors of writing the sample.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// A file or folder could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The output folder may not be written (the rule of `data import`: absent, empty, or an earlier sample).
    #[error("{0}")]
    Out(String),
    /// A screenshot could not be encoded.
    #[error("{}: {source}", path.display())]
    Image {
        /// The path.
        path: PathBuf,
        /// The encoder error.
        source: image::ImageError,
    },
}

/// What a step does, before geometry is resolved.
enum Act {
    /// Click the centre of the target element.
    Click,
    /// Long-press the centre of the target element for the seconds given.
    LongPress(f64),
    /// Swipe between two points.
    Swipe(Point, Point),
    /// Other actions, complete.
    Plain(Action),
}

/// One scripted step.
struct StepSpec {
    page: Page,
    target: Option<&'static str>,
    act: Act,
    thought: &'static str,
    subtask: &'static str,
}

/// One scripted trajectory.
struct TrajSpec {
    app: &'static str,
    accent: Rgb<u8>,
    instruction: &'static str,
    steps: Vec<StepSpec>,
}

fn centre(r: Rect) -> Point {
    [(r[0] + r[2] / 2) as f64, (r[1] + r[3] / 2) as f64]
}

fn bbox(r: Rect) -> BoxNumbers {
    [r[0], r[1], r[0] + r[2], r[1] + r[3]].map(Number::from)
}

/// The Qwen-Agent function-calling system prompt with the `mobile_use` tool for this screen.
fn system_prompt() -> String {
    let tool = json!({"type": "function", "function": {
        "name_for_human": "mobile_use", "name": "mobile_use",
        "description": format!("Use a touchscreen to interact with a mobile device, and take screenshots.\n* This is an interface to a mobile device with touchscreen. You can perform actions like clicking, typing, swiping, etc.\n* Some applications may take time to start or process actions, so you may need to wait and take successive screenshots to see the results of your actions.\n* The screen's resolution is {}x{}.\n* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element. Don't click boxes on their edges unless asked.", draw::W, draw::H),
        "parameters": {"properties": {
            "action": {"type": "string", "enum": ["key", "click", "long_press", "swipe", "type", "system_button", "open", "wait", "terminate"]},
            "coordinate": {"type": "array"}, "coordinate2": {"type": "array"}, "text": {"type": "string"},
            "time": {"type": "number"}, "button": {"type": "string", "enum": ["Back", "Home", "Menu", "Enter"]},
            "status": {"type": "string", "enum": ["success", "failure"]}},
            "required": ["action"], "type": "object"},
        "args_format": "Format the arguments as a JSON object."}});
    format!(
        "You are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tool}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>"
    )
}

/// Resolve a scripted step into its gold action and boxes.
fn resolve(spec: &StepSpec, accent: Rgb<u8>) -> (Action, Vec<Rect>) {
    let layout = draw::layout(spec.page, accent);
    let target = spec.target.and_then(|t| layout.get(t));
    let mut boxes: Vec<Rect> = target.into_iter().collect();
    // A launcher icon's label also belongs to the icon: a second gold box.
    if let (Page::Launcher, Some(r)) = (spec.page, target) {
        boxes.push([r[0], r[1] + 130, r[2], 30]);
    }
    let point = target.map_or([draw::W as f64 / 2.0, draw::H as f64 / 2.0], centre);
    let action = match &spec.act {
        Act::Click => Action::Click { coordinate: point },
        Act::LongPress(t) => Action::LongPress {
            coordinate: point,
            time: Some(*t),
        },
        Act::Swipe(a, b) => Action::Swipe {
            coordinate: *a,
            coordinate2: *b,
        },
        Act::Plain(a) => a.clone(),
    };
    (action, boxes)
}

/// The `data.jsonl` line of one trajectory (screenshots named `images/t{ti}_s{si}.png`).
fn trajectory_line(ti: usize, t: &TrajSpec, system: &str) -> DataLine {
    let steps: Vec<DataStep> = t
        .steps
        .iter()
        .enumerate()
        .map(|(si, s)| {
            let (action, boxes) = resolve(s, t.accent);
            let call = action.to_tool_call().to_string();
            let response = format!(
                "<think>{}</think>\n<action>{}</action>\n<tool_call>\n{call}\n</tool_call>",
                s.thought, s.subtask
            );
            let bbox = match boxes.as_slice() {
                [] => None,
                [one] => Some(GoldBoxes::One(bbox(*one))),
                many => Some(GoldBoxes::Many(many.iter().map(|r| bbox(*r)).collect())),
            };
            DataStep {
                image: format!("{}/t{ti}_s{si}.png", crate::dataset::IMAGES_DIR),
                thought: s.thought.into(),
                subtask: s.subtask.into(),
                action: call.into(),
                response,
                bbox,
                candidate_bbox: None,
                instruction: None,
            }
        })
        .collect();
    DataLine {
        id: None,
        app_name: t.app.into(),
        trajectory_length: steps.len(),
        instruction: t.instruction.into(),
        system: Some(system.into()),
        image_width: draw::W,
        image_height: draw::H,
        trajectory: steps,
    }
}

/// The sample's `data.jsonl` text (deterministic).
pub(crate) fn data_jsonl() -> String {
    let system = system_prompt();
    let mut out = String::new();
    for (ti, t) in script::trajectories().iter().enumerate() {
        out.push_str(&trajectory_line(ti, t, &system).to_line());
        out.push('\n');
    }
    out
}

/// Write the sample benchmark (`data.jsonl` and `images/`) into `dir` (created when absent).
pub fn write(dir: &Path) -> Result<(), SampleError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SampleError::Io { path, source }
    };
    let images = dir.join(crate::dataset::IMAGES_DIR);
    std::fs::create_dir_all(&images).map_err(io(&images))?;
    let scripts = script::trajectories();
    let jobs: Vec<(PathBuf, Page, Rgb<u8>)> = scripts
        .iter()
        .enumerate()
        .flat_map(|(ti, t)| {
            let images = &images;
            t.steps
                .iter()
                .enumerate()
                .map(move |(si, s)| (images.join(format!("t{ti}_s{si}.png")), s.page, t.accent))
        })
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    let chunk = jobs.len().div_ceil(threads).max(1);
    std::thread::scope(|sc| {
        let handles: Vec<_> = jobs
            .chunks(chunk)
            .map(|c| sc.spawn(move || c.iter().try_for_each(save_png)))
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| Ok(())))
    })?;
    let data = dir.join(crate::dataset::DATA_FILE);
    std::fs::write(&data, data_jsonl()).map_err(io(&data))
}

/// The source named in the `benchmark.json` of a folder `sample` wrote: what tells an earlier sample apart from any
/// other benchmark folder.
fn sample_source() -> crate::dataset::SourceInfo {
    crate::dataset::SourceInfo {
        format: "sample".into(),
        path: "embedded".into(),
        split: None,
        level: None,
        limit: None,
    }
}

/// Write the sample as the `sample` command does: `out` must be absent, empty, or an earlier sample (replaced
/// whole), by the same rule as `data import`; a folder holding anything else is refused untouched. The files are
/// written beside `out` and moved into place, `benchmark.json` last.
pub fn write_out(out: &Path) -> Result<(), SampleError> {
    let refused = |e: crate::import::ImportError| SampleError::Out(e.to_string());
    let target = crate::import::OutputFolder::prepare(out, &sample_source()).map_err(refused)?;
    write(target.staging())?;
    let info = crate::dataset::BenchmarkInfo {
        schema_version: crate::dataset::INFO_SCHEMA_VERSION,
        source: Some(sample_source()),
        rules: None,
        counts: None,
        program_version: Some(env!("CARGO_PKG_VERSION").into()),
    };
    target.commit(&info).map_err(refused)?;
    Ok(())
}

fn save_png((path, page, accent): &(PathBuf, Page, Rgb<u8>)) -> Result<(), SampleError> {
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    let img = draw::draw(*page, *accent);
    let file = std::fs::File::create(path).map_err(|source| SampleError::Io {
        path: path.clone(),
        source,
    })?;
    let enc = PngEncoder::new_with_quality(
        std::io::BufWriter::new(file),
        CompressionType::Fast,
        FilterType::Sub,
    );
    img.write_with_encoder(enc)
        .map_err(|source| SampleError::Image {
            path: path.clone(),
            source,
        })
}

/// The cache folder for this build's sample: `TMP/mobile-r1-eval-sample-<hash of version and data>`.
pub(crate) fn default_dir() -> PathBuf {
    let mut h = Sha256::new();
    h.update(SAMPLE_VERSION.to_le_bytes());
    h.update(data_jsonl().as_bytes());
    let hex = crate::fingerprint::hex(&h.finalize()[..6]);
    std::env::temp_dir().join(format!("mobile-r1-eval-sample-{hex}"))
}

/// Write the sample once into [`default_dir`] and return that folder; reused when already complete.
/// The copy is written into a private temporary folder and renamed into place.
pub fn materialize_default() -> Result<PathBuf, SampleError> {
    let dir = default_dir();
    if dir.join(COMPLETE_MARKER).is_file() {
        return Ok(dir);
    }
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let nth = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = dir.with_extension(format!("tmp-{}-{nth}-{nanos}", std::process::id()));
    write(&tmp)?;
    let marker = tmp.join(COMPLETE_MARKER);
    std::fs::write(&marker, SAMPLE_VERSION.to_string()).map_err(|source| SampleError::Io {
        path: marker,
        source,
    })?;
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another process won the race (or a stale partial folder is in the way).
        if !dir.join(COMPLETE_MARKER).is_file() {
            let _ = std::fs::remove_dir_all(&dir);
            if std::fs::rename(&tmp, &dir).is_ok() {
                return Ok(dir);
            }
        }
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if dir.join(COMPLETE_MARKER).is_file() {
        Ok(dir)
    } else {
        Err(SampleError::Io {
            path: dir,
            source: std::io::Error::other("could not place the sample benchmark"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::ActionType;
    use crate::dataset::Benchmark;
    use crate::score::in_box;

    #[test]
    fn deterministic_complete_and_consistent() {
        assert_eq!(data_jsonl(), data_jsonl());
        let b = Benchmark::from_jsonl(&data_jsonl(), "/unused", Path::new("sample/data.jsonl"))
            .unwrap();
        let n = b.num_steps();
        assert!((15..=30).contains(&n), "{n} steps");
        let types: std::collections::HashSet<ActionType> = b
            .trajectories
            .iter()
            .flat_map(|t| t.steps.iter().map(|s| s.action.action_type()))
            .collect();
        assert_eq!(
            types.len(),
            ActionType::ALL.len(),
            "every action type appears"
        );
        for t in &b.trajectories {
            assert!(t.system.as_deref().is_some_and(|s| s.contains("720x1600")));
            for s in &t.steps {
                let ty = s.action.action_type();
                if matches!(ty, ActionType::Click | ActionType::LongPress) {
                    let p = s.action.point().unwrap();
                    assert!(
                        !s.bboxes.is_empty(),
                        "{}: click without a gold box",
                        s.image
                    );
                    assert!(
                        s.bboxes.iter().any(|bx| in_box(p, bx, 1.0, false)),
                        "{}: gold point outside its box",
                        s.image
                    );
                }
                let parsed = crate::parse::parse_response(&s.response);
                assert!(parsed.full_format);
                assert_eq!(parsed.action.as_ref(), Ok(&s.action));
            }
        }
    }

    #[test]
    fn pngs_are_deterministic() {
        let a = draw::draw(Page::Dialog, Rgb([1, 2, 3]));
        let b = draw::draw(Page::Dialog, Rgb([1, 2, 3]));
        assert_eq!(a.as_raw(), b.as_raw());
        assert_eq!(a.dimensions(), (draw::W, draw::H));
    }

    #[test]
    fn materialize_default_concurrently() {
        let dirs: Vec<PathBuf> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(materialize_default)).collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        });
        assert!(dirs.windows(2).all(|w| w[0] == w[1]));
        let b = Benchmark::load(&dirs[0]).unwrap();
        assert!(b.validate_images().ok());
    }
}
