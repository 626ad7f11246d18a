//! Reading a response as a reference evaluator reads it ([`Reading`]), for the rule presets that reproduce one.
//!
//! The references find the tool call with plain string splits, load it with Python's `json.loads`, compare action
//! names exactly and read each argument only where their matcher uses it, failing (the step counts as wrong) on
//! any exception. Each function here follows one of them: what the reference cannot read is a
//! [`ParseFailure`], what it never reads is accepted whatever it holds.

use serde_json::{Map, Value};

mod python;

use python::{mark_non_finite, non_finite, py_str, NON_FINITE};

use super::ParseFailure;
use crate::action::{Action, ActionError, ActionType, Button, Status};
use crate::settings::{py_strip, Reading};

/// The bare tool call prefix the Qwen evaluator looks for when the response has no `<tool_call>` tag.
const BARE_PREFIX: &str = r#"{"name": "mobile_use", "arguments":"#;

/// The response read as `reading` says; `None` for [`Reading::Lenient`] (the caller's own parse stands).
pub fn read_as(reading: Reading, text: &str) -> Option<Result<Action, ParseFailure>> {
    let r = match reading {
        Reading::Lenient => return None,
        Reading::QwenEvaluator | Reading::QwenConverted | Reading::AitwConverted => {
            qwen_extract(text)
                .ok_or(ParseFailure::NoToolCall)
                .and_then(|json| load_arguments(py_strip(&json)))
                .and_then(|args| qwen_arguments(&args, reading).map_err(ParseFailure::from))
        }
        Reading::AgentCpm => agentcpm_extract(text)
            .ok_or(ParseFailure::NoToolCall)
            .and_then(load_arguments)
            .and_then(|args| agentcpm_arguments(&args).map_err(ParseFailure::from)),
    };
    Some(r)
}

/// The Qwen AndroidControl evaluator's extraction (InfiGUI-R1 `AndroidControl.compute_scores`, thinking off):
/// the text after the first `<tool_call>` up to the next one, else from the literal bare prefix on; cut at
/// `</tool_call>`, or without it at `<conclusion>` and after the last `}}`.
fn qwen_extract(text: &str) -> Option<String> {
    const OPEN: &str = "<tool_call>";
    let pred = match text.find(OPEN) {
        Some(i) => {
            let rest = &text[i + OPEN.len()..];
            rest[..rest.find(OPEN).unwrap_or(rest.len())].to_owned()
        }
        None => {
            let i = text.find(BARE_PREFIX)?;
            text[i..].to_owned()
        }
    };
    Some(match pred.find("</tool_call>") {
        Some(i) => pred[..i].to_owned(),
        None => {
            let head = &pred[..pred.find("<conclusion>").unwrap_or(pred.len())];
            let head = &head[..head.rfind("}}").unwrap_or(head.len())];
            format!("{head}}}}}")
        }
    })
}

/// AgentCPM-GUI's `qwen2_5_2_minicpm`: the text between the first and the second `"<tool_call>\n"`, cut at the
/// first `"\n</tool_call>"`.
fn agentcpm_extract(text: &str) -> Option<&str> {
    let body = text.split("<tool_call>\n").nth(1)?;
    body.split("\n</tool_call>").next()
}

/// `json.loads(text)['arguments']`, with Python's `NaN`, `Infinity` and `-Infinity` read as marked strings
/// ([`non_finite`]).
fn load_arguments(text: &str) -> Result<Value, ParseFailure> {
    let v: Value = serde_json::from_str(&mark_non_finite(text))
        .map_err(|e| ParseFailure::InvalidJson(e.to_string()))?;
    let map = v
        .as_object()
        .ok_or(ActionError::NotAnObject("another value"))?;
    map.get("arguments")
        .cloned()
        .ok_or(ParseFailure::Action(ActionError::MissingArguments))
}

