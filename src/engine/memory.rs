//! Memory: how much the device has free, the automatic token budget derived from it, and the process's peak
//! resident memory for `throughput.json`.

use candle_core::Device;

/// Share of the free memory the automatic budget may use; the rest absorbs fragmentation, the vision tower's
/// activations and allocator slack.
pub(crate) const BUDGET_FRACTION: f64 = 0.6;
/// Upper bound of the automatic token budget (keeps a CPU run with a tiny model from planning absurd batches).
pub(crate) const MAX_AUTO_TOKENS: usize = 1 << 20;

/// Free memory of `device` in bytes: GPU memory on CUDA, `MemAvailable` of the host otherwise (Metal shares the
/// host's memory). `None` when it cannot be read.
pub(crate) fn free_bytes(device: &Device) -> Option<u64> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(_) = device {
        return candle_core::cuda_backend::cudarc::driver::result::mem_get_info()
            .ok()
            .map(|(free, _)| free as u64);
    }
    let _ = device;
    host_available_bytes()
}

/// The device memory in use now (total − free, so the CUDA context, the allocator's pool and any other process
/// on the card count too); `None` on CPU and Metal, whose memory is the host's (see [`peak_rss_bytes`]).
pub(crate) fn device_in_use(device: &Device) -> Option<u64> {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(_) = device {
        if let Ok((free, total)) = candle_core::cuda_backend::cudarc::driver::result::mem_get_info()
        {
            return Some(total.saturating_sub(free) as u64);
        }
    }
    let _ = device;
    None
}

/// `MemAvailable` from `/proc/meminfo`.
pub(crate) fn host_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&text, "MemAvailable:")
}

fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Peak resident set size of this process in bytes (`VmHWM`), when the platform reports it.
pub(crate) fn peak_rss_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    meminfo_field(&text, "VmHWM:")
}

/// The automatic token budget: `(free · BUDGET_FRACTION − reserve) / kv_bytes_per_token`, clamped to
/// `[min_tokens, MAX_AUTO_TOKENS]`. `reserve` is the transient memory of one prefill call (activations of the
/// vision tower and the language model), which the KV caches must leave free; `min_tokens` keeps at least one
/// worst-case sequence runnable.
pub(crate) fn auto_batch_tokens(
    free: Option<u64>,
    kv_bytes_per_token: usize,
    reserve: u64,
    min_tokens: usize,
) -> usize {
    let Some(free) = free else {
        return min_tokens.max(16_384);
    };
    let usable = (free as f64 * BUDGET_FRACTION - reserve as f64).max(0.0);
    let tokens = (usable / kv_bytes_per_token.max(1) as f64) as usize;
    tokens.clamp(min_tokens, MAX_AUTO_TOKENS.max(min_tokens))
}

/// Transient bytes of one prefill call of at most `prefill_tokens` tokens, whose images have at most four
/// patches per image token: the language model's and the vision tower's activations.
pub(crate) fn prefill_reserve(model: &crate::model::VlModel, prefill_tokens: usize) -> u64 {
    (prefill_tokens * model.activation_bytes_per_token()
        + 4 * prefill_tokens * model.vision_activation_bytes_per_patch()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_is_parsed_in_kib() {
        let t = "MemTotal:       24000000 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(meminfo_field(t, "MemAvailable:"), Some(2048 * 1024));
        assert_eq!(meminfo_field(t, "Nope:"), None);
    }

    #[test]
    fn budget_scales_with_free_memory_and_is_clamped() {
        assert_eq!(auto_batch_tokens(Some(1_000_000), 100, 0, 10), 6_000);
        assert_eq!(auto_batch_tokens(Some(1_000_000), 100, 100_000, 10), 5_000);
        assert_eq!(auto_batch_tokens(Some(1_000), 100, 0, 500), 500);
        assert_eq!(auto_batch_tokens(Some(1_000), 100, 10_000, 500), 500);
        assert_eq!(
            auto_batch_tokens(Some(u64::MAX / 2), 1, 0, 10),
            MAX_AUTO_TOKENS
        );
        assert_eq!(auto_batch_tokens(None, 1, 0, 10), 16_384);
    }
}
