//! AndroidControl as published (`google-research/google-research android_control/README.md`): GZIP TFRecord files,
//! one `tf.train.Example` per episode with `episode_id`, `goal`, `screenshots` (PNG bytes), `screenshot_widths`,
//! `screenshot_heights`, `accessibility_trees`, `actions` (JSON, one fewer than the screenshots) and
//! `step_instructions` (one per action). Step k is action k on screenshot k. Splits come from `splits.json`
//! (`train`, `validation`, `test`) or `test_subsplits.json` (`IDD`, `app_unseen`, `task_unseen`,
//! `category_unseen`) beside the record files.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use prost::Message;
use serde_json::Value;

use super::checks::UNREADABLE_SCREENSHOT;
use super::episode::{clip_box, round2, Episode, ImageData, StepDraft, MISSING_SCREENSHOT};
use super::proto::Example;
use super::sink::Sink;
use super::{a11y, io_err, tfrecord, ImportError, ImportOptions, Level};
use crate::action::{Action, Button};

/// The record files: `--source` itself, or the files of the folder named like TFRecord shards (`*-of-*`).
fn record_files(source: &Path) -> Result<Vec<PathBuf>, ImportError> {
    if source.is_file() {
        return Ok(vec![source.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(source)
        .map_err(io_err(source))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.contains("-of-") && !n.starts_with('.'))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ImportError::Source {
            path: source.to_path_buf(),
            message: "holds no TFRecord file named like android_control-00000-of-00020".into(),
        });
    }
    Ok(files)
}

/// The episode ids of `--split`, from `splits.json` or `test_subsplits.json` beside the records.
fn split_ids(source: &Path, split: &str) -> Result<HashSet<i64>, ImportError> {
    let dir = if source.is_file() {
        source.parent().unwrap_or(Path::new("."))
    } else {
        source
    };
    let mut known = Vec::new();
    for name in ["splits.json", "test_subsplits.json"] {
        let path = dir.join(name);
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| ImportError::Source {
            path: path.clone(),
            message: format!("malformed JSON: {e}"),
        })?;
        let Some(obj) = v.as_object() else { continue };
        known.extend(obj.keys().cloned());
        if let Some(list) = obj.get(split) {
            let ids = list
                .as_array()
                .map(|a| a.iter().map(Value::as_i64).collect());
            return match ids {
                Some(Some(ids)) => Ok(ids),
                _ => Err(ImportError::Source {
                    path,
                    message: format!("`{split}` must be a list of integer episode ids"),
                }),
            };
        }
    }
    Err(ImportError::Option {
        flag: "--split",
        message: if known.is_empty() {
            format!("no splits.json or test_subsplits.json in {}", dir.display())
        } else {
            format!("unknown split {split:?} (known: {})", known.join(", "))
        },
    })
}

/// Import every episode of every record file.
pub(super) fn import(opts: &ImportOptions, sink: &mut Sink) -> Result<(), ImportError> {
    let wanted = match &opts.split {
        Some(s) => Some(split_ids(&opts.source, s)?),
        None => None,
    };
    for file in record_files(&opts.source)? {
        let mut reader = tfrecord::open(&file).map_err(io_err(&file))?;
        let mut index = 0;
        while let Some(record) = reader.next_record() {
            if sink.full() {
                return Ok(());
            }
            let at = format!("{}#{index}", file.display());
            index += 1;
            let bytes = match record {
                Ok(b) => b,
                Err(e) => {
                    sink.skip_episode(e.kind(), format!("{at}: {e}"))?;
                    continue;
                }
            };
            let Ok(example) = Example::decode(&bytes[..]) else {
                sink.skip_episode("record that is not a tf.train.Example", at)?;
                continue;
            };
            let id = example.ints("episode_id").and_then(|v| v.first().copied());
            if let Some(w) = &wanted {
                if !id.is_some_and(|id| w.contains(&id)) {
                    continue;
                }
            }
            let id = id.map_or_else(|| format!("record-{}", index - 1), |i| i.to_string());
            if let Some(ep) = episode(&example, id, opts.level(), &at, sink)? {
                sink.episode(ep, &at)?;
            }
        }
    }
    Ok(())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The per-observation lists of a record.
struct Lists<'a> {
    shots: &'a [Vec<u8>],
    instructions: &'a [Vec<u8>],
    trees: &'a [Vec<u8>],
    widths: &'a [i64],
    heights: &'a [i64],
}

