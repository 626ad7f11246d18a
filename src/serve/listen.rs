//! The accept loop of `serve` (hyper's HTTP/1 connections under tokio, with the bounds a shared server needs): at
//! most `max_connections` connections at once (beyond them, new ones wait in the kernel's backlog and cost no file
//! descriptor), a deadline on each request head and on the idle time of a kept-alive connection ([`idle`](super::idle),
//! so a slowloris or a silent connection is closed), and a stop in three phases: draining (still accepting, each new
//! connection answered once, `/health` and new requests 503) until no request holds a slot; closing (each
//! connection ends after its answer); and, at the shutdown deadline, cutting off what is left (the requests still
//! waiting get an error) and returning.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::idle::{IdleLimits, TimedStream, Tracked, Tracker};
use super::routes::App;

/// The connection bounds of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Most open connections (`--max-connections`).
    pub max_connections: usize,
    /// Time to send a whole request head: from the accept on a new connection, from the head's first byte on a
    /// kept-alive one (`--header-timeout`).
    pub header_timeout: Duration,
    /// Time a kept-alive connection may stay silent between requests (`--keep-alive-timeout`).
    pub keep_alive_timeout: Duration,
    /// Time to send a whole request body, once the server reads it (`--body-timeout`).
    pub body_timeout: Duration,
    /// Time from a stop signal to the exit, in-flight requests included (`--shutdown-timeout`).
    pub shutdown_timeout: Duration,
}

/// How long the requests cut off at the deadline are given to have their error written.
const CUT_OFF_GRACE: Duration = Duration::from_secs(1);

/// Serve `listener` until a stop signal and the drain after it; `Err` when the deadline cut requests off.
pub(crate) async fn serve(listener: TcpListener, app: Arc<App>, limits: ConnLimits) -> Result<()> {
    let total = u32::try_from(limits.max_connections.max(1)).unwrap_or(u32::MAX);
    let conns = Conns {
        router: super::routes::router(app.clone()),
        slots: Arc::new(Semaphore::new(total as usize)),
        total,
        closing: watch::channel(false).0,
        idle: IdleLimits {
            header: limits.header_timeout,
            keep_alive: limits.keep_alive_timeout,
        },
    };
    let signal = super::stop_signal();
    tokio::pin!(signal);
    // Serving.
    let sig = loop {
        tokio::select! {
            sig = &mut signal => break sig,
            next = next_connection(&listener, &conns.slots) => {
                if let Some((stream, permit)) = next { conns.spawn(stream, permit, true) }
            }
        }
    };
    app.stopping.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + limits.shutdown_timeout;
    tracing::warn!(
        "{sig}: no new requests; finishing the ones in flight, for at most {} s (again to quit at once)",
        limits.shutdown_timeout.as_secs_f64()
    );
    tokio::spawn(async {
        let sig = super::stop_signal().await;
        eprintln!("{sig} again: quitting at once");
        std::process::exit(130);
    });
    // Draining: new connections are answered (503) once and closed.
    while app.in_flight() > 0 && Instant::now() < deadline {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            next = next_connection(&listener, &conns.slots) => {
                if let Some((stream, permit)) = next { conns.spawn(stream, permit, false) }
            }
        }
    }
    drop(listener);
    conns.close(&app, deadline, limits.shutdown_timeout).await
}

/// The open connections: the router they serve, a slot each, and the signal to end after the current answer.
struct Conns {
    router: axum::Router,
    slots: Arc<Semaphore>,
    /// How many slots there are (all free: every connection ended).
    total: u32,
    closing: watch::Sender<bool>,
    idle: IdleLimits,
}

impl Conns {
    /// Serve one connection on its own task, holding `permit` until it ends; with `keep_alive` false, it ends
    /// after one answer.
    fn spawn(&self, stream: tokio::net::TcpStream, permit: OwnedSemaphorePermit, keep_alive: bool) {
        let tracker = Tracker::new(self.idle);
        let service = tracked_service(self.router.clone(), tracker.clone());
        let mut closing = self.closing.subscribe();
        let mut builder = http1::Builder::new();
        // The request-head and idle deadlines are the stream's: hyper's own header timer would also run while a
        // kept-alive connection is idle.
        builder.timer(TokioTimer::new()).keep_alive(keep_alive);
        tokio::spawn(async move {
            let io = TokioIo::new(TimedStream::new(stream, tracker, permit));
            let conn = builder.serve_connection(io, service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => return log_end(r),
                _ = closing.wait_for(|c| *c) => conn.as_mut().graceful_shutdown(),
            }
            log_end(conn.await);
        });
    }

    /// End every connection once its answer is written, until `deadline`; past it, the requests still unanswered
    /// get an error (a short grace to write it), and the result says how many.
    async fn close(&self, app: &App, deadline: Instant, timeout: Duration) -> Result<()> {
        let _ = self.closing.send(true);
        let all = self.total;
        if tokio::time::timeout_at(deadline, self.slots.acquire_many(all))
            .await
            .is_ok()
        {
            return Ok(());
        }
        let cut = app.in_flight();
        if cut == 0 {
            tracing::warn!("the shutdown deadline passed: closing the connections still open");
            return Ok(());
        }
        let _ = app.abort.send(true);
        let _ = tokio::time::timeout(CUT_OFF_GRACE, self.slots.acquire_many(all)).await;
        anyhow::bail!(
            "the shutdown deadline ({} s, --shutdown-timeout) passed with {cut} request(s) unanswered; they got \
             an error",
            timeout.as_secs_f64()
        )
    }
}

/// The router as a hyper service whose requests mark `tracker` busy until their answer is written.
fn tracked_service(
    router: axum::Router,
    tracker: Tracker,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = hyper::Response<Tracked>,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    let inner = TowerToHyperService::new(router);
    hyper::service::service_fn(move |req| {
        use hyper::service::Service;
        let guard = tracker.begin();
        let answer = inner.call(req);
        async move {
            let response = answer.await?;
            Ok(response.map(|body| Tracked::new(body, guard)))
        }
    })
}

/// The next connection, once one of the connection slots is free; `None` after a failed accept (out of file
/// descriptors, say), after a short pause so that a persistent failure does not spin.
async fn next_connection(
    listener: &TcpListener,
    conns: &Arc<Semaphore>,
) -> Option<(tokio::net::TcpStream, tokio::sync::OwnedSemaphorePermit)> {
    let permit = conns.clone().acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, _)) => Some((stream, permit)),
        Err(e) => {
            tracing::warn!("accepting a connection failed: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// Log how a connection ended, when it was not a plain close.
fn log_end(r: hyper::Result<()>) {
    if let Err(e) = r {
        if e.is_timeout() || e.to_string().contains("--header-timeout") {
            tracing::debug!("closed a connection that sent no whole request head in time");
        } else {
            tracing::debug!("connection ended: {e}");
        }
    }
}
