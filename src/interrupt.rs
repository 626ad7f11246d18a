//! Ctrl-C and SIGTERM: the first one asks the run to stop admitting prompts, finish and save the ones in flight,
//! and exit with 128 + the signal (130, 143) after saying how to resume; a second one exits at once.
//!
//! The flag is process-wide because a signal is: the handler can only reach a static. Code below the command
//! layer never reads it: it is handed a [`Cancel`] token that follows the flag, and asks the token before taking
//! the next prompt or the next chunk of a download; a run that is never interrupted behaves exactly as before.
//! `eval` and `pack` install the handlers ([`install`]); other commands keep the default (immediate) behaviour.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

/// The first signal received (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// A request to stop, passed down as a value: work that admits new items (prompts, downloads, requests) asks
/// [`Cancel::is_cancelled`] before taking the next one. A token may follow the process's Ctrl-C/SIGTERM flag
/// ([`Cancel::on_signals`]), its own flag (set by `Cancel::cancel` in tests), or both; clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    signals: bool,
}

impl Cancel {
    /// A token that no signal sets (only tests cancel one).
    pub fn new() -> Self {
        Self::default()
    }

    /// A token that is also cancelled by the first Ctrl-C or SIGTERM (once [`install`] has run).
    pub(crate) fn on_signals() -> Self {
        Self {
            signals: true,
            ..Self::default()
        }
    }

    /// Ask every holder of this token (and its clones) to stop.
    #[cfg(test)]
    pub(crate) fn cancel(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    /// Whether a stop was asked.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Relaxed) || (self.signals && requested())
    }

    /// The signal that asked the stop, for a token that follows the signals.
    pub fn signal(&self) -> Option<i32> {
        self.signals.then(signal).flatten()
    }
}

/// Whether a stop was requested (the first Ctrl-C or SIGTERM arrived).
fn requested() -> bool {
    SIGNAL.load(Ordering::Relaxed) != 0
}

/// The signal that requested the stop, if any.
fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

/// A run stopped on request after saving what was finished.
#[derive(Debug, thiserror::Error)]
#[error(
    "interrupted: {done} of {total} {unit} done and saved in {}. Resume with:\n  {resume}",
    out.display()
)]
pub(crate) struct Interrupted {
    /// The signal that stopped the run.
    pub signal: i32,
    /// Units (steps, trajectories) finished so far in the phase that was stopped.
    pub done: usize,
    /// Units of that phase in all.
    pub total: usize,
    /// `steps` or `judged trajectories`.
    pub unit: &'static str,
    /// The run folder.
    pub out: PathBuf,
    /// The command line that resumes the run (this one, with `--out` pointing at the run folder).
    pub resume: String,
}

/// Where a stopped run is and how it was started, for [`Interrupted`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct StopPoint<'a> {
    /// Units (steps, trajectories) finished so far in the phase that was stopped.
    pub done: usize,
    /// Units of that phase in all.
    pub total: usize,
    /// `steps` or `judged trajectories`.
    pub unit: &'static str,
    /// The run folder.
    pub out: &'a std::path::Path,
    /// The command line the run was started with.
    pub args: &'a [String],
}

impl Interrupted {
    /// The stop error when `cancel` was set by a signal, or `None`.
    pub fn check(cancel: &Cancel, at: StopPoint<'_>) -> Option<Self> {
        cancel.signal().map(|signal| Self {
            signal,
            done: at.done,
            total: at.total,
            unit: at.unit,
            out: at.out.to_path_buf(),
            resume: resume_command(at.args.to_vec(), at.out),
        })
    }

    /// The exit status: 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM).
    pub(crate) fn exit_code(&self) -> u8 {
        (128 + self.signal).clamp(0, 255) as u8
    }
}

/// `args` as one shell command line that resumes in `out`: any `--out` is replaced by `--out <out>`.
pub(crate) fn resume_command(args: Vec<String>, out: &std::path::Path) -> String {
    let mut kept = Vec::with_capacity(args.len() + 2);
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        if a == "--out" {
            it.next();
        } else if !a.starts_with("--out=") {
            kept.push(a);
        }
    }
    kept.push("--out".into());
    kept.push(out.to_string_lossy().into_owned());
    kept.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Quote `s` for a POSIX shell when it holds anything but safe characters.
pub(crate) fn shell_quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Install the SIGINT and SIGTERM handlers (Unix). Elsewhere the default behaviour stays.
pub fn install() {
    #[cfg(unix)]
    // SAFETY: `on_signal` only does async-signal-safe work (an atomic exchange, write(2), _exit(2)).
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    let first = SIGNAL
        .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok();
    let msg: &[u8] = if first {
        b"\nstopping: finishing the prompts in flight and saving them (press Ctrl-C again to quit at once)\n"
    } else {
        b"\nquitting at once\n"
    };
    // SAFETY: write(2) and _exit(2) are async-signal-safe.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        if !first {
            libc::_exit(128 + sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_shared_by_its_clones() {
        let a = Cancel::new();
        let b = a.clone();
        assert!(!b.is_cancelled());
        a.cancel();
        assert!(b.is_cancelled() && !Cancel::on_signals().is_cancelled());
    }

    #[test]
    fn resume_command_replaces_out_and_quotes() {
        let args = ["mobile-r1-eval", "eval", "--model", "my model", "--out=x"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            resume_command(args, std::path::Path::new("runs/a b")),
            "mobile-r1-eval eval --model 'my model' --out 'runs/a b'"
        );
        let args = ["m", "eval", "--out", "old", "--no-judge"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            resume_command(args, std::path::Path::new("new")),
            "m eval --no-judge --out new"
        );
    }
}
