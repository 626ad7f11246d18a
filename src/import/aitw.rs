//! The AITW action space in the per-episode step files of AITZ and CAGUI: each episode is one JSON list of step
//! objects with `result_action_type` (ids of `google-research/google-research android_in_the_wild/action_type.py`),
//! `result_touch_yx` / `result_lift_yx` (normalised `[y, x]`, JSON strings, `[-1, -1]` when unused),
//! `result_action_text`, `ui_positions` (`[y, x, h, w]` boxes) and `image_path`. The two formats differ in where the
//! screen size comes from, in the unit of `ui_positions`, and in two extra action ids ([`Flavor`]).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::checks::image_size;
use super::episode::{
    clip_box, round2, skip_location, Episode, ImageData, StepDraft, MISSING_SCREENSHOT,
};
use super::sink::Sink;
use super::{io_err, ImportError};
use crate::action::{Action, Button, Status};
use crate::dataset::BBox;

/// AITW's tap/swipe threshold: a dual point whose touch and lift are at most this far apart (Euclidean distance of
/// the normalised `(y, x)` points) is a tap (`_SWIPE_DISTANCE_THRESHOLD = 0.04` in
/// `google-research/google-research android_in_the_wild/action_matching.py`, `is_tap_action`).
pub(super) const SWIPE_DISTANCE_THRESHOLD: f64 = 0.04;

/// Which of the two AITW-style formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavor {
    /// AITZ: screen size from the PNG, `ui_positions` in pixels of the stored image, AITW's ids only.
    Aitz,
    /// CAGUI: `image_width` / `image_height` fields, `ui_positions` normalised, and AgentCPM-GUI's extra ids
    /// 0 (long press, `duration` ms) and 1 (wait, `duration` ms).
    Cagui,
}

