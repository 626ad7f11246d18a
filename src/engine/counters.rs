//! What the engine counts as it runs, told to a [`Counters`] of the caller's choosing: the engine knows the events
//! (a prompt prefilled, a decode step, a retry after running out of memory), the caller keeps the totals in its own
//! record (the phase counters of a run, the server's metrics).

use crate::records::PhaseStats;

/// One event the engine counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Count {
    /// Seconds spent asking the request source for work.
    WaitSeconds(f64),
    /// A prefill or decode call split after running out of device memory.
    OomRetry,
    /// Attention FLOPs of a prefill.
    PrefillAttentionFlops(f64),
    /// Prompt tokens computed by a prefill (the cached prefix excluded).
    PrefillTokens(usize),
    /// Prompt tokens taken from the prefix cache.
    PrefixCachedTokens(usize),
    /// Pictures and their patches prefilled.
    Images {
        /// Pictures.
        images: usize,
        /// Their patches.
        patches: usize,
    },
    /// Seconds of one prefill call.
    PrefillSeconds(f64),
    /// Attention FLOPs of a decode call.
    DecodeAttentionFlops(f64),
    /// One decode step over `seqs` sequences, taking `seconds`.
    DecodeStep {
        /// Sequences decoded.
        seqs: usize,
        /// Its time.
        seconds: f64,
    },
    /// One generated token.
    DecodeToken,
    /// One finished prompt.
    Prompt,
}

/// Where the engine's counts go.
pub trait Counters {
    /// Count `event`.
    fn count(&mut self, event: Count);
    /// The device's memory in use now (`None` where it cannot be read): the caller keeps the peak.
    fn device_in_use(&mut self, bytes: Option<u64>);
}

/// The phase counters of a run (and of the server) keep the engine's counts as totals.
impl Counters for PhaseStats {
    fn count(&mut self, event: Count) {
        match event {
            Count::WaitSeconds(s) => self.wait_seconds += s,
            Count::OomRetry => self.oom_retries += 1,
            Count::PrefillAttentionFlops(f) => self.prefill_attention_flops += f,
            Count::PrefillTokens(n) => self.prefill_tokens += n,
            Count::PrefixCachedTokens(n) => self.prefix_cached_tokens += n,
            Count::Images { images, patches } => {
                self.images += images;
                self.patches += patches;
            }
            Count::PrefillSeconds(s) => self.prefill_seconds += s,
            Count::DecodeAttentionFlops(f) => self.decode_attention_flops += f,
            Count::DecodeStep { seqs, seconds } => {
                self.decode_steps += 1;
                self.decode_seq_sum += seqs;
                self.decode_seconds += seconds;
            }
            Count::DecodeToken => self.decode_tokens += 1,
            Count::Prompt => self.prompts += 1,
        }
    }

    fn device_in_use(&mut self, bytes: Option<u64>) {
        self.note_device_in_use(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_counters_keep_totals_and_the_peak() {
        let mut s = PhaseStats::default();
        s.count(Count::DecodeStep {
            seqs: 3,
            seconds: 0.5,
        });
        s.count(Count::DecodeStep {
            seqs: 2,
            seconds: 0.25,
        });
        s.count(Count::Images {
            images: 2,
            patches: 40,
        });
        s.count(Count::OomRetry);
        s.device_in_use(Some(7));
        s.device_in_use(Some(5));
        assert_eq!((s.decode_steps, s.decode_seq_sum), (2, 5));
        assert_eq!(s.decode_seconds, 0.75);
        assert_eq!((s.images, s.patches, s.oom_retries), (2, 40, 1));
        assert_eq!(s.peak_device_bytes, Some(7));
    }
}