/// The arguments object and its action, named exactly as the references compare it.
fn action_of(args: &Value) -> Result<(&Map<String, Value>, ActionType), ActionError> {
    let map = args
        .as_object()
        .ok_or(ActionError::NotAnObject("another value"))?;
    let name = match map.get("action") {
        None => return Err(ActionError::MissingAction),
        Some(Value::String(s)) => s.as_str(),
        Some(other) => return Err(ActionError::UnknownAction(other.to_string())),
    };
    let t = ActionType::ALL
        .iter()
        .copied()
        .find(|t| t.as_str() == name)
        .ok_or_else(|| ActionError::UnknownAction(name.to_owned()))?;
    Ok((map, t))
}

/// A JSON number as Python reads it (a boolean is the integer 0 or 1, `NaN` and the infinities floats).
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        other => other.as_f64().or_else(|| non_finite(other)),
    }
}

struct Fields<'a> {
    map: &'a Map<String, Value>,
    action: ActionType,
}

impl Fields<'_> {
    fn get(&self, arg: &'static str) -> Result<&Value, ActionError> {
        self.map.get(arg).ok_or(ActionError::MissingArg {
            action: self.action,
            arg,
        })
    }

    fn wrong(&self, arg: &'static str, expected: &'static str) -> ActionError {
        ActionError::WrongType {
            action: self.action,
            arg,
            expected,
            found: self.map.get(arg).map_or_else(String::new, Value::to_string),
        }
    }

    /// `p[0], p[1]` of a sequence of at least two numbers (`exactly`: Python's `x, y = p`, two and no more).
    fn point(&self, arg: &'static str, exactly: bool) -> Result<[f64; 2], ActionError> {
        let bad = || self.wrong(arg, "an array of two numbers");
        let arr = self.get(arg)?.as_array().ok_or_else(bad)?;
        if arr.len() < 2 || (exactly && arr.len() != 2) {
            return Err(bad());
        }
        match (number(&arr[0]), number(&arr[1])) {
            (Some(x), Some(y)) => Ok([x, y]),
            _ => Err(bad()),
        }
    }

    /// [`Self::point`] of finite numbers: a `NaN` or infinite point is refused (a departure `docs/rules.md` lists
    /// for swipes; a click or long press there is wrong by every reference).
    fn finite_point(&self, arg: &'static str, exactly: bool) -> Result<[f64; 2], ActionError> {
        let p = self.point(arg, exactly)?;
        if p.iter().all(|v| v.is_finite()) {
            Ok(p)
        } else {
            Err(self.wrong(arg, "an array of two finite numbers"))
        }
    }

    /// `norm_coordinate`'s division of a `candidate_bbox`: an iterable (an empty string or object is one) of
    /// sequences of at least four numbers; never read after that.
    fn divisible_boxes(&self, arg: &'static str) -> Result<(), ActionError> {
        let bad = || self.wrong(arg, "an array of boxes of four numbers");
        let boxes = match self.map.get(arg) {
            None => return Ok(()),
            Some(Value::String(s)) if s.is_empty() => return Ok(()),
            Some(Value::Object(m)) if m.is_empty() => return Ok(()),
            Some(Value::Array(a)) => a,
            Some(_) => return Err(bad()),
        };
        let four = |b: &Value| {
            b.as_array()
                .is_some_and(|b| b.len() >= 4 && b[..4].iter().all(|v| number(v).is_some()))
        };
        boxes.iter().all(four).then_some(()).ok_or_else(bad)
    }

    fn string(&self, arg: &'static str) -> Result<String, ActionError> {
        match self.get(arg)? {
            Value::String(s) if !s.starts_with(NON_FINITE) => Ok(s.clone()),
            _ => Err(self.wrong(arg, "a string")),
        }
    }

    /// `.lower().strip()` of a string argument, which must then be one of `allowed` (lower case).
    fn lowered<T: std::str::FromStr>(
        &self,
        arg: &'static str,
        allowed: &'static str,
    ) -> Result<T, ActionError> {
        let s = self.string(arg)?;
        let key = py_strip(&s.to_lowercase()).to_owned();
        let known = allowed.split(", ").any(|a| a.to_lowercase() == key);
        known
            .then(|| key.parse().ok())
            .flatten()
            .ok_or(ActionError::BadValue {
                action: self.action,
                arg,
                value: s,
                allowed,
            })
    }

    /// A number where the reference never reads it.
    fn unread_seconds(&self, arg: &'static str) -> Option<f64> {
        self.map.get(arg).and_then(Value::as_f64)
    }
}

