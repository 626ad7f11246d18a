//! The requests of a phase as they become ready to run: [`JobQueue`].
//!
//! A phase's requests are numbered `0..count`. Some phases know every request at the start (each step prompt of
//! the gold history); others release a request only when an earlier one's answer is known (the next step of a
//! trajectory whose prompt holds the model's own earlier answers). The queue serves both: a device takes a whole
//! group of ready requests at a time (e.g. one trajectory's steps, so one device runs them together), and asks
//! without waiting while it has other work, or waiting when it has none.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

use crate::engine::Next;

/// The longest a taker waits in one [`JobQueue::next_group`] call.
pub const WAIT_SLICE: std::time::Duration = std::time::Duration::from_millis(100);

#[derive(Debug, Default)]
struct State {
    ready: VecDeque<Vec<usize>>,
    /// Requests that may still be released.
    expected: usize,
    /// Set by [`JobQueue::close`]: nothing more is handed out.
    closed: bool,
}

/// The ready requests of a phase, grouped (see the module documentation). Shared by every device of a run.
#[derive(Debug)]
pub struct JobQueue {
    count: usize,
    /// Some requests wait for a release ([`JobQueue::chained`]).
    chained: bool,
    state: Mutex<State>,
    released: Condvar,
}

impl JobQueue {
    /// Every request ready from the start, in `groups` (each index once, largest group first as the phase
    /// wishes); `count` is the number of requests.
    pub fn ready(count: usize, groups: Vec<Vec<usize>>) -> Self {
        Self::with(count, groups, 0)
    }

    /// `count` requests, each its own group, all ready.
    pub(crate) fn ungrouped(count: usize) -> Self {
        Self::ready(count, (0..count).map(|i| vec![i]).collect())
    }

    /// `count` requests of which `first` are ready (each its own group); the other `count - first.len()` are
    /// released one by one with [`JobQueue::release`], or given up with [`JobQueue::forgo`].
    pub fn chained(count: usize, first: Vec<usize>) -> Self {
        let expected = count.saturating_sub(first.len());
        Self::with(
            count,
            first.into_iter().map(|i| vec![i]).collect(),
            expected,
        )
    }

    fn with(count: usize, ready: Vec<Vec<usize>>, expected: usize) -> Self {
        Self {
            count,
            chained: expected > 0,
            state: Mutex::new(State {
                ready: ready.into(),
                expected,
                closed: false,
            }),
            released: Condvar::new(),
        }
    }

    /// Number of requests of the phase (indices are below it).
    pub fn count(&self) -> usize {
        self.count
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make request `index` ready (one of the expected ones).
    pub fn release(&self, index: usize) {
        let mut s = self.lock();
        s.expected = s.expected.saturating_sub(1);
        s.ready.push_back(vec![index]);
        self.released.notify_all();
    }

    /// `n` of the expected requests will never be released (a chain ended early).
    pub(crate) fn forgo(&self, n: usize) {
        let mut s = self.lock();
        s.expected = s.expected.saturating_sub(n);
        self.released.notify_all();
    }

    /// Hand out nothing more (a stop was requested); waiting takers return [`Next::Done`].
    pub fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.ready.clear();
        self.released.notify_all();
    }

    /// A taker stopped (its device failed) with requests it took still unanswered. Their releases may never come,
    /// so a chained queue hands out nothing more (what is missing is redone on resume); a queue of requests that do
    /// not wait for each other goes on, so the other takers finish it.
    pub(crate) fn abandon(&self) {
        if self.chained {
            self.close();
        }
    }

    /// The next ready group. With `wait`, block until a group is released or nothing more can come, but at most
    /// [`WAIT_SLICE`] (then [`Next::Pending`]), so a waiting taker can notice that it should stop.
    pub(crate) fn next_group(&self, wait: bool) -> Next<Vec<usize>> {
        let mut s = self.lock();
        let mut waited = false;
        loop {
            if let Some(g) = s.ready.pop_front() {
                return Next::Ready(g);
            }
            if s.closed || s.expected == 0 {
                return Next::Done;
            }
            if !wait || waited {
                return Next::Pending;
            }
            s = self
                .released
                .wait_timeout(s, WAIT_SLICE)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            waited = true;
        }
    }
}

