//! The deadlines of one connection between its requests: a new connection has `--header-timeout` from its accept
//! to send a whole request head; once an answer is written, the connection may stay idle (not a byte of the next
//! request) for `--keep-alive-timeout` and is then closed quietly; and once the first byte of the next head comes,
//! the rest of that head is due within `--header-timeout`. No deadline runs while a request is being answered (its
//! body has `--body-timeout`, its answer takes what it takes).
//!
//! The socket is read through [`TimedStream`], which sees the bytes, enforces the deadlines and closes without a
//! reset; the service marks a request head read ([`Tracker::begin`]) and its answer written whole ([`Tracked`]
//! drops its guard when hyper is done with the body).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

/// The two deadlines of a connection's idle time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdleLimits {
    /// Time to send a whole request head: from the accept for the first request, from the head's first byte after.
    pub header: Duration,
    /// Time a kept-alive connection may wait, silent, for its next request.
    pub keep_alive: Duration,
}

/// Where a connection is between its requests.
#[derive(Debug)]
struct State {
    /// Requests whose answer is not written whole yet.
    busy: usize,
    /// Answers written whole.
    served: usize,
    /// When the connection was accepted or its last answer was written.
    idle_since: Instant,
    /// When the first byte of the next request head came.
    head_started: Option<Instant>,
}

/// What happens when a deadline passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    /// Nothing of a request was sent: the connection is closed as a client closes it.
    Quiet,
    /// Part of a request head was sent: the connection fails with a timeout.
    PartialHead,
}

/// The shared state of one connection, seen by its reader and its service.
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    state: Arc<Mutex<State>>,
    limits: IdleLimits,
}

impl Tracker {
    /// A connection accepted now.
    pub(crate) fn new(limits: IdleLimits) -> Self {
        let state = State {
            busy: 0,
            served: 0,
            idle_since: Instant::now(),
            head_started: None,
        };
        Self {
            state: Arc::new(Mutex::new(state)),
            limits,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request head was read: no deadline runs until the returned guard is dropped (its answer written).
    pub(crate) fn begin(&self) -> AnswerGuard {
        self.lock().busy += 1;
        AnswerGuard(self.clone())
    }

    /// Bytes came in: while idle, the first one starts the head's deadline.
    fn saw_bytes(&self) {
        let mut s = self.lock();
        if s.busy == 0 && s.head_started.is_none() {
            s.head_started = Some(Instant::now());
        }
    }

    /// The deadline now running, if any.
    fn deadline(&self) -> Option<(Instant, Expiry)> {
        let s = self.lock();
        if s.busy > 0 {
            return None;
        }
        let (from, within) = match s.head_started {
            _ if s.served == 0 => (s.idle_since, self.limits.header),
            Some(t) => (t, self.limits.header),
            None => (s.idle_since, self.limits.keep_alive),
        };
        // A deadline past the clock's range is none.
        let at = from.checked_add(within)?;
        let expiry = if s.head_started.is_some() {
            Expiry::PartialHead
        } else {
            Expiry::Quiet
        };
        Some((at, expiry))
    }
}

/// Held while a request is answered; dropped once its answer is written whole (or abandoned).
#[derive(Debug)]
pub(crate) struct AnswerGuard(Tracker);

impl Drop for AnswerGuard {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.busy = s.busy.saturating_sub(1);
        s.served += 1;
        if s.busy == 0 {
            s.idle_since = Instant::now();
            s.head_started = None;
        }
    }
}

/// A response body that holds its request's [`AnswerGuard`] until hyper has written (and dropped) it.
pub(crate) struct Tracked {
    body: Body,
    _guard: AnswerGuard,
}

impl Tracked {
    pub(crate) fn new(body: Body, guard: AnswerGuard) -> Self {
        Self {
            body,
            _guard: guard,
        }
    }
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket, read under its [`Tracker`]'s deadlines, holding the connection's slot. When hyper drops
/// it, a connection the client may still be sending on (a request refused before its body was read: 401, an
/// announced 413, 408) is not closed at once, which would reset it and could lose the answer before the client
/// reads it: its writing side is shut and what comes is read and dropped for a short while first ([`linger`]).
pub(crate) struct TimedStream {
    inner: Option<TcpStream>,
    tracker: Tracker,
    sleep: Pin<Box<Sleep>>,
    permit: Option<OwnedSemaphorePermit>,
    /// Closed by the client, or for a deadline (nothing to answer): closed at once, without lingering.
    quiet: bool,
}

impl TimedStream {
    pub(crate) fn new(inner: TcpStream, tracker: Tracker, permit: OwnedSemaphorePermit) -> Self {
        let sleep = Box::pin(tokio::time::sleep(tracker.limits.header));
        Self {
            inner: Some(inner),
            tracker,
            sleep,
            permit: Some(permit),
            quiet: false,
        }
    }

