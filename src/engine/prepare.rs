//! Turning benchmark steps into model inputs, ahead of the model: screenshot decode, smart-resize, patchify,
//! prompt rendering and tokenisation run on the rayon pool, and a bounded channel hands the results to the
//! model thread so preparation overlaps compute without piling up memory.

use std::sync::mpsc::{sync_channel, Receiver};

use rayon::prelude::*;

use super::prompts::{self, SystemPrompt};
use crate::chat::PromptBuilder;
use crate::dataset::{Benchmark, Trajectory};
use crate::preprocess::{self, ModelInput};

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

/// The input of step `step` of `traj` (and its shareable prefix length): the screenshot prepared with the
/// checkpoint's image settings, then the step prompt rendered with the checkpoint's chat template.
pub fn step_input(
    kit: &PromptBuilder,
    bench: &Benchmark,
    traj: &Trajectory,
    step: usize,
    mode: SystemPrompt,
) -> anyhow::Result<(ModelInput, usize)> {
    let img = preprocess::load_and_prepare(&bench.root.join(&traj.steps[step].image), &kit.image)?;
    let messages = prompts::step_messages(traj, step, img.resized_wh, mode)?;
    Ok(kit.build_with_prefix(&messages, vec![img])?)
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
