//! Parsing `data.jsonl` lines into trajectories, with errors naming file, line and field.

use std::collections::HashMap;
use std::path::{Component, Path};

use serde_json::{Map, Value};

use super::{BBox, DataStep, DatasetError, Step, Trajectory};
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

    fn req<'v>(
        &self,
        obj: &'v Map<String, Value>,
        prefix: &str,
        key: &str,
    ) -> Result<&'v Value, DatasetError> {
        match obj.get(key) {
            None | Some(Value::Null) => Err(self.err(format!("{prefix}{key}"), "missing")),
            Some(v) => Ok(v),
        }
    }

    fn string(
        &self,
        obj: &Map<String, Value>,
        prefix: &str,
        key: &str,
    ) -> Result<String, DatasetError> {
        let v = self.req(obj, prefix, key)?;
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| self.err(format!("{prefix}{key}"), "must be a string"))
    }

    fn opt_string(
        &self,
        obj: &Map<String, Value>,
        prefix: &str,
        key: &str,
    ) -> Result<Option<String>, DatasetError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.err(format!("{prefix}{key}"), "must be a string")),
        }
    }

    fn positive(&self, obj: &Map<String, Value>, key: &str) -> Result<u32, DatasetError> {
        let v = self.req(obj, "", key)?;
        match whole_number(v) {
            Some(n) if n > 0 && n <= u32::MAX as u64 => Ok(n as u32),
            _ => Err(self.err(key, format!("must be a positive integer, found {v}"))),
        }
    }
}

/// A non-negative whole number written as a JSON integer, a float with no fraction (`1080.0`) or a string of
/// digits (`"1080"`): releases store sizes and lengths each way.
fn whole_number(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.0e15)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    }
}

/// A value that may be stored as JSON text inside a string (`"[...]"`, `"{...}"`), parsed; other values as
/// they are.
fn unquoted(v: &Value) -> Result<std::borrow::Cow<'_, Value>, String> {
    match v {
        Value::String(s) if s.trim_start().starts_with(['[', '{']) => serde_json::from_str(s)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| format!("not valid JSON: {e}")),
        other => Ok(std::borrow::Cow::Borrowed(other)),
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
    let v: Value = serde_json::from_str(raw).map_err(|e| DatasetError::Json {
        file: ctx.file.to_path_buf(),
        line: ctx.line,
        message: e.to_string(),
    })?;
    let obj = v.as_object().ok_or_else(|| DatasetError::Json {
        file: ctx.file.to_path_buf(),
        line: ctx.line,
        message: "a line must be a JSON object".into(),
    })?;
    let id = match obj.get("id") {
        None | Some(Value::Null) => index.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => n.to_string(),
        Some(_) => return Err(ctx.err("id", "must be a string or an integer")),
    };
    let image_width = ctx.positive(obj, "image_width")?;
    let image_height = ctx.positive(obj, "image_height")?;
    let steps_v =
        unquoted(ctx.req(obj, "", "trajectory")?).map_err(|m| ctx.err("trajectory", m))?;
    let steps_arr = steps_v
        .as_array()
        .ok_or_else(|| ctx.err("trajectory", "must be a list of steps"))?;
    if steps_arr.is_empty() {
        return Err(ctx.err("trajectory", "is empty"));
    }
    let screen = [image_width as f64, image_height as f64];
    let steps = steps_arr
        .iter()
        .enumerate()
        .map(|(k, s)| parse_step(s, &format!("trajectory[{k}]."), screen, ctx))
        .collect::<Result<Vec<_>, _>>()?;
    let len_v = ctx.req(obj, "", "trajectory_length")?;
    match whole_number(len_v) {
        Some(n) if n as usize == steps.len() => {}
        Some(n) => {
            return Err(ctx.err(
                "trajectory_length",
                format!("is {n} but `trajectory` has {} steps", steps.len()),
            ))
        }
        None => return Err(ctx.err("trajectory_length", "must be a non-negative integer")),
    }
    Ok(Trajectory {
        id,
        line: ctx.line,
        app_name: ctx.string(obj, "", "app_name")?,
        instruction: ctx.string(obj, "", "instruction")?,
        system: ctx.opt_string(obj, "", "system")?,
        image_width,
        image_height,
        steps,
    })
}

fn parse_step(v: &Value, prefix: &str, screen: [f64; 2], ctx: &Line) -> Result<Step, DatasetError> {
    let step = parse_step_fields(v, prefix, screen, ctx)?;
    check_on_screen(&step.action, screen).map_err(|m| ctx.err(format!("{prefix}action"), m))?;
    Ok(step)
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

    /// What is wrong, with the values involved.
    pub(crate) fn message(&self) -> &str {
        match self {
            StepRefusal::OffScreen(m) | StepRefusal::Field { message: m, .. } => m,
        }
    }
}

