//! The accept loop of `serve` (hyper's HTTP/1 connections under tokio, with the bounds a shared server needs): at
//! most `max_connections` connections at once (beyond them, new ones wait in the kernel's backlog and cost no file
//! descriptor), a deadline on each request head (from the moment the server waits for one, so it also closes an
//! idle kept-alive connection and a slowloris), and a stop in three phases: draining (still accepting, each new
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
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;

use super::routes::App;

/// The connection bounds of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Most open connections (`--max-connections`).
    pub max_connections: usize,
    /// Time to send a whole request head, counted from when the server waits for it (`--header-timeout`).
    pub header_timeout: Duration,
    /// Time to send a whole request body, once the server reads it (`--body-timeout`).
    pub body_timeout: Duration,
    /// Time from a stop signal to the exit, in-flight requests included (`--shutdown-timeout`).
    pub shutdown_timeout: Duration,
}

/// How long the requests cut off at the deadline are given to have their error written.
const CUT_OFF_GRACE: Duration = Duration::from_secs(1);

/// Serve `listener` until a stop signal and the drain after it; `Err` when the deadline cut requests off.
pub(crate) async fn serve(listener: TcpListener, app: Arc<App>, limits: ConnLimits) -> Result<()> {
    let router = super::routes::router(app.clone());
    let conns = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (closing, closing_rx) = watch::channel(false);
    let accept = |stream: tokio::net::TcpStream, permit, keep_alive: bool| {
        let service = TowerToHyperService::new(router.clone());
        let mut closing = closing_rx.clone();
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .keep_alive(keep_alive);
        tokio::spawn(async move {
            let _permit = permit;
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => return log_end(r),
                _ = closing.wait_for(|c| *c) => conn.as_mut().graceful_shutdown(),
            }
            log_end(conn.await);
        });
    };
    let signal = super::stop_signal();
    tokio::pin!(signal);
    // Serving.
    let sig = loop {
        tokio::select! {
            sig = &mut signal => break sig,
            next = next_connection(&listener, &conns) => {
                if let Some((stream, permit)) = next { accept(stream, permit, true) }
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
            next = next_connection(&listener, &conns) => {
                if let Some((stream, permit)) = next { accept(stream, permit, false) }
            }
        }
    }
    drop(listener);
    // Closing: each connection ends once its answer is written.
    let _ = closing.send(true);
    let all = u32::try_from(limits.max_connections.max(1)).unwrap_or(u32::MAX);
    let ended = tokio::time::timeout_at(deadline, conns.acquire_many(all)).await;
    if ended.is_ok() {
        return Ok(());
    }
    let cut = app.in_flight();
    if cut == 0 {
        tracing::warn!("the shutdown deadline passed: closing the connections still open");
        return Ok(());
    }
    let _ = app.abort.send(true);
    let _ = tokio::time::timeout(CUT_OFF_GRACE, conns.acquire_many(all)).await;
    anyhow::bail!(
        "the shutdown deadline ({} s, --shutdown-timeout) passed with {cut} request(s) unanswered; they got an \
         error",
        limits.shutdown_timeout.as_secs_f64()
    )
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
        if e.is_timeout() {
            tracing::debug!("closed a connection that sent no whole request head in time");
        } else {
            tracing::debug!("connection ended: {e}");
        }
    }
}

/// The request body, read within `limit` bytes and `timeout`.
pub(crate) async fn read_body(
    body: axum::body::Body,
    limit: usize,
    timeout: Duration,
) -> Result<Vec<u8>, BodyError> {
    use futures_util::StreamExt;
    let read = async {
        let mut stream = body.into_data_stream();
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| BodyError::Broken(e.to_string()))?;
            if out.len() + chunk.len() > limit {
                return Err(BodyError::TooLarge);
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(BodyError::Slow))
}

/// Why a request body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// Over the body limit.
    TooLarge,
    /// Not sent whole within the body timeout.
    Slow,
    /// The connection failed while reading it.
    Broken(String),
}