/// The arguments as the Qwen evaluator's `evaluate_android_control_action` reads them
/// ([`Reading::QwenEvaluator`]: `norm_coordinate` divides any `coordinate` and `coordinate2` first, so a bad one
/// fails every action) or as the conversions for AITW and GUI-Odyssey read them ([`Reading::QwenConverted`]:
/// only what the action needs; a typed text may be any value, written as Python's `str()` writes it).
fn qwen_arguments(args: &Value, reading: Reading) -> Result<Action, ActionError> {
    let (map, action) = action_of(args)?;
    let f = Fields { map, action };
    if reading == Reading::QwenEvaluator {
        f.divisible_boxes("candidate_bbox")?;
        for arg in ["coordinate", "coordinate2"] {
            if map.contains_key(arg) {
                f.point(arg, false)?;
            }
        }
    }
    let unread = |arg| Ok(map.get(arg).map_or_else(String::new, py_str));
    let text = |arg| match (reading, action) {
        (Reading::QwenConverted, ActionType::Type) => f.get(arg).map(py_str),
        (Reading::QwenConverted | Reading::AitwConverted, _) => unread(arg),
        _ => f.string(arg),
    };
    Ok(match action {
        ActionType::Click => Action::Click {
            coordinate: f.finite_point("coordinate", false)?,
        },
        ActionType::LongPress => Action::LongPress {
            coordinate: f.finite_point("coordinate", false)?,
            time: f.unread_seconds("time"),
        },
        ActionType::Swipe => Action::Swipe {
            coordinate: f.finite_point("coordinate", false)?,
            coordinate2: f.finite_point("coordinate2", false)?,
        },
        ActionType::Type => Action::Type {
            text: text("text")?,
        },
        ActionType::Open => Action::Open {
            text: text("text")?,
        },
        ActionType::Key => Action::Key {
            text: text("text")?,
        },
        ActionType::SystemButton => Action::SystemButton {
            button: f.lowered::<Button>("button", "Back, Home, Menu, Enter")?,
        },
        ActionType::Wait => Action::Wait {
            time: f.unread_seconds("time"),
        },
        ActionType::Terminate => Action::Terminate {
            status: f.lowered::<Status>("status", "success, failure")?,
        },
    })
}

