//! The engine loop of `serve`: one thread owns the model and runs the same continuous batcher as `eval`
//! ([`Engine::run`]), fed by a channel of prepared requests. A request joins the running batch as soon as there is
//! room; each token goes back to its HTTP handler through the request's own event channel (for streaming, stop
//! strings and log-probabilities), and its answer when it is done.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

use super::metrics::{Metrics, Ticket};
use super::text::{token_bytes, StopScan};
use crate::backend::LoadedModel;
use crate::engine::{
    Engine, EngineSink, FinishReason, Generation, Next, Request, RequestSource, TokenScores,
};
use crate::interrupt::Cancel;
use crate::openai::{Finish, TokenLogprob, TopLogprob, Usage};
use crate::records::PhaseStats;
use crate::settings::BatchLimits;

/// A prepared request on its way to the engine, and where its tokens go.
pub struct Job {
    /// The engine's request (its `id` unique among the server's requests).
    pub request: Request,
    /// The handler's side.
    pub live: Live,
}

/// What the engine thread needs to answer one request.
pub(crate) struct Live {
    /// Events for the handler.
    pub events: UnboundedSender<Event>,
    /// Stop strings.
    pub stops: Vec<String>,
    /// Whether the answer streams (pieces of text are sent as they are safe to send).
    pub stream: bool,
    /// `top_logprobs` when log-probabilities were asked for.
    pub logprobs: Option<usize>,
    /// The request's place in the queue and the batch.
    pub ticket: Ticket,
}

/// What a handler hears about its request.
#[derive(Debug)]
pub enum Event {
    /// New text (streaming only) and the log-probabilities of the tokens since the last piece.
    Piece {
        /// The text.
        text: String,
        /// One entry per token.
        logprobs: Vec<TokenLogprob>,
    },
    /// The answer.
    Done(Finished),
    /// The engine failed; the request has no answer.
    Failed(String),
}

/// A finished request.
#[derive(Debug)]
pub(crate) struct Finished {
    /// The reply, cut before a stop string.
    pub text: String,
    /// Why it ended.
    pub finish: Finish,
    /// Token counts.
    pub usage: Usage,
    /// Every content token's log-probabilities (when asked for; with streaming they went out with the pieces).
    pub logprobs: Vec<TokenLogprob>,
}

/// One request in the engine.
struct State {
    live: Live,
    stop_tokens: Vec<u32>,
    tokens: Vec<u32>,
    scan: StopScan,
    /// Log-probabilities not yet handed over.
    logprobs: Vec<TokenLogprob>,
}

type States = RefCell<HashMap<usize, State>>;

/// Run the engine until every sender of `jobs` is gone and the last sequence is answered. An engine error fails
/// the requests it held (the handlers answer 500) and the loop goes on with a fresh engine.
pub fn run(
    model: Arc<LoadedModel>,
    limits: BatchLimits,
    jobs: Receiver<Job>,
    metrics: Arc<Metrics>,
) {
    let states: States = RefCell::new(HashMap::new());
    let mut stats = PhaseStats::default();
    let mut source = Source {
        jobs: &jobs,
        states: &states,
        closed: false,
    };
    let mut sink = Sink {
        states: &states,
        model: &model,
        metrics: &metrics,
    };
    loop {
        let mut engine = Engine::new(&model.model, limits, Cancel::new());
        match engine.run(&mut source, &mut stats, &mut sink) {
            Ok(()) => return,
            Err(e) => {
                let msg = format!("the engine failed: {e:#}");
                tracing::error!("{msg}");
                for (_, st) in states.borrow_mut().drain() {
                    let _ = st.live.events.send(Event::Failed(msg.clone()));
                }
                if source.closed {
                    return;
                }
            }
        }
    }
}

/// The engine's requests: jobs from the channel, each registered before the engine sees it.
struct Source<'a> {
    jobs: &'a Receiver<Job>,
    states: &'a States,
    closed: bool,
}

impl RequestSource for Source<'_> {
    fn next(&mut self, wait: bool) -> Next<Request> {
        loop {
            let job = if wait {
                self.jobs.recv().ok()
            } else {
                match self.jobs.try_recv() {
                    Ok(j) => Some(j),
                    Err(TryRecvError::Empty) => return Next::Pending,
                    Err(TryRecvError::Disconnected) => None,
                }
            };
            let Some(job) = job else {
                self.closed = true;
                return Next::Done;
            };
            // A client that went away while its request waited is not answered.
            if job.live.events.is_closed() {
                continue;
            }
            let state = State {
                stop_tokens: job.request.stop_tokens.clone(),
                tokens: Vec::new(),
                scan: StopScan::new(job.live.stops.clone()),
                logprobs: Vec::new(),
                live: job.live,
            };
            self.states.borrow_mut().insert(job.request.id, state);
            return Next::Ready(job.request);
        }
    }
}

