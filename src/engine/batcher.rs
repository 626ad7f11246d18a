//! Continuous batching over the model: prompts join the running batch as soon as the token budget and the
//! sequence cap allow (their prefill runs between two decode steps), finished sequences leave at once, and every
//! result is handed to the caller the moment it is complete.
//!
//! Each sequence keeps its own exact-length KV cache and attends only to itself, so a sequence's tokens do not
//! depend on what else is in the batch (see `crate::model` for the batch-invariance argument).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use anyhow::Result;
use candle_core::{Tensor, D};

use super::counters::{Count, Counters};
use super::memory;
use super::scheduler::{admit_count, prefill_chunks, Occupancy, MAX_PREFILL_TOKENS};
use super::{EngineSink, FinishReason, Generation, Next, Request, RequestSource, TokenScores};
use crate::interrupt::Cancel;
use crate::model::flops::{decode_attention_flops, prefill_attention_flops, PromptShape};
use crate::model::{PrefillRequest, SeqCache, VlModel};
use crate::settings::BatchLimits;

/// A sequence being decoded: its request's settings (not its input, which may be large) and its state.
struct Running {
    id: usize,
    prompt_tokens: usize,
    max_new_tokens: usize,
    stop_tokens: Vec<u32>,
    top_k: usize,
    cache: SeqCache,
    generated: Vec<u32>,
    top_logprobs: Vec<Vec<(u32, f32)>>,
    cost: usize,
    /// Ended by the caller ([`EngineSink::token`] returned `false`).
    stopped: bool,
    /// The sampler of a non-greedy request.
    sampler: Option<candle_transformers::generation::LogitsProcessor>,
}

/// How many prefix caches are kept (distinct system prompts, e.g. one per screen resolution).
const PREFIX_CACHE_ENTRIES: usize = 8;

/// Runs requests through the model with continuous batching.
pub struct Engine<'m> {
    model: &'m VlModel,
    limits: BatchLimits,
    prefixes: HashMap<Vec<u32>, SeqCache>,
    running: Vec<Running>,
    waiting: VecDeque<Request>,
    /// Most sequences per decode call (halved on out-of-memory errors).
    decode_group: usize,
    /// Once cancelled, nothing more is admitted; the running sequences finish.
    cancel: Cancel,
    /// Test hook: how many multi-sequence prefill and decode calls fail with an injected out-of-memory error.
    #[cfg(test)]
    inject_oom: (usize, usize),
}

impl<'m> Engine<'m> {
    /// An engine for `model` under `limits`; once `cancel` is set it admits no more requests and returns when
    /// the running sequences have finished.
    pub fn new(model: &'m VlModel, limits: BatchLimits, cancel: Cancel) -> Self {
        Self {
            model,
            limits,
            prefixes: HashMap::new(),
            running: Vec::new(),
            waiting: VecDeque::new(),
            decode_group: usize::MAX,
            cancel,
            #[cfg(test)]
            inject_oom: (0, 0),
        }
    }

    /// Generate for every request of `requests` (pulled as room frees up, so preparation overlaps compute, and
    /// without waiting while sequences run, so requests may arrive at any time), telling `sink` each token and each
    /// result as soon as it is complete.
    pub fn run<S: Counters>(
        &mut self,
        requests: &mut dyn RequestSource,
        stats: &mut S,
        sink: &mut dyn EngineSink<S>,
    ) -> Result<()> {
        let mut exhausted = false;
        loop {
            let t_wait = Instant::now();
            if self.cancel.is_cancelled() {
                // After a stop request admit nothing more; the running sequences finish and are handed over.
                self.waiting.clear();
                exhausted = true;
            }
            while !exhausted && self.waiting.len() < self.limits.max_seqs.max(1) {
                let idle = self.waiting.is_empty() && self.running.is_empty();
                match requests.next(idle) {
                    Next::Ready(r) => self.waiting.push_back(r),
                    Next::Pending => break,
                    Next::Done => exhausted = true,
                }
            }
            stats.count(Count::WaitSeconds(t_wait.elapsed().as_secs_f64()));
            if self.waiting.is_empty() && self.running.is_empty() {
                if exhausted {
                    return Ok(());
                }
                continue;
            }
            self.admit(stats, sink)?;
            if !self.running.is_empty() {
                self.decode_step(stats, sink)?;
            }
        }
    }

    fn occupancy(&self) -> Occupancy {
        Occupancy {
            seqs: self.running.len(),
            tokens: self.running.iter().map(|r| r.cost).sum(),
        }
    }

