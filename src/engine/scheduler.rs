//! Admission control for continuous batching: which waiting prompts may join the running batch now.
//!
//! Every running sequence reserves `prompt_tokens + max_new_tokens` KV slots (its worst case), so a batch never
//! outgrows the token budget while it decodes. A prompt that alone exceeds the budget still runs, alone, so a
//! long prompt can never starve. Pure logic (but for [`BatchLimits::auto`]): the engine owns the model and the
//! queue.

use crate::settings::BatchLimits;

/// Smallest automatic token budget, before `max_new_tokens`: room for a few step prompts of a real screen.
pub const MIN_AUTO_BATCH_TOKENS: usize = 8192;

/// Cap on prompt tokens prefilled in one model call (bounds prefill activations).
pub const MAX_PREFILL_TOKENS: usize = 16_384;

impl BatchLimits {
    /// The limits of a run: `max_seqs` sequences, `max_new_tokens` per sequence, and `max_batch_tokens` or, when
    /// `None`, the budget the device's free memory allows for `model`'s KV cache after one prefill's activations
    /// (at least [`MIN_AUTO_BATCH_TOKENS`] + `max_new_tokens`). What `eval` and `bench` use.
    pub fn auto(
        model: &crate::model::VlModel,
        max_seqs: usize,
        max_new_tokens: usize,
        max_batch_tokens: Option<usize>,
    ) -> Self {
        let max_batch_tokens = max_batch_tokens.unwrap_or_else(|| {
            let reserve = super::memory::prefill_reserve(model, MAX_PREFILL_TOKENS);
            super::memory::auto_batch_tokens(
                super::memory::free_bytes(model.device()),
                model.kv_bytes_per_token(),
                reserve,
                MIN_AUTO_BATCH_TOKENS + max_new_tokens,
            )
        });
        Self {
            max_seqs: max_seqs.max(1),
            max_new_tokens: max_new_tokens.max(1),
            max_batch_tokens,
        }
    }

    /// Tokens reserved for a prompt of `prompt_tokens` tokens.
    pub(crate) fn cost(&self, prompt_tokens: usize) -> usize {
        prompt_tokens + self.max_new_tokens
    }
}

/// The running batch's occupancy.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Occupancy {
    /// Running sequences.
    pub seqs: usize,
    /// Reserved tokens of the running sequences.
    pub tokens: usize,
}

/// How many of `waiting` (prompt token counts, in queue order) may be admitted now, taken from the front.
pub fn admit_count(limits: &BatchLimits, running: Occupancy, waiting: &[usize]) -> usize {
    let mut occ = running;
    let mut n = 0;
    for &prompt in waiting {
        let cost = limits.cost(prompt);
        let fits_seqs = occ.seqs < limits.max_seqs.max(1);
        let fits_tokens = occ.tokens + cost <= limits.max_batch_tokens;
        // An oversized prompt runs alone rather than never.
        let alone = occ.seqs == 0;
        if !(fits_seqs && (fits_tokens || alone)) {
            break;
        }
        occ.seqs += 1;
        occ.tokens += cost;
        n += 1;
    }
    n
}

/// Most prompt tokens prefilled in one model call: bounds the activations of a prefill (vision tower and LM)
/// independently of how many sequences are admitted. At least one prompt is always taken.
pub fn prefill_chunks(
    prompt_tokens: &[usize],
    max_prefill_tokens: usize,
) -> Vec<std::ops::Range<usize>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut sum = 0;
    for (i, &t) in prompt_tokens.iter().enumerate() {
        if i > start && sum + t > max_prefill_tokens {
            chunks.push(start..i);
            start = i;
            sum = 0;
        }
        sum += t;
    }
    if start < prompt_tokens.len() {
        chunks.push(start..prompt_tokens.len());
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(seqs: usize, tokens: usize) -> BatchLimits {
        BatchLimits {
            max_seqs: seqs,
            max_batch_tokens: tokens,
            max_new_tokens: 10,
        }
    }

    #[test]
    fn admits_up_to_the_sequence_cap() {
        assert_eq!(
            admit_count(&limits(3, 10_000), Occupancy::default(), &[5, 5, 5, 5]),
            3
        );
        assert_eq!(
            admit_count(
                &limits(3, 10_000),
                Occupancy {
                    seqs: 2,
                    tokens: 30
                },
                &[5, 5]
            ),
            1
        );
    }

    #[test]
    fn admits_up_to_the_token_budget_in_queue_order() {
        // costs 20, 30, 20 → 20 + 30 = 50 fits, + 20 = 70 does not
        assert_eq!(
            admit_count(&limits(8, 60), Occupancy::default(), &[10, 20, 10]),
            2
        );
    }

    #[test]
    fn an_oversized_prompt_runs_alone() {
        assert_eq!(
            admit_count(&limits(8, 60), Occupancy::default(), &[500, 1]),
            1
        );
        assert_eq!(
            admit_count(
                &limits(8, 60),
                Occupancy {
                    seqs: 1,
                    tokens: 20
                },
                &[500]
            ),
            0
        );
    }

    #[test]
    fn prefill_chunks_respect_the_token_cap() {
        assert_eq!(
            prefill_chunks(&[4, 4, 4, 9, 1], 8),
            vec![0..2, 2..3, 3..4, 4..5]
        );
        assert_eq!(prefill_chunks(&[100], 8), vec![0..1]);
        assert!(prefill_chunks(&[], 8).is_empty());
    }
}
