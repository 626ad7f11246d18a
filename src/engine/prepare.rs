//! Turning benchmark steps into model inputs, ahead of the model: screenshot decode, smart-resize, patchify,
//! prompt rendering and tokenisation run on the rayon pool, and a bounded channel hands the results to the
//! model thread so preparation overlaps compute without piling up memory.

use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};

use rayon::prelude::*;

use super::prompts::{self, SystemPrompt};
use crate::chat::{ChatTemplate, Tokenizer};
use crate::dataset::{Benchmark, Trajectory};
use crate::preprocess::{self, ImageProcessorConfig, ModelInput, PreparedImage};

/// What turns messages and screenshots into token ids: the checkpoint's tokenizer, chat template and image
/// processor settings.
pub struct PromptKit {
    /// The checkpoint's tokenizer.
    pub tokenizer: Tokenizer,
    /// The checkpoint's chat template.
    pub template: ChatTemplate,
    /// Image processor settings (pixel bounds included).
    pub image: ImageProcessorConfig,
}

/// A prepared prompt, or why it could not be prepared (the step is then recorded as an error).
pub struct Prepared {
    /// The caller's job index.
    pub job: usize,
    /// The model input and the length of its shareable system-turn prefix, or an error message.
    pub input: Result<(ModelInput, usize), String>,
    /// The resized screenshot size `[w, h]` the model saw.
    pub image_size: Option<[u32; 2]>,
    /// Seconds spent preparing it.
    pub seconds: f64,
}

const USER_TURN: &str = "<|im_start|>user\n";

impl PromptKit {
    /// Render `messages` (whose image parts are filled by `images` in order) and tokenise them; also return the
    /// token length of the text up to the first user turn (the system prefix) when it tokenises on its own to a
    /// prefix of the whole — only then is its KV safely shareable.
    pub fn encode(&self, messages: &serde_json::Value, images: Vec<PreparedImage>) -> anyhow::Result<(ModelInput, usize)> {
        let text = self.template.render(messages, true)?;
        let ids = self.tokenizer.encode_prompt(&text, &images)?;
        let prefix_len = match text.find(USER_TURN) {
            Some(at) if at > 0 => {
                let p = self.tokenizer.encode_prompt(&text[..at + USER_TURN.len()], &[])?;
                if ids.starts_with(&p) { p.len() } else { 0 }
            }
            _ => 0,
        };
        Ok((ModelInput { input_ids: ids, images }, prefix_len))
    }

    /// Prepare step `step` of trajectory `traj`.
    pub fn step(&self, bench: &Benchmark, traj: &Trajectory, step: usize, mode: SystemPrompt) -> anyhow::Result<(ModelInput, usize)> {
        let img = self.load_image(&bench.root.join(&traj.steps[step].image))?;
        let messages = prompts::step_messages(traj, step, img.resized_wh, mode)?;
        self.encode(&messages, vec![img])
    }

    /// Load and preprocess one screenshot.
    pub fn load_image(&self, path: &Path) -> anyhow::Result<PreparedImage> {
        Ok(preprocess::load_and_prepare(path, &self.image)?)
    }
}

/// Prepare `jobs` in order on the rayon pool, `chunk` at a time, and stream the results through a channel that
/// holds at most `bound` prepared prompts. The producer stops early when the receiver is dropped.
pub fn prefetch<'scope, J, F>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    jobs: Vec<J>,
    chunk: usize,
    bound: usize,
    f: F,
) -> Receiver<Prepared>
where
    J: Send + Sync + 'scope,
    F: Fn(usize, &J) -> Prepared + Send + Sync + 'scope,
{
    let (tx, rx) = sync_channel(bound.max(1));
    scope.spawn(move || {
        let indexed: Vec<(usize, J)> = jobs.into_iter().enumerate().collect();
        for group in indexed.chunks(chunk.max(1)) {
            let prepared: Vec<Prepared> = group.par_iter().map(|(i, j)| f(*i, j)).collect();
            for p in prepared {
                if tx.send(p).is_err() {
                    return;
                }
            }
        }
    });
    rx
}
