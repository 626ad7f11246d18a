//! The shared path of both phases: prepare prompts ahead on the rayon pool, generate them with continuous
//! batching, and hand every outcome (a generation, or why the prompt could not be prepared) to the caller as soon
//! as it is known.

use std::cell::RefCell;

use anyhow::Result;

use super::batcher::{Batcher, GenRequest, GenResult};
use super::prepare::{prefetch, Prepared};
use super::progress::{PhaseStats, Progress};
use super::rundir::JsonlAppender;
use super::scheduler::BatchLimits;
use crate::chat::PromptBuilder;
use crate::model::Qwen25VL;
use crate::preprocess::ModelInput;

/// The outcome of one job.
pub enum Outcome {
    /// The model's generation and the resized size `[w, h]` of the prompt's (first) image.
    Generated(GenResult, Option<[u32; 2]>),
    /// The prompt could not be prepared (e.g. an unreadable screenshot): recorded, not fatal.
    Failed(String),
}

/// A model with its prompt kit and batch limits: what both phases run prompts through.
pub struct Runner<'a> {
    /// The model.
    pub model: &'a Qwen25VL,
    /// Its tokenizer, chat template and image settings.
    pub kit: &'a PromptBuilder,
    /// Batch limits.
    pub limits: BatchLimits,
}

impl Runner<'_> {
    /// Run `jobs`: `prepare` builds each job's input and shareable prefix length (on worker threads), `record`
    /// receives each job's outcome on the calling thread.
    pub fn run<J: Clone + Send + Sync>(
        &self,
        jobs: &[J],
        prepare: impl Fn(&J) -> Result<(ModelInput, usize)> + Send + Sync,
        stats: &mut PhaseStats,
        mut record: impl FnMut(&J, Outcome, &PhaseStats) -> Result<()>,
    ) -> Result<()> {
        let (model, limits) = (self.model, self.limits);
        let lookahead = limits.max_seqs.max(1) * 2;
        let sizes = RefCell::new(vec![None; jobs.len()]);
        let failure: RefCell<Option<anyhow::Error>> = RefCell::new(None);
        let record = RefCell::new(&mut record);
        let prepare = &prepare;
        std::thread::scope(|scope| -> Result<()> {
            let rx = prefetch(scope, jobs.to_vec(), lookahead, lookahead, move |i, job| {
                let t0 = std::time::Instant::now();
                let input = prepare(job).map_err(|e| format!("{e:#}"));
                let image_size = input
                    .as_ref()
                    .ok()
                    .and_then(|(m, _)| m.images.first())
                    .map(|im| im.resized_wh);
                Prepared {
                    job: i,
                    input,
                    image_size,
                    seconds: t0.elapsed().as_secs_f64(),
                }
            });
            let errors_seen = RefCell::new(0usize);
            let prep_seconds = RefCell::new(0f64);
            let requests = rx
                .into_iter()
                .inspect(|p| *prep_seconds.borrow_mut() += p.seconds)
                .map_while(|p| match p.input {
                    Ok((input, prefix_len)) => {
                        sizes.borrow_mut()[p.job] = p.image_size;
                        Some(Some(GenRequest {
                            id: p.job,
                            input,
                            prefix_len,
                        }))
                    }
                    Err(msg) => {
                        *errors_seen.borrow_mut() += 1;
                        let snapshot = PhaseStats::default();
                        match (record.borrow_mut())(&jobs[p.job], Outcome::Failed(msg), &snapshot) {
                            Ok(()) => Some(None),
                            Err(e) => {
                                *failure.borrow_mut() = Some(e);
                                None
                            }
                        }
                    }
                });
            let mut batcher = Batcher::new(model, limits);
            batcher.run(requests.flatten(), stats, |r, st| {
                let size = sizes.borrow()[r.id];
                (record.borrow_mut())(&jobs[r.id], Outcome::Generated(r, size), st)
            })?;
            stats.errors += *errors_seen.borrow();
            stats.prepare_seconds += *prep_seconds.borrow();
            failure.borrow_mut().take().map_or(Ok(()), Err)
        })
    }
}

/// Run one phase whose results are appended to `path`: `work` gets the appender, the phase counters and the
/// progress display (`total` prompts, `total - pending` of them done by an earlier run); the wall time is
/// measured and everything appended is synced before returning.
pub fn run_phase(
    name: &str,
    path: &std::path::Path,
    total: usize,
    pending: usize,
    work: impl FnOnce(&mut JsonlAppender, &mut PhaseStats, &mut Progress) -> Result<()>,
) -> Result<PhaseStats> {
    let mut out = JsonlAppender::open(path, 8)?;
    let mut stats = PhaseStats {
        phase: name.into(),
        ..Default::default()
    };
    let mut progress = Progress::new(name, total as u64, total.saturating_sub(pending) as u64);
    let t0 = std::time::Instant::now();
    work(&mut out, &mut stats, &mut progress)?;
    out.sync()?;
    stats.wall_seconds = t0.elapsed().as_secs_f64();
    progress.finish();
    Ok(stats)
}
