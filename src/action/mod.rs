//! The Qwen2.5-VL `mobile_use` action space: nine actions with typed arguments.
//!
//! An action is written as the `arguments` object of a tool call, `{"action": "click", "coordinate": [x, y]}`,
//! and the whole tool call is `{"name": "mobile_use", "arguments": {...}}`. Reading is explicit and lenient
//! about case (`Click`, `LONG_PRESS`, `home`) but strict about argument types, with an error naming the
//! argument. Unknown extra arguments are ignored.

mod names;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use names::extension_action;
pub use names::{ActionType, Button, Status};

/// The tool name every tool call must carry.
pub const TOOL_NAME: &str = "mobile_use";

/// A point `[x, y]` in pixels.
pub(crate) type Point = [f64; 2];

/// Why an action (arguments object or tool call) could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ActionError {
    /// The arguments (or the tool call) are not a JSON object.
    #[error("expected a JSON object, found {0}")]
    NotAnObject(&'static str),
    /// The tool call has a `name` other than `mobile_use`.
    #[error("tool name is {0:?}, expected \"mobile_use\"")]
    WrongName(String),
    /// The tool call has no `name`.
    #[error("tool call has no \"name\"")]
    MissingName,
    /// The tool call has no `arguments`.
    #[error("tool call has no \"arguments\"")]
    MissingArguments,
    /// `arguments` is a string that does not hold a JSON object.
    #[error("\"arguments\" is a string that is not a JSON object: {0}")]
    ArgumentsString(String),
    /// The arguments have no `action`.
    #[error("arguments have no \"action\"")]
    MissingAction,
    /// The `action` is not one of the nine.
    #[error("unknown action {0:?}")]
    UnknownAction(String),
    /// The `action` belongs to an extended action space of agents fine-tuned from Qwen3-VL (MAI-UI's `answer`,
    /// `ask_user`, `mcp_call`, `drag`; `INFO` is `ask_user`) that has no `mobile_use` counterpart: a valid
    /// answer, never a match for a gold action. Holds the canonical name.
    #[error("action {0:?} is outside the mobile_use action space")]
    Unsupported(&'static str),
    /// A required argument is absent.
    #[error("action {action} needs argument \"{arg}\"")]
    MissingArg {
        /// The action.
        action: ActionType,
        /// The missing argument.
        arg: &'static str,
    },
    /// An argument has the wrong JSON type or shape.
    #[error("argument \"{arg}\" of {action} must be {expected}, found {found}")]
    WrongType {
        /// The action.
        action: ActionType,
        /// The argument.
        arg: &'static str,
        /// What was expected.
        expected: &'static str,
        /// A short rendering of what was found.
        found: String,
    },
    /// An argument has a value outside its allowed set.
    #[error("argument \"{arg}\" of {action} is {value:?}, allowed: {allowed}")]
    BadValue {
        /// The action.
        action: ActionType,
        /// The argument.
        arg: &'static str,
        /// The value found.
        value: String,
        /// The allowed values.
        allowed: &'static str,
    },
}

/// One `mobile_use` action with its arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send a key event (`text`, e.g. "volume_up").
    Key {
        /// The key name.
        text: String,
    },
    /// Tap a point.
    Click {
        /// The point.
        coordinate: Point,
    },
    /// Press a point for `time` seconds (optional on input; ignored by scoring).
    LongPress {
        /// The point.
        coordinate: Point,
        /// Seconds.
        time: Option<f64>,
    },
    /// Swipe from `coordinate` to `coordinate2`.
    Swipe {
        /// Start point.
        coordinate: Point,
        /// End point.
        coordinate2: Point,
    },
    /// Type text into the focused field.
    Type {
        /// The text.
        text: String,
    },
    /// Press a system button.
    SystemButton {
        /// The button.
        button: Button,
    },
    /// Open an app by name.
    Open {
        /// The app name.
        text: String,
    },
    /// Wait `time` seconds (optional on input).
    Wait {
        /// Seconds.
        time: Option<f64>,
    },
    /// End the task.
    Terminate {
        /// Success or failure.
        status: Status,
    },
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

struct Args<'a> {
    map: &'a Map<String, Value>,
    action: ActionType,
}