    fn io(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        match self.inner.as_mut() {
            Some(s) => Ok(Pin::new(s)),
            None => Err(io::Error::from(io::ErrorKind::NotConnected)),
        }
    }

    /// The idle deadline's verdict once the socket has nothing to read: `None` while it has not passed.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Result<()>> {
        let (at, expiry) = self.tracker.deadline()?;
        if self.sleep.deadline() != at {
            self.sleep.as_mut().reset(at);
        }
        self.sleep.as_mut().poll(cx).is_ready().then(|| {
            // Nothing is answered: the connection is closed at once.
            self.quiet = true;
            if expiry == Expiry::Quiet {
                // End of file: hyper closes an idle connection without an error.
                return Ok(());
            }
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request head was not sent whole in time (--header-timeout)",
            ))
        })
    }
}

impl AsyncRead for TimedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        if let Poll::Ready(r) = self.io()?.poll_read(cx, buf) {
            if buf.filled().len() > before {
                self.tracker.saw_bytes();
            } else if r.is_ok() {
                self.quiet = true;
            }
            return Poll::Ready(r);
        }
        match self.expired(cx) {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

impl AsyncWrite for TimedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.io()?.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.io()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io()?.poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io()?.poll_shutdown(cx)
    }
}

impl Drop for TimedStream {
    fn drop(&mut self) {
        let (Some(stream), Some(permit)) = (self.inner.take(), self.permit.take()) else {
            return;
        };
        if self.quiet {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(linger(stream, permit));
        }
    }
}

/// Longest time a closing connection is read and dropped.
const LINGER: Duration = Duration::from_secs(5);
/// Longest silence of the client while lingering.
const LINGER_QUIET: Duration = Duration::from_secs(1);

/// Shut the writing side of `stream` (the client sees the end of the answer), then read and drop what the client
/// still sends, until it closes, goes quiet for [`LINGER_QUIET`], or [`LINGER`] passes; the connection keeps its
/// slot (`_permit`) meanwhile.
async fn linger(mut stream: TcpStream, _permit: OwnedSemaphorePermit) {
    use std::future::poll_fn;
    let _ = poll_fn(|cx| Pin::new(&mut stream).poll_shutdown(cx)).await;
    let drain = async {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let read = poll_fn(|cx| {
                let mut b = ReadBuf::new(&mut buf);
                Pin::new(&mut stream)
                    .poll_read(cx, &mut b)
                    .map_ok(|()| b.filled().len())
            });
            match tokio::time::timeout(LINGER_QUIET, read).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> IdleLimits {
        IdleLimits {
            header: Duration::from_secs(2),
            keep_alive: Duration::from_secs(7),
        }
    }

    #[test]
    fn the_deadlines_follow_the_connection() {
        let t = Tracker::new(limits());
        let (accepted, _) = t.deadline().unwrap();
        assert_eq!(t.deadline().unwrap().1, Expiry::Quiet);
        // A new connection: the head is due from the accept, even once its first byte came.
        t.saw_bytes();
        assert_eq!(t.deadline(), Some((accepted, Expiry::PartialHead)));
        let guard = t.begin();
        assert_eq!(t.deadline(), None, "no deadline while answering");
        t.saw_bytes();
        let before = Instant::now();
        drop(guard);
        // Idle after the answer: the keep-alive deadline, until a byte starts the next head's shorter one.
        let (idle, expiry) = t.deadline().unwrap();
        assert_eq!(expiry, Expiry::Quiet);
        assert!(idle >= before + limits().keep_alive);
        t.saw_bytes();
        let (head, expiry) = t.deadline().unwrap();
        assert_eq!(expiry, Expiry::PartialHead);
        assert!(head >= before + limits().header && head < idle);
    }
}