    fn admit<S: Counters>(&mut self, stats: &mut S, sink: &mut dyn EngineSink<S>) -> Result<()> {
        let lens: Vec<usize> = self
            .waiting
            .iter()
            .map(|r| r.input.input_ids.len())
            .collect();
        let n = admit_count(&self.limits, self.occupancy(), &lens);
        if n == 0 {
            return Ok(());
        }
        let batch: Vec<Request> = self.waiting.drain(..n).collect();
        for range in prefill_chunks(&lens[..n], MAX_PREFILL_TOKENS) {
            self.prefill_with_retry(&batch[range], stats, sink)?;
        }
        Ok(())
    }

    /// Prefill `reqs`; on an out-of-memory error split the group in two and retry each half.
    fn prefill_with_retry<S: Counters>(
        &mut self,
        reqs: &[Request],
        stats: &mut S,
        sink: &mut dyn EngineSink<S>,
    ) -> Result<()> {
        match self.prefill(reqs, stats) {
            Ok(logits) => self.start_sequences(reqs, logits, stats, sink),
            Err(e) if reqs.len() > 1 && is_oom(&e) => {
                tracing::warn!(
                    "out of memory prefilling {} prompts; retrying in halves",
                    reqs.len()
                );
                stats.count(Count::OomRetry);
                let (a, b) = reqs.split_at(reqs.len() / 2);
                self.prefill_with_retry(a, stats, sink)?;
                self.prefill_with_retry(b, stats, sink)
            }
            Err(e) => Err(e),
        }
    }

    fn prefill<S: Counters>(
        &mut self,
        reqs: &[Request],
        stats: &mut S,
    ) -> Result<(Vec<SeqCache>, Tensor)> {
        #[cfg(test)]
        if self.inject_oom.0 > 0 && reqs.len() > 1 {
            self.inject_oom.0 -= 1;
            anyhow::bail!("CUDA_ERROR_OUT_OF_MEMORY: out of memory (injected)");
        }
        let t0 = Instant::now();
        for r in reqs {
            self.ensure_prefix(r, stats)?;
        }
        let prefixes: Vec<Option<&SeqCache>> = reqs
            .iter()
            .map(|r| {
                (r.prefix_len > 0)
                    .then(|| self.prefixes.get(&r.input.input_ids[..r.prefix_len]))
                    .flatten()
            })
            .collect();
        let batch: Vec<PrefillRequest<'_>> = reqs
            .iter()
            .zip(&prefixes)
            .map(|(r, p)| PrefillRequest {
                input: &r.input,
                prefix: *p,
            })
            .collect();
        stats.count(Count::PrefillAttentionFlops(
            self.model.prefill_attention_flops(&batch),
        ));
        let out = self.model.prefill(&batch)?;
        // GPU work is asynchronous: wait for it, so the prefill time is the prefill's and not the next step's.
        self.model.device().synchronize()?;
        stats.device_in_use(memory::device_in_use(self.model.device()));
        for (r, p) in reqs.iter().zip(&prefixes) {
            let cached = p.map_or(0, |c| c.len());
            stats.count(Count::PrefixCachedTokens(cached));
            stats.count(Count::PrefillTokens(r.input.input_ids.len() - cached));
            stats.count(Count::Images {
                images: r.input.images.len(),
                patches: r.input.images.iter().map(|i| i.n_patches()).sum::<usize>(),
            });
        }
        stats.count(Count::PrefillSeconds(t0.elapsed().as_secs_f64()));
        Ok(out)
    }

    /// Compute (once) the KV of a request's shared prefix.
    fn ensure_prefix<S: Counters>(&mut self, r: &Request, stats: &mut S) -> Result<()> {
        if r.prefix_len == 0
            || self
                .prefixes
                .contains_key(&r.input.input_ids[..r.prefix_len])
        {
            return Ok(());
        }
        if self.prefixes.len() >= PREFIX_CACHE_ENTRIES {
            self.prefixes.clear();
        }
        let ids = r.input.input_ids[..r.prefix_len].to_vec();
        let cache = self.model.prefill_prefix(&ids)?;
        stats.count(Count::PrefillTokens(ids.len()));
        let shape = PromptShape {
            grids: &[],
            new_tokens: ids.len(),
            cached_tokens: 0,
        };
        stats.count(Count::PrefillAttentionFlops(prefill_attention_flops(
            self.model.config(),
            &[shape],
        )));
        self.prefixes.insert(ids, cache);
        Ok(())
    }

