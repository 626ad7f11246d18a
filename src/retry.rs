//! One retry policy for every HTTP client of the program (the Hub downloads and the OpenAI backend): which
//! failures are worth another try, how long to wait before it, and the loop that tries.
//!
//! * **Busy** (HTTP 429): the server asks to be called later. Waiting it out is not a failed attempt: it costs no
//!   retry, only time, up to a budget per call ([`Policy::busy_budget`]).
//! * **Transient** (a connection error, a timeout, HTTP 408, 409 and any 5xx): tried again up to
//!   [`Policy::retries`] more times.
//! * **Final** (any other status, an answer that cannot be read): the call's answer.
//!
//! The wait before another try is the server's `Retry-After` (`retry-after-ms` first, then `retry-after` in
//! seconds; at most [`MAX_RETRY_AFTER`]) or else an exponential backoff, `min(0.5 s · 2ⁿ, 8 s)` less a random part
//! of up to a quarter (as openai-python's `_base_client.py` does). A stop request ends any wait at once.

use std::time::{Duration, Instant};

/// The longest wait a `Retry-After` may ask for before it is cut short.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How a client retries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Further tries after a transient failure.
    pub retries: u32,
    /// The longest time one call spends waiting out busy answers (429) before it gives up.
    pub busy_budget: Duration,
}

/// What an HTTP status means to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    /// 2xx/3xx: an answer.
    Answer,
    /// 429: wait and call again.
    Busy,
    /// 408, 409, 5xx: worth another try.
    Transient,
    /// Any other status: the server's last word.
    Final,
}

/// The class of `status`.
pub fn classify(status: u16) -> StatusClass {
    match status {
        429 => StatusClass::Busy,
        408 | 409 => StatusClass::Transient,
        s if s >= 500 => StatusClass::Transient,
        s if s < 400 => StatusClass::Answer,
        _ => StatusClass::Final,
    }
}

/// Why one attempt gave no answer; `F` is what a client makes of a final failure.
#[derive(Debug)]
pub enum Failure<F> {
    /// The server is busy (429).
    Busy {
        /// What happened.
        message: String,
        /// The server's `Retry-After`.
        after: Option<Duration>,
    },
    /// Worth another try (a connection error, a timeout, 408, 409, 5xx, an answer cut short).
    Transient {
        /// What happened.
        message: String,
        /// The server's `Retry-After`.
        after: Option<Duration>,
    },
    /// The call's final outcome.
    Final(F),
    /// A stop was requested.
    Cancelled,
}

impl<F> Failure<F> {
    /// A transient failure without `Retry-After`.
    pub fn transient(message: impl Into<String>) -> Self {
        Failure::Transient {
            message: message.into(),
            after: None,
        }
    }

    /// The failure of an HTTP status that is not final: busy or transient by [`classify`]; `None` for a final one.
    pub fn of_status(status: u16, message: String, after: Option<Duration>) -> Option<Self> {
        match classify(status) {
            StatusClass::Busy => Some(Failure::Busy { message, after }),
            StatusClass::Transient => Some(Failure::Transient { message, after }),
            StatusClass::Answer | StatusClass::Final => None,
        }
    }
}

/// Why a call ended without an answer.
#[derive(Debug, PartialEq)]
pub enum GaveUp<F> {
    /// A final failure.
    Final(F),
    /// Every retry failed; the last failure's message.
    Retries(String),
    /// The server stayed busy longer than the budget; its last message.
    Busy(String),
    /// A stop was requested (while waiting to retry `Some(failure)`).
    Cancelled(Option<String>),
}

/// A call's outcome and the attempts it took.
#[derive(Debug)]
pub struct Outcome<T, F> {
    /// The answer, or why there is none.
    pub result: Result<T, GaveUp<F>>,
    /// Attempts made.
    pub attempts: usize,
    /// Of them, busy answers waited out.
    pub busy: usize,
}