/// The kind of a step whose gold point is off the screen.
pub(crate) const OFF_SCREEN: &str = "gold point off the screen";

/// Run the loader's checks of one step (as it would be written into `data.jsonl`) on a `screen` of `[w, h]`
/// pixels: writers of benchmark folders call it so that they write only steps the loader accepts.
pub(crate) fn check_step(step: &DataStep, [w, h]: [u32; 2]) -> Result<(), StepRefusal> {
    let v = serde_json::to_value(step).map_err(|e| StepRefusal::Field {
        field: String::new(),
        message: e.to_string(),
    })?;
    let screen = [w as f64, h as f64];
    let ctx = Line {
        file: Path::new(super::DATA_FILE),
        line: 0,
    };
    let step = parse_step_fields(&v, "", screen, &ctx).map_err(|e| match e {
        DatasetError::Field { field, message, .. } => StepRefusal::Field { field, message },
        other => StepRefusal::Field {
            field: String::new(),
            message: other.to_string(),
        },
    })?;
    check_on_screen(&step.action, screen).map_err(StepRefusal::OffScreen)
}

/// A step's fields, each checked on its own (the gold point's place is checked by the caller).
fn parse_step_fields(
    v: &Value,
    prefix: &str,
    screen: [f64; 2],
    ctx: &Line,
) -> Result<Step, DatasetError> {
    let obj = v
        .as_object()
        .ok_or_else(|| ctx.err(prefix.trim_end_matches('.'), "a step must be an object"))?;
    let image = step_image(obj, prefix, ctx)?;
    check_image_path(&image).map_err(|m| ctx.err(format!("{prefix}image"), m))?;
    let action_v = ctx.req(obj, prefix, "action")?;
    let action = parse_gold_action(action_v).map_err(|m| ctx.err(format!("{prefix}action"), m))?;
    let bbox_key = if obj.contains_key("bbox") {
        "bbox"
    } else {
        "candidate_bbox"
    };
    let bboxes = match obj.get(bbox_key) {
        None | Some(Value::Null) => Vec::new(),
        Some(b) => parse_boxes(b, screen).map_err(|m| ctx.err(format!("{prefix}{bbox_key}"), m))?,
    };
    Ok(Step {
        image,
        thought: ctx.opt_string(obj, prefix, "thought")?.unwrap_or_default(),
        subtask: ctx.opt_string(obj, prefix, "subtask")?.unwrap_or_default(),
        action,
        response: ctx.opt_string(obj, prefix, "response")?.unwrap_or_default(),
        bboxes,
        instruction: ctx
            .opt_string(obj, prefix, "instruction")?
            .filter(|s| !s.trim().is_empty()),
    })
}

/// The screenshot of a step: a path string, or an image record `{"path": …}` as dataset tools write them.
fn step_image(obj: &Map<String, Value>, prefix: &str, ctx: &Line) -> Result<String, DatasetError> {
    match ctx.req(obj, prefix, "image")? {
        Value::String(s) => Ok(s.clone()),
        Value::Object(o) => match o.get("path") {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(ctx.err(
                format!("{prefix}image"),
                "an image record needs a `path` string",
            )),
        },
        _ => Err(ctx.err(format!("{prefix}image"), "must be a string")),
    }
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

fn parse_box(v: &Value, screen: [f64; 2]) -> Result<BBox, String> {
    let arr = v
        .as_array()
        .filter(|a| a.len() == 4)
        .ok_or_else(|| format!("a box must be [x1, y1, x2, y2], found {v}"))?;
    let mut b = [0.0; 4];
    for (slot, x) in b.iter_mut().zip(arr) {
        *slot = x
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

/// One box `[x1, y1, x2, y2]` or a list of boxes.
fn parse_boxes(v: &Value, screen: [f64; 2]) -> Result<Vec<BBox>, String> {
    let arr = v
        .as_array()
        .ok_or_else(|| format!("must be a box or a list of boxes, found {v}"))?;
    if arr.iter().all(Value::is_number) && !arr.is_empty() {
        return Ok(vec![parse_box(v, screen)?]);
    }
    arr.iter().map(|b| parse_box(b, screen)).collect()
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
        let s = [100.0, 200.0];
        assert_eq!(
            parse_boxes(&serde_json::json!([1, 2, 3, 4]), s)
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            parse_boxes(&serde_json::json!([[1, 2, 3, 4], [0, 0, 100, 200]]), s)
                .unwrap()
                .len(),
            2
        );
        assert!(parse_boxes(&serde_json::json!([]), s).unwrap().is_empty());
        assert!(parse_boxes(&serde_json::json!([-1, 2, 3, 4]), s).is_err());
        assert!(parse_boxes(&serde_json::json!([1, 2, 300, 4]), s).is_err());
        assert!(parse_boxes(&serde_json::json!([5, 2, 3, 4]), s).is_err());
    }
}