/// The arguments as AgentCPM-GUI's `qwen2_5_2_minicpm` converts them and its action schema accepts them: points
/// unpacked as exactly two numbers, `time` required for a long press and a wait (its milliseconds a whole
/// number, not negative), typed text a string, the buttons `Back`, `Home` and `Enter` as written; `open` and `key`
/// have no conversion. A terminate's status must still be success or failure (the conversion turns any terminate
/// into "finish"; refusing an unknown status is a departure `docs/rules.md` lists).
fn agentcpm_arguments(args: &Value) -> Result<Action, ActionError> {
    let (map, action) = action_of(args)?;
    let f = Fields { map, action };
    let millis = |arg: &'static str| -> Result<f64, ActionError> {
        let t = number(f.get(arg)?).ok_or_else(|| f.wrong(arg, "a number"))?;
        let ms = t * 1000.0;
        if ms >= 0.0 && ms.fract() == 0.0 {
            Ok(t)
        } else {
            Err(f.wrong(arg, "a number of whole milliseconds"))
        }
    };
    Ok(match action {
        ActionType::Click => Action::Click {
            coordinate: f.finite_point("coordinate", true)?,
        },
        ActionType::LongPress => {
            let coordinate = f.finite_point("coordinate", true)?;
            Action::LongPress {
                coordinate,
                time: Some(millis("time")?),
            }
        }
        ActionType::Swipe => Action::Swipe {
            coordinate: f.finite_point("coordinate", true)?,
            coordinate2: f.finite_point("coordinate2", true)?,
        },
        ActionType::Type => Action::Type {
            text: f.string("text")?,
        },
        ActionType::SystemButton => {
            let s = f.string("button")?;
            let button = [Button::Back, Button::Home, Button::Enter]
                .into_iter()
                .find(|b| b.as_str() == s)
                .ok_or(ActionError::BadValue {
                    action,
                    arg: "button",
                    value: s,
                    allowed: "Back, Home, Enter",
                })?;
            Action::SystemButton { button }
        }
        ActionType::Wait => Action::Wait {
            time: Some(millis("time")?),
        },
        ActionType::Terminate => Action::Terminate {
            status: f.lowered::<Status>("status", "success, failure")?,
        },
        ActionType::Open | ActionType::Key => {
            return Err(ActionError::UnknownAction(action.as_str().to_owned()))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(reading: Reading, text: &str) -> Result<Action, ParseFailure> {
        read_as(reading, text).expect("a reference reading")
    }

    const CLICK: &str =
        r#"{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [5, 6]}}"#;

    #[test]
    fn the_qwen_evaluator_finds_only_its_own_forms() {
        let q = Reading::QwenEvaluator;
        let want = Ok(Action::Click {
            coordinate: [5.0, 6.0],
        });
        assert_eq!(read(q, &format!("Answer: {CLICK}")), want);
        assert_eq!(read(q, &format!("<tool_call>{CLICK}")), want);
        let reordered =
            r#"{"arguments": {"action": "click", "coordinate": [5, 6]}, "name": "mobile_use"}"#;
        assert_eq!(read(q, reordered), Err(ParseFailure::NoToolCall));
        let draft =
            format!("<think><tool_call>\n{{}}\n</tool_call></think><tool_call>{CLICK}</tool_call>");
        assert!(matches!(read(q, &draft), Err(ParseFailure::Action(_))));
        let tail = format!("<tool_call>\n{CLICK}\nnext: {{\"a\": {{\"b\": 1}}}} done");
        assert!(matches!(read(q, &tail), Err(ParseFailure::InvalidJson(_))));
        assert!(read(q, &format!("<tool_call>json\n{CLICK}</tool_call>")).is_err());
        let name = CLICK.replace("\"click\"", "\"click \"");
        assert!(read(q, &name).is_err());
        assert!(read_as(Reading::Lenient, CLICK).is_none());
    }

    #[test]
    fn arguments_are_read_where_the_reference_reads_them() {
        let call = |args: &str| {
            format!("<tool_call>\n{{\"name\": \"x\", \"arguments\": {args}}}\n</tool_call>")
        };
        let typed = call(r#"{"action": "type", "text": 5}"#);
        assert!(read(Reading::QwenEvaluator, &typed).is_err());
        assert!(read(Reading::AgentCpm, &typed).is_err());
        assert_eq!(
            read(Reading::QwenConverted, &typed),
            Ok(Action::Type { text: "5".into() })
        );
        let three = call(r#"{"action": "click", "coordinate": [1, 2, 3]}"#);
        assert!(read(Reading::QwenEvaluator, &three).is_ok());
        assert!(read(Reading::AgentCpm, &three).is_err());
        let stray = call(r#"{"action": "type", "text": "a", "coordinate": [1]}"#);
        assert!(read(Reading::QwenEvaluator, &stray).is_err());
        assert!(read(Reading::QwenConverted, &stray).is_ok());
        let button = call(r#"{"action": "system_button", "button": "Back\n"}"#);
        assert!(read(Reading::QwenEvaluator, &button).is_ok());
        assert!(read(Reading::AgentCpm, &button).is_err());
        let wait = call(r#"{"action": "wait"}"#);
        assert!(read(Reading::QwenEvaluator, &wait).is_ok());
        assert!(read(Reading::AgentCpm, &wait).is_err());
        let list = Value::from(vec![Value::from(5), Value::Null, Value::from(1.5)]);
        assert_eq!(py_str(&list), "[5, None, 1.5]");
    }

    fn args(args: &str) -> String {
        format!("<tool_call>\n{{\"name\": \"x\", \"arguments\": {args}}}\n</tool_call>")
    }

    #[test]
    fn a_type_without_text_is_read_where_the_conversion_never_reads_it() {
        let bare = args(r#"{"action": "type"}"#);
        let typed = Ok(Action::Type { text: "".into() });
        assert_eq!(read(Reading::AitwConverted, &bare), typed);
        assert!(read(Reading::QwenConverted, &bare).is_err());
        assert!(read(Reading::QwenEvaluator, &bare).is_err());
        let open = args(r#"{"action": "open"}"#);
        assert_eq!(
            read(Reading::QwenConverted, &open),
            Ok(Action::Open { text: "".into() })
        );
        assert_eq!(
            read(
                Reading::AitwConverted,
                &args(r#"{"action": "type", "text": 1.5e16}"#)
            ),
            Ok(Action::Type {
                text: "1.5e+16".into()
            })
        );
    }

    #[test]
    fn an_answer_candidate_bbox_is_divided_by_the_qwen_evaluator_only() {
        let q = Reading::QwenEvaluator;
        let with = |boxes: &str| {
            args(&format!(
                r#"{{"action": "click", "coordinate": [5, 6], "candidate_bbox": {boxes}}}"#
            ))
        };
        for fine in [
            "[]",
            "[[1, 2, 3, 4]]",
            "[[1, 2, 3, 4, \"x\"], [0, true, 1, 2]]",
            "\"\"",
            "{}",
        ] {
            assert!(read(q, &with(fine)).is_ok(), "{fine}");
        }
        for bad in [
            "5",
            "null",
            "[[1, 2, 3]]",
            "[[1, 2, \"3\", 4]]",
            "\"ab\"",
            "[5]",
        ] {
            assert!(read(q, &with(bad)).is_err(), "{bad}");
            assert!(read(Reading::QwenConverted, &with(bad)).is_ok(), "{bad}");
        }
    }

    #[test]
    fn python_non_finite_numbers_are_read_where_json_loads_reads_them() {
        let wait = args(r#"{"action": "wait", "time": NaN}"#);
        assert_eq!(
            read(Reading::QwenEvaluator, &wait),
            Ok(Action::Wait { time: None })
        );
        assert!(read(Reading::AgentCpm, &wait).is_err());
        let stray =
            args(r#"{"action": "click", "coordinate": [5, 6], "coordinate2": [-Infinity, 1]}"#);
        assert!(read(Reading::QwenEvaluator, &stray).is_ok());
        for (token, text) in [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf")] {
            let typed = args(&format!(r#"{{"action": "type", "text": {token}}}"#));
            let want = Ok(Action::Type { text: text.into() });
            assert_eq!(read(Reading::QwenConverted, &typed), want);
            assert!(read(Reading::QwenEvaluator, &typed).is_err());
        }
        let listed = args(r#"{"action": "type", "text": [NaN, "NaN", 1e-05]}"#);
        assert_eq!(
            read(Reading::QwenConverted, &listed),
            Ok(Action::Type {
                text: "[nan, 'NaN', 1e-05]".into()
            })
        );
        let click = args(r#"{"action": "click", "coordinate": [NaN, 6]}"#);
        assert!(read(Reading::QwenEvaluator, &click).is_err());
        let quoted = args(r#"{"action": "type", "text": "say NaN \"Infinity\""}"#);
        assert_eq!(
            read(Reading::QwenEvaluator, &quoted),
            Ok(Action::Type {
                text: "say NaN \"Infinity\"".into()
            })
        );
    }
}
