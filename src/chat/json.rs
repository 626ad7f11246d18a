//! The `tojson` filter as transformers defines it for chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=False)`, i.e. `", "` and
//! `": "` separators (`","` at line ends when indented), keys in insertion order, no HTML escaping (minijinja's
//! own `tojson` escapes `<`, `>`, `&` and `'`, which would change tool prompts).

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, ErrorKind};

/// Separators and indent of one `json.dumps` call.
struct Style {
    indent: Option<usize>,
    item: String,
    key: String,
}

/// The `tojson(indent=None, separators=None)` filter.
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    // Accepted and ignored, as in Python when False.
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let (item, key) = match separators {
        Some(s) if s.len() == 2 => (s[0].clone(), s[1].clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "separators must be a pair",
            ))
        }
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let json = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let mut out = String::new();
    write(&json, &Style { indent, item, key }, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

fn newline(style: &Style, depth: usize, out: &mut String) {
    if let Some(n) = style.indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', n * depth));
    }
}

fn write(v: &serde_json::Value, style: &Style, depth: usize, out: &mut String) {
    use serde_json::Value as J;
    match v {
        J::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item);
                }
                newline(style, depth + 1, out);
                write(x, style, depth + 1, out);
            }
            newline(style, depth, out);
            out.push(']');
        }
        J::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (k, x)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item);
                }
                newline(style, depth + 1, out);
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(&style.key);
                write(x, style, depth + 1, out);
            }
            newline(style, depth, out);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}