/// One taker's view of a [`JobQueue`]: request indices, a group at a time, so a device runs a whole group.
#[derive(Debug)]
pub struct Taker<'q> {
    queue: &'q JobQueue,
    current: VecDeque<usize>,
    /// The only taker of its queue: takes every ready request at once and hands out the lowest index first.
    sole: Option<std::collections::BTreeSet<usize>>,
}

impl<'q> Taker<'q> {
    /// A taker of `queue` that shares it with others: a whole group at a time.
    pub fn new(queue: &'q JobQueue) -> Self {
        Self {
            queue,
            current: VecDeque::new(),
            sole: None,
        }
    }

    /// The only taker of `queue` (one device): the ready requests in index order, which a phase sorts for one
    /// device (largest prompts first), whatever their groups.
    pub fn sole(queue: &'q JobQueue) -> Self {
        Self {
            sole: Some(Default::default()),
            ..Self::new(queue)
        }
    }

    /// The next request index (see [`JobQueue::next_group`] for `wait`).
    pub fn next(&mut self, wait: bool) -> Next<usize> {
        if let Some(ready) = self.sole.as_mut() {
            while let Next::Ready(g) = self.queue.next_group(false) {
                ready.extend(g);
            }
            if let Some(i) = ready.pop_first() {
                return Next::Ready(i);
            }
        } else if let Some(i) = self.current.pop_front() {
            return Next::Ready(i);
        }
        match self.queue.next_group(wait) {
            Next::Ready(g) => {
                match self.sole.as_mut() {
                    Some(ready) => ready.extend(g),
                    None => self.current.extend(g),
                }
                self.next(wait)
            }
            Next::Pending => Next::Pending,
            Next::Done => Next::Done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sole_taker_takes_in_index_order() {
        let q = JobQueue::ready(4, vec![vec![2, 0], vec![3], vec![1]]);
        let mut t = Taker::sole(&q);
        let got: Vec<Next<usize>> = (0..5).map(|_| t.next(false)).collect();
        let want = [0, 1, 2, 3].map(Next::Ready);
        assert_eq!(got[..4], want);
        assert_eq!(got[4], Next::Done);
        // Released one by one, they come as released.
        let q = JobQueue::chained(3, vec![1]);
        let mut t = Taker::sole(&q);
        assert_eq!(t.next(false), Next::Ready(1));
        assert_eq!(t.next(false), Next::Pending);
        q.release(0);
        q.release(2);
        let got: Vec<Next<usize>> = (0..3).map(|_| t.next(false)).collect();
        assert_eq!(got, [Next::Ready(0), Next::Ready(2), Next::Done]);
    }

    #[test]
    fn groups_come_whole_and_in_order() {
        let q = JobQueue::ready(3, vec![vec![2, 0], vec![1]]);
        let mut t = Taker::new(&q);
        let got: Vec<Next<usize>> = (0..4).map(|_| t.next(false)).collect();
        assert_eq!(
            got,
            [Next::Ready(2), Next::Ready(0), Next::Ready(1), Next::Done]
        );
    }

    #[test]
    fn chained_requests_wait_for_their_release() {
        let q = JobQueue::chained(4, vec![0, 2]);
        let mut t = Taker::new(&q);
        assert_eq!(t.next(false), Next::Ready(0));
        assert_eq!(t.next(false), Next::Ready(2));
        assert_eq!(t.next(false), Next::Pending);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| loop {
                match Taker::new(&q).next(true) {
                    Next::Pending => continue,
                    other => return other,
                }
            });
            q.release(1);
            assert_eq!(waiter.join().unwrap(), Next::Ready(1));
        });
        assert_eq!(t.next(false), Next::Pending);
        q.forgo(1);
        assert_eq!(t.next(true), Next::Done);
    }

    #[test]
    fn an_abandoned_chained_queue_stops_and_a_ready_one_goes_on() {
        let q = JobQueue::chained(3, vec![0]);
        q.abandon();
        assert_eq!(Taker::new(&q).next(true), Next::Done);
        let q = JobQueue::ungrouped(2);
        q.abandon();
        assert_eq!(Taker::new(&q).next(false), Next::Ready(0));
    }

    #[test]
    fn a_closed_queue_hands_out_nothing() {
        let q = JobQueue::chained(3, vec![0]);
        q.close();
        assert_eq!(Taker::new(&q).next(true), Next::Done);
    }
}