impl Args<'_> {
    fn get(&self, arg: &'static str) -> Result<&Value, ActionError> {
        match self.map.get(arg) {
            None | Some(Value::Null) => Err(ActionError::MissingArg {
                action: self.action,
                arg,
            }),
            Some(v) => Ok(v),
        }
    }

    fn wrong(&self, arg: &'static str, expected: &'static str, v: &Value) -> ActionError {
        ActionError::WrongType {
            action: self.action,
            arg,
            expected,
            found: short(v),
        }
    }

    fn text(&self, arg: &'static str) -> Result<String, ActionError> {
        let v = self.get(arg)?;
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| self.wrong(arg, "a string", v))
    }

    fn point(&self, arg: &'static str) -> Result<Point, ActionError> {
        let v = self.get(arg)?;
        let bad = || self.wrong(arg, "an array of two numbers [x, y]", v);
        let arr = v.as_array().ok_or_else(bad)?;
        match arr.as_slice() {
            [x, y] => match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) if x.is_finite() && y.is_finite() => Ok([x, y]),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }

    fn opt_seconds(&self, arg: &'static str) -> Result<Option<f64>, ActionError> {
        match self.map.get(arg) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(t) if t.is_finite() => Ok(Some(t)),
                _ => Err(self.wrong(arg, "a number of seconds", v)),
            },
        }
    }

    fn choice<T: FromStr>(
        &self,
        arg: &'static str,
        allowed: &'static str,
    ) -> Result<T, ActionError> {
        let v = self.get(arg)?;
        let s = v.as_str().ok_or_else(|| self.wrong(arg, "a string", v))?;
        s.parse().map_err(|_| ActionError::BadValue {
            action: self.action,
            arg,
            value: s.to_owned(),
            allowed,
        })
    }
}

impl Action {
    /// The action's type.
    pub fn action_type(&self) -> ActionType {
        match self {
            Action::Key { .. } => ActionType::Key,
            Action::Click { .. } => ActionType::Click,
            Action::LongPress { .. } => ActionType::LongPress,
            Action::Swipe { .. } => ActionType::Swipe,
            Action::Type { .. } => ActionType::Type,
            Action::SystemButton { .. } => ActionType::SystemButton,
            Action::Open { .. } => ActionType::Open,
            Action::Wait { .. } => ActionType::Wait,
            Action::Terminate { .. } => ActionType::Terminate,
        }
    }

    /// The (start) point of a click, long press or swipe.
    pub fn point(&self) -> Option<Point> {
        match self {
            Action::Click { coordinate }
            | Action::LongPress { coordinate, .. }
            | Action::Swipe { coordinate, .. } => Some(*coordinate),
            _ => None,
        }
    }

    /// Read an `arguments` object `{"action": ..., ...}`.
    pub(crate) fn from_arguments(v: &Value) -> Result<Action, ActionError> {
        let map = v.as_object().ok_or(ActionError::NotAnObject(kind(v)))?;
        let name = match map.get("action") {
            None | Some(Value::Null) => return Err(ActionError::MissingAction),
            Some(Value::String(s)) => s,
            Some(other) => return Err(ActionError::UnknownAction(short(other))),
        };
        let action: ActionType = name.parse().map_err(|_| match extension_action(name) {
            Some(known) => ActionError::Unsupported(known),
            None => ActionError::UnknownAction(name.clone()),
        })?;
        let a = Args { map, action };
        Ok(match action {
            ActionType::Key => Action::Key {
                text: a.text("text")?,
            },
            ActionType::Click => Action::Click {
                coordinate: a.point("coordinate")?,
            },
            ActionType::LongPress => Action::LongPress {
                coordinate: a.point("coordinate")?,
                time: a.opt_seconds("time")?,
            },
            ActionType::Swipe => Action::Swipe {
                coordinate: a.point("coordinate")?,
                coordinate2: a.point("coordinate2")?,
            },
            ActionType::Type => Action::Type {
                text: a.text("text")?,
            },
            ActionType::SystemButton => Action::SystemButton {
                button: a.choice("button", "Back, Home, Menu, Enter")?,
            },
            ActionType::Open => Action::Open {
                text: a.text("text")?,
            },
            ActionType::Wait => Action::Wait {
                time: a.opt_seconds("time")?,
            },
            ActionType::Terminate => Action::Terminate {
                status: a.choice("status", "success, failure")?,
            },
        })
    }

    /// Read a tool call `{"name": "mobile_use", "arguments": {...}}`; `arguments` may also be a JSON string.
    pub(crate) fn from_tool_call(v: &Value) -> Result<Action, ActionError> {
        let map = v.as_object().ok_or(ActionError::NotAnObject(kind(v)))?;
        match map.get("name") {
            None | Some(Value::Null) => return Err(ActionError::MissingName),
            Some(Value::String(s)) if s.trim() == TOOL_NAME => {}
            Some(Value::String(s)) => return Err(ActionError::WrongName(s.clone())),
            Some(other) => return Err(ActionError::WrongName(short(other))),
        }
        match map.get("arguments") {
            None | Some(Value::Null) => Err(ActionError::MissingArguments),
            Some(Value::String(s)) => {
                let inner: Value = serde_json::from_str(s)
                    .map_err(|_| ActionError::ArgumentsString(short(&Value::from(s.as_str()))))?;
                Action::from_arguments(&inner)
            }
            Some(args) => Action::from_arguments(args),
        }
    }

