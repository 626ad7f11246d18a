//! HTTP with `ureq`: agents with timeouts (and the proxy, if any), the Hub's file metadata, URL encoding, and the
//! classification of failures by the program's retry policy ([`crate::retry`]).

use std::time::Duration;

use super::HubSettings;

/// The agents one hub needs: one that returns redirects (for the Hub's own answers, whose headers name the
/// commit and the blob) and one that follows them (for the file's bytes, often on a CDN).
#[derive(Clone)]
pub(crate) struct Agents {
    /// Redirects returned, not followed.
    pub direct: ureq::Agent,
    /// Redirects followed (the authorization header is never sent to another host).
    pub follow: ureq::Agent,
}

impl Agents {
    /// Agents with the settings' timeout and proxy.
    pub fn new(s: &HubSettings) -> Result<Self, String> {
        let build = |redirects: u32| -> Result<ureq::Agent, String> {
            let mut b = ureq::AgentBuilder::new()
                .timeout_connect(s.timeout)
                .timeout_read(s.timeout)
                .timeout_write(s.timeout)
                .redirects(redirects)
                .user_agent(concat!("mobile-r1-eval/", env!("CARGO_PKG_VERSION")));
            if let Some(p) = &s.proxy {
                let proxy = ureq::Proxy::new(p).map_err(|e| format!("proxy {p}: {e}"))?;
                b = b.proxy(proxy);
            }
            Ok(b.build())
        };
        Ok(Self {
            direct: build(0)?,
            follow: build(8)?,
        })
    }
}

/// What the Hub says about one file before its bytes are fetched.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Metadata {
    /// The commit the revision resolved to (`X-Repo-Commit`).
    pub commit: String,
    /// The blob name (`X-Linked-Etag` for LFS/Xet files, else `ETag`), without quotes.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// Where the bytes are when the Hub redirects to another host (a CDN), else `None` (same URL).
    pub location: Option<String>,
}

/// How an attempt ended for good.
#[derive(Debug)]
pub enum Final {
    /// An HTTP status that will not change (404, 401, 403, …), with the Hub's `X-Error-Code` if any.
    Status(u16, Option<String>),
    /// An answer that is not what the Hub sends.
    Bad(String),
    /// Writing the cache failed.
    Io(std::path::PathBuf, std::io::Error),
}

/// One attempt's failure.
pub type Failure = crate::retry::Failure<Final>;

/// An answer that is not what the Hub sends.
pub(crate) fn bad(reason: impl Into<String>) -> Failure {
    Failure::Final(Final::Bad(reason.into()))
}

/// A `ureq` error as a [`Failure`].
pub(crate) fn classify(e: ureq::Error, timeout: Duration) -> Failure {
    match e {
        ureq::Error::Status(code, resp) => {
            let after = crate::retry::retry_after(
                resp.header("retry-after-ms"),
                resp.header("retry-after"),
            );
            Failure::of_status(code, format!("HTTP {code}"), after).unwrap_or_else(|| {
                Failure::Final(Final::Status(
                    code,
                    resp.header("X-Error-Code").map(str::to_string),
                ))
            })
        }
        ureq::Error::Transport(t) => Failure::transient(transport_reason(&t, timeout)),
    }
}

/// A short reason for a transport failure (no answer in time, connection refused, …).
fn transport_reason(t: &ureq::Transport, timeout: Duration) -> String {
    let text = t.to_string();
    let timed_out = text.contains("timed out") || text.contains("WouldBlock") || {
        use std::error::Error;
        t.source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some_and(|io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                )
            })
    };
    match (timed_out, t.url()) {
        (true, Some(url)) => format!("no answer within {} s (GET {url})", timeout.as_secs_f64()),
        (true, None) => format!("no answer within {} s", timeout.as_secs_f64()),
        (false, _) => text,
    }
}

/// Ask for the metadata of the file at `url` (`Range: bytes=0-0`, redirects not followed): commit, blob name,
/// size, and where the bytes are. Relative redirects (a renamed repo) are followed on the Hub.
pub fn metadata(
    agents: &Agents,
    url: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<Metadata, Failure> {
    let mut url = url.to_string();
    for _ in 0..8 {
        let mut req = agents.direct.get(&url).set("Range", "bytes=0-0");
        if let Some(t) = token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let resp = req.call().map_err(|e| classify(e, timeout))?;
        let status = resp.status();
        let location = resp.header("Location").map(str::to_string);
        if (300..400).contains(&status) {
            if let Some(loc) = location.as_deref().filter(|l| l.starts_with('/')) {
                url = join_origin(&url, loc);
                continue;
            }
        }
        return read_metadata(&resp, status, location);
    }
    Err(bad("too many redirects"))
}

fn read_metadata(
    resp: &ureq::Response,
    status: u16,
    location: Option<String>,
) -> Result<Metadata, Failure> {
    let header = |n: &str| {
        resp.header(n)
            .map(|v| v.trim().trim_matches('"').to_string())
    };
    let commit = header("X-Repo-Commit")
        .filter(|c| super::is_commit(c))
        .ok_or_else(|| bad("the answer has no X-Repo-Commit header (is HF_ENDPOINT a Hub?)"))?;
    let etag = header("X-Linked-Etag")
        .or_else(|| header("ETag"))
        .map(|e| e.trim_start_matches("W/").trim_matches('"').to_string())
        .filter(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        .ok_or_else(|| bad("the answer has no usable ETag header"))?;
    let from_range = header("Content-Range")
        .and_then(|r| r.rsplit('/').next().and_then(|n| n.parse::<u64>().ok()));
    let size = header("X-Linked-Size")
        .and_then(|s| s.parse().ok())
        .or(from_range)
        .or_else(|| {
            (status == 200)
                .then(|| header("Content-Length").and_then(|s| s.parse().ok()))
                .flatten()
        })
        .ok_or_else(|| bad("the answer gives no file size"))?;
    let location = location.filter(|_| (300..400).contains(&status));
    Ok(Metadata {
        commit,
        etag,
        size,
        location,
    })
}

/// `loc` (a path starting with `/`) on the scheme, host and port of `url`.
fn join_origin(url: &str, loc: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find('/')
        .map_or(url.len(), |i| after_scheme + i);
    format!("{}{loc}", &url[..end])
}

/// Percent-encode one URL path segment (a revision: `refs/pr/3` → `refs%2Fpr%2F3`).
pub(crate) fn encode_segment(s: &str) -> String {
    encode(s, false)
}

/// Percent-encode a file path for a URL, keeping its `/`.
pub(crate) fn encode_path(s: &str) -> String {
    encode(s, true)
}

fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        let plain = b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (keep_slash && b == b'/');
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_encoded() {
        assert_eq!(encode_segment("refs/pr/3"), "refs%2Fpr%2F3");
        assert_eq!(
            encode_path("images/截图 1.png"),
            "images/%E6%88%AA%E5%9B%BE%201.png"
        );
        assert_eq!(
            join_origin("http://127.0.0.1:80/a/resolve/main/x", "/b/resolve/main/x"),
            "http://127.0.0.1:80/b/resolve/main/x"
        );
    }
}
