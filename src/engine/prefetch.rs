//! Preparation ahead of the model: jobs are turned into inputs (screenshot decode, smart-resize, patchify,
//! tokenisation) on the rayon pool, and a bounded channel hands the results to the model thread in job order, so
//! preparation overlaps compute without piling up memory.

use std::sync::mpsc::{sync_channel, Receiver};

use rayon::prelude::*;

/// Prepare `jobs` in order on the rayon pool, `chunk` at a time, and stream `f(index, job)` through a channel that
/// holds at most `bound` results. The producer stops early when the receiver is dropped.
pub fn prefetch<'scope, J, T, F>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    jobs: Vec<J>,
    chunk: usize,
    bound: usize,
    f: F,
) -> Receiver<T>
where
    J: Send + Sync + 'scope,
    T: Send + 'scope,
    F: Fn(usize, &J) -> T + Send + Sync + 'scope,
{
    let (tx, rx) = sync_channel(bound.max(1));
    scope.spawn(move || {
        let indexed: Vec<(usize, J)> = jobs.into_iter().enumerate().collect();
        for group in indexed.chunks(chunk.max(1)) {
            let prepared: Vec<T> = group.par_iter().map(|(i, j)| f(*i, j)).collect();
            for p in prepared {
                if tx.send(p).is_err() {
                    return;
                }
            }
        }
    });
    rx
}
