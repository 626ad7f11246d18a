//! The inference engine: token-level requests in, greedy generations out through a sink. Prompts join the
//! running batch as soon as the token budget and the sequence cap allow (continuous batching), a text-only
//! prefix shared by many prompts is computed once, and every result is handed over the moment it is complete.
//!
//! The engine knows nothing of benchmarks, prompts or scores: [`crate::backend`] turns chat requests into
//! [`Request`]s, and [`crate::eval`] drives the phases of an evaluation.

mod batcher;
mod counters;
pub mod memory;
mod sampling;
mod scheduler;

pub use batcher::{argmax_rows, is_oom, top_k_logprobs, Engine};
pub use counters::{Count, Counters};
pub(crate) use sampling::Sampling;
/// The server still names the limits through the engine.
pub use scheduler::{
    admit_count, prefill_chunks, Occupancy, MAX_PREFILL_TOKENS, MIN_AUTO_BATCH_TOKENS,
};

use crate::preprocess::ModelInput;
pub(crate) use crate::records::FinishReason;

/// What a source of work found when asked: ready work, nothing yet, or nothing more ([`RequestSource::next`],
/// and the backends' job queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next<T> {
    /// Ready work.
    Ready(T),
    /// Nothing ready now; more may be released later.
    Pending,
    /// Nothing more will come.
    Done,
}

/// One prompt to generate for (greedy unless `sampling` says otherwise; no repetition penalty).
#[derive(Debug, Clone)]
pub struct Request {
    /// Caller's id, returned with the result.
    pub id: usize,
    /// Token ids (image pads expanded) and images.
    pub input: ModelInput,
    /// Length of the text-only prefix (e.g. the system turn) whose KV may be shared between prompts; 0 for none.
    pub prefix_len: usize,
    /// Most generated tokens (at most the engine's `max_new_tokens`).
    pub max_new_tokens: usize,
    /// Tokens that end generation (the checkpoint's end-of-sequence ids); empty to generate exactly
    /// `max_new_tokens`.
    pub stop_tokens: Vec<u32>,
    /// Record this many most likely (token, log-probability) pairs per generated position (0 = none).
    pub top_logprobs: usize,
    /// How the next token is chosen ([`Sampling::Greedy`] for evaluation).
    pub sampling: Sampling,
}

/// Where the engine takes its requests from: [`RequestSource::next`] is asked without waiting while sequences
/// are running (so decoding goes on), and with `wait` when the engine has nothing else to do.
pub trait RequestSource {
    /// The next request, [`Next::Pending`] when none is ready yet (never with `wait`), or [`Next::Done`].
    fn next(&mut self, wait: bool) -> Next<Request>;
}

/// A source of requests that are all known: an iterator.
pub struct Requests<I>(pub I);

impl<I: Iterator<Item = Request>> RequestSource for Requests<I> {
    fn next(&mut self, _wait: bool) -> Next<Request> {
        self.0.next().map_or(Next::Done, Next::Ready)
    }
}

impl RequestSource for std::sync::mpsc::Receiver<Request> {
    fn next(&mut self, wait: bool) -> Next<Request> {
        use std::sync::mpsc::TryRecvError;
        if wait {
            return self.recv().map_or(Next::Done, Next::Ready);
        }
        match self.try_recv() {
            Ok(r) => Next::Ready(r),
            Err(TryRecvError::Empty) => Next::Pending,
            Err(TryRecvError::Disconnected) => Next::Done,
        }
    }
}

/// What the engine tells its caller about each sequence, with the caller's counters `S` (the phase counters of a
/// run by default).
pub trait EngineSink<S = crate::records::PhaseStats> {
    /// Sequence `id` generated `token` (a stop token included, before the length check). Returning `false` ends
    /// the sequence now, with [`FinishReason::Stopped`] (e.g. a stop string appeared in its text).
    fn token(&mut self, id: usize, token: u32) -> bool {
        let _ = (id, token);
        true
    }

    /// [`EngineSink::token`] with the token's log-probabilities when its request asked for them
    /// (`top_logprobs` > 0); the engine calls this one, and by default it forwards to `token`.
    fn token_scored(&mut self, id: usize, token: u32, scores: Option<TokenScores<'_>>) -> bool {
        let _ = scores;
        self.token(id, token)
    }

    /// Sequence `id` finished; `stats` are the caller's counters so far.
    fn done(&mut self, generation: Generation, stats: &S) -> anyhow::Result<()>;
}

/// A generated token's log-probability and its position's most likely tokens (id, log-probability), best first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenScores<'a> {
    /// The log-softmax of the chosen token (of the logits before any temperature).
    pub logprob: f32,
    /// The request's `top_logprobs` most likely tokens.
    pub top: &'a [(u32, f32)],
}

/// Any closure taking each finished generation is a sink that never stops a sequence early.
impl<S, F> EngineSink<S> for F
where
    F: FnMut(Generation, &S) -> anyhow::Result<()>,
{
    fn done(&mut self, generation: Generation, stats: &S) -> anyhow::Result<()> {
        self(generation, stats)
    }
}

/// One finished prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The request's id.
    pub id: usize,
    /// Generated token ids, the stop token excluded.
    pub token_ids: Vec<u32>,
    /// The stop token that ended generation, if one did.
    pub stop_token: Option<u32>,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Why it stopped.
    pub finish: FinishReason,
    /// Per generated position (the stop token's included), the most likely (id, log-softmax in f32), best first.
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
}
