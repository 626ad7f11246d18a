//! GUI-Odyssey (`OpenGVLab/GUI-Odyssey`, data on Hugging Face `OpenGVLab/GUI-Odyssey`): `annotations/<episode>.json`,
//! `screenshots/<file>` (flattened by the repository's `data/preprocessing.py`) and `splits/<name>_split.json`
//! (`{"train": [...], "test": [...]}` of annotation file names). Fields as `introduction.md` describes them:
//! `device_info.{w, h}` (the screen), `task_info.{instruction, app}`, `steps[].{step, screenshot, action, info,
//! low_level_instruction, sam2_bbox}`. Every coordinate is on a 0–1000 grid per axis (`info` points `(x, y)`,
//! `sam2_bbox` `(x1, y1, x2, y2)`); pixels are value / 1000 × the screen side.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::episode::{clip_box, round2, Episode, ImageData, StepDraft};
use super::sink::Sink;
use super::{io_err, ImportError, ImportOptions, Level};
use crate::action::{Action, Button, Status};

/// The annotation files: every `annotations/*.json`, or those `--split NAME[:train|test]` lists (test by default).
fn annotation_files(source: &Path, split: Option<&str>) -> Result<Vec<PathBuf>, ImportError> {
    let dir = source.join("annotations");
    if !dir.is_dir() {
        return Err(ImportError::Source {
            path: source.to_path_buf(),
            message: "has no annotations/ folder (the GUI-Odyssey layout: annotations/, screenshots/, splits/)"
                .into(),
        });
    }
    let Some(split) = split else {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(io_err(&dir))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        return Ok(files);
    };
    let (name, part) = split.split_once(':').unwrap_or((split, "test"));
    let stem = name.trim_end_matches(".json");
    let stem = if stem.ends_with("_split") {
        stem.to_string()
    } else {
        format!("{stem}_split")
    };
    let path = source.join("splits").join(format!("{stem}.json"));
    let bad = |message: String| ImportError::Option {
        flag: "--split",
        message,
    };
    if !path.is_file() {
        return Err(bad(format!("{} does not exist", path.display())));
    }
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| ImportError::Source {
        path: path.clone(),
        message: format!("malformed JSON: {e}"),
    })?;
    let list = v.get(part).and_then(Value::as_array).ok_or_else(|| {
        bad(format!(
            "{} has no list `{part}` (use NAME:train or NAME:test)",
            path.display()
        ))
    })?;
    Ok(list
        .iter()
        .filter_map(Value::as_str)
        .map(|f| {
            let p = dir.join(f);
            if p.is_file() || f.ends_with(".json") {
                p
            } else {
                dir.join(format!("{f}.json"))
            }
        })
        .collect())
}

/// Import the episodes of `--split` (or all).
pub(super) fn import(opts: &ImportOptions, sink: &mut Sink) -> Result<(), ImportError> {
    let shots = opts.source.join("screenshots");
    for file in annotation_files(&opts.source, opts.split.as_deref())? {
        if sink.full() {
            break;
        }
        let at = file.display().to_string();
        if !file.is_file() {
            sink.skip_episode("annotation file listed in the split is missing", at)?;
            continue;
        }
        let text = std::fs::read_to_string(&file).map_err(io_err(&file))?;
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            sink.skip_episode("annotation file that is not valid JSON", at)?;
            continue;
        };
        if let Some(ep) = episode(&v, &file, &shots, opts.level(), sink)? {
            sink.episode(ep, &at)?;
        }
    }
    Ok(())
}

