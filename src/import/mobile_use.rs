//! AndroidControl converted to `mobile_use` JSONL, the layout of UI-S1 / Mobile-Agent-v3
//! (`X-PLUG/MobileAgent UI-S1/datasets/android_control_evaluation_std.jsonl`, `android_control_train_example.jsonl`):
//! one episode per line, `{"goal", "episode_id"?, "steps": [{"action_content": {mobile_use arguments},
//! "screenshot", "step_instruction"?, "check_options"?}]}`. Coordinates are screen pixels; gold boxes are
//! `check_options.candidate_bbox` (evaluation file) or `action_content.bbox` (training file). The screenshots are
//! not part of the file: each `screenshot` path is used where it exists, else its file name is looked up in
//! `--images` (default: the JSONL file's folder, then its `images/` subfolder).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::episode::{clip_box, image_size, skip_location, Episode, ImageData, Sink, StepDraft};
use super::{io_err, ImportError, ImportOptions, Level};
use crate::action::Action;
use crate::dataset::BBox;

/// The screenshot of a step: the path itself (relative to the JSONL's folder) when it exists, else the first of
/// the `images` folders holding its file name (else the last candidate, which is then reported missing).
fn resolve(screenshot: &str, base: &Path, images: &[PathBuf]) -> PathBuf {
    let p = Path::new(screenshot);
    let direct = if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    };
    if direct.is_file() {
        return direct;
    }
    let Some(name) = p.file_name() else {
        return direct;
    };
    let candidates: Vec<PathBuf> = images.iter().map(|d| d.join(name)).collect();
    candidates
        .iter()
        .find(|c| c.is_file())
        .or(candidates.last())
        .cloned()
        .unwrap_or(direct)
}

/// Import every line of the JSONL file.
pub(super) fn import(opts: &ImportOptions, sink: &mut Sink) -> Result<(), ImportError> {
    let file = &opts.source;
    if !file.is_file() {
        return Err(ImportError::Source {
            path: file.clone(),
            message: "must be the JSONL file".into(),
        });
    }
    let text = std::fs::read_to_string(file).map_err(io_err(file))?;
    let base = file.parent().unwrap_or(Path::new(".")).to_path_buf();
    let images = match &opts.images {
        Some(d) => vec![d.clone()],
        None => vec![base.clone(), base.join("images")],
    };
    for (i, line) in crate::safe_io::strip_bom(&text).lines().enumerate() {
        if sink.full() {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{}:{}", file.display(), i + 1);
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(_) => {
                sink.skip_episode("line that is not JSON", at)?;
                continue;
            }
        };
        let ctx = Ctx {
            base: &base,
            images: &images,
            level: opts.level(),
            at: &at,
        };
        if let Some(ep) = episode(&v, i, &ctx, sink)? {
            sink.episode(ep, &at)?;
        }
    }
    Ok(())
}

struct Ctx<'a> {
    base: &'a Path,
    images: &'a [PathBuf],
    level: Level,
    at: &'a str,
}

fn episode(
    v: &Value,
    line: usize,
    ctx: &Ctx,
    sink: &mut Sink,
) -> Result<Option<Episode>, ImportError> {
    let id = match v.get("episode_id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => line.to_string(),
    };
    let (Some(goal), Some(steps)) = (
        v.get("goal").and_then(Value::as_str),
        v.get("steps").and_then(Value::as_array),
    ) else {
        sink.skip_episode(
            "line without goal or steps",
            format!("{}: episode {id}", ctx.at),
        )?;
        return Ok(None);
    };
    let mut out = Vec::new();
    for (k, s) in steps.iter().enumerate() {
        match step(s, k, ctx, sink) {
            Ok(d) => out.push(d),
            Err(kind) => {
                let at = format!("{}: episode {id} step {k}", ctx.at);
                let image = s.get("screenshot").and_then(Value::as_str);
                let image = image.map(|shot| format!("{shot}, looked for by name under --images"));
                sink.skip_step(&kind, skip_location(at, &kind, image.as_deref()))?
            }
        }
    }
    Ok(Some(Episode {
        id,
        app_name: String::new(),
        instruction: goal.to_string(),
        steps: out,
    }))
}

