//! One driver for both phases of an evaluation (step prompts, judge prompts): each phase says which prompts
//! are pending, how to build one, and what line to append for its outcome; the driver runs them through the
//! backend, appends every line the moment its outcome is known, and shows progress.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::dump::PromptDump;
use super::progress::Progress;
use crate::backend::{Backend, ChatRequest, ChatResult, JobQueue};
use crate::records::PhaseStats;
use crate::rundir::JsonlAppender;

/// A phase of an evaluation: `pending()` prompts, each turned into one line of its results file.
pub trait Phase: Sync {
    /// The line appended per prompt.
    type Record: Serialize;
    /// Name for progress and `throughput.json` (`steps`, `judge`).
    fn name(&self) -> &'static str;
    /// Prompts of the whole benchmark in this phase (done ones included).
    fn total(&self) -> usize;
    /// Prompts still to run.
    fn pending(&self) -> usize;
    /// Pending prompt `i` as a chat request (called on worker threads).
    fn request(&self, i: usize) -> Result<ChatRequest>;
    /// The line for pending prompt `i`'s outcome (an answer, or why it could not run).
    fn record(&self, i: usize, outcome: Result<ChatResult, String>) -> Self::Record;
    /// The pending prompts grouped into units that go to one device together, largest first (each its own
    /// unit unless the phase says otherwise).
    fn groups(&self) -> Vec<Vec<usize>> {
        (0..self.pending()).map(|i| vec![i]).collect()
    }
    /// The queue the backend takes the pending prompts from: all ready, in [`Phase::groups`] (a phase whose
    /// prompts wait for earlier answers starts a chained queue and releases them in [`Phase::settled`]).
    fn queue(&self) -> JobQueue {
        JobQueue::ready(self.pending(), self.groups())
    }
    /// Prompt `i`'s line has been appended: release the prompts it makes ready, or give up those it makes
    /// unnecessary; returns how many were given up (they count as done for the progress display).
    fn settled(&self, i: usize, record: &Self::Record, jobs: &JobQueue) -> usize {
        let _ = (i, record, jobs);
        0
    }
    /// What pending prompt `i` is, for `--dump-prompts` (e.g. its trajectory and step).
    fn describe(&self, i: usize) -> serde_json::Value {
        serde_json::json!({ "index": i })
    }
}

/// Run `phase` through `backend`, appending its lines to `path` (synced before returning).
pub fn run_phase<P: Phase>(backend: &dyn Backend, phase: &P, path: &Path) -> Result<PhaseStats> {
    run_phase_dumping(backend, phase, path, None)
}

/// [`run_phase`], writing every prompt built into `dump` as well.
pub fn run_phase_dumping<P: Phase>(
    backend: &dyn Backend,
    phase: &P,
    path: &Path,
    dump: Option<&PromptDump>,
) -> Result<PhaseStats> {
    let mut out = JsonlAppender::open(path, 8)?;
    let (total, pending) = (phase.total(), phase.pending());
    let mut progress = Progress::new(phase.name(), total as u64, (total - pending) as u64);
    let t0 = std::time::Instant::now();
    let make = |i: usize| {
        let request = phase.request(i)?;
        if let Some(d) = dump {
            d.write(phase.describe(i), &request)?;
        }
        Ok(request)
    };
    let jobs = phase.queue();
    let mut stats = backend.run(&jobs, &make, &mut |i, outcome, st| {
        let record = phase.record(i, outcome);
        if let Err(e) = out.append(&record) {
            // Nothing more can be saved: hand out nothing more (a chained queue would wait for this release).
            jobs.close();
            return Err(e.into());
        }
        let given_up = phase.settled(i, &record, &jobs);
        progress.advance(1 + given_up as u64, st);
        Ok(())
    })?;
    out.sync()?;
    if let Some(d) = dump {
        d.flush()?;
    }
    stats.phase = phase.name().into();
    stats.wall_seconds = t0.elapsed().as_secs_f64();
    progress.finish();
    for d in &stats.devices {
        tracing::info!(
            "{}: {} finished {} prompts ({:.1} s busy)",
            phase.name(),
            d.device,
            d.prompts,
            d.busy_seconds
        );
    }
    Ok(stats)
}