    /// The `arguments` object, `action` first.
    pub(crate) fn to_arguments(&self) -> Value {
        let mut m = Map::new();
        m.insert("action".into(), self.action_type().as_str().into());
        let pt = |p: &Point| Value::from(vec![num(p[0]), num(p[1])]);
        match self {
            Action::Key { text } | Action::Type { text } | Action::Open { text } => {
                m.insert("text".into(), text.as_str().into());
            }
            Action::Click { coordinate } => {
                m.insert("coordinate".into(), pt(coordinate));
            }
            Action::LongPress { coordinate, time } => {
                m.insert("coordinate".into(), pt(coordinate));
                if let Some(t) = time {
                    m.insert("time".into(), num(*t));
                }
            }
            Action::Swipe {
                coordinate,
                coordinate2,
            } => {
                m.insert("coordinate".into(), pt(coordinate));
                m.insert("coordinate2".into(), pt(coordinate2));
            }
            Action::SystemButton { button } => {
                m.insert("button".into(), button.as_str().into());
            }
            Action::Wait { time } => {
                if let Some(t) = time {
                    m.insert("time".into(), num(*t));
                }
            }
            Action::Terminate { status } => {
                m.insert("status".into(), status.as_str().into());
            }
        }
        Value::Object(m)
    }

    /// The whole tool call `{"name": "mobile_use", "arguments": {...}}`.
    pub fn to_tool_call(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), TOOL_NAME.into());
        m.insert("arguments".into(), self.to_arguments());
        Value::Object(m)
    }
}

/// A number as JSON: integral values are written without a fraction.
fn num(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        Value::from(x as i64)
    } else {
        Value::from(x)
    }
}

impl fmt::Display for Action {
    /// The compact arguments JSON.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_arguments())
    }
}

impl Serialize for Action {
    /// Serialized as the `arguments` object.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_arguments().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Action {
    /// Reads either an `arguments` object or a whole tool call.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        let r = if v.get("name").is_some() {
            Action::from_tool_call(&v)
        } else {
            Action::from_arguments(&v)
        };
        r.map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_case_variants() {
        for t in ActionType::ALL {
            assert_eq!(t.as_str().parse::<ActionType>(), Ok(*t));
            assert_eq!(t.as_str().to_uppercase().parse::<ActionType>(), Ok(*t));
        }
        assert_eq!("LongPress".parse(), Ok(ActionType::LongPress));
        assert_eq!("System-Button".parse(), Ok(ActionType::SystemButton));
        assert!("scroll".parse::<ActionType>().is_err());
        assert_eq!("home".parse(), Ok(Button::Home));
        assert_eq!("SUCCESS".parse(), Ok(Status::Success));
    }

    #[test]
    fn round_trip_all_actions() {
        let all = [
            json!({"action": "key", "text": "volume_up"}),
            json!({"action": "click", "coordinate": [10, 20]}),
            json!({"action": "long_press", "coordinate": [10.5, 20], "time": 2}),
            json!({"action": "swipe", "coordinate": [1, 2], "coordinate2": [3, 4]}),
            json!({"action": "type", "text": "你好"}),
            json!({"action": "system_button", "button": "Back"}),
            json!({"action": "open", "text": "淘宝"}),
            json!({"action": "wait", "time": 1.5}),
            json!({"action": "terminate", "status": "failure"}),
        ];
        for v in all {
            let a = Action::from_arguments(&v).unwrap();
            assert_eq!(a.to_arguments(), v);
            let back: Action = serde_json::from_value(a.to_tool_call()).unwrap();
            assert_eq!(back, a);
        }
    }

    #[test]
    fn errors_name_the_argument() {
        let e =
            Action::from_arguments(&json!({"action": "click", "coordinate": "12,3"})).unwrap_err();
        assert!(
            matches!(
                e,
                ActionError::WrongType {
                    arg: "coordinate",
                    ..
                }
            ),
            "{e}"
        );
        let e = Action::from_arguments(&json!({"action": "click"})).unwrap_err();
        assert!(matches!(
            e,
            ActionError::MissingArg {
                arg: "coordinate",
                ..
            }
        ));
        let e = Action::from_arguments(&json!({"action": "system_button", "button": "Power"}))
            .unwrap_err();
        assert!(matches!(e, ActionError::BadValue { arg: "button", .. }));
        let e = Action::from_arguments(&json!({"action": "fly"})).unwrap_err();
        assert_eq!(e, ActionError::UnknownAction("fly".into()));
        let e = Action::from_arguments(&json!({"action": "INFO", "text": "which?"})).unwrap_err();
        assert_eq!(e, ActionError::Unsupported("ask_user"));
        let e =
            Action::from_tool_call(&json!({"name": "computer_use", "arguments": {}})).unwrap_err();
        assert!(matches!(e, ActionError::WrongName(_)));
        let a = Action::from_tool_call(
            &json!({"name": "mobile_use", "arguments": "{\"action\":\"wait\"}"}),
        );
        assert_eq!(a, Ok(Action::Wait { time: None }));
    }
}
