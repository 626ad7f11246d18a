//! Many small files at once (a benchmark's screenshots): a few helper threads take files from one queue, each
//! trying a file's candidate paths in turn; the caller's thread counts the results and returns at once on a stop
//! request or the first failure (the helpers then stop after the file in hand).

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::transfer::{self, Fetched, Job, Net};
use super::{HubError, HubSettings};
use crate::interrupt::Cancel;

/// Files fetched at the same time.
pub(crate) const PARALLEL_TRANSFERS: usize = 4;

/// A count of files: a bar on a terminal, a log line every 10 s otherwise.
pub(crate) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: usize,
    last_log: Mutex<Instant>,
}

impl Progress {
    /// A display for `total` files.
    pub fn new(settings: &HubSettings, total: usize) -> Self {
        let bar = (settings.progress && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(total as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "files [{bar:30}] {pos}/{len} {per_sec} ETA {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b
        });
        Self {
            bar,
            total,
            last_log: Mutex::new(Instant::now()),
        }
    }

    fn advance(&self, done: usize) {
        if let Some(b) = &self.bar {
            b.set_position(done as u64);
            return;
        }
        let mut last = self.last_log.lock().expect("progress lock");
        if last.elapsed() >= Duration::from_secs(10) || done == self.total {
            tracing::info!("fetched {done} of {} files", self.total);
            *last = Instant::now();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Fetch every entry of `queue` (each a list of candidate paths for one file).
pub fn run(
    repo: &str,
    net: Arc<Net>,
    cancel: &Cancel,
    queue: VecDeque<Vec<Job>>,
    progress: &Progress,
) -> Result<Vec<Fetched>, HubError> {
    let total = queue.len();
    let queue = Arc::new(Mutex::new(queue));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    for _ in 0..PARALLEL_TRANSFERS.min(total) {
        let (net, queue, stop, tx) = (net.clone(), queue.clone(), stop.clone(), tx.clone());
        std::thread::Builder::new()
            .name("hub-transfer".into())
            .spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Some(cands) = queue.lock().expect("queue lock").pop_front() else {
                    break;
                };
                if tx.send(first_found(&net, &cands)).is_err() {
                    break;
                }
            })
            .map_err(|e| HubError::Invalid(format!("cannot start a download thread: {e}")))?;
    }
    drop(tx);
    let mut fetched = Vec::with_capacity(total);
    let result = loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(Ok(f)) => {
                fetched.push(f);
                progress.advance(fetched.len());
            }
            Ok(Err(e)) => break Err(e),
            Err(mpsc::RecvTimeoutError::Timeout) if cancel.is_cancelled() => {
                break Err(HubError::Cancelled {
                    repo: repo.to_string(),
                    file: format!("file {} of {total}", fetched.len() + 1),
                })
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break Ok(()),
        }
    };
    stop.store(true, Ordering::Relaxed);
    result?;
    if fetched.len() != total {
        return Err(HubError::Invalid(format!(
            "only {} of {total} files were fetched",
            fetched.len()
        )));
    }
    Ok(fetched)
}

/// The first candidate the repo has; when none, the error about the last one.
fn first_found(net: &Net, cands: &[Job]) -> Result<Fetched, HubError> {
    let mut last = None;
    for job in cands {
        match transfer::fetch(net, job) {
            Ok(f) => return Ok(f),
            Err(e) if e.is_not_found() => {
                tracing::debug!("{} is not in the repo", job.file());
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| HubError::Invalid("no candidate path".into())))
}
