//! Prompts as token ids: the checkpoint's chat template (rendered with minijinja under transformers' Jinja
//! settings), the tokenizer with Qwen2-VL's special tokens, and the expansion of each `<|image_pad|>` into the
//! image's token count. No candle here.

mod builder;
mod json;
mod template;
mod tokenizer;

pub use self::builder::{user_turn_messages, PromptBuilder};
pub use self::template::{render_str, ChatTemplate};
pub use self::tokenizer::{
    Tokenizer, ENDOFTEXT, IMAGE_PAD, IM_END, IM_START, VIDEO_PAD, VISION_END, VISION_START,
};

/// Errors of chat-template rendering and tokenisation.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// The I/O or parse message.
        reason: String,
    },
    /// No chat template in `chat_template.json`, `chat_template.jinja` or `tokenizer_config.json`.
    #[error("no chat template found in {0}")]
    NoTemplate(String),
    /// The template failed to compile or render.
    #[error("chat template: {0:#}")]
    Template(#[from] minijinja::Error),
    /// The tokenizer failed to load, encode or decode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A special token the model needs is not in the vocabulary.
    #[error("tokenizer has no special token {0}")]
    MissingToken(&'static str),
    /// The prompt's image placeholders and the images do not match in number.
    #[error("prompt has {placeholders} <|image_pad|> placeholders but {images} images were given")]
    ImageCount {
        /// Placeholders in the rendered text.
        placeholders: usize,
        /// Images passed.
        images: usize,
    },
    /// Image preprocessing failed.
    #[error(transparent)]
    Preprocess(#[from] crate::preprocess::PreprocessError),
}
