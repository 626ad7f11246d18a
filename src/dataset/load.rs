//! Reading `data.jsonl` into trajectories: each line is deserialized as a [`DataLine`] (its fields read in the
//! forms released files use too), then checked as a whole (a non-empty trajectory of the length it states, boxes
//! inside the screen, gold points on it, a gold action that parses); every error names the file, the line and
//! the field.

use std::collections::HashMap;
use std::path::{Component, Path};

use serde_json::{Map, Value};

use super::line::MISSING;
use super::{BBox, BoxNumbers, DataLine, DataStep, DatasetError, Step, Trajectory};
use crate::action::Action;

/// Context of one line, for building errors.
struct Line<'a> {
    file: &'a Path,
    line: usize,
}

impl Line<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> DatasetError {
        DatasetError::Field {
            file: self.file.to_path_buf(),
            line: self.line,
            field: field.into(),
            message: message.into(),
        }
    }

    fn json(&self, message: String) -> DatasetError {
        DatasetError::Json {
            file: self.file.to_path_buf(),
            line: self.line,
            message,
        }
    }
}

/// Parse the whole file; blank lines are skipped (but counted for line numbers).
pub(super) fn parse_jsonl(text: &str, file: &Path) -> Result<Vec<Trajectory>, DatasetError> {
    let mut out: Vec<Trajectory> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let text = crate::safe_io::strip_bom(text); // a leading UTF-8 BOM (Windows editors) is not data
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let ctx = Line { file, line: i + 1 };
        let t = parse_line(raw, i, &ctx)?;
        if let Some(first) = seen.insert(t.id.clone(), t.line) {
            return Err(ctx.err(
                "id",
                format!("duplicate trajectory id {:?} (first on line {first})", t.id),
            ));
        }
        out.push(t);
    }
    if out.is_empty() {
        return Err(DatasetError::Empty {
            file: file.to_path_buf(),
        });
    }
    Ok(out)
}

fn parse_line(raw: &str, index: usize, ctx: &Line) -> Result<Trajectory, DatasetError> {
    let mut v: Value = serde_json::from_str(raw).map_err(|e| ctx.json(e.to_string()))?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| ctx.json("a line must be a JSON object".into()))?;
    unquote_trajectory(obj).map_err(|m| ctx.err("trajectory", m))?;
    let line: DataLine = serde_path_to_error::deserialize(v).map_err(|e| field_error(&e, ctx))?;
    trajectory(line, index, ctx)
}

/// Some releases store the trajectory as the JSON text of its list: it is read as the list.
fn unquote_trajectory(obj: &mut Map<String, Value>) -> Result<(), String> {
    if let Some(Value::String(s)) = obj.get("trajectory") {
        if s.trim_start().starts_with(['[', '{']) {
            let list = serde_json::from_str(s).map_err(|e| format!("not valid JSON: {e}"))?;
            obj.insert("trajectory".into(), list);
        }
    }
    Ok(())
}

/// A line that does not deserialize, as the error of the field it failed at. An absent required field fails at
/// the object holding it (serde's "missing field `name`"): the error names the field itself.
fn field_error(e: &serde_path_to_error::Error<serde_json::Error>, ctx: &Line) -> DatasetError {
    let path = e.path().to_string();
    let path = if path == "." { String::new() } else { path };
    let message = e.inner().to_string();
    let absent = message
        .strip_prefix("missing field `")
        .and_then(|m| m.strip_suffix('`'));
    match absent {
        Some(name) if path.is_empty() => ctx.err(name, MISSING),
        Some(name) => ctx.err(format!("{path}.{name}"), MISSING),
        None => ctx.err(path, message),
    }
}

