//! `PromptBuilder`: tokenizer + chat template + image processor of one checkpoint, turning messages and
//! pictures into a `ModelInput`.

use std::path::Path;

use serde_json::{json, Value};

use super::{ChatError, ChatTemplate, Tokenizer};
use crate::preprocess::{ImageProcessorConfig, ModelInput, PreparedImage};

/// Messages for one user turn: the images (one `{"type": "image"}` part each) followed by the text — the
/// `generate` command's prompt.
pub fn user_turn_messages(n_images: usize, text: &str) -> Value {
    let mut parts: Vec<Value> = (0..n_images).map(|_| json!({"type": "image"})).collect();
    parts.push(json!({"type": "text", "text": text}));
    json!([{"role": "user", "content": parts}])
}

/// Everything needed to turn chat messages and pictures into model input ids for one checkpoint.
#[derive(Debug)]
pub struct PromptBuilder {
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template.
    pub template: ChatTemplate,
    /// Image processor settings.
    pub image: ImageProcessorConfig,
}

impl PromptBuilder {
    /// Loads `tokenizer.json`, the chat template and `preprocessor_config.json` from one model folder.
    pub fn from_model_dir(dir: &Path) -> Result<Self, ChatError> {
        Self::from_dirs(dir, dir)
    }

    /// Loads the chat template and image processor from `model_dir` and `tokenizer.json` from `tokenizer_dir`.
    pub(crate) fn from_dirs(model_dir: &Path, tokenizer_dir: &Path) -> Result<Self, ChatError> {
        Ok(Self {
            tokenizer: Tokenizer::from_model_dir(tokenizer_dir)?,
            template: ChatTemplate::from_model_dir(model_dir)?,
            image: ImageProcessorConfig::from_model_dir(model_dir)?,
        })
    }

    /// Renders `messages` with the generation prompt and tokenises them; `images` fill the messages' image parts
    /// in order.
    pub fn build(
        &self,
        messages: &Value,
        images: Vec<PreparedImage>,
    ) -> Result<ModelInput, ChatError> {
        let text = self.template.render(messages, true)?;
        let input_ids = self.tokenizer.encode_prompt(&text, &images)?;
        Ok(ModelInput { input_ids, images })
    }

    /// Like [`PromptBuilder::build`], and also the token length of the rendered text up to the first user turn
    /// (the system turn) when that text tokenises on its own to an exact prefix of the whole prompt — only then
    /// may its KV cache be shared between prompts; 0 otherwise.
    pub(crate) fn build_with_prefix(
        &self,
        messages: &Value,
        images: Vec<PreparedImage>,
    ) -> Result<(ModelInput, usize), ChatError> {
        const USER_TURN: &str = "<|im_start|>user\n";
        let text = self.template.render(messages, true)?;
        let input_ids = self.tokenizer.encode_prompt(&text, &images)?;
        let prefix_len = match text.find(USER_TURN) {
            Some(at) if at > 0 => {
                let p = self.tokenizer.encode(&text[..at + USER_TURN.len()])?;
                if input_ids.starts_with(&p) {
                    p.len()
                } else {
                    0
                }
            }
            _ => 0,
        };
        Ok((ModelInput { input_ids, images }, prefix_len))
    }

    /// One user turn: the already prepared images, then `text`.
    pub fn build_user_turn(
        &self,
        images: Vec<PreparedImage>,
        text: &str,
    ) -> Result<ModelInput, ChatError> {
        self.build(&user_turn_messages(images.len(), text), images)
    }
}
