//! Several devices in one process: one [`LocalBackend`] per device, each with its own copy of the model and its
//! own memory budget, all pulling whole groups of requests (e.g. a trajectory's steps) from one shared queue,
//! largest first. Outcomes travel to the calling thread, which alone calls the sink (the run folder's one
//! writer). A device that fails stops its worker with its error; the others drain the queue, and the run then
//! ends with that error, so a resume redoes only what is missing.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::Mutex;

use anyhow::{bail, Result};

use super::{Backend, BackendInfo, ChatResult, Jobs, LocalBackend, MakeRequest, Sink};
use crate::engine::BatchLimits;
use crate::preprocess::ImageProcessorConfig;
use crate::records::{DeviceShare, PhaseStats};

/// One backend per device, sharing the work.
pub struct MultiBackend {
    devices: Vec<LocalBackend>,
    info: BackendInfo,
}

/// A message from a device's worker to the calling thread.
enum Msg {
    /// Request `index` is done (or failed); `stats` are the worker's counters so far.
    Outcome {
        device: usize,
        index: usize,
        outcome: Result<ChatResult, String>,
        stats: PhaseStats,
    },
}

impl MultiBackend {
    /// Share the work between `devices` (at least one; all the same checkpoint and settings).
    pub fn new(devices: Vec<LocalBackend>) -> Result<Self> {
        let Some(first) = devices.first() else {
            bail!("no device to run on");
        };
        let mut info = first.info().clone();
        info.device = devices
            .iter()
            .map(|d| d.info().device.clone())
            .collect::<Vec<_>>()
            .join(",");
        Ok(Self { devices, info })
    }

    fn label(&self, k: usize) -> String {
        format!("{}#{k}", self.devices[k].info().device)
    }
}

/// The next index from the group being worked on, or the next group of the shared queue.
fn next_index(queue: &Mutex<VecDeque<Vec<usize>>>, current: &mut VecDeque<usize>) -> Option<usize> {
    if current.is_empty() {
        let group = queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()?;
        current.extend(group);
    }
    current.pop_front()
}

impl Backend for MultiBackend {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn image_config(&self) -> &ImageProcessorConfig {
        self.devices[0].image_config()
    }

    fn limits(&self) -> BatchLimits {
        self.devices[0].limits()
    }

    fn local_model(&self) -> Option<&super::LoadedModel> {
        self.devices[0].local_model()
    }

    fn run(&self, jobs: &Jobs, make: &MakeRequest<'_>, sink: &mut Sink<'_>) -> Result<PhaseStats> {
        let queue = Mutex::new(jobs.groups.iter().cloned().collect::<VecDeque<_>>());
        let (tx, rx) = mpsc::channel::<Msg>();
        let mut latest = vec![PhaseStats::default(); self.devices.len()];
        let mut sink_error = None;
        let results: Vec<Result<PhaseStats>> = std::thread::scope(|scope| {
            let workers: Vec<_> = self
                .devices
                .iter()
                .enumerate()
                .map(|(k, backend)| {
                    let (tx, queue) = (tx.clone(), &queue);
                    scope.spawn(move || {
                        let mut current = VecDeque::new();
                        let indices = std::iter::from_fn(move || next_index(queue, &mut current));
                        // Half a batch at a time: enough to keep the device busy, little enough to share.
                        let chunk = (backend.limits().max_seqs / 2).max(1);
                        backend.run_indices(
                            indices,
                            jobs.count,
                            chunk,
                            make,
                            &mut |index, outcome, st| {
                                let stats = st.clone();
                                let msg = Msg::Outcome {
                                    device: k,
                                    index,
                                    outcome,
                                    stats,
                                };
                                tx.send(msg).map_err(|_| anyhow::anyhow!("the run stopped"))
                            },
                        )
                    })
                })
                .collect();
            drop(tx);
            for Msg::Outcome {
                device,
                index,
                outcome,
                stats,
            } in rx
            {
                // A failed preparation reports empty counters: keep the worker's last real ones.
                if stats.prompts >= latest[device].prompts {
                    latest[device] = stats;
                }
                let total = sum(&latest);
                if sink_error.is_none() {
                    sink_error = sink(index, outcome, &total).err();
                }
            }
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("worker panicked")))
                })
                .collect()
        });
        if let Some(e) = sink_error {
            return Err(e);
        }
        let mut shares = Vec::new();
        let mut failures = Vec::new();
        for (k, r) in results.into_iter().enumerate() {
            match r {
                Ok(s) => shares.push((self.label(k), s)),
                Err(e) => {
                    tracing::error!("device {} stopped: {e:#}", self.label(k));
                    failures.push(format!("{}: {e:#}", self.label(k)));
                }
            }
        }
        if !failures.is_empty() {
            bail!(
                "{} of {} devices failed (the others finished their work; resume to redo what is missing):\n{}",
                failures.len(),
                self.devices.len(),
                failures.join("\n")
            );
        }
        let mut total = sum(&shares.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>());
        total.devices = shares
            .into_iter()
            .map(|(device, s)| DeviceShare::of(device, &s))
            .collect();
        Ok(total)
    }
}

/// The counters of several devices added up.
fn sum(parts: &[PhaseStats]) -> PhaseStats {
    let mut total = PhaseStats::default();
    for p in parts {
        total.add(p);
    }
    total
}
