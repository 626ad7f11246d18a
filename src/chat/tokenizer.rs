//! The `tokenizers` tokenizer with Qwen2-VL's special tokens resolved by name, and prompt encoding with image
//! placeholders expanded.

use std::path::Path;

use super::ChatError;
use crate::preprocess::PreparedImage;

/// `<|endoftext|>` (151643 in Qwen2): BOS/pad, and a stop token.
pub const ENDOFTEXT: &str = "<|endoftext|>";
/// `<|im_start|>` (151644).
pub const IM_START: &str = "<|im_start|>";
/// `<|im_end|>` (151645): end of a turn, the EOS token.
pub const IM_END: &str = "<|im_end|>";
/// `<|vision_start|>` (151652).
pub const VISION_START: &str = "<|vision_start|>";
/// `<|vision_end|>` (151653).
pub const VISION_END: &str = "<|vision_end|>";
/// `<|image_pad|>` (151655): one per merged 2×2 patch after expansion.
pub const IMAGE_PAD: &str = "<|image_pad|>";
/// `<|video_pad|>` (151656).
pub const VIDEO_PAD: &str = "<|video_pad|>";

/// A Qwen2-VL tokenizer.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    image_pad: u32,
    vision_start: u32,
    vision_end: u32,
    im_end: u32,
    endoftext: Option<u32>,
}

fn tok_err(e: impl std::fmt::Display) -> ChatError {
    ChatError::Tokenizer(e.to_string())
}

impl Tokenizer {
    /// Loads a `tokenizer.json`.
    pub(crate) fn from_file(path: &Path) -> Result<Self, ChatError> {
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| ChatError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::from_tokenizer(inner)
    }

    /// Loads `<dir>/tokenizer.json`.
    pub fn from_model_dir(dir: &Path) -> Result<Self, ChatError> {
        Self::from_file(&dir.join("tokenizer.json"))
    }

    /// Wraps a loaded tokenizer; fails if a Qwen2-VL special token the prompt needs is missing.
    pub(crate) fn from_tokenizer(inner: tokenizers::Tokenizer) -> Result<Self, ChatError> {
        let id = |t: &'static str| inner.token_to_id(t).ok_or(ChatError::MissingToken(t));
        // Every turn starts with it, though no code needs its id.
        id(IM_START)?;
        Ok(Self {
            image_pad: id(IMAGE_PAD)?,
            vision_start: id(VISION_START)?,
            vision_end: id(VISION_END)?,
            im_end: id(IM_END)?,
            endoftext: inner.token_to_id(ENDOFTEXT),
            inner,
        })
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Id of `<|image_pad|>` (151655 for Qwen2.5-VL).
    pub fn image_pad_id(&self) -> u32 {
        self.image_pad
    }

    /// Id of `<|vision_start|>` (151652).
    pub fn vision_start_id(&self) -> u32 {
        self.vision_start
    }

    /// Id of `<|vision_end|>` (151653).
    pub fn vision_end_id(&self) -> u32 {
        self.vision_end
    }

    /// Id of `<|im_end|>` (151645), the end-of-turn / EOS token.
    pub fn im_end_id(&self) -> u32 {
        self.im_end
    }

    /// Ids that end generation: `<|im_end|>`, then `<|endoftext|>` if present (the checkpoint's
    /// `eos_token_id` list).
    pub(crate) fn stop_ids(&self) -> Vec<u32> {
        std::iter::once(self.im_end).chain(self.endoftext).collect()
    }

    /// Size of the vocabulary including added tokens (151665 for Qwen2.5-VL).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Encodes text as transformers does with `add_special_tokens=False` (Qwen adds no BOS anyway); special
    /// tokens written in the text (`<|im_start|>`, …) become their ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ChatError> {
        Ok(self
            .inner
            .encode_fast(text, false)
            .map_err(tok_err)?
            .get_ids()
            .to_vec())
    }

    /// Encodes a rendered chat prompt whose `i`-th `<|image_pad|>` stands for `images[i]`, expanding each into
    /// `images[i].n_tokens()` copies — the ids transformers' processor produces after replacing each placeholder
    /// with that many pad strings. The text is tokenised with one pad per image (an added token, so it splits
    /// the text exactly as the expanded string would) and the ids are spliced.
    pub fn encode_prompt(
        &self,
        text: &str,
        images: &[PreparedImage],
    ) -> Result<Vec<u32>, ChatError> {
        let ids = self.encode(text)?;
        let placeholders = ids.iter().filter(|&&i| i == self.image_pad).count();
        if placeholders != images.len() {
            return Err(ChatError::ImageCount {
                placeholders,
                images: images.len(),
            });
        }
        let extra: usize = images
            .iter()
            .map(|im| im.n_tokens().saturating_sub(1))
            .sum();
        let mut out = Vec::with_capacity(ids.len() + extra);
        let mut next = images.iter();
        for id in ids {
            match (id == self.image_pad).then(|| next.next()).flatten() {
                Some(im) => out.extend(std::iter::repeat_n(self.image_pad, im.n_tokens())),
                None => out.push(id),
            }
        }
        Ok(out)
    }

    /// Decodes ids to text, optionally dropping special tokens (no clean-up of tokenisation spaces, as Qwen's
    /// `tokenizer_config.json` sets `clean_up_tokenization_spaces: false`).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, ChatError> {
        self.inner.decode(ids, skip_special_tokens).map_err(tok_err)
    }
}