/// Run `attempt` under `policy` until it answers or gives up; `stopped` is asked before each attempt and during
/// every wait (a stop ends the call), and `on_wait(wait, message)` is told of each wait before it starts.
pub fn run<T, F>(
    policy: Policy,
    stopped: &dyn Fn() -> bool,
    on_wait: &dyn Fn(Duration, &str),
    mut attempt: impl FnMut() -> Result<T, Failure<F>>,
) -> Outcome<T, F> {
    let (mut attempts, mut busy, mut transient) = (0usize, 0usize, 0u32);
    let mut busy_left = policy.busy_budget;
    let end = |result, attempts, busy| Outcome {
        result,
        attempts,
        busy,
    };
    loop {
        if stopped() {
            return end(Err(GaveUp::Cancelled(None)), attempts, busy);
        }
        attempts += 1;
        let (message, wait) = match attempt() {
            Ok(v) => return end(Ok(v), attempts, busy),
            Err(Failure::Final(f)) => return end(Err(GaveUp::Final(f)), attempts, busy),
            Err(Failure::Cancelled) => return end(Err(GaveUp::Cancelled(None)), attempts, busy),
            Err(Failure::Busy { message, after }) => {
                busy += 1;
                let wait = wait_for(after, busy - 1);
                if wait > busy_left {
                    return end(Err(GaveUp::Busy(message)), attempts, busy);
                }
                busy_left -= wait;
                (message, wait)
            }
            Err(Failure::Transient { message, after }) => {
                if transient >= policy.retries {
                    return end(Err(GaveUp::Retries(message)), attempts, busy);
                }
                let wait = wait_for(after, transient as usize);
                transient += 1;
                (message, wait)
            }
        };
        on_wait(wait, &message);
        if !pause(wait, stopped) {
            return end(Err(GaveUp::Cancelled(Some(message))), attempts, busy);
        }
    }
}

/// The wait before another try: the server's `after` (at most [`MAX_RETRY_AFTER`]), else [`backoff`]`(n)`.
fn wait_for(after: Option<Duration>, n: usize) -> Duration {
    after.map_or_else(|| backoff(n), |a| a.min(MAX_RETRY_AFTER))
}

/// The wait before retry `n` (0-based): `min(0.5 · 2ⁿ, 8)` seconds, less a random part of up to a quarter (so
/// clients that failed together do not come back together).
pub fn backoff(n: usize) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let base = (0.5 * 2f64.powi(n.min(16) as i32)).min(8.0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(n);
    let jitter = (h.finish() % 1000) as f64 / 1000.0;
    Duration::from_secs_f64(base * (1.0 - 0.25 * jitter))
}

/// The longest wait a server's `Retry-After` is taken for: a larger (or absurd) value waits this long.
const LONGEST_RETRY_AFTER_S: f64 = 3600.0;

/// The server's `Retry-After` from the values of its `retry-after-ms` and `retry-after` headers (seconds, possibly
/// fractional, at most an hour; an HTTP date is not read).
pub fn retry_after(ms: Option<&str>, secs: Option<&str>) -> Option<Duration> {
    let number = |v: Option<&str>| v.and_then(|v| v.trim().parse::<f64>().ok());
    number(ms)
        .map(|ms| ms / 1000.0)
        .or_else(|| number(secs))
        .filter(|s| !s.is_nan() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(LONGEST_RETRY_AFTER_S)))
}

