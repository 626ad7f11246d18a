//! Answers: a whole completion, a streamed chunk, the model list. The server writes them; the client reads them
//! with every field but the choices optional, since servers differ in what they fill in.

use serde::{Deserialize, Serialize};

/// Token counts of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Usage {
    /// Prompt tokens (image tokens included).
    #[serde(default)]
    pub prompt_tokens: usize,
    /// Generated tokens (an end-of-sequence token included).
    #[serde(default)]
    pub completion_tokens: usize,
    /// Their sum.
    #[serde(default)]
    pub total_tokens: usize,
}

impl Usage {
    /// The counts of a request with `prompt` prompt tokens and `completion` generated ones.
    pub fn new(prompt: usize, completion: usize) -> Self {
        Self {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
        }
    }
}

/// One alternative at a position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TopLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes (a token may hold part of a character).
    pub bytes: Option<Vec<u8>>,
}

/// The generated token at one position, with its alternatives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TokenLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes.
    pub bytes: Option<Vec<u8>>,
    /// The most likely tokens at this position, best first.
    #[serde(default)]
    pub top_logprobs: Vec<TopLogprob>,
}

/// `choices[i].logprobs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChoiceLogprobs {
    /// One entry per generated content token.
    #[serde(default)]
    pub content: Vec<TokenLogprob>,
}

/// `choices[i].message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AssistantMessage {
    /// Always `assistant`.
    #[serde(default)]
    pub role: String,
    /// The answer (null in some servers' tool-call answers).
    #[serde(default)]
    pub content: Option<String>,
}

/// One choice of a whole completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Choice {
    /// Its index (0).
    #[serde(default)]
    pub index: u32,
    /// The answer.
    pub message: AssistantMessage,
    /// Log-probabilities, when asked for.
    #[serde(default)]
    pub logprobs: Option<ChoiceLogprobs>,
    /// `stop` or `length`.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// `object: "chat.completion"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChatCompletion {
    /// `chatcmpl-…`.
    #[serde(default)]
    pub id: String,
    /// `chat.completion`.
    #[serde(default)]
    pub object: String,
    /// Unix seconds.
    #[serde(default)]
    pub created: u64,
    /// The served model's name.
    #[serde(default)]
    pub model: String,
    /// The answers (one).
    pub choices: Vec<Choice>,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// What produced the answer.
    #[serde(default)]
    pub system_fingerprint: Option<String>,
}

/// `choices[i].delta` of a chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Delta {
    /// `assistant`, in the first chunk only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// New text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// One choice of a chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChunkChoice {
    /// Its index (0).
    pub index: u32,
    /// What is new.
    pub delta: Delta,
    /// Log-probabilities of the tokens of this chunk, when asked for.
    #[serde(default)]
    pub logprobs: Option<ChoiceLogprobs>,
    /// Set in the last content chunk.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// `object: "chat.completion.chunk"`: one server-sent event of a streamed answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChatCompletionChunk {
    /// The same in every chunk of an answer.
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: String,
    /// The same in every chunk.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    /// One choice, or none in the usage chunk.
    pub choices: Vec<ChunkChoice>,
    /// Null, but in the last chunk when `stream_options.include_usage` asked for it.
    pub usage: Option<Usage>,
    /// What produced the answer.
    #[serde(default)]
    pub system_fingerprint: Option<String>,
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelCard {
    /// The name requests use.
    pub id: String,
    /// `model`.
    #[serde(default)]
    pub object: String,
    /// Unix seconds.
    #[serde(default)]
    pub created: u64,
    /// Who serves it and which weights (written here, between `created` and `family`).
    #[serde(flatten)]
    pub published: PublishedModel,
    /// `serve`'s extension: the model family as its `config.json` names it (`qwen2_5_vl`, `qwen3_vl`), so a
    /// client can prompt it as its family expects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// `serve`'s extension: how it prepares pictures, so a client can check that the pictures it sends are
    /// left at their size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageSettings>,
}

/// What a model list says of a model beyond its name: who serves it and which weights, each absent when the
/// server does not say. A client records it in its run's manifest as it reads it here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedModel {
    /// Who serves it (`owned_by`; an empty one reads as absent).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "non_empty"
    )]
    pub owned_by: Option<String>,
    /// Where the weights came from (vLLM's `root`: the model path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// `serve`'s extension: the checkpoint's fingerprint, so a client can tell two checkpoints served under one
    /// name apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// vLLM's extension: the longest prompt plus completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<usize>,
}

impl PublishedModel {
    /// Whether the server said nothing of these.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A string, absent when null or empty.
fn non_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

/// How a server prepares a picture: smart-resized so its sides are multiples of `factor` and its area lies within
/// `min_pixels..=max_pixels` (a picture already so is left as it is), cut into `patch_size` patches merged
/// `merge_size × merge_size` into one token; the model answers points in `coordinate_frame`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ImageSettings {
    /// Fewest pixels of a resized picture.
    pub min_pixels: u64,
    /// Most pixels of a resized picture.
    pub max_pixels: u64,
    /// Side of a vision patch, in pixels.
    pub patch_size: usize,
    /// Patches merged per side into one token.
    pub merge_size: usize,
    /// What the resized sides are multiples of (`patch_size · merge_size`).
    pub factor: usize,
    /// The frame of the model's points, in `--coordinate-frame`'s spelling (`image-pixels`, `relative-999`).
    pub coordinate_frame: String,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelList {
    /// `list`.
    #[serde(default)]
    pub object: String,
    /// The served models.
    pub data: Vec<ModelCard>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_writes_what_it_publishes_between_created_and_family_and_reads_back() {
        let card = ModelCard {
            id: "m".into(),
            object: "model".into(),
            created: 7,
            published: PublishedModel {
                owned_by: Some("me".into()),
                root: Some("/ckpt".into()),
                fingerprint: Some("f".into()),
                max_model_len: Some(4096),
            },
            family: Some("qwen2_5_vl".into()),
            image: None,
        };
        let text = serde_json::to_string(&card).unwrap();
        assert_eq!(
            text,
            r#"{"id":"m","object":"model","created":7,"owned_by":"me","root":"/ckpt","fingerprint":"f","max_model_len":4096,"family":"qwen2_5_vl"}"#
        );
        assert_eq!(serde_json::from_str::<ModelCard>(&text).unwrap(), card);
    }

    #[test]
    fn a_card_saying_nothing_publishes_nothing() {
        let card: ModelCard =
            serde_json::from_str(r#"{"id": "m", "owned_by": "", "root": null}"#).unwrap();
        assert!(card.published.is_empty(), "{card:?}");
        assert_eq!(
            serde_json::to_string(&card.published).unwrap(),
            "{}",
            "the manifest leaves it out"
        );
    }
}