    fn start_sequences<S: Counters>(
        &mut self,
        reqs: &[Request],
        (caches, logits): (Vec<SeqCache>, Tensor),
        stats: &mut S,
        sink: &mut dyn EngineSink<S>,
    ) -> Result<()> {
        let first = self.running.len();
        for (r, cache) in reqs.iter().zip(caches) {
            let cost = self.limits.cost(r.input.input_ids.len());
            self.running.push(Running {
                id: r.id,
                prompt_tokens: r.input.input_ids.len(),
                max_new_tokens: self.new_token_cap(r),
                stop_tokens: r.stop_tokens.clone(),
                top_k: r.top_logprobs,
                cache,
                generated: Vec::new(),
                top_logprobs: Vec::new(),
                cost,
                stopped: false,
                sampler: r.sampling.processor(),
            });
        }
        self.push_tokens(first, &logits, stats, sink)?;
        self.retire(stats, sink)
    }

    /// The most tokens request `r` may generate: its own cap within the engine's, and within the model's context
    /// (`max_position_embeddings`, which also holds the prompt); a prompt that leaves less room than it asks for
    /// stops at the context (finish `length`), said in the log. At least one token is generated.
    fn new_token_cap(&self, r: &Request) -> usize {
        let asked = r.max_new_tokens.clamp(1, self.limits.max_new_tokens);
        let context = self.model.config().text.max_position_embeddings;
        let prompt = r.input.input_ids.len();
        let room = context.saturating_sub(prompt).max(1);
        if room < asked {
            tracing::warn!(
                "prompt {} has {prompt} tokens: with {asked} new tokens it exceeds the model's context of {context} \
                 (max_position_embeddings); it generates at most {room} (finish \"length\")",
                r.id
            );
        }
        asked.min(room)
    }

    /// One decode step for every running sequence, in groups of at most `decode_group` sequences; an
    /// out-of-memory error halves the group size for the rest of the run and retries (a failed call leaves the
    /// caches unchanged, so no sequence advances twice).
    fn decode_step<S: Counters>(
        &mut self,
        stats: &mut S,
        sink: &mut dyn EngineSink<S>,
    ) -> Result<()> {
        let t0 = Instant::now();
        let n = self.running.len();
        let mut done_rows = 0;
        while done_rows < n {
            let (start, end) = (done_rows, (done_rows + self.decode_group).min(n));
            let keys = self.running[start..end].iter().map(|r| r.cache.len() + 1);
            let attention_flops = decode_attention_flops(self.model.config(), keys);
            match self.decode_range(start, end) {
                Ok(logits) => {
                    stats.count(Count::DecodeAttentionFlops(attention_flops));
                    self.push_tokens(start, &logits, stats, sink)?;
                    done_rows = end;
                }
                Err(e) if end - start > 1 && is_oom(&e) => {
                    self.decode_group = (end - start) / 2;
                    stats.count(Count::OomRetry);
                    tracing::warn!(
                        "out of memory decoding {} sequences; now at most {} per call",
                        end - start,
                        self.decode_group
                    );
                }
                Err(e) => return Err(e),
            }
        }
        stats.device_in_use(memory::device_in_use(self.model.device()));
        stats.count(Count::DecodeStep {
            seqs: n,
            seconds: t0.elapsed().as_secs_f64(),
        });
        self.retire(stats, sink)
    }

    /// Logits (end − start, vocab) of one decode step of running sequences `start..end`.
    fn decode_range(&mut self, start: usize, end: usize) -> Result<Tensor> {
        #[cfg(test)]
        if self.inject_oom.1 > 0 && end - start > 1 {
            self.inject_oom.1 -= 1;
            anyhow::bail!("CUDA_ERROR_OUT_OF_MEMORY: out of memory (injected)");
        }
        let running = &mut self.running[start..end];
        let tokens: Vec<u32> = running
            .iter()
            .map(|r| *r.generated.last().expect("running sequences have a token"))
            .collect();
        let mut caches: Vec<&mut SeqCache> = running.iter_mut().map(|r| &mut r.cache).collect();
        Ok(self.model.decode(&tokens, &mut caches)?)
    }