fn episode(
    v: &Value,
    file: &Path,
    shots: &Path,
    level: Level,
    sink: &mut Sink,
) -> Result<Option<Episode>, ImportError> {
    let at = file.display().to_string();
    let id = match v.get("episode_id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => file
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned()),
    };
    let dim = |k: &str| {
        v.pointer(&format!("/device_info/{k}"))
            .and_then(Value::as_u64)
            .filter(|&n| n > 0 && n <= u32::MAX as u64)
    };
    let (Some(w), Some(h), Some(steps)) =
        (dim("w"), dim("h"), v.get("steps").and_then(Value::as_array))
    else {
        sink.skip_episode(
            "episode without device_info.w/h or steps",
            format!("{at}: episode {id}"),
        )?;
        return Ok(None);
    };
    let screen = [w as u32, h as u32];
    let task = |k: &str| v.pointer(&format!("/task_info/{k}"));
    let instruction = task("instruction")
        .or_else(|| task("task"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let app_name = match task("app") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let mut out = Vec::new();
    for (k, s) in steps.iter().enumerate() {
        let index = s
            .get("step")
            .and_then(Value::as_u64)
            .map_or(k, |i| i as usize);
        match step(s, index, shots, screen, level) {
            Ok(d) => out.push(d),
            Err(kind) => sink.skip_step(&kind, format!("{at}: episode {id} step {index}"))?,
        }
    }
    Ok(Some(Episode {
        id,
        app_name,
        instruction: instruction.to_string(),
        steps: out,
    }))
}

fn step(
    s: &Value,
    index: usize,
    shots: &Path,
    screen: [u32; 2],
    level: Level,
) -> Result<StepDraft, String> {
    let shot = s
        .get("screenshot")
        .and_then(Value::as_str)
        .ok_or("step without screenshot")?;
    let action = map_action(s, screen)?;
    let low = s
        .get("low_level_instruction")
        .and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty());
    if level == Level::Low && low.is_none() {
        return Err("no low_level_instruction for --level low".into());
    }
    let bboxes = match &action {
        Action::Click { .. } | Action::LongPress { .. } => {
            sam2_box(s.get("sam2_bbox"), screen).into_iter().collect()
        }
        _ => vec![],
    };
    Ok(StepDraft {
        source_index: index,
        image: ImageData::File(shots.join(shot)),
        screen,
        action,
        bboxes,
        thought: String::new(),
        subtask: low.unwrap_or_default().to_string(),
        instruction: (level == Level::Low).then(|| low.unwrap_or_default().to_string()),
    })
}

/// A 0–1000 `(x, y)` point in screen pixels.
fn pixels(p: [f64; 2], screen: [u32; 2]) -> [f64; 2] {
    [
        round2(p[0] / 1000.0 * screen[0] as f64),
        round2(p[1] / 1000.0 * screen[1] as f64),
    ]
}

/// `sam2_bbox` (0–1000 `x1, y1, x2, y2`; `[]` when absent) in screen pixels.
fn sam2_box(v: Option<&Value>, screen: [u32; 2]) -> Option<[f64; 4]> {
    let a = v?.as_array().filter(|a| a.len() == 4)?;
    let n: Vec<f64> = a.iter().map(Value::as_f64).collect::<Option<_>>()?;
    let [x1, y1] = pixels([n[0], n[1]], screen);
    let [x2, y2] = pixels([n[2], n[3]], screen);
    clip_box([x1, y1, x2, y2], screen)
}

/// The points of `info`: `[[x, y], …]`, a single `[x, y]`, or either as a JSON string.
fn points(info: &Value) -> Option<Vec<[f64; 2]>> {
    let parsed;
    let v = match info {
        Value::String(s) if s.trim_start().starts_with('[') => {
            parsed = serde_json::from_str::<Value>(s).ok()?;
            &parsed
        }
        other => other,
    };
    let a = v.as_array()?;
    let pt = |p: &Value| -> Option<[f64; 2]> {
        let q = p.as_array().filter(|q| q.len() == 2)?;
        Some([q[0].as_f64()?, q[1].as_f64()?])
    };
    if a.len() == 2 && a.iter().all(Value::is_number) {
        return pt(v).map(|p| vec![p]);
    }
    a.iter().map(pt).collect()
}

