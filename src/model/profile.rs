//! Opt-in section timings of the model (`MOBILE_R1_EVAL_PROFILE=1`): each instrumented section waits for the
//! device before and after it, so the times are the GPU's, at the cost of that synchronisation (leave it off to
//! measure throughput). `bench --json` reports the table under `profile`; `eval` logs it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use candle_core::Device;

static TABLE: Mutex<BTreeMap<&'static str, (u64, f64)>> = Mutex::new(BTreeMap::new());

/// True when `MOBILE_R1_EVAL_PROFILE` is set to a true value (`1`, `true`, `yes`, `on`).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| super::files::env_flag("MOBILE_R1_EVAL_PROFILE"))
}

/// Run `f`, adding its (device-synchronised) time to section `name` when profiling is on.
pub fn section<T, E: From<candle_core::Error>>(
    name: &'static str,
    device: &Device,
    f: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    if !enabled() {
        return f();
    }
    device.synchronize()?;
    let t0 = Instant::now();
    let out = f()?;
    device.synchronize()?;
    let dt = t0.elapsed().as_secs_f64();
    let mut table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let e = table.entry(name).or_insert((0, 0.0));
    e.0 += 1;
    e.1 += dt;
    Ok(out)
}

/// The sections so far: name → (calls, seconds). Nested sections are counted in their parents too.
pub fn snapshot() -> BTreeMap<&'static str, (u64, f64)> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// `{section: {"calls", "seconds"}}` of a [`snapshot`].
pub fn to_json(table: &BTreeMap<&'static str, (u64, f64)>) -> serde_json::Value {
    table
        .iter()
        .map(|(k, (calls, secs))| {
            (
                k.to_string(),
                serde_json::json!({"calls": calls, "seconds": secs}),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}
