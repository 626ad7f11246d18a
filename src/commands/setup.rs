//! What several commands set up from their flags alike: the Hub ([`HubArgs`] and the proxy variables into
//! [`HubSettings`]), `--data` resolved to a benchmark folder (or the embedded sample), the history procedure, an
//! API key from the environment, and the guard that ends a run at once when it is stopped before any prompt ran.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::dataset::Benchmark;
use crate::openai::ApiKey;
use crate::records::{HistorySource, Procedure};

use crate::cli::HubArgs;
use crate::hub::{DataLocation, Hub, HubSettings};
use crate::interrupt::Cancel;
use crate::records::DataSource;

/// Load `--data`, or the embedded sample when absent.
pub(crate) fn load_benchmark(data: Option<&Path>) -> anyhow::Result<Benchmark> {
    let dir = match data {
        Some(d) => d.to_path_buf(),
        None => {
            crate::sample::materialize_default().context("writing the embedded sample benchmark")?
        }
    };
    Benchmark::load(&dir).with_context(|| format!("loading benchmark {}", dir.display()))
}

/// The semi-online procedure of `--history` and `--semi-online` (`None`: the gold history); `--semi-online`
/// without `--history predicted` is refused rather than ignored.
pub fn semi_online(
    history: HistorySource,
    procedure: Option<Procedure>,
) -> Result<Option<Procedure>> {
    match (history, procedure) {
        (HistorySource::Gold, None) => Ok(None),
        (HistorySource::Gold, Some(p)) => anyhow::bail!(
            "--semi-online {p} needs --history predicted (with the gold history every step is independent)"
        ),
        (HistorySource::Predicted, p) => Ok(Some(p.unwrap_or(Procedure::Uis1Sop))),
    }
}

/// The API key held by the environment variable `var` (named by `flag`); `None` without a variable.
pub(crate) fn api_key(flag: &str, var: Option<&str>) -> Result<Option<ApiKey>> {
    let Some(var) = var else {
        return Ok(None);
    };
    match std::env::var(var) {
        Ok(v) => match ApiKey::new(v) {
            Some(k) => Ok(Some(k)),
            None => bail!("{flag} {var}: the environment variable is empty"),
        },
        Err(_) => bail!("{flag} {var}: no such environment variable (it should hold the API key)"),
    }
}

/// The hub the flags describe; transfers stop when `cancel` is set.
pub fn hub(a: &HubArgs, cancel: Cancel) -> Hub {
    let cache_dir = cache_dir(a);
    let token = a
        .hub_token
        .clone()
        .filter(|t| !t.trim().is_empty())
        .or_else(|| token_file(&cache_dir));
    let endpoint = a.hub_endpoint.trim_end_matches('/').to_string();
    Hub {
        settings: HubSettings {
            proxy: proxy_for(&endpoint, &|name| std::env::var(name).ok()),
            endpoint,
            cache_dir,
            offline: a.hub_offline,
            token,
            timeout: Duration::from_secs(a.hub_timeout),
            retries: a.hub_retries,
            progress: true,
        },
        cancel,
    }
}

/// `--hub-cache`, else `--hf-home`/hub, else `~/.cache/huggingface/hub` (as Hugging Face's tools choose it).
fn cache_dir(a: &HubArgs) -> PathBuf {
    if let Some(c) = a.hub_cache.clone().filter(|p| !p.as_os_str().is_empty()) {
        return c;
    }
    let home = a
        .hf_home
        .clone()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| {
            let user = std::env::var_os("HOME").map_or_else(PathBuf::new, PathBuf::from);
            user.join(".cache").join("huggingface")
        });
    home.join("hub")
}