/// The checks of a whole line, and its trajectory: `index` is its id when it has none.
fn trajectory(line: DataLine, index: usize, ctx: &Line) -> Result<Trajectory, DatasetError> {
    if line.trajectory.is_empty() {
        return Err(ctx.err("trajectory", "is empty"));
    }
    let screen = [line.image_width, line.image_height];
    let steps = line
        .trajectory
        .iter()
        .enumerate()
        .map(|(k, s)| {
            step(s, screen)
                .map_err(|r| ctx.err(format!("trajectory[{k}].{}", r.field()), r.message()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if line.trajectory_length != steps.len() {
        return Err(ctx.err(
            "trajectory_length",
            format!(
                "is {} but `trajectory` has {} steps",
                line.trajectory_length,
                steps.len()
            ),
        ));
    }
    Ok(Trajectory {
        id: line.id.unwrap_or_else(|| index.to_string()),
        line: ctx.line,
        app_name: line.app_name,
        instruction: line.instruction,
        system: line.system,
        image_width: line.image_width,
        image_height: line.image_height,
        steps,
    })
}

/// Why the loader refuses one step (see [`check_step`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StepRefusal {
    /// The gold point lies off the screen.
    OffScreen(String),
    /// Another field is invalid: its name and what is wrong.
    Field {
        /// The field, e.g. `bbox`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl StepRefusal {
    /// The kind of refusal, for counting: stable across steps.
    pub(crate) fn kind(&self) -> String {
        match self {
            StepRefusal::OffScreen(_) => OFF_SCREEN.into(),
            StepRefusal::Field { field, .. } => {
                format!("step the benchmark loader refuses (field `{field}`)")
            }
        }
    }

    /// The field refused (an off-screen point is the `action`'s).
    pub(crate) fn field(&self) -> &str {
        match self {
            StepRefusal::OffScreen(_) => "action",
            StepRefusal::Field { field, .. } => field,
        }
    }

    /// What is wrong, with the values involved.
    pub(crate) fn message(&self) -> &str {
        match self {
            StepRefusal::OffScreen(m) | StepRefusal::Field { message: m, .. } => m,
        }
    }
}

/// The kind of a step whose gold point is off the screen.
pub(crate) const OFF_SCREEN: &str = "gold point off the screen";

/// Run the loader's checks of one step (as it is written into `data.jsonl`) on a `screen` of `[w, h]` pixels:
/// writers of benchmark folders call it so that they write only steps the loader accepts.
pub(crate) fn check_step(step: &DataStep, screen: [u32; 2]) -> Result<(), StepRefusal> {
    self::step(step, screen).map(|_| ())
}

/// A step of a line on a `[w, h]` screen, checked: its screenshot path stays inside the folder, its gold action
/// parses and lies on the screen, its boxes are boxes inside it.
fn step(s: &DataStep, [w, h]: [u32; 2]) -> Result<Step, StepRefusal> {
    let screen = [w as f64, h as f64];
    let refused = |field: &str| {
        let field = field.to_string();
        move |message: String| StepRefusal::Field { field, message }
    };
    check_image_path(&s.image).map_err(refused("image"))?;
    let action = parse_gold_action(&s.action).map_err(refused("action"))?;
    let (key, boxes) = s.gold_boxes();
    let bboxes = boxes
        .iter()
        .map(|b| check_box(b, screen))
        .collect::<Result<Vec<_>, _>>()
        .map_err(refused(key))?;
    check_on_screen(&action, screen).map_err(StepRefusal::OffScreen)?;
    Ok(Step {
        image: s.image.clone(),
        thought: s.thought.clone(),
        subtask: s.subtask.clone(),
        action,
        response: s.response.clone(),
        bboxes,
        instruction: s.instruction.clone().filter(|i| !i.trim().is_empty()),
    })
}

/// A gold point must lie on the screen (edges included): one outside it cannot be scored against.
fn check_on_screen(action: &Action, [w, h]: [f64; 2]) -> Result<(), String> {
    let points: Vec<&crate::action::Point> = match action {
        Action::Click { coordinate } | Action::LongPress { coordinate, .. } => vec![coordinate],
        Action::Swipe {
            coordinate,
            coordinate2,
        } => vec![coordinate, coordinate2],
        _ => Vec::new(),
    };
    match points
        .into_iter()
        .find(|[x, y]| !(0.0..=w).contains(x) || !(0.0..=h).contains(y))
    {
        Some([x, y]) => Err(format!(
            "point [{x}, {y}] is off the {w}×{h} screen (image_width × image_height)"
        )),
        None => Ok(()),
    }
}

/// The gold action: a tool call (object or JSON string, its `arguments` an object or JSON text), or a bare
/// arguments object.
fn parse_gold_action(v: &Value) -> Result<Action, String> {
    let parsed = match v {
        Value::String(s) => {
            serde_json::from_str::<Value>(s).map_err(|e| format!("not valid JSON: {e}"))?
        }
        other => other.clone(),
    };
    let mut v = parsed;
    if let Some(Value::String(args)) = v.get("arguments") {
        let args = serde_json::from_str::<Value>(args)
            .map_err(|e| format!("`arguments` is not valid JSON: {e}"))?;
        v["arguments"] = args;
    }
    let r = if v.get("name").is_some() || v.get("arguments").is_some() {
        Action::from_tool_call(&v)
    } else {
        Action::from_arguments(&v)
    };
    r.map_err(|e| e.to_string())
}

/// Refuse absolute paths and paths that escape the folder.
fn check_image_path(p: &str) -> Result<(), String> {
    if p.trim().is_empty() {
        return Err("is empty".into());
    }
    let bytes = p.as_bytes();
    let windows_abs = bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic();
    if p.starts_with('/') || p.starts_with('\\') || windows_abs || Path::new(p).is_absolute() {
        return Err(format!(
            "{p:?} is absolute; image paths must be relative to the benchmark folder"
        ));
    }
    let escapes = Path::new(p)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
        || p.split(['/', '\\']).any(|part| part == "..");
    if escapes {
        return Err(format!("{p:?} escapes the benchmark folder"));
    }
    Ok(())
}

/// A gold box in screen pixels: no negative coordinate, its corners in order, inside the screen.
fn check_box(numbers: &BoxNumbers, screen: [f64; 2]) -> Result<BBox, String> {
    let v = Value::from(numbers.to_vec());
    let mut b = [0.0; 4];
    for (slot, n) in b.iter_mut().zip(numbers) {
        *slot = n
            .as_f64()
            .filter(|f| f.is_finite())
            .ok_or_else(|| format!("box coordinates must be numbers, found {v}"))?;
    }
    if b.iter().any(|&x| x < 0.0) {
        return Err(format!("box {v} has a negative coordinate"));
    }
    if b[0] > b[2] || b[1] > b[3] {
        return Err(format!("box {v} has x1 > x2 or y1 > y2"));
    }
    if b[2] > screen[0] || b[3] > screen[1] {
        return Err(format!(
            "box {v} lies outside the {}x{} screen",
            screen[0], screen[1]
        ));
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gold_points_must_be_on_the_screen() {
        let click = |x: f64, y: f64| Action::Click { coordinate: [x, y] };
        assert!(check_on_screen(&click(0.0, 200.0), [100.0, 200.0]).is_ok());
        let err = check_on_screen(&click(-50.0, 99999.0), [100.0, 200.0]).unwrap_err();
        assert!(
            err.contains("[-50, 99999]") && err.contains("100×200"),
            "{err}"
        );
    }

    #[test]
    fn check_step_names_an_off_screen_point_apart_from_other_fields() {
        let step = |coordinate: [f64; 2], bbox: serde_json::Value| {
            serde_json::from_value::<DataStep>(serde_json::json!({"image": "images/e/0.png", "bbox": bbox,
                "action": {"name": "mobile_use", "arguments": {"action": "click", "coordinate": coordinate}}}))
            .unwrap()
        };
        let ok = step([50.0, 60.0], serde_json::json!([[40, 50, 60, 70]]));
        assert_eq!(check_step(&ok, [100, 200]), Ok(()));
        let off =
            check_step(&step([150.0, 60.0], serde_json::Value::Null), [100, 200]).unwrap_err();
        assert_eq!(off.kind(), OFF_SCREEN);
        assert!(off.message().contains("[150, 60]"), "{off:?}");
        let boxed = check_step(
            &step([50.0, 60.0], serde_json::json!([[40, 50, 160, 70]])),
            [100, 200],
        )
        .unwrap_err();
        assert_eq!(
            boxed.kind(),
            "step the benchmark loader refuses (field `bbox`)"
        );
    }

    #[test]
    fn image_paths() {
        assert!(check_image_path("images/a.png").is_ok());
        assert!(check_image_path("/etc/passwd").is_err());
        assert!(check_image_path("images/../../x.png").is_err());
        assert!(check_image_path("C:\\x.png").is_err());
        assert!(check_image_path("").is_err());
    }

    #[test]
    fn release_field_types_are_accepted() {
        let ctx = Line {
            file: Path::new(crate::dataset::DATA_FILE),
            line: 1,
        };
        let line = serde_json::json!({
            "app_name": "闲鱼", "trajectory_length": "2", "instruction": "i",
            "image_width": "1080", "image_height": 2400.0,
            "trajectory": serde_json::json!([
                {"image": "a.png", "action": {"name": "mobile_use",
                    "arguments": "{\"action\": \"click\", \"coordinate\": [1, 2]}"}},
                {"image": {"path": "images/b.png"}, "action": "{\"name\": \"mobile_use\", \"arguments\": {\"action\": \"terminate\", \"status\": \"success\"}}"}
            ]).to_string(),
        });
        let t = parse_line(&line.to_string(), 0, &ctx).unwrap();
        assert_eq!(
            (t.image_width, t.image_height, t.steps.len()),
            (1080, 2400, 2)
        );
        assert_eq!(t.steps[1].image, "images/b.png");
        for bad in [
            serde_json::json!("10.5"),
            serde_json::json!(-3),
            serde_json::json!("x"),
        ] {
            let mut l = line.clone();
            l["image_width"] = bad;
            let e = parse_line(&l.to_string(), 0, &ctx).unwrap_err();
            assert_eq!(e.field(), Some("image_width"));
        }
    }

    #[test]
    fn boxes() {
        let screen = [100, 200];
        let read = |bbox: serde_json::Value| -> Result<Vec<BBox>, String> {
            let s = serde_json::from_value::<DataStep>(
                serde_json::json!({"image": "a.png", "bbox": bbox,
                "action": {"action": "wait"}}),
            )
            .map_err(|e| e.to_string())?;
            step(&s, screen)
                .map(|s| s.bboxes)
                .map_err(|r| r.message().to_string())
        };
        assert_eq!(read(serde_json::json!([1, 2, 3, 4])).unwrap().len(), 1);
        let two = serde_json::json!([[1, 2, 3, 4], [0, 0, 100, 200]]);
        assert_eq!(read(two).unwrap().len(), 2);
        assert!(read(serde_json::json!([])).unwrap().is_empty());
        for (bad, why) in [
            (serde_json::json!([-1, 2, 3, 4]), "negative"),
            (
                serde_json::json!([1, 2, 300, 4]),
                "outside the 100x200 screen",
            ),
            (serde_json::json!([5, 2, 3, 4]), "x1 > x2"),
            (serde_json::json!([1, 2, 3]), "[x1, y1, x2, y2]"),
            (serde_json::json!([[1, 2, "3", 4]]), "must be numbers"),
            (serde_json::json!("1,2,3,4"), "a box or a list of boxes"),
        ] {
            let e = read(bad).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn candidate_boxes_are_read_when_there_is_no_bbox_and_named_in_errors() {
        let s: DataStep = serde_json::from_value(serde_json::json!({"image": "a.png",
            "candidate_bbox": [[1, 2, 300, 4]], "action": {"action": "wait"}}))
        .unwrap();
        let r = step(&s, [100, 200]).unwrap_err();
        assert_eq!(r.field(), "candidate_bbox");
        let s = DataStep {
            bbox: Some(crate::dataset::GoldBoxes::One(
                [1, 2, 3, 4].map(serde_json::Number::from),
            )),
            ..s
        };
        assert_eq!(
            step(&s, [100, 200]).unwrap().bboxes,
            vec![[1.0, 2.0, 3.0, 4.0]]
        );
    }

    #[test]
    fn a_missing_field_is_named_where_it_is_missing() {
        let ctx = Line {
            file: Path::new(crate::dataset::DATA_FILE),
            line: 3,
        };
        let line = serde_json::json!({"app_name": "a", "trajectory_length": 1, "instruction": "i",
            "image_width": 10, "image_height": 20, "trajectory": [{"image": "a.png", "action": {"action": "wait"}}]});
        assert!(parse_line(&line.to_string(), 0, &ctx).is_ok());
        let mut no_action = line.clone();
        no_action["trajectory"][0]
            .as_object_mut()
            .unwrap()
            .remove("action");
        let e = parse_line(&no_action.to_string(), 0, &ctx).unwrap_err();
        assert_eq!(e.field(), Some("trajectory[0].action"));
        assert_eq!(
            e.to_string(),
            "data.jsonl:3: field `trajectory[0].action`: missing"
        );
        let mut no_app = line.clone();
        no_app.as_object_mut().unwrap().remove("app_name");
        let e = parse_line(&no_app.to_string(), 0, &ctx).unwrap_err();
        assert_eq!(e.to_string(), "data.jsonl:3: field `app_name`: missing");
        let mut null_steps = line;
        null_steps["trajectory"] = serde_json::Value::Null;
        let e = parse_line(&null_steps.to_string(), 0, &ctx).unwrap_err();
        assert_eq!(e.to_string(), "data.jsonl:3: field `trajectory`: missing");
    }
}
