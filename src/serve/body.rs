//! Reading a request's body within the server's bounds (a size limit and a deadline), and draining the body of
//! a request refused without it.

use std::time::Duration;

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

/// Read and drop the body of a request refused without it (a full queue, a stop), up to `limit` bytes and
/// `timeout`: a connection closed with unread bytes is reset, and a reset can lose the refusal before the client
/// reads it. Nothing is kept, so this costs no memory.
pub(crate) async fn discard_body(body: axum::body::Body, limit: usize, timeout: Duration) {
    use futures_util::StreamExt;
    let drain = async {
        let mut stream = body.into_data_stream();
        let mut seen = 0;
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len();
            if seen > limit {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(timeout, drain).await;
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
