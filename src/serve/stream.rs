//! A streamed answer as server-sent events, the way OpenAI sends them: a first chunk with the role, one chunk per
//! piece of text (with the log-probabilities of its tokens when asked for), a last content chunk with
//! `finish_reason`, a usage chunk (`choices: []`) when `stream_options.include_usage` asked for one, then
//! `data: [DONE]`. An engine failure, or the shutdown deadline cutting the answer off, is sent as a `data:` line
//! holding `{"error": …}`, which clients raise.

use std::convert::Infallible;

use axum::body::Bytes;
use futures_util::Stream;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::watch;

use super::meta::{cut_off, next_event, Meta};
use super::worker::Event;
use crate::openai::{ApiError, ChatCompletionChunk, ChoiceLogprobs, ChunkChoice, Delta, Usage};

/// Where a stream is.
enum Stage {
    /// The role chunk is still to be sent.
    Start,
    /// Sending the engine's events.
    Events,
    /// Everything but `[DONE]` is sent.
    Closing,
    /// Nothing more.
    Over,
}

struct Sse {
    rx: UnboundedReceiver<Event>,
    meta: Meta,
    abort: watch::Receiver<bool>,
    include_usage: bool,
    logprobs: bool,
    stage: Stage,
}

impl Sse {
    fn chunk(&self, choices: Vec<ChunkChoice>, usage: Option<Usage>) -> Bytes {
        let c = ChatCompletionChunk {
            id: self.meta.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.meta.created,
            model: self.meta.model.clone(),
            choices,
            usage,
            system_fingerprint: Some(self.meta.fingerprint.clone()),
        };
        event(&serde_json::to_string(&c).unwrap_or_default())
    }

    fn choice(
        &self,
        delta: Delta,
        logprobs: Vec<crate::openai::TokenLogprob>,
        finish: Option<&str>,
    ) -> ChunkChoice {
        ChunkChoice {
            index: 0,
            delta,
            logprobs: self
                .logprobs
                .then_some(ChoiceLogprobs { content: logprobs }),
            finish_reason: finish.map(str::to_string),
        }
    }

    /// The bytes of the next event, or `None` at the end.
    async fn next(&mut self) -> Option<Bytes> {
        match self.stage {
            Stage::Start => {
                self.stage = Stage::Events;
                let delta = Delta {
                    role: Some("assistant".into()),
                    content: Some(String::new()),
                };
                let first = self.choice(delta, Vec::new(), None);
                Some(self.chunk(vec![first], None))
            }
            Stage::Events => Some(match next_event(&mut self.rx, &mut self.abort).await {
                None => {
                    self.stage = Stage::Over;
                    event(&cut_off().body().to_string())
                }
                Some(e) => self.engine_event(e),
            }),
            Stage::Closing => {
                self.stage = Stage::Over;
                Some(event("[DONE]"))
            }
            Stage::Over => None,
        }
    }

    /// The bytes of an engine event (or of its absence: the engine dropped the request).
    fn engine_event(&mut self, e: Option<Event>) -> Bytes {
        match e {
            Some(Event::Piece { text, logprobs }) => {
                let delta = Delta {
                    role: None,
                    content: Some(text),
                };
                let c = self.choice(delta, logprobs, None);
                self.chunk(vec![c], None)
            }
            Some(Event::Done(f)) => {
                self.stage = Stage::Closing;
                let last = self.choice(Delta::default(), Vec::new(), Some(f.finish.as_str()));
                let mut bytes = self.chunk(vec![last], None).to_vec();
                if self.include_usage {
                    bytes.extend_from_slice(&self.chunk(Vec::new(), Some(f.usage)));
                }
                Bytes::from(bytes)
            }
            Some(Event::Failed(msg)) => {
                self.stage = Stage::Over;
                event(&ApiError::internal(msg).body().to_string())
            }
            None => {
                self.stage = Stage::Over;
                event(
                    &ApiError::internal("the engine dropped the request")
                        .body()
                        .to_string(),
                )
            }
        }
    }
}

/// One `data:` event.
fn event(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// The event stream of one request.
pub(crate) fn sse_body(
    rx: UnboundedReceiver<Event>,
    meta: Meta,
    abort: watch::Receiver<bool>,
    include_usage: bool,
    logprobs: bool,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let sse = Sse {
        rx,
        meta,
        abort,
        include_usage,
        logprobs,
        stage: Stage::Start,
    };
    futures_util::stream::unfold(sse, |mut s| async move {
        let bytes = s.next().await?;
        Some((Ok(bytes), s))
    })
}