/// Sleep `d` unless `stopped` becomes true meanwhile (then `false`).
pub fn pause(d: Duration, stopped: &dyn Fn() -> bool) -> bool {
    let end = Instant::now() + d;
    loop {
        if stopped() {
            return false;
        }
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(25)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const NEVER: &dyn Fn() -> bool = &|| false;
    const QUIET: &dyn Fn(Duration, &str) = &|_, _| {};

    fn policy(retries: u32, busy_ms: u64) -> Policy {
        Policy {
            retries,
            busy_budget: Duration::from_millis(busy_ms),
        }
    }

    #[test]
    fn statuses_are_classified() {
        assert_eq!(classify(429), StatusClass::Busy);
        for s in [408, 409, 500, 502, 503, 504] {
            assert_eq!(classify(s), StatusClass::Transient, "{s}");
        }
        for s in [400, 401, 403, 404, 413, 422] {
            assert_eq!(classify(s), StatusClass::Final, "{s}");
        }
        assert_eq!(classify(200), StatusClass::Answer);
        assert!(Failure::<()>::of_status(404, String::new(), None).is_none());
    }

    #[test]
    fn backoff_doubles_up_to_eight_seconds_with_jitter() {
        for (n, base) in [(0, 0.5), (1, 1.0), (2, 2.0), (4, 8.0), (10, 8.0)] {
            let d = backoff(n).as_secs_f64();
            assert!(d <= base && d >= 0.75 * base, "retry {n}: {d}");
        }
    }

    #[test]
    fn retry_after_reads_milliseconds_first_then_seconds() {
        let ms = retry_after(Some("250"), Some("3"));
        assert_eq!(ms, Some(Duration::from_millis(250)));
        assert_eq!(
            retry_after(None, Some(" 1.5 ")),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(None, Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            None
        );
        assert_eq!(retry_after(None, Some("-1")), None);
        assert_eq!(retry_after(None, Some("NaN")), None);
        let hour = Some(Duration::from_secs(3600));
        assert_eq!(retry_after(None, Some("1e300")), hour);
        assert_eq!(retry_after(Some("inf"), None), hour);
    }

    #[test]
    fn transient_failures_are_retried_a_bounded_number_of_times() {
        let calls = Cell::new(0);
        let out: Outcome<(), ()> = run(policy(2, 0), NEVER, QUIET, || {
            calls.set(calls.get() + 1);
            Err(Failure::Transient {
                message: format!("boom {}", calls.get()),
                after: Some(Duration::ZERO),
            })
        });
        assert_eq!(out.result, Err(GaveUp::Retries("boom 3".into())));
        assert_eq!((out.attempts, out.busy), (3, 0));
    }

    #[test]
    fn busy_answers_cost_no_retry_only_time() {
        // Five 429s with Retry-After 10 ms fit a 100 ms budget although no retry is allowed; then the answer.
        let calls = Cell::new(0);
        let out = run(policy(0, 100), NEVER, QUIET, || {
            calls.set(calls.get() + 1);
            if calls.get() <= 5 {
                Err(Failure::<()>::Busy {
                    message: "busy".into(),
                    after: Some(Duration::from_millis(10)),
                })
            } else {
                Ok(7)
            }
        });
        assert_eq!((out.result, out.attempts, out.busy), (Ok(7), 6, 5));
        // A server busy beyond the budget: the call gives up with its message.
        let t0 = Instant::now();
        let out: Outcome<(), ()> = run(policy(5, 50), NEVER, QUIET, || {
            Err(Failure::Busy {
                message: "still busy".into(),
                after: Some(Duration::from_millis(20)),
            })
        });
        assert_eq!(out.result, Err(GaveUp::Busy("still busy".into())));
        assert_eq!(out.busy, 3);
        assert!(t0.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn final_failures_and_stops_end_the_call_at_once() {
        let out: Outcome<(), &str> = run(policy(9, 0), NEVER, QUIET, || Err(Failure::Final("no")));
        assert_eq!((out.result, out.attempts), (Err(GaveUp::Final("no")), 1));
        // A stop during a long wait ends it.
        let t0 = Instant::now();
        let stop_after = t0 + Duration::from_millis(50);
        let stopped = move || Instant::now() > stop_after;
        let out: Outcome<(), ()> = run(policy(3, 0), &stopped, QUIET, || {
            Err(Failure::Transient {
                message: "down".into(),
                after: Some(Duration::from_secs(30)),
            })
        });
        assert_eq!(out.result, Err(GaveUp::Cancelled(Some("down".into()))));
        assert!(t0.elapsed() < Duration::from_secs(2));
    }
}