    /// Append each row's token (greedy, or drawn by the row's sampler) and its log-probabilities when asked to
    /// running sequences `first..first + rows`, telling the sink.
    fn push_tokens<S: Counters>(
        &mut self,
        first: usize,
        logits: &Tensor,
        stats: &mut S,
        sink: &mut dyn EngineSink<S>,
    ) -> Result<()> {
        let mut next = argmax_rows(logits)?;
        let running = &mut self.running[first..first + next.len()];
        for (row, (tok, r)) in next.iter_mut().zip(running.iter_mut()).enumerate() {
            if let Some(sampler) = r.sampler.as_mut() {
                *tok = sampler.sample(&logits.get(row)?)?;
            }
        }
        let scored = running.iter().any(|r| r.top_k > 0);
        let rows = if scored {
            logprob_rows(logits)?
        } else {
            Vec::new()
        };
        for (row, tok) in next.into_iter().enumerate() {
            let r = &mut self.running[first + row];
            r.generated.push(tok);
            let scores = (r.top_k > 0).then(|| {
                let top = top_k_of_row(&rows[row], r.top_k);
                (rows[row][tok as usize], top)
            });
            let keep = match scores {
                Some((logprob, top)) => {
                    let keep =
                        sink.token_scored(r.id, tok, Some(TokenScores { logprob, top: &top }));
                    r.top_logprobs.push(top);
                    keep
                }
                None => sink.token_scored(r.id, tok, None),
            };
            r.stopped = !keep;
            stats.count(Count::DecodeToken);
        }
        Ok(())
    }

    /// Hand over and drop every sequence that hit a stop token or its length limit.
    fn retire<S: Counters>(&mut self, stats: &mut S, sink: &mut dyn EngineSink<S>) -> Result<()> {
        let mut i = 0;
        while i < self.running.len() {
            let r = &self.running[i];
            let last = *r.generated.last().expect("a token was pushed");
            let finish = if r.stop_tokens.contains(&last) {
                FinishReason::Eos
            } else if r.stopped {
                FinishReason::Stopped
            } else if r.generated.len() >= r.max_new_tokens {
                FinishReason::Length
            } else {
                i += 1;
                continue;
            };
            let mut r = self.running.swap_remove(i);
            let stop_token = match finish {
                FinishReason::Eos => r.generated.pop(),
                FinishReason::Length | FinishReason::Stopped => None,
            };
            stats.count(Count::Prompt);
            let generation = Generation {
                id: r.id,
                token_ids: r.generated,
                stop_token,
                prompt_tokens: r.prompt_tokens,
                finish,
                top_logprobs: r.top_logprobs,
            };
            sink.done(generation, stats)?;
        }
        Ok(())
    }
}

/// Greedy choice per row of a (B, vocab) logits tensor: the first index of the maximum, as torch.argmax.
pub fn argmax_rows(logits: &Tensor) -> Result<Vec<u32>> {
    Ok(logits
        .argmax(D::Minus1)?
        .to_dtype(candle_core::DType::U32)?
        .to_vec1::<u32>()?)
}

/// The `k` most likely entries of each row of `logits` (B, vocab) as (id, log-probability), best first
/// (ties: lower id first).
pub fn top_k_logprobs(logits: &Tensor, k: usize) -> Result<Vec<Vec<(u32, f32)>>> {
    Ok(logprob_rows(logits)?
        .iter()
        .map(|row| top_k_of_row(row, k))
        .collect())
}

/// The log-softmax of each row of `logits` (B, vocab), in f32.
fn logprob_rows(logits: &Tensor) -> Result<Vec<Vec<f32>>> {
    Ok(crate::ops::composed::log_softmax_f32(logits)?.to_vec2::<f32>()?)
}

/// The `k` largest entries of `row` as (index, value), best first, ties by lower index: a strict order, so the
/// top `k` are the first `k` of any larger top.
fn top_k_of_row(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<u32> = (0..row.len() as u32).collect();
    let k = k.min(row.len());
    let cmp = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
    if k > 0 && k < idx.len() {
        idx.select_nth_unstable_by(k - 1, cmp);
    }
    idx.truncate(k);
    idx.sort_by(cmp);
    idx.into_iter().map(|i| (i, row[i as usize])).collect()
}

/// Whether an error is a device out-of-memory error (CUDA's message, or the host allocator's).
pub fn is_oom(e: &anyhow::Error) -> bool {
    let s = format!("{e:#}").to_ascii_lowercase();
    s.contains("out of memory") || s.contains("out_of_memory") || s.contains("cannot allocate")
}

#[cfg(test)]
mod tests;
