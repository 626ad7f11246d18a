//! How many calls the OpenAI backend's workers have in flight while the server is busy: `--concurrency` at first;
//! a busy answer (429) halves the allowance (at most once per [`COOLDOWN`], never below 1), and each allowance's
//! worth of answers in a row raises it by one again, up to `--concurrency` (additive increase, multiplicative
//! decrease, as TCP does with its window). So a client with more workers than the server has slots soon sends
//! about as many calls as it can take instead of being answered 429 over and over.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The shortest time between two cuts: the 429s of calls sent together count as one sign of overload.
const COOLDOWN: Duration = Duration::from_secs(1);
/// How often a worker waiting for a place looks whether it should stop.
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug)]
struct State {
    /// Calls allowed in flight now.
    limit: usize,
    /// Calls in flight.
    in_flight: usize,
    /// The lowest `limit` so far.
    lowest: usize,
    /// Answers since the last change of `limit`.
    answered: usize,
    /// When `limit` was last cut.
    cut_at: Option<Instant>,
}

/// The allowance of calls in flight, shared by a client's workers.
#[derive(Debug)]
pub(crate) struct Throttle {
    max: usize,
    state: Mutex<State>,
    freed: Condvar,
}

/// A call's place in flight, given back when dropped.
#[derive(Debug)]
pub(crate) struct Place<'a>(&'a Throttle);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        drop(s);
        self.0.freed.notify_all();
    }
}

impl Throttle {
    /// At most `max` calls in flight (at least 1).
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            max,
            state: Mutex::new(State {
                limit: max,
                in_flight: 0,
                lowest: max,
                answered: 0,
                cut_at: None,
            }),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait for a place in flight; `None` once `stopped` says so.
    pub fn acquire(&self, stopped: &dyn Fn() -> bool) -> Option<Place<'_>> {
        let mut s = self.lock();
        loop {
            if stopped() {
                return None;
            }
            if s.in_flight < s.limit {
                s.in_flight += 1;
                return Some(Place(self));
            }
            s = self
                .freed
                .wait_timeout(s, POLL)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// A busy answer: halve the allowance, unless it was cut less than [`COOLDOWN`] ago.
    pub fn busy(&self) {
        let mut s = self.lock();
        if s.cut_at.is_some_and(|t| t.elapsed() < COOLDOWN) || s.limit == 1 {
            return;
        }
        let before = s.limit;
        s.limit = (s.limit / 2).max(1);
        s.lowest = s.lowest.min(s.limit);
        s.answered = 0;
        s.cut_at = Some(Instant::now());
        tracing::info!(
            "the server is busy (429): {} requests in flight at most, down from {before}",
            s.limit
        );
    }

    /// An answer: after an allowance's worth of them, raise the allowance by one (up to the maximum).
    pub fn answered(&self) {
        let mut s = self.lock();
        if s.limit == self.max {
            return;
        }
        s.answered += 1;
        if s.answered >= s.limit {
            s.limit += 1;
            s.answered = 0;
            tracing::debug!("{} requests in flight at most again", s.limit);
            drop(s);
            self.freed.notify_all();
        }
    }

    /// The lowest allowance so far.
    pub fn lowest(&self) -> usize {
        self.lock().lowest
    }

    #[cfg(test)]
    fn limit(&self) -> usize {
        self.lock().limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_answers_halve_and_answers_grow_back() {
        let t = Throttle::new(8);
        t.busy();
        assert_eq!(t.limit(), 4);
        // The 429s of one burst cut once.
        t.busy();
        assert_eq!(t.limit(), 4);
        t.lock().cut_at = None;
        t.busy();
        t.lock().cut_at = None;
        t.busy();
        t.lock().cut_at = None;
        t.busy();
        assert_eq!((t.limit(), t.lowest()), (1, 1), "never below 1");
        t.answered();
        assert_eq!(t.limit(), 2);
        t.answered();
        assert_eq!(t.limit(), 2);
        t.answered();
        assert_eq!(t.limit(), 3);
        for _ in 0..100 {
            t.answered();
        }
        assert_eq!((t.limit(), t.lowest()), (8, 1), "up to the maximum");
    }

    #[test]
    fn places_beyond_the_allowance_wait() {
        let t = Throttle::new(2);
        let never = || false;
        let a = t.acquire(&never).unwrap();
        let _b = t.acquire(&never).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiting = s.spawn(|| {
                t.acquire(&|| stop.load(std::sync::atomic::Ordering::Relaxed))
                    .is_some()
            });
            std::thread::sleep(Duration::from_millis(100));
            assert!(!waiting.is_finished(), "a third place was given");
            drop(a);
            assert!(waiting.join().unwrap(), "a freed place was not given");
        });
        assert!(t.acquire(&|| true).is_none(), "a stop ends the wait");
    }
}
