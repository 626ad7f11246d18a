//! Static-batch greedy generation on top of `prefill` / `decode`.

use candle_core::{Tensor, D};

use super::{PrefillRequest, Qwen25VL, Result, SeqCache};
use crate::ops::composed::log_softmax_f32;
use crate::preprocess::ModelInput;

/// Options of [`Qwen25VL::generate`].
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// Most tokens generated per sequence.
    pub max_new_tokens: usize,
    /// Keep going past end-of-sequence tokens (exactly `max_new_tokens` tokens).
    pub ignore_eos: bool,
    /// Record this many most likely (token, logprob) pairs per generated position (0 = none).
    pub top_logprobs: usize,
    /// Stop tokens; `None` uses the checkpoint's eos ids.
    pub eos_token_ids: Option<Vec<u32>>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_new_tokens: 256,
            ignore_eos: false,
            top_logprobs: 0,
            eos_token_ids: None,
        }
    }
}

/// Why a sequence stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// It produced an end-of-sequence token (included in `token_ids`).
    Eos,
    /// It reached `max_new_tokens`.
    Length,
}

/// The result for one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Generated ids (an eos that stopped generation included).
    pub token_ids: Vec<u32>,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Why generation stopped.
    pub finish: FinishReason,
    /// Per generated position, the most likely (id, log-softmax in f32), most likely first.
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
}

/// The `k` most likely entries of each row of `logits` (B, vocab) as (id, log-probability), best first
/// (ties: lower id first).
pub fn top_k_logprobs(logits: &Tensor, k: usize) -> candle_core::Result<Vec<Vec<(u32, f32)>>> {
    let rows = log_softmax_f32(logits)?.to_vec2::<f32>()?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let mut idx: Vec<u32> = (0..row.len() as u32).collect();
            let k = k.min(row.len());
            let cmp =
                |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
            if k > 0 && k < idx.len() {
                idx.select_nth_unstable_by(k - 1, cmp);
            }
            idx.truncate(k);
            idx.sort_by(cmp);
            idx.into_iter().map(|i| (i, row[i as usize])).collect()
        })
        .collect())
}

impl Qwen25VL {
    /// Greedy generation for a static batch (no sampling, no repetition penalty). Finished sequences leave
    /// the batch; results do not depend on the batch composition.
    pub fn generate(
        &self,
        inputs: &[&ModelInput],
        opts: &GenerateOptions,
    ) -> Result<Vec<Generation>> {
        let eos = opts
            .eos_token_ids
            .clone()
            .unwrap_or_else(|| self.cfg.eos_token_ids.clone());
        let mut gens: Vec<Generation> = inputs
            .iter()
            .map(|i| Generation {
                token_ids: Vec::new(),
                prompt_tokens: i.input_ids.len(),
                finish: FinishReason::Length,
                top_logprobs: Vec::new(),
            })
            .collect();
        if inputs.is_empty() || opts.max_new_tokens == 0 {
            return Ok(gens);
        }
        let reqs: Vec<PrefillRequest<'_>> = inputs.iter().map(|i| PrefillRequest::new(i)).collect();
        let (mut caches, mut logits) = self.prefill(&reqs)?;
        for c in caches.iter_mut() {
            c.reserve(opts.max_new_tokens)?;
        }
        let mut active: Vec<usize> = (0..inputs.len()).collect();
        loop {
            let next = logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
            let tops = if opts.top_logprobs > 0 {
                Some(top_k_logprobs(&logits, opts.top_logprobs)?)
            } else {
                None
            };
            let mut still = Vec::with_capacity(active.len());
            let mut feed = Vec::with_capacity(active.len());
            for (row, &s) in active.iter().enumerate() {
                let g = &mut gens[s];
                g.token_ids.push(next[row]);
                if let Some(t) = &tops {
                    g.top_logprobs.push(t[row].clone());
                }
                if !opts.ignore_eos && eos.contains(&next[row]) {
                    g.finish = FinishReason::Eos;
                } else if g.token_ids.len() < opts.max_new_tokens {
                    still.push(s);
                    feed.push(next[row]);
                }
            }
            active = still;
            if active.is_empty() {
                return Ok(gens);
            }
            let mut refs: Vec<&mut SeqCache> = select_mut(&mut caches, &active);
            logits = self.decode(&feed, &mut refs)?;
        }
    }
}

/// Mutable references to `items[i]` for the sorted, distinct indices `idx`.
fn select_mut<'a, T>(items: &'a mut [T], idx: &[usize]) -> Vec<&'a mut T> {
    let mut out = Vec::with_capacity(idx.len());
    let mut it = idx.iter().peekable();
    for (i, x) in items.iter_mut().enumerate() {
        if it.peek() == Some(&&i) {
            out.push(x);
            it.next();
        }
    }
    out
}
