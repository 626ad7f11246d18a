//! AndroidControl converted to `mobile_use` JSONL, the layout of UI-S1 / Mobile-Agent-v3
//! (`X-PLUG/MobileAgent UI-S1/datasets/android_control_evaluation_std.jsonl`, `android_control_train_example.jsonl`):
//! one episode per line, `{"goal", "episode_id"?, "steps": [{"action_content": {mobile_use arguments},
//! "screenshot", "step_instruction"?, "check_options"?}]}`. Coordinates are screen pixels; gold boxes are
//! `check_options.candidate_bbox` (evaluation file) or `action_content.bbox` (training file). The screenshots are
//! not part of the file: each `screenshot` path is used where it exists, else its file name is looked up in
//! `--images` (default: the JSONL file's folder, then its `images/` subfolder).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::checks::image_size;
use super::episode::{clip_box, round2, skip_location, Episode, ImageData, StepDraft};
use super::sink::Sink;
use super::{io_err, ImportError, ImportOptions, Level};
use crate::action::Action;
use crate::dataset::{BBox, OFF_SCREEN};

/// The kind counted (per box) for a gold box partly beyond its screenshot, imported clipped to it.
const BOX_CLIPPED: &str = "gold box partly beyond its screenshot, clipped to it (per box)";
/// The kind counted (per box) for a gold box wholly beyond its screenshot, left out.
const BOX_OUTSIDE: &str = "gold box beyond its screenshot, left out (per box)";
/// The kind counted (per box) for a gold box that is not `[x1, y1, x2, y2]` numbers, left out.
const BOX_MALFORMED: &str = "malformed gold box, left out (per box)";

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
    warn_beyond(sink);
    Ok(())
}

/// The JSONL states no screen size: its pixel coordinates are taken to be those of the screenshots. Gold points or
/// boxes beyond the screenshots say the screenshots found are of another size than the source's (resized copies,
/// say); a warning names the counts, which `benchmark.json` keeps.
fn warn_beyond(sink: &mut Sink) {
    let [points, clipped, outside] =
        [OFF_SCREEN, BOX_CLIPPED, BOX_OUTSIDE].map(|k| sink.count_of(k));
    if points + clipped + outside > 0 {
        sink.warn(format!(
            "{points} gold point(s) and {} gold box(es) lie beyond their screenshot ({points} step(s) not \
             imported, {clipped} box(es) clipped, {outside} left out): where many do, the screenshots are of \
             another size than the one the source's pixel coordinates refer to (check --images)",
            clipped + outside
        ));
    }
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
    let mut bboxes = Vec::new();
    for b in boxes.map(|b| parse_boxes(b, screen)).unwrap_or_default() {
        match b {
            Ok((b, clipped)) => {
                if clipped {
                    sink.adjusted(BOX_CLIPPED);
                }
                bboxes.push(b);
            }
            Err(kind) => sink.adjusted(kind),
        }
    }
    Ok(StepDraft {
        source_index: k,
        image: ImageData::File(path),
        screen,
        action,
        bboxes,
        thought: String::new(),
        subtask: instruction.unwrap_or_default().to_string(),
        instruction: (ctx.level == Level::Low).then(|| instruction.unwrap_or_default().to_string()),
    })
}

/// One box `[x1, y1, x2, y2]` or a list of boxes, each clipped to the screen (`true` when clipping changed it), or
/// the kind of problem that leaves it out.
fn parse_boxes(v: &Value, screen: [u32; 2]) -> Vec<Result<(BBox, bool), &'static str>> {
    let one = |b: &Value| -> Result<(BBox, bool), &'static str> {
        let a = b.as_array().filter(|a| a.len() == 4).ok_or(BOX_MALFORMED)?;
        let mut out = [0.0; 4];
        for (o, x) in out.iter_mut().zip(a) {
            *o = x.as_f64().filter(|f| f.is_finite()).ok_or(BOX_MALFORMED)?;
        }
        let clipped = clip_box(out, screen).ok_or(BOX_OUTSIDE)?;
        Ok((clipped, clipped != out.map(round2)))
    };
    match v.as_array() {
        Some(a) if !a.is_empty() && a.iter().all(Value::is_number) => vec![one(v)],
        Some(a) => a.iter().map(one).collect(),
        None if v.is_null() => vec![],
        None => vec![Err(BOX_MALFORMED)],
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
            vec![Ok(([360.0, 327.0, 695.0, 466.0], false))]
        );
        assert_eq!(
            parse_boxes(
                &serde_json::json!([
                    [456, 2211, 624, 2337],
                    [0, 473, 1080, 2500],
                    "x",
                    [1100, 0, 1200, 9]
                ]),
                s
            ),
            vec![
                Ok(([456.0, 2211.0, 624.0, 2337.0], false)),
                Ok(([0.0, 473.0, 1080.0, 2400.0], true)),
                Err(BOX_MALFORMED),
                Err(BOX_OUTSIDE)
            ]
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
