//! Python's reading and writing of JSON values, as the reference evaluators get them from `json.loads` and
//! `str()`.

use serde_json::Value;

/// Starts the string that stands for a `NaN`, `Infinity` or `-Infinity` token; JSON strings cannot hold a raw
/// U+0000, so no real string is taken for one.
pub(super) const NON_FINITE: char = '\u{0}';

/// The text with each `NaN`, `Infinity` and `-Infinity` token outside strings (which Python's `json.loads` reads
/// as floats) replaced by a string of [`NON_FINITE`] and the token.
pub(super) fn mark_non_finite(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if !in_string {
            let token = ["-Infinity", "Infinity", "NaN"]
                .into_iter()
                .find(|t| rest.starts_with(t));
            if let Some(t) = token {
                out.push_str(&format!("\"\\u0000{t}\""));
                rest = &rest[t.len()..];
                continue;
            }
        }
        if in_string && escaped {
            escaped = false;
        } else if in_string && c == '\\' {
            escaped = true;
        } else if c == '"' {
            in_string = !in_string;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The float a marked `NaN`, `Infinity` or `-Infinity` string stands for.
pub(super) fn non_finite(v: &Value) -> Option<f64> {
    match v.as_str()?.strip_prefix(NON_FINITE)? {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// A JSON value as Python's `str()` writes the value `json.loads` makes of it.
pub(super) fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) if !s.starts_with(NON_FINITE) => s.clone(),
        other => py_repr(other),
    }
}

/// Python's `repr()` of the value `json.loads` makes of `v` (strings quoted as Python quotes them when they hold
/// no quote or backslash of their own).
fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => match n.as_f64() {
            Some(x) if !n.is_i64() && !n.is_u64() => py_float(x),
            _ => n.to_string(),
        },
        Value::String(s) if s.starts_with(NON_FINITE) => {
            non_finite(v).map_or_else(|| s.clone(), py_float)
        }
        Value::String(s) if s.contains('\'') && !s.contains('"') => format!("\"{s}\""),
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(py_repr).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", py_repr(&Value::from(k.as_str())), py_repr(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// Python's `repr()` of a float: the shortest digits that read back, positional for decimal exponents from -4 to
/// 15, else `d.ddde+XX` with a sign and at least two exponent digits; `nan`, `inf`, `-inf`.
fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{x:?}");
        return if s.contains('.') { s } else { format!("{s}.0") };
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_written_as_python_writes_them() {
        let cases = [
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.25e-123, "1.25e-123"),
            (1e300, "1e+300"),
            (-2.5, "-2.5"),
            (-0.0, "-0.0"),
            (5.0, "5.0"),
            (0.1, "0.1"),
        ];
        for (x, want) in cases {
            assert_eq!(py_float(x), want, "{x}");
        }
    }
}
