//! The model-output parser: `<think>…</think><action>…</action><tool_call>…</tool_call>`.
//!
//! Tolerates whitespace and newlines, a Markdown code fence inside `<tool_call>`, a missing closing
//! `</tool_call>`, and a bare JSON tool call without any tags. The first tool call wins. A thought may also come in
//! `<thinking>` tags (MAI-UI) or end with a lone `</think>` (Qwen3-VL Thinking, whose prompt opens the tag).

mod reference;

use serde::Serialize;
use serde_json::Value;

pub use reference::read_as;

use crate::action::{Action, ActionError};

/// Why a response yields no valid action (a **format error** in the metrics).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseFailure {
    /// The response is empty or whitespace.
    #[error("empty response")]
    Empty,
    /// No `<tool_call>` tag and no JSON tool call anywhere.
    #[error("no tool call found")]
    NoToolCall,
    /// The tool call text is not valid JSON.
    #[error("tool call is not valid JSON: {0}")]
    InvalidJson(String),
    /// The JSON is not a valid `mobile_use` call (wrong name, unknown action, bad arguments).
    #[error("{0}")]
    Action(#[from] ActionError),
}

impl ParseFailure {
    /// A stable snake_case kind, for reports.
    pub fn kind(&self) -> &'static str {
        match self {
            ParseFailure::Empty => "empty",
            ParseFailure::NoToolCall => "no_tool_call",
            ParseFailure::InvalidJson(_) => "invalid_json",
            ParseFailure::Action(ActionError::WrongName(_) | ActionError::MissingName) => {
                "wrong_name"
            }
            ParseFailure::Action(ActionError::UnknownAction(_) | ActionError::MissingAction) => {
                "unknown_action"
            }
            ParseFailure::Action(ActionError::Unsupported(_)) => "unsupported_action",
            ParseFailure::Action(ActionError::MissingArg { .. }) => "missing_argument",
            ParseFailure::Action(ActionError::WrongType { .. } | ActionError::BadValue { .. }) => {
                "bad_argument"
            }
            ParseFailure::Action(_) => "bad_tool_call",
        }
    }
}

impl ParseFailure {
    /// The canonical name of an action outside the `mobile_use` space that the response validly answered with
    /// (see [`ActionError::Unsupported`]): scored as a wrong type, not as a format error.
    pub fn unsupported_action(&self) -> Option<&'static str> {
        match self {
            ParseFailure::Action(ActionError::Unsupported(name)) => Some(name),
            _ => None,
        }
    }
}

impl Serialize for ParseFailure {
    /// `{"kind": ..., "message": ...}`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("kind", self.kind())?;
        m.serialize_entry("message", &self.to_string())?;
        m.end()
    }
}

/// What a raw model response contains.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedOutput {
    /// The parsed action, or why there is none.
    pub action: Result<Action, ParseFailure>,
    /// The text inside `<think>…</think>` (trimmed).
    pub think: Option<String>,
    /// The text inside `<action>…</action>` (trimmed).
    pub action_text: Option<String>,
    /// The tool-call JSON text that was parsed (trimmed, fence removed).
    pub tool_call_text: Option<String>,
    /// All three tags present, closed and in order: think, action, tool_call.
    pub full_format: bool,
}

/// A tag's span: byte offsets of the opening tag start, the content, and the end (after the closing tag).
struct Tag<'a> {
    start: usize,
    content: &'a str,
    end: usize,
    closed: bool,
}

fn find_tag<'a>(text: &'a str, name: &str, from: usize) -> Option<Tag<'a>> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = from + text.get(from..)?.find(&open)?;
    let body = start + open.len();
    match text[body..].find(&close) {
        Some(rel) => Some(Tag {
            start,
            content: &text[body..body + rel],
            end: body + rel + close.len(),
            closed: true,
        }),
        None => Some(Tag {
            start,
            content: &text[body..],
            end: text.len(),
            closed: false,
        }),
    }
}