/// Tokens and answers back to the handlers.
struct Sink<'a> {
    states: &'a States,
    model: &'a LoadedModel,
    metrics: &'a Metrics,
}

impl Sink<'_> {
    fn decode(&self, ids: &[u32]) -> String {
        self.model
            .kit
            .tokenizer
            .decode(ids, true)
            .unwrap_or_else(|e| format!("(undecodable: {e})"))
    }

    fn logprob(&self, token: u32, scores: TokenScores<'_>, top: usize) -> TokenLogprob {
        let tok = &self.model.kit.tokenizer;
        let text = |id: u32| {
            let bytes = token_bytes(tok, id);
            (String::from_utf8_lossy(&bytes).into_owned(), Some(bytes))
        };
        let (token, bytes) = text(token);
        TokenLogprob {
            token,
            logprob: scores.logprob,
            bytes,
            top_logprobs: scores.top[..top.min(scores.top.len())]
                .iter()
                .map(|&(id, logprob)| {
                    let (token, bytes) = text(id);
                    TopLogprob {
                        token,
                        logprob,
                        bytes,
                    }
                })
                .collect(),
        }
    }
}

impl EngineSink for Sink<'_> {
    fn token_scored(&mut self, id: usize, token: u32, scores: Option<TokenScores<'_>>) -> bool {
        let mut states = self.states.borrow_mut();
        let Some(st) = states.get_mut(&id) else {
            return true;
        };
        st.live.ticket.start();
        if st.live.events.is_closed() {
            return false; // the client went away
        }
        if st.stop_tokens.contains(&token) {
            return true; // the engine ends the sequence; the stop token is not content
        }
        st.tokens.push(token);
        if let (Some(s), Some(top)) = (scores, st.live.logprobs) {
            let lp = self.logprob(token, s, top);
            st.logprobs.push(lp);
        }
        if !st.live.stream && st.scan.stops_nothing() {
            return true;
        }
        let text = self.decode(&st.tokens);
        let piece = st.scan.advance(&text, false);
        if st.live.stream && (!piece.is_empty() || !st.logprobs.is_empty()) {
            let logprobs = std::mem::take(&mut st.logprobs);
            let sent = st.live.events.send(Event::Piece {
                text: piece,
                logprobs,
            });
            if sent.is_err() {
                return false;
            }
        }
        !st.scan.stopped()
    }

    fn done(&mut self, g: Generation, stats: &PhaseStats) -> anyhow::Result<()> {
        let Some(mut st) = self.states.borrow_mut().remove(&g.id) else {
            return Ok(());
        };
        let completion = g.token_ids.len() + usize::from(g.stop_token.is_some());
        self.metrics.finished(g.prompt_tokens, completion, stats);
        // The request's cost: its prompt's wait and prefill (to the first token), then the whole.
        let ticket = &st.live.ticket;
        tracing::info!(
            "request {}: {} prompt tokens, first token after {:.2} s; {completion} generated, {:.2} s in all",
            g.id,
            g.prompt_tokens,
            ticket.first_token().unwrap_or_default().as_secs_f64(),
            ticket.age().as_secs_f64()
        );
        let text = self.decode(&g.token_ids);
        let rest = st.scan.advance(&text, true);
        if st.live.stream && (!rest.is_empty() || !st.logprobs.is_empty()) {
            let logprobs = std::mem::take(&mut st.logprobs);
            let _ = st.live.events.send(Event::Piece {
                text: rest,
                logprobs,
            });
        }
        let finish = match g.finish {
            FinishReason::Length if !st.scan.stopped() => Finish::Length,
            _ => Finish::Stop,
        };
        let finished = Finished {
            text: st.scan.reply(&text).to_string(),
            finish,
            usage: Usage::new(g.prompt_tokens, completion),
            logprobs: std::mem::take(&mut st.logprobs),
        };
        // A handler that is gone no longer listens; nothing to do then.
        let _ = st.live.events.send(Event::Done(finished));
        Ok(())
    }
}