/// The token `huggingface-cli login` stores beside the cache.
fn token_file(cache_dir: &Path) -> Option<String> {
    let file = cache_dir.parent()?.join("token");
    let text = std::fs::read_to_string(file).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// The proxy for `endpoint` from the usual variables (`HTTPS_PROXY` for https, `HTTP_PROXY` for http, then
/// `ALL_PROXY`; lower-case names too), unless `NO_PROXY` names its host (or is `*`).
pub(crate) fn proxy_for(endpoint: &str, var: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let get = |name: &str| {
        var(name)
            .or_else(|| var(&name.to_ascii_lowercase()))
            .filter(|v| !v.trim().is_empty())
    };
    let host = endpoint
        .split("://")
        .nth(1)
        .unwrap_or(endpoint)
        .split(['/', ':'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    let bypass = get("NO_PROXY").is_some_and(|list| {
        list.split(',').map(str::trim).any(|entry| {
            let e = entry.trim_start_matches('.').to_ascii_lowercase();
            entry == "*" || (!e.is_empty() && (host == e || host.ends_with(&format!(".{e}"))))
        })
    });
    if bypass {
        return None;
    }
    let scheme_var = if endpoint.starts_with("https:") {
        "HTTPS_PROXY"
    } else {
        "HTTP_PROXY"
    };
    get(scheme_var).or_else(|| get("ALL_PROXY"))
}

/// `--data` as a benchmark folder: a local folder as given, a Hub dataset fetched into the cache (or found there
/// offline) with where it came from.
pub(crate) fn resolve_data(
    loc: Option<DataLocation>,
    hub: &Hub,
) -> anyhow::Result<(Option<PathBuf>, Option<DataSource>)> {
    match loc {
        None => Ok((None, None)),
        Some(DataLocation::Local(dir)) => Ok((Some(dir), None)),
        Some(DataLocation::Hub { repo, revision }) => {
            let fetched = crate::hub::data::fetch(hub, &repo, &revision)
                .with_context(|| format!("--data hf:{repo}@{revision}"))?;
            tracing::info!(
                "benchmark hf:{repo}@{revision} is commit {} ({})",
                fetched.source.commit,
                fetched.dir.display()
            );
            Ok((Some(fetched.dir), Some(fetched.source)))
        }
    }
}

/// While alive, a stop request (Ctrl-C, SIGTERM) ends the process at once with 128 + the signal: for the time
/// before the first prompt runs (loading a model), when there is nothing to finish or save.
pub(crate) struct ExitOnStop {
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ExitOnStop {
    /// Watch `cancel` while `what` (e.g. "loading the model") goes on.
    pub fn start(cancel: Cancel, what: &'static str) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let seen = done.clone();
        let thread = std::thread::Builder::new()
            .name("exit-on-stop".into())
            .spawn(move || {
                while !seen.load(Ordering::Relaxed) {
                    if cancel.is_cancelled() {
                        eprintln!(
                            "stopped while {what}; no prompt had run, so there is nothing to save"
                        );
                        let signal = cancel.signal().unwrap_or(libc_sigint());
                        std::process::exit(128 + signal);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
            .ok();
        Self { done, thread }
    }
}

impl Drop for ExitOnStop {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// SIGINT's number (2 on every Unix).
fn libc_sigint() -> i32 {
    2
}

/// The exit status for a stop request: 128 + the signal (130 for Ctrl-C, 143 for SIGTERM).
pub(crate) fn stop_exit_code() -> u8 {
    let signal = Cancel::on_signals().signal();
    (128 + signal.unwrap_or(libc_sigint())).clamp(0, 255) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_follows_the_scheme_and_no_proxy() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let v = vars(&[("HTTPS_PROXY", "http://p:1"), ("http_proxy", "http://q:2")]);
        assert_eq!(
            proxy_for("https://huggingface.co", &v).as_deref(),
            Some("http://p:1")
        );
        assert_eq!(
            proxy_for("http://127.0.0.1:5", &v).as_deref(),
            Some("http://q:2")
        );
        let v = vars(&[
            ("ALL_PROXY", "socks5://s:3"),
            ("NO_PROXY", "localhost,.hf.co"),
        ]);
        assert_eq!(proxy_for("https://x.hf.co", &v), None);
        assert_eq!(
            proxy_for("https://huggingface.co/", &v).as_deref(),
            Some("socks5://s:3")
        );
        assert_eq!(proxy_for("http://localhost:8", &v), None);
        assert_eq!(
            proxy_for("http://h", &vars(&[("NO_PROXY", "*"), ("HTTP_PROXY", "x")])),
            None
        );
    }
}