/// Remove a surrounding Markdown code fence (```json … ```), if any.
fn strip_fence(s: &str) -> &str {
    let t = s.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let rest = match rest.find('\n') {
        Some(nl) if rest[..nl].trim().chars().all(|c| c.is_ascii_alphanumeric()) => &rest[nl + 1..],
        _ => rest.trim_start_matches(|c: char| c.is_ascii_alphabetic()),
    };
    rest.trim_end().strip_suffix("```").unwrap_or(rest).trim()
}

/// The balanced `{…}` object starting at byte `start` (which must be `{`), respecting JSON strings.
fn balanced_object(text: &str, start: usize) -> Option<&str> {
    let mut depth = 0usize;
    let mut in_str = false;
    let mut escaped = false;
    for (i, c) in text[start..].char_indices() {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&text[start..start + i + 1]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Parse the text of one tool call (inside the tag): the first JSON object in it.
fn parse_tool_call(body: &str) -> Result<Action, ParseFailure> {
    let body = strip_fence(body);
    if body.is_empty() {
        return Err(ParseFailure::NoToolCall);
    }
    let json = match body.find('{') {
        Some(i) => balanced_object(body, i).unwrap_or(&body[i..]),
        None => body,
    };
    let v: Value =
        serde_json::from_str(json).map_err(|e| ParseFailure::InvalidJson(e.to_string()))?;
    Ok(Action::from_tool_call(&v)?)
}

/// Find a bare JSON tool call (an object with a `name` key) anywhere in `text`.
fn find_bare_tool_call(text: &str) -> Option<(&str, Result<Action, ParseFailure>)> {
    let mut first_obj: Option<(&str, Result<Action, ParseFailure>)> = None;
    for (i, _) in text.match_indices('{') {
        let Some(obj) = balanced_object(text, i) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(obj) else {
            continue;
        };
        if v.get("name").is_some() || v.get("arguments").is_some() {
            return Some((obj, Action::from_tool_call(&v).map_err(ParseFailure::from)));
        }
        if first_obj.is_none() && v.get("action").is_some() {
            first_obj = Some((obj, Action::from_tool_call(&v).map_err(ParseFailure::from)));
        }
    }
    first_obj
}

/// Parse a raw model response.
pub fn parse_response(text: &str) -> ParsedOutput {
    // MAI-UI writes its thought in `<thinking>` tags.
    let think = find_tag(text, "think", 0).or_else(|| find_tag(text, "thinking", 0));
    // Qwen3-VL Thinking outputs carry only the closing tag (the opening one ends the prompt): the thought is what
    // precedes it, and the answer is looked for after it.
    let bare_close = think.is_none().then(|| text.find("</think>")).flatten();
    let think_text = match (&think, bare_close) {
        (Some(t), _) => Some(t.content.trim().to_owned()),
        (None, Some(i)) => Some(text[..i].trim().to_owned()),
        (None, None) => None,
    };
    let after_think = match (&think, bare_close) {
        (Some(t), _) if t.closed => t.end,
        (None, Some(i)) => i + "</think>".len(),
        _ => 0,
    };
    let action_tag = find_tag(text, "action", after_think);
    let after_action = action_tag
        .as_ref()
        .filter(|t| t.closed)
        .map_or(after_think, |t| t.end);
    let tool = find_tag(text, "tool_call", after_action).or_else(|| find_tag(text, "tool_call", 0));

    let (tool_call_text, action) = if text.trim().is_empty() {
        (None, Err(ParseFailure::Empty))
    } else if let Some(t) = &tool {
        (
            Some(strip_fence(t.content).to_owned()),
            parse_tool_call(t.content),
        )
    } else {
        let rest = &text[after_action..];
        match find_bare_tool_call(rest) {
            Some((json, r)) => (Some(json.to_owned()), r),
            None => (None, Err(ParseFailure::NoToolCall)),
        }
    };

    let full_format = match (&think, &action_tag, &tool) {
        (Some(th), Some(ac), Some(tc)) => {
            th.closed && ac.closed && tc.closed && th.end <= ac.start && ac.end <= tc.start
        }
        _ => false,
    };
    let mut action_text = action_tag.map(|t| t.content.trim().to_owned());
    let mut think_text = think_text;
    if think_text.is_none() && action_text.is_none() {
        let head = &text[..tool.as_ref().map_or(text.len(), |t| t.start)];
        (think_text, action_text) = labelled_lines(head);
    }
    ParsedOutput {
        action,
        think: think_text,
        action_text,
        tool_call_text,
        full_format,
    }
}

/// The `Thought: …` and `Action: …` lines that Qwen3-VL's `mobile_use` prompt asks for before the tool call, when
/// the response has no tags for them (each the rest of its line; the last of each wins).
fn labelled_lines(head: &str) -> (Option<String>, Option<String>) {
    let (mut thought, mut action) = (None, None);
    for line in head.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix("Thought:") {
            thought = Some(t.trim().to_owned());
        } else if let Some(a) = line.strip_prefix("Action:") {
            action = Some(a.trim().to_owned());
        }
    }
    (thought, action)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Button;

    #[test]
    fn full_format() {
        let r = "<think>在首页</think>\n<action>点击搜索框</action>\n<tool_call>\n{\"name\": \"mobile_use\", \"arguments\": {\"action\": \"click\", \"coordinate\": [360, 200]}}\n</tool_call>";
        let p = parse_response(r);
        assert_eq!(
            p.action,
            Ok(Action::Click {
                coordinate: [360.0, 200.0]
            })
        );
        assert!(p.full_format);
        assert_eq!(p.think.as_deref(), Some("在首页"));
        assert_eq!(p.action_text.as_deref(), Some("点击搜索框"));
    }

    #[test]
    fn fence_and_bare() {
        let r = "<tool_call>\n```json\n{\"name\":\"mobile_use\",\"arguments\":{\"action\":\"system_button\",\"button\":\"home\"}}\n```\n</tool_call>";
        let p = parse_response(r);
        assert_eq!(
            p.action,
            Ok(Action::SystemButton {
                button: Button::Home
            })
        );
        assert!(!p.full_format);
        let p = parse_response("I will wait. {\"name\": \"mobile_use\", \"arguments\": {\"action\": \"wait\", \"time\": 2}}");
        assert_eq!(p.action, Ok(Action::Wait { time: Some(2.0) }));
    }

    #[test]
    fn failures() {
        assert_eq!(parse_response("  \n").action, Err(ParseFailure::Empty));
        assert_eq!(
            parse_response("<think>hmm</think>").action,
            Err(ParseFailure::NoToolCall)
        );
        assert_eq!(
            parse_response("<tool_call>{\"name\": </tool_call>")
                .action
                .unwrap_err()
                .kind(),
            "invalid_json"
        );
    }

    #[test]
    fn thought_and_action_lines_of_the_qwen3_prompt() {
        let r = "Thought: The search box is at the top.\nAction: Tap the search box.\n<tool_call>\n{\"name\": \"mobile_use\", \"arguments\": {\"action\": \"click\", \"coordinate\": [500, 80]}}\n</tool_call>";
        let p = parse_response(r);
        assert_eq!(p.think.as_deref(), Some("The search box is at the top."));
        assert_eq!(p.action_text.as_deref(), Some("Tap the search box."));
        assert!(!p.full_format);
        let tagged = parse_response("<think>x</think>Action: y\n<tool_call>{}</tool_call>");
        assert_eq!(
            (tagged.think.as_deref(), tagged.action_text),
            (Some("x"), None)
        );
    }

    #[test]
    fn balanced_ignores_braces_in_strings() {
        let t = r#"{"a": "}{", "b": {"c": 1}} tail"#;
        assert_eq!(balanced_object(t, 0), Some(r#"{"a": "}{", "b": {"c": 1}}"#));
    }
}
