//! Preparation ahead of the model: jobs are turned into inputs (screenshot decode, smart-resize, patchify,
//! tokenisation) on the rayon pool, and a bounded channel hands the results to the model thread in job order, so
//! preparation overlaps compute without piling up memory.

use std::sync::mpsc::{sync_channel, Receiver};

use rayon::prelude::*;

/// Prepare `jobs` in order on the rayon pool, `chunk` at a time, and stream `f(job)` through a channel that
/// holds at most `bound` results. Jobs are pulled from the iterator only as they are prepared (it may be a queue
/// shared with other consumers); the producer stops early when the receiver is dropped.
pub fn prefetch<'scope, J, T, F>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    mut jobs: impl Iterator<Item = J> + Send + 'scope,
    chunk: usize,
    bound: usize,
    f: F,
) -> Receiver<T>
where
    J: Send + Sync + 'scope,
    T: Send + 'scope,
    F: Fn(&J) -> T + Send + Sync + 'scope,
{
    let (tx, rx) = sync_channel(bound.max(1));
    scope.spawn(move || loop {
        let group: Vec<J> = jobs.by_ref().take(chunk.max(1)).collect();
        if group.is_empty() {
            return;
        }
        let prepared: Vec<T> = group.par_iter().map(&f).collect();
        for p in prepared {
            if tx.send(p).is_err() {
                return;
            }
        }
    });
    rx
}
