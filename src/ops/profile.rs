//! Opt-in section timings ([`super::OpsConfig::profile`]): each instrumented section waits for the device before
//! and after it, so the times are the device's, at the cost of that synchronisation (leave it off to measure
//! throughput).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use candle_core::Device;

use crate::records::{ProfileSnapshot, SectionTime};

/// The section table of one loaded model; clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Profiler {
    on: bool,
    table: Arc<Mutex<BTreeMap<&'static str, (u64, f64)>>>,
}

impl Profiler {
    /// A profiler that records when `on`, else does nothing.
    pub fn new(on: bool) -> Self {
        Self {
            on,
            table: Arc::default(),
        }
    }

    /// Run `f`, adding its (device-synchronised) time to section `name` when profiling is on.
    pub fn section<T, E: From<candle_core::Error>>(
        &self,
        name: &'static str,
        device: &Device,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        if !self.on {
            return f();
        }
        device.synchronize()?;
        let t0 = Instant::now();
        let out = f()?;
        device.synchronize()?;
        let dt = t0.elapsed().as_secs_f64();
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let e = table.entry(name).or_insert((0, 0.0));
        e.0 += 1;
        e.1 += dt;
        Ok(out)
    }

    /// The table so far; `None` when profiling is off.
    pub fn snapshot(&self) -> Option<ProfileSnapshot> {
        if !self.on {
            return None;
        }
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        Some(ProfileSnapshot(
            table
                .iter()
                .map(|(k, &(calls, seconds))| (k.to_string(), SectionTime { calls, seconds }))
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_counted_only_when_on_and_serialise_as_a_table() {
        let off = Profiler::new(false);
        off.section("a", &Device::Cpu, || Ok::<_, candle_core::Error>(()))
            .unwrap();
        assert_eq!(off.snapshot(), None);
        let on = Profiler::new(true);
        let shared = on.clone();
        for _ in 0..2 {
            shared
                .section("a", &Device::Cpu, || Ok::<_, candle_core::Error>(()))
                .unwrap();
        }
        let snap = on.snapshot().unwrap();
        assert_eq!(snap.0["a"].calls, 2);
        let json = serde_json::to_value(&snap).unwrap();
        assert_eq!(json["a"]["calls"], 2);
        assert!(json["a"]["seconds"].as_f64().unwrap() >= 0.0);
    }
}
