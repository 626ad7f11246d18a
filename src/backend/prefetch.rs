//! Preparation ahead of the model: ready requests are taken from a phase's job queue and turned into inputs
//! (screenshot decode, smart-resize, patchify, tokenisation) on the rayon pool, and a bounded channel hands the
//! results to the model thread in the order taken, so preparation overlaps compute without piling up memory.
//!
//! [`Feed`] tells the model thread whether a prepared request is on its way (it then waits for it, as a batch
//! fills) or whether none is ready yet (it then goes on decoding, and asks again after the next step).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Mutex;

use rayon::prelude::*;

use super::Taker;
use crate::engine::Next;

/// The requests one device takes from a job queue, and what is known of them on the way to the model.
#[derive(Debug)]
pub(crate) struct Feed<'q> {
    taker: Mutex<Taker<'q>>,
    /// Taken and not yet received by the model thread.
    coming: AtomicUsize,
    /// The model thread is done: the preparing thread stops waiting for releases.
    stopped: AtomicBool,
}

impl<'q> Feed<'q> {
    /// A feed taking from `taker`.
    pub fn new(taker: Taker<'q>) -> Self {
        Self {
            taker: Mutex::new(taker),
            coming: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
        }
    }

    /// Take the next ready request; with `wait`, wait for a release until one comes, nothing more can, or the
    /// feed is stopped (`None`).
    fn take(&self, wait: bool) -> Option<usize> {
        loop {
            let next = self
                .taker
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .next(wait);
            match next {
                Next::Ready(i) => {
                    self.coming.fetch_add(1, Ordering::SeqCst);
                    return Some(i);
                }
                Next::Done => return None,
                Next::Pending if wait && !self.stopped.load(Ordering::SeqCst) => continue,
                Next::Pending => return None,
            }
        }
    }

    /// Whether a taken request is still on its way to the model thread.
    pub(crate) fn coming(&self) -> bool {
        self.coming.load(Ordering::SeqCst) > 0
    }

    /// The model thread received one request.
    pub(crate) fn received(&self) {
        self.coming.fetch_sub(1, Ordering::SeqCst);
    }

    /// The model thread is done: stop waiting for releases.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }
}

/// Prepare the requests of `feed` on the rayon pool, up to `chunk` at a time, and stream `f(index)` through a
/// channel that holds at most `bound` results. The preparing thread stops when the feed has nothing more or the
/// receiver is dropped.
pub(crate) fn prefetch<'scope, T, F>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    feed: &'scope Feed<'_>,
    chunk: usize,
    bound: usize,
    f: F,
) -> Receiver<T>
where
    T: Send + 'scope,
    F: Fn(&usize) -> T + Send + Sync + 'scope,
{
    let (tx, rx) = sync_channel(bound.max(1));
    scope.spawn(move || loop {
        let Some(first) = feed.take(true) else {
            return;
        };
        let mut group = vec![first];
        while group.len() < chunk.max(1) {
            match feed.take(false) {
                Some(i) => group.push(i),
                None => break,
            }
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
