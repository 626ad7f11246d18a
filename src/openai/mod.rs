//! The OpenAI chat-completions protocol as both halves of the program speak it: `serve` reads requests and writes
//! answers, `eval --backend openai` writes requests and reads answers. Plain serde types and the rules between
//! them and the program's own chat messages; no HTTP, no model.
//!
//! The field names and shapes follow the official client (`openai/openai-python`,
//! `src/openai/types/chat/completion_create_params.py`, `chat_completion.py`, `chat_completion_chunk.py`,
//! `chat_completion_token_logprob.py`): messages with string content or parts (`text`, `image_url`), `max_tokens`
//! and `max_completion_tokens`, `stop`, `seed`, `logprobs` + `top_logprobs` (0–20), `stream` with
//! `stream_options.include_usage`; answers with `choices[0].message.content`, `finish_reason` and `usage`. Errors
//! travel as `{"error": {"message", "type", "param", "code"}}`; a client also reads the flat form older vLLM
//! servers send.

mod convert;
mod data_url;
mod error;
mod request;
mod response;

pub(crate) use convert::{chat_body, hf_messages, ClientParams};
pub use data_url::{parse_data_url, png_data_url, DataUrl};
pub(crate) use error::{parse_error_body, ApiError};
pub use request::{
    parse_chat_request, ChatCompletionRequest, ChatMessage, Content, Part, Role, MAX_STOP_STRINGS,
    MAX_TOP_LOGPROBS,
};
pub use response::PublishedModel;
pub(crate) use response::{
    AssistantMessage, ChatCompletion, ChatCompletionChunk, Choice, ChoiceLogprobs, ChunkChoice,
    Delta, ImageSettings, ModelCard, ModelList, TokenLogprob, TopLogprob, Usage,
};

/// An API key (`Authorization: Bearer <key>`): never shown (its `Debug` prints `<redacted>`).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// A key, or `None` for an empty string.
    pub fn new(key: impl Into<String>) -> Option<Self> {
        let key = key.into();
        (!key.trim().is_empty()).then(|| Self(key.trim().to_string()))
    }

    /// The key itself, for the `Authorization` header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `sent` is this key, compared in time independent of where they differ.
    pub fn matches(&self, sent: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), sent.as_bytes());
        let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
        diff == 0 && a.len() == b.len()
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// How a generation ended, in the protocol's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// An end-of-sequence token or a stop string (`"stop"`).
    Stop,
    /// The token limit (`"length"`).
    Length,
}

impl Finish {
    /// The `finish_reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ApiKey;

    #[test]
    fn a_key_is_compared_whole_and_never_shown() {
        let k = ApiKey::new(" s3cret ").unwrap();
        assert!(
            k.matches("s3cret") && !k.matches("s3cre") && !k.matches("s3cretx") && !k.matches("")
        );
        assert_eq!(format!("{k:?}"), "ApiKey(<redacted>)");
        assert!(ApiKey::new("  ").is_none());
    }
}