/// One episode's steps; `None` when the record lacks what every step needs (counted).
fn episode(
    ex: &Example,
    id: String,
    level: Level,
    at: &str,
    sink: &mut Sink,
) -> Result<Option<Episode>, ImportError> {
    let (Some(goal), Some(shots)) = (
        ex.bytes("goal").and_then(|g| g.first()),
        ex.bytes("screenshots"),
    ) else {
        sink.skip_episode(
            "record without goal or screenshots",
            format!("{at}: episode {id}"),
        )?;
        return Ok(None);
    };
    let actions = ex.bytes("actions").unwrap_or_default();
    if actions.is_empty() {
        sink.skip_episode("episode with no actions", format!("{at}: episode {id}"))?;
        return Ok(None);
    }
    let lists = Lists {
        shots,
        instructions: ex.bytes("step_instructions").unwrap_or_default(),
        trees: ex.bytes("accessibility_trees").unwrap_or_default(),
        widths: ex.ints("screenshot_widths").unwrap_or_default(),
        heights: ex.ints("screenshot_heights").unwrap_or_default(),
    };
    let mut steps = Vec::new();
    for (k, action) in actions.iter().enumerate() {
        match step(&lists, k, action, level, sink) {
            Ok(d) => steps.push(d),
            Err(kind) => sink.skip_step(&kind, format!("{at}: episode {id} step {k}"))?,
        }
    }
    Ok(Some(Episode {
        id,
        app_name: String::new(),
        instruction: text(goal),
        steps,
    }))
}

/// Step `k` (action `raw` on screenshot `k`), or the kind of problem that keeps it out.
fn step(
    l: &Lists,
    k: usize,
    raw: &[u8],
    level: Level,
    sink: &mut Sink,
) -> Result<StepDraft, String> {
    let shot = l.shots.get(k).ok_or(MISSING_SCREENSHOT)?;
    let screen =
        screen_size(shot, l.widths.get(k), l.heights.get(k)).ok_or(UNREADABLE_SCREENSHOT)?;
    let step_instruction = l.instructions.get(k).map(|b| text(b));
    if level == Level::Low && step_instruction.is_none() {
        return Err("no step instruction for --level low".into());
    }
    let mapped = map_action(raw, screen)?;
    if let Some(note) = mapped.note {
        sink.adjusted(note);
    }
    let bboxes = match (mapped.action.point(), &mapped.action) {
        (Some(p), Action::Click { .. } | Action::LongPress { .. }) => {
            match l.trees.get(k).map(|t| a11y::decode(t)) {
                Some(Some(forest)) => a11y::element_box(&forest, p)
                    .and_then(|b| clip_box(b, screen))
                    .into_iter()
                    .collect(),
                Some(None) => {
                    sink.adjusted("undecodable accessibility tree: no gold box");
                    vec![]
                }
                None => vec![],
            }
        }
        _ => vec![],
    };
    Ok(StepDraft {
        source_index: k,
        image: ImageData::Bytes(shot.clone()),
        screen,
        action: mapped.action,
        bboxes,
        thought: String::new(),
        subtask: step_instruction.clone().unwrap_or_default(),
        instruction: (level == Level::Low).then_some(step_instruction).flatten(),
    })
}

/// The screenshot's size from the record's lists, else from the image header (the sink reads the header of every
/// screenshot and leaves out one that is no image or whose size does not fit this screen).
fn screen_size(shot: &[u8], w: Option<&i64>, h: Option<&i64>) -> Option<[u32; 2]> {
    match (w, h) {
        (Some(&w), Some(&h)) if w > 0 && h > 0 && w <= u32::MAX as i64 && h <= u32::MAX as i64 => {
            Some([w as u32, h as u32])
        }
        _ => image::ImageReader::new(std::io::Cursor::new(shot))
            .with_guessed_format()
            .ok()?
            .into_dimensions()
            .ok()
            .map(|(w, h)| [w, h]),
    }
}

/// A mapped action and, for a lossy mapping, the note counted in the summary.
#[derive(Debug, PartialEq)]
pub(super) struct Mapped {
    pub action: Action,
    pub note: Option<&'static str>,
}

fn plain(action: Action) -> Mapped {
    Mapped { action, note: None }
}