/// Every `*.json` file under `root`, sorted (the episode files; other JSON files are skipped when read).
pub(super) fn json_files(root: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
            let p = e.map_err(io_err(&dir))?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("json"))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Import every episode file under `--source` (the folder the steps' `image_path` values are relative to).
pub(super) fn import(source: &Path, flavor: Flavor, sink: &mut Sink) -> Result<(), ImportError> {
    if !source.is_dir() {
        return Err(ImportError::Source {
            path: source.to_path_buf(),
            message: "must be the folder the episodes' image_path values are relative to".into(),
        });
    }
    for file in json_files(source)? {
        if sink.full() {
            break;
        }
        let at = file.display().to_string();
        let text = std::fs::read_to_string(&file).map_err(io_err(&file))?;
        let Ok(v) = serde_json::from_str::<Value>(crate::safe_io::strip_bom(&text)) else {
            sink.skip_episode("episode file that is not valid JSON", at)?;
            continue;
        };
        let Some(steps) = episode_steps(&v) else {
            tracing::debug!("{at}: not an episode file (no list of steps); skipped");
            continue;
        };
        let ep = episode(steps, &file, source, flavor, sink)?;
        sink.episode(ep, &at)?;
    }
    Ok(())
}

/// The steps of an episode file: a non-empty list of objects with `result_action_type`.
fn episode_steps(v: &Value) -> Option<Vec<&Value>> {
    let a = v.as_array().filter(|a| !a.is_empty())?;
    a.iter()
        .all(|s| s.get("result_action_type").is_some())
        .then(|| a.iter().collect())
}

fn str_or_num(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn episode(
    mut steps: Vec<&Value>,
    file: &Path,
    source: &Path,
    flavor: Flavor,
    sink: &mut Sink,
) -> Result<Episode, ImportError> {
    steps.sort_by_key(|s| s.get("step_id").and_then(Value::as_u64).unwrap_or(u64::MAX));
    let first = steps[0];
    let id = str_or_num(first.get("episode_id")).unwrap_or_else(|| {
        file.file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
    });
    let instruction = first
        .get("instruction")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut out = Vec::new();
    for (k, s) in steps.iter().enumerate() {
        let index = s
            .get("step_id")
            .and_then(Value::as_u64)
            .map_or(k, |i| i as usize);
        match step(s, index, (source, file), flavor) {
            Ok(d) => out.push(d),
            Err(kind) => {
                let at = format!("{}: episode {id} step {index}", file.display());
                let image = s.get("image_path").and_then(Value::as_str);
                sink.skip_step(&kind, skip_location(at, &kind, image))?
            }
        }
    }
    Ok(Episode {
        id,
        app_name: String::new(),
        instruction,
        steps: out,
    })
}

/// A normalised `[y, x]` point, stored as a JSON string or a list; `None` when absent or `[-1, -1]` (unused).
pub(super) fn yx(v: Option<&Value>) -> Option<[f64; 2]> {
    let parsed;
    let v = match v? {
        Value::String(s) => {
            parsed = serde_json::from_str::<Value>(s).ok()?;
            &parsed
        }
        other => other,
    };
    let a = v.as_array().filter(|a| a.len() == 2)?;
    let p = [a[0].as_f64()?, a[1].as_f64()?];
    (p[0] >= 0.0 && p[1] >= 0.0).then_some(p)
}

/// The kind of a tap step whose `ui_positions` cannot be read: its gold boxes would be lost, and the step scored
/// by distance instead.
pub(super) const BAD_POSITIONS: &str = "tap whose ui_positions is not a list of [y, x, h, w] boxes";

/// The kind of a CAGUI step whose screen size is absent or not positive integers.
pub(super) const BAD_SCREEN: &str =
    "step whose image_width / image_height are not positive integers";

/// `ui_positions` as `[y, x, h, w]` boxes (a JSON string or a list; absent or null: none), or [`BAD_POSITIONS`]
/// when it is anything else (truncated JSON, a box of other than 4 numbers, not a list).
fn positions(v: Option<&Value>) -> Result<Vec<[f64; 4]>, &'static str> {
    let parsed;
    let v = match v {
        Some(Value::String(s)) => {
            parsed = serde_json::from_str::<Value>(s).map_err(|_| BAD_POSITIONS)?;
            &parsed
        }
        None | Some(Value::Null) => return Ok(vec![]),
        Some(other) => other,
    };
    let one = |b: &Value| -> Option<[f64; 4]> {
        let a = b.as_array().filter(|a| a.len() == 4)?;
        let n = |i: usize| a[i].as_f64().filter(|f| f.is_finite());
        Some([n(0)?, n(1)?, n(2)?, n(3)?])
    };
    v.as_array()
        .ok_or(BAD_POSITIONS)?
        .iter()
        .map(|b| one(b).ok_or(BAD_POSITIONS))
        .collect()
}

/// A normalised `[y, x]` point in screen pixels `[x, y]`.
fn pixels(p: [f64; 2], screen: [u32; 2]) -> [f64; 2] {
    [
        round2(p[1] * screen[0] as f64),
        round2(p[0] * screen[1] as f64),
    ]
}

/// `image_path` under `--source`; else the file of that name beside the episode's JSON, where the datasets keep
/// it, so that an episode folder taken out of its split (as `IMNearth/CoAT`'s `data-example/` publishes one)
/// imports too.
fn screenshot(source: &Path, rel: &str, episode_file: &Path) -> PathBuf {
    let path = source.join(rel);
    if path.is_file() {
        return path;
    }
    Path::new(rel)
        .file_name()
        .and_then(|name| Some(episode_file.parent()?.join(name)))
        .filter(|beside| beside.is_file())
        .unwrap_or(path)
}

fn step(
    s: &Value,
    index: usize,
    (source, episode_file): (&Path, &Path),
    flavor: Flavor,
) -> Result<StepDraft, String> {
    let rel = s
        .get("image_path")
        .and_then(Value::as_str)
        .ok_or("step without image_path")?;
    let path = screenshot(source, rel, episode_file);
    let screen = match flavor {
        Flavor::Aitz => image_size(&path)?,
        // The fields are the screen; the sink checks that the JPEG's size fits it.
        Flavor::Cagui if !path.is_file() => return Err(MISSING_SCREENSHOT.into()),
        Flavor::Cagui => dims(s).ok_or(BAD_SCREEN)?,
    };
    let action = map_action(s, screen, flavor)?;
    // Gold boxes: the ui_positions boxes containing the gold point (AgentCPM-GUI eval/utils/evaluator.py,
    // obtain_gt_bbox / check_inside), as [x1, y1, x2, y2] screen pixels.
    let bboxes = match (&action, action.point()) {
        (Action::Click { .. } | Action::LongPress { .. }, Some([x, y])) => {
            let (sx, sy) = match flavor {
                Flavor::Aitz => (1.0, 1.0),
                Flavor::Cagui => (screen[0] as f64, screen[1] as f64),
            };
            positions(s.get("ui_positions"))?
                .into_iter()
                .map(|[by, bx, bh, bw]| [bx * sx, by * sy, (bx + bw) * sx, (by + bh) * sy])
                .filter(|b: &BBox| b[0] <= x && x <= b[2] && b[1] <= y && y <= b[3])
                .filter_map(|b| clip_box(b, screen))
                .collect()
        }
        _ => vec![],
    };
    let text = |k: &str| {
        s.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(StepDraft {
        source_index: index,
        image: ImageData::File(path),
        screen,
        action,
        bboxes,
        thought: text("coat_action_think"),
        subtask: text("coat_action_desc"),
        instruction: None,
    })
}

/// `image_width` / `image_height`, when both are positive integers.
fn dims(s: &Value) -> Option<[u32; 2]> {
    let get = |k: &str| {
        s.get(k)
            .and_then(Value::as_u64)
            .filter(|&n| n > 0 && n <= u32::MAX as u64)
    };
    Some([get("image_width")? as u32, get("image_height")? as u32])
}

/// Map one AITW-style step to `mobile_use` in screen pixels.
pub(super) fn map_action(s: &Value, screen: [u32; 2], flavor: Flavor) -> Result<Action, String> {
    let ty = match s.get("result_action_type") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(t)) => t.trim().parse().ok(),
        _ => None,
    }
    .ok_or("step whose result_action_type is not an integer")?;
    let touch = yx(s.get("result_touch_yx"));
    let seconds = || {
        s.get("duration")
            .and_then(Value::as_f64)
            .map(|ms| ms / 1000.0)
    };
    Ok(match (ty, flavor) {
        (3, _) => Action::Type {
            text: s
                .get("result_action_text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        },
        (4, _) => {
            let touch = touch.ok_or("dual-point action without a touch point")?;
            let lift = yx(s.get("result_lift_yx")).unwrap_or(touch);
            dual_point(touch, lift, screen)
        }
        (5, _) => Action::SystemButton {
            button: Button::Back,
        },
        (6, _) => Action::SystemButton {
            button: Button::Home,
        },
        (7, _) => Action::SystemButton {
            button: Button::Enter,
        },
        (10, _) => Action::Terminate {
            status: Status::Success,
        },
        (11, _) => Action::Terminate {
            status: Status::Failure,
        },
        (0, Flavor::Cagui) => Action::LongPress {
            coordinate: pixels(touch.ok_or("long press without a touch point")?, screen),
            time: seconds(),
        },
        (1, Flavor::Cagui) => Action::Wait { time: seconds() },
        (0 | 1 | 2 | 8 | 9, _) => {
            return Err(format!(
                "action type {ty} (unused in AITW) has no mobile_use equivalent"
            ))
        }
        _ => return Err(format!("unknown action type {ty}")),
    })
}

/// AITW's dual point: a tap at the touch point when touch and lift are within [`SWIPE_DISTANCE_THRESHOLD`], else a
/// swipe from touch to lift (the way the finger moved).
pub(super) fn dual_point(touch: [f64; 2], lift: [f64; 2], screen: [u32; 2]) -> Action {
    let d = ((touch[0] - lift[0]).powi(2) + (touch[1] - lift[1]).powi(2)).sqrt();
    if d <= SWIPE_DISTANCE_THRESHOLD {
        Action::Click {
            coordinate: pixels(touch, screen),
        }
    } else {
        Action::Swipe {
            coordinate: pixels(touch, screen),
            coordinate2: pixels(lift, screen),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yx_strings_are_y_first() {
        let p = yx(Some(&json!("[0.25, 0.75]"))).unwrap();
        // y = 0.25 of 600, x = 0.75 of 270.
        assert_eq!(pixels(p, [270, 600]), [202.5, 150.0]);
        assert_eq!(yx(Some(&json!("[-1.0, -1.0]"))), None);
        assert_eq!(yx(Some(&json!([0.5, 0.5]))), Some([0.5, 0.5]));
        assert_eq!(yx(Some(&json!("nonsense"))), None);
    }

    #[test]
    fn dual_points_are_taps_within_the_aitw_threshold_else_finger_swipes() {
        let s = [270, 600];
        // 0.0017 apart: a tap at the touch point.
        assert_eq!(
            dual_point([0.4984, 0.6070], [0.4967, 0.6070], s),
            Action::Click {
                coordinate: [163.89, 299.04]
            }
        );
        // 0.03 apart taps; 0.05 apart swipes.
        assert!(matches!(
            dual_point([0.5, 0.5], [0.53, 0.5], s),
            Action::Click { .. }
        ));
        assert!(matches!(
            dual_point([0.5, 0.5], [0.5, 0.55], s),
            Action::Swipe { .. }
        ));
        // The finger moves up (lift y < touch y): the swipe goes up.
        match dual_point([0.541, 0.507], [0.001, 0.579], s) {
            Action::Swipe {
                coordinate,
                coordinate2,
            } => assert!(coordinate2[1] < coordinate[1]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_ui_positions_are_named_not_read_as_no_boxes() {
        let p = |v: Value| positions(Some(&v));
        assert_eq!(p(json!("[[1, 2, 3, 4]]")), Ok(vec![[1.0, 2.0, 3.0, 4.0]]));
        assert_eq!(p(json!("[]")), Ok(vec![]));
        assert_eq!(positions(None), Ok(vec![]));
        for bad in [
            json!("[[1, 2, 3, 4], [5, 6"),
            json!("[[1, 2, 3]]"),
            json!(7),
            json!([[1, 2, 3, "4"]]),
        ] {
            assert_eq!(p(bad.clone()), Err(BAD_POSITIONS), "{bad}");
        }
    }

    #[test]
    fn action_ids() {
        let s = [270, 600];
        let step = |ty: i64| json!({"result_action_type": ty, "result_action_text": "hi", "duration": 1500});
        assert_eq!(
            map_action(&step(3), s, Flavor::Aitz),
            Ok(Action::Type { text: "hi".into() })
        );
        assert_eq!(
            map_action(&step(7), s, Flavor::Aitz),
            Ok(Action::SystemButton {
                button: Button::Enter
            })
        );
        assert_eq!(
            map_action(&step(11), s, Flavor::Aitz),
            Ok(Action::Terminate {
                status: Status::Failure
            })
        );
        assert!(map_action(&step(1), s, Flavor::Aitz)
            .unwrap_err()
            .contains("unused in AITW"));
        assert_eq!(
            map_action(&step(1), s, Flavor::Cagui),
            Ok(Action::Wait { time: Some(1.5) })
        );
        assert_eq!(
            map_action(&step(42), s, Flavor::Cagui),
            Err("unknown action type 42".into())
        );
        assert!(map_action(&json!({"result_action_type": 4}), s, Flavor::Aitz).is_err());
    }
}