/// Map one GUI-Odyssey step to `mobile_use` in screen pixels. The action names are those of `introduction.md`
/// (CLICK, SCROLL, LONG_PRESS, TYPE, COMPLETE, IMPOSSIBLE, HOME, BACK) and of `data/format_converter.py`
/// `decode_action` (TEXT, INCOMPLETE; CLICK with `KEY_HOME`, `KEY_BACK`, `KEY_APPSELECT`); SCROLL's points are the
/// finger's path (`decode_action` reads UP when y decreases).
pub(super) fn map_action(s: &Value, screen: [u32; 2]) -> Result<Action, String> {
    let name = s
        .get("action")
        .and_then(Value::as_str)
        .ok_or("step without action")?
        .trim()
        .to_uppercase();
    let info = s.get("info").unwrap_or(&Value::Null);
    let key = info.as_str().map(|k| k.trim().to_uppercase());
    let button = |b| Action::SystemButton { button: b };
    Ok(match (name.as_str(), key.as_deref()) {
        ("CLICK" | "LONG_PRESS", Some("KEY_HOME")) | ("HOME", _) => button(Button::Home),
        ("CLICK" | "LONG_PRESS", Some("KEY_BACK")) | ("BACK", _) => button(Button::Back),
        ("CLICK" | "LONG_PRESS", Some("KEY_APPSELECT")) => {
            return Err("KEY_APPSELECT (recent apps) has no mobile_use button".into())
        }
        ("CLICK" | "LONG_PRESS", _) => {
            let p = points(info)
                .and_then(|p| p.first().copied())
                .ok_or_else(|| format!("{name} without a point"))?;
            let coordinate = pixels(p, screen);
            if name == "CLICK" {
                Action::Click { coordinate }
            } else {
                Action::LongPress {
                    coordinate,
                    time: None,
                }
            }
        }
        ("SCROLL", _) => match points(info).as_deref() {
            Some([a, b, ..]) => Action::Swipe {
                coordinate: pixels(*a, screen),
                coordinate2: pixels(*b, screen),
            },
            _ => return Err("SCROLL without start and end points".into()),
        },
        ("TEXT" | "TYPE", _) => Action::Type {
            text: info.as_str().unwrap_or_default().to_string(),
        },
        ("COMPLETE", _) => Action::Terminate {
            status: Status::Success,
        },
        ("INCOMPLETE" | "IMPOSSIBLE", _) => Action::Terminate {
            status: Status::Failure,
        },
        (other, _) => return Err(format!("action {other:?} has no mobile_use equivalent")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(action: &str, info: Value) -> Result<Action, String> {
        map_action(&json!({"action": action, "info": info}), [1080, 2400])
    }

    #[test]
    fn coordinates_are_on_a_0_to_1000_grid_x_first() {
        assert_eq!(
            map("CLICK", json!([[250, 500]])),
            Ok(Action::Click {
                coordinate: [270.0, 1200.0]
            })
        );
        assert_eq!(
            map("LONG_PRESS", json!("[[100, 900]]")),
            Ok(Action::LongPress {
                coordinate: [108.0, 2160.0],
                time: None
            })
        );
        assert_eq!(
            map("SCROLL", json!([[500, 800], [500, 200]])),
            Ok(Action::Swipe {
                coordinate: [540.0, 1920.0],
                coordinate2: [540.0, 480.0]
            })
        );
        assert_eq!(
            sam2_box(Some(&json!([100, 100, 200, 150])), [1080, 2400]),
            Some([108.0, 240.0, 216.0, 360.0])
        );
        assert_eq!(sam2_box(Some(&json!([])), [1080, 2400]), None);
    }

    #[test]
    fn keys_texts_and_statuses() {
        assert_eq!(
            map("CLICK", json!("KEY_HOME")),
            Ok(Action::SystemButton {
                button: Button::Home
            })
        );
        assert_eq!(
            map("BACK", json!("")),
            Ok(Action::SystemButton {
                button: Button::Back
            })
        );
        assert!(map("CLICK", json!("KEY_APPSELECT"))
            .unwrap_err()
            .contains("recent apps"));
        assert_eq!(
            map("TEXT", json!("hello")),
            Ok(Action::Type {
                text: "hello".into()
            })
        );
        assert_eq!(
            map("INCOMPLETE", json!("")),
            Ok(Action::Terminate {
                status: Status::Failure
            })
        );
        assert!(map("DRAG", json!("")).is_err());
    }
}
