//! The typed readings of flag values that clap's own parsers do not cover, each refusing a bad value with
//! what it accepts.

/// A Hugging Face switch: `1`, `true`, `yes` or `on` (any case) is on; anything else, empty included, is off.
pub(super) fn hf_true(s: &str) -> Result<bool, String> {
    Ok(matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    ))
}

/// `on`/`off` (also `1`/`0`, `true`/`false`, `yes`/`no`), case-insensitive.
pub(super) fn on_off(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        other => Err(format!("`{other}` is neither on nor off")),
    }
}

/// A positive, finite rate in GFLOP/s.
pub(super) fn positive_gflops(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("expected a positive rate in GFLOP/s, found {s:?}")),
    }
}

/// A whole number (`--max-new-tokens 32`); a negative or fractional value, or one beyond the type's range, is
/// refused with the accepted range, rather than taken for a flag (clap names the flag).
pub(super) fn whole<T: Whole>(s: &str) -> Result<T, String> {
    let t = s.trim();
    if let Ok(v) = t.parse() {
        return Ok(v);
    }
    let range = format!("0 to {}", T::MAX);
    match t.parse::<i128>() {
        Ok(v) if v >= 0 => Err(format!("{v} is beyond the accepted range ({range})")),
        _ => Err(format!(
            "expected a whole number (0, 1, 2, …; accepted: {range}), found {s:?}"
        )),
    }
}

/// A whole number of at least 1 (`--hub-timeout`, `bench --steps`), refused below with the accepted range.
pub(super) fn at_least_one<T: Whole>(s: &str) -> Result<T, String> {
    let v: T = whole(s)?;
    if v == T::ZERO {
        return Err(format!("must be at least 1 (accepted: 1 to {})", T::MAX));
    }
    Ok(v)
}

/// `qwen2.5-vl` or `qwen3-vl` (case-insensitive; the `config.json` spellings `qwen2_5_vl` and `qwen3_vl` too).
pub(super) fn model_family(s: &str) -> Result<crate::settings::ModelFamily, String> {
    use crate::settings::ModelFamily;
    let key = s.trim().to_ascii_lowercase();
    ModelFamily::ALL
        .into_iter()
        .find(|f| key == f.display_name().to_ascii_lowercase() || key == f.model_type())
        .ok_or_else(|| format!("unknown model family {s:?}: expected qwen2.5-vl or qwen3-vl"))
}

/// The longest time a duration flag takes: 30 days (larger values would overflow the clock's arithmetic).
const LONGEST_SECONDS: f64 = 30.0 * 86_400.0;

/// A positive number of seconds up to 30 days (`--request-timeout 2.5`).
pub(super) fn seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= LONGEST_SECONDS => Ok(v),
        _ => Err(format!(
            "expected a positive number of seconds up to {LONGEST_SECONDS} (30 days; e.g. 30 or 2.5), found {s:?}"
        )),
    }
}

/// The unsigned integer types a flag takes, with their range for the error messages.
pub(super) trait Whole: std::str::FromStr + std::fmt::Display + PartialEq + Copy {
    const ZERO: Self;
    const MAX: Self;
}

macro_rules! whole_types {
    ($($t:ty),*) => {$(
        impl Whole for $t {
            const ZERO: Self = 0;
            const MAX: Self = <$t>::MAX;
        }
    )*};
}
whole_types!(u16, u32, u64, usize);