/// One step, or the kind of problem that keeps it out.
fn step(s: &Value, k: usize, ctx: &Ctx, sink: &mut Sink) -> Result<StepDraft, String> {
    let shot = s
        .get("screenshot")
        .and_then(Value::as_str)
        .ok_or("step without screenshot")?;
    let path = resolve(shot, ctx.base, ctx.images);
    let screen = image_size(&path)?;
    let args = s
        .get("action_content")
        .ok_or("step without action_content")?;
    let mut action = Action::from_arguments(args).map_err(|e| {
        let name = args.get("action").and_then(Value::as_str).unwrap_or("?");
        format!("action {name:?} that is not a valid mobile_use action ({e})")
    })?;
    let instruction = s.get("step_instruction").and_then(Value::as_str);
    if ctx.level == Level::Low && instruction.is_none() {
        return Err("no step_instruction for --level low".into());
    }
    let check = s.get("check_options");
    if let (Some(dir), Action::Swipe { .. }) = (
        check
            .and_then(|c| c.get("direction"))
            .and_then(Value::as_str),
        &action,
    ) {
        if reorient(&mut action, dir) {
            sink.adjusted(
                "swipe reversed to move the finger against check_options.direction (an AndroidControl scroll)",
            );
        }
    }
    let boxes = check
        .and_then(|c| c.get("candidate_bbox"))
        .or_else(|| args.get("bbox"));
    Ok(StepDraft {
        source_index: k,
        image: ImageData::File(path),
        screen,
        action,
        bboxes: boxes.map(|b| parse_boxes(b, screen)).unwrap_or_default(),
        thought: String::new(),
        subtask: instruction.unwrap_or_default().to_string(),
        instruction: (ctx.level == Level::Low).then(|| instruction.unwrap_or_default().to_string()),
    })
}

/// One box `[x1, y1, x2, y2]` or a list of boxes, clipped to the screen; malformed entries are left out.
fn parse_boxes(v: &Value, screen: [u32; 2]) -> Vec<BBox> {
    let one = |b: &Value| -> Option<BBox> {
        let a = b.as_array().filter(|a| a.len() == 4)?;
        let mut out = [0.0; 4];
        for (o, x) in out.iter_mut().zip(a) {
            *o = x.as_f64()?;
        }
        clip_box(out, screen)
    };
    match v.as_array() {
        Some(a) if a.iter().all(Value::is_number) => one(v).into_iter().collect(),
        Some(a) => a.iter().filter_map(one).collect(),
        None => vec![],
    }
}

/// Make a swipe move the finger opposite to the AndroidControl scroll `direction` it was converted from (the
/// conversion keeps up/down but not left/right that way); true when the points were swapped.
fn reorient(action: &mut Action, direction: &str) -> bool {
    let Action::Swipe {
        coordinate,
        coordinate2,
    } = action
    else {
        return false;
    };
    let (dx, dy) = (
        coordinate2[0] - coordinate[0],
        coordinate2[1] - coordinate[1],
    );
    // The finger's component that should be negative (or positive) for this scroll direction.
    let wrong = match direction.trim().to_lowercase().as_str() {
        "down" => dy.abs() >= dx.abs() && dy > 0.0,
        "up" => dy.abs() >= dx.abs() && dy < 0.0,
        "right" => dx.abs() > dy.abs() && dx > 0.0,
        "left" => dx.abs() > dy.abs() && dx < 0.0,
        _ => false,
    };
    if wrong {
        std::mem::swap(coordinate, coordinate2);
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swipe(a: [f64; 2], b: [f64; 2]) -> Action {
        Action::Swipe {
            coordinate: a,
            coordinate2: b,
        }
    }

    #[test]
    fn swipes_follow_the_scroll_direction_on_both_axes() {
        // "down" with the finger moving up (as the conversion writes it): kept.
        let mut a = swipe([540.0, 1800.0], [540.0, 600.0]);
        assert!(!reorient(&mut a, "down"));
        // "right" with the finger moving right (as the conversion writes it): reversed.
        let mut a = swipe([270.0, 1200.0], [810.0, 1200.0]);
        assert!(reorient(&mut a, "right"));
        assert_eq!(a, swipe([810.0, 1200.0], [270.0, 1200.0]));
        let mut a = swipe([810.0, 1200.0], [270.0, 1200.0]);
        assert!(reorient(&mut a, "left"));
        let mut a = swipe([540.0, 600.0], [540.0, 1800.0]);
        assert!(!reorient(&mut a, "up"));
    }

    #[test]
    fn boxes_single_or_listed() {
        let s = [1080, 2400];
        assert_eq!(
            parse_boxes(&serde_json::json!([360, 327, 695, 466]), s),
            vec![[360.0, 327.0, 695.0, 466.0]]
        );
        assert_eq!(
            parse_boxes(
                &serde_json::json!([[456, 2211, 624, 2337], [0, 473, 1080, 2500], "x"]),
                s
            ),
            vec![[456.0, 2211.0, 624.0, 2337.0], [0.0, 473.0, 1080.0, 2400.0]]
        );
    }

    #[test]
    fn screenshots_are_found_by_name_under_images() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("8193_0.png"), b"x").unwrap();
        let images = [dir.path().join("none"), dir.path().to_path_buf()];
        let got = resolve(
            "/datasets/AndroidControl/images/8193_0.png",
            Path::new("/nowhere"),
            &images,
        );
        assert_eq!(got, dir.path().join("8193_0.png"));
    }
}