/// Map one AndroidControl action JSON (`{"action_type": …}`) to `mobile_use` in screen pixels.
pub(super) fn map_action(raw: &[u8], screen: [u32; 2]) -> Result<Mapped, String> {
    let v: Value =
        serde_json::from_slice(raw).map_err(|_| "action that is not valid JSON".to_string())?;
    let ty = v
        .get("action_type")
        .and_then(Value::as_str)
        .ok_or("action without action_type")?;
    let num = |k: &str| v.get(k).and_then(Value::as_f64);
    let point = || match (num("x"), num("y")) {
        (Some(x), Some(y)) => Ok([round2(x), round2(y)]),
        _ => Err(format!("{ty} without x and y")),
    };
    let string = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("{ty} without {k}"))
    };
    Ok(match ty {
        "click" => plain(Action::Click {
            coordinate: point()?,
        }),
        "long_press" => plain(Action::LongPress {
            coordinate: point()?,
            time: None,
        }),
        "scroll" => plain(scroll(&string("direction")?, point().ok(), screen)?),
        "open_app" => plain(Action::Open {
            text: string("app_name")?,
        }),
        "input_text" => plain(Action::Type {
            text: string("text")?,
        }),
        // The README's older `type` (click at x, y, type, press enter): only the typing is one mobile_use action.
        "type" => Mapped {
            action: Action::Type {
                text: string("text")?,
            },
            note: Some("type (click, text, enter) imported as type(text)"),
        },
        "navigate_home" => plain(Action::SystemButton {
            button: Button::Home,
        }),
        "navigate_back" => plain(Action::SystemButton {
            button: Button::Back,
        }),
        "wait" => plain(Action::Wait { time: None }),
        other => {
            return Err(format!(
                "action type {other:?} has no mobile_use equivalent"
            ))
        }
    })
}

/// An AndroidControl `scroll`: `direction` is where the content scrolls (`down` reveals what is below), so the
/// finger moves the opposite way, on both axes — as AndroidWorld, from the same team and with the same JSON
/// actions, executes it (`google-research/android_world android_world/env/actuation.py`: `scroll` down swipes from
/// the centre to the top edge; `swipe` is "inverse of scroll"). From the action's point (else the screen's centre)
/// to the screen edge the finger moves towards.
pub(super) fn scroll(
    direction: &str,
    from: Option<[f64; 2]>,
    screen: [u32; 2],
) -> Result<Action, String> {
    let (w, h) = (screen[0] as f64, screen[1] as f64);
    let start = from.unwrap_or([round2(w / 2.0), round2(h / 2.0)]);
    let end = match direction.trim().to_lowercase().as_str() {
        "down" => [start[0], 0.0],
        "up" => [start[0], h],
        "right" => [0.0, start[1]],
        "left" => [w, start[1]],
        other => return Err(format!("scroll with unknown direction {other:?}")),
    };
    Ok(Action::Swipe {
        coordinate: start,
        coordinate2: end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(json: &str) -> Result<Action, String> {
        map_action(json.as_bytes(), [1080, 2400]).map(|m| m.action)
    }

    #[test]
    fn actions_map_to_mobile_use() {
        assert_eq!(
            map(r#"{"action_type":"click","x":540,"y":2273}"#),
            Ok(Action::Click {
                coordinate: [540.0, 2273.0]
            })
        );
        assert_eq!(
            map(r#"{"action_type":"open_app","app_name":"Google Play Books"}"#),
            Ok(Action::Open {
                text: "Google Play Books".into()
            })
        );
        assert_eq!(
            map(r#"{"action_type":"navigate_back"}"#),
            Ok(Action::SystemButton {
                button: Button::Back
            })
        );
        assert_eq!(
            map(r#"{"action_type":"input_text","text":"hi"}"#),
            Ok(Action::Type { text: "hi".into() })
        );
        let typed = map_action(
            br#"{"action_type":"type","x":1,"y":2,"text":"hi"}"#,
            [1080, 2400],
        )
        .unwrap();
        assert!(typed.note.is_some());
        assert_eq!(
            map(r#"{"action_type":"double_tap","x":1,"y":2}"#),
            Err(r#"action type "double_tap" has no mobile_use equivalent"#.into())
        );
        assert_eq!(
            map(r#"{"action_type":"click"}"#),
            Err("click without x and y".into())
        );
        assert_eq!(map("not json"), Err("action that is not valid JSON".into()));
    }

    #[test]
    fn scroll_direction_is_the_content_so_the_finger_moves_the_other_way() {
        let fing = |d: &str| match map(&format!(r#"{{"action_type":"scroll","direction":"{d}"}}"#))
        {
            Ok(Action::Swipe {
                coordinate,
                coordinate2,
            }) => [
                coordinate2[0] - coordinate[0],
                coordinate2[1] - coordinate[1],
            ],
            other => panic!("{other:?}"),
        };
        assert_eq!(fing("down"), [0.0, -1200.0]); // finger up
        assert_eq!(fing("up"), [0.0, 1200.0]); // finger down
        assert_eq!(fing("right"), [-540.0, 0.0]); // finger left
        assert_eq!(fing("left"), [540.0, 0.0]); // finger right
        assert!(map(r#"{"action_type":"scroll","direction":"sideways"}"#).is_err());
    }
}
