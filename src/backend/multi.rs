//! Several devices in one process: one [`DeviceBackend`] per device (a [`LocalBackend`] with its own copy of the
//! model and its own memory budget), all pulling whole groups of requests (e.g. a trajectory's steps) from one
//! shared queue, largest first. Outcomes travel to the calling thread, which alone calls the sink (the run
//! folder's one writer). A device that fails stops its worker with its error; the others drain the queue, and
//! the run then ends with an error naming the failed devices, so a resume redoes only what is missing.

use std::sync::mpsc::{self, Receiver, Sender};

use anyhow::{anyhow, bail, Result};

use super::{
    Backend, BackendInfo, BackendKind, ChatResult, DeviceBackend, JobQueue, LocalBackend,
    MakeRequest, Sink, Taker,
};
use crate::preprocess::ImageProcessorConfig;
use crate::records::{DeviceShare, PhaseStats};
use crate::settings::BatchLimits;

/// One backend per device, sharing the work.
pub struct MultiBackend<'d> {
    devices: Vec<Box<dyn DeviceBackend + 'd>>,
    info: BackendInfo,
}

/// A message from a device's worker to the calling thread: request `index` is done (or failed); `stats` are
/// the worker's counters so far.
struct Outcome {
    device: usize,
    index: usize,
    outcome: Result<ChatResult, String>,
    stats: PhaseStats,
}

impl<'d> MultiBackend<'d> {
    /// Share the work between `devices` (at least one; all the same checkpoint and settings).
    pub fn new(devices: Vec<Box<dyn DeviceBackend + 'd>>) -> Result<Self> {
        let Some(first) = devices.first() else {
            bail!("no device to run on");
        };
        let mut info = first.info().clone();
        let places: Vec<&str> = devices.iter().map(|d| d.info().place()).collect();
        if let BackendKind::Local(local) = &mut info.kind {
            local.device = places.join(",");
        }
        Ok(Self { devices, info })
    }

    /// Share the work between local checkpoints, one per device.
    pub fn local(devices: Vec<LocalBackend>) -> Result<Self> {
        Self::new(
            devices
                .into_iter()
                .map(|d| Box::new(d) as Box<dyn DeviceBackend + 'd>)
                .collect(),
        )
    }

    /// Device `k` as named in errors and shares: `cuda:1#1` (the device, then its worker number).
    fn label(&self, k: usize) -> String {
        format!("{}#{k}", self.devices[k].info().place())
    }

    /// Each device's result in order: its counters, or the error that stopped it.
    fn run_workers(
        &self,
        jobs: &JobQueue,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> (Vec<Result<PhaseStats>>, Result<()>) {
        let (tx, rx) = mpsc::channel::<Outcome>();
        std::thread::scope(|scope| {
            let workers: Vec<_> = self
                .devices
                .iter()
                .enumerate()
                .map(|(k, device)| {
                    let tx = tx.clone();
                    scope.spawn(move || work(k, device.as_ref(), jobs, make, tx))
                })
                .collect();
            drop(tx); // the channel closes when the last worker ends
            let delivered = deliver(rx, self.devices.len(), sink);
            let results = workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|_| Err(anyhow!("worker panicked"))))
                .collect();
            (results, delivered)
        })
    }

    /// The phase's counters with each device's share, or an error naming every device that failed.
    fn conclude(&self, results: Vec<Result<PhaseStats>>) -> Result<PhaseStats> {
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
            let others = if shares.is_empty() {
                "no device is left"
            } else {
                "the others finished their work"
            };
            bail!(
                "{} of {} devices failed ({others}; resume to redo what is missing):\n{}",
                failures.len(),
                self.devices.len(),
                failures.join("\n")
            );
        }
        let mut total = sum(shares.iter().map(|(_, s)| s));
        total.devices = shares
            .into_iter()
            .map(|(device, s)| DeviceShare::of(device, &s))
            .collect();
        Ok(total)
    }
}

/// Device `k`'s worker: answer groups from `jobs` until nothing more comes (or the device fails), sending each
/// outcome to the calling thread.
fn work(
    k: usize,
    device: &dyn DeviceBackend,
    jobs: &JobQueue,
    make: &MakeRequest<'_>,
    tx: Sender<Outcome>,
) -> Result<PhaseStats> {
    // Half a batch at a time: enough to keep the device busy, little enough to share.
    let chunk = (device.limits().max_seqs / 2).max(1);
    let result = device.run_taking(
        Taker::new(jobs),
        jobs.count(),
        chunk,
        make,
        &mut |index, outcome, st| {
            let stats = st.clone();
            let msg = Outcome {
                device: k,
                index,
                outcome,
                stats,
            };
            tx.send(msg).map_err(|_| anyhow!("the run stopped"))
        },
    );
    if result.is_err() {
        // Requests this device took and did not answer may hold back releases the others wait for.
        jobs.abandon();
    }
    result
}

/// Hand every outcome to `sink` as it arrives (this thread is the one writer), with the sum of each device's
/// latest counters, until every worker has ended. After a sink error the rest are dropped and that error is
/// returned.
fn deliver(rx: Receiver<Outcome>, devices: usize, sink: &mut Sink<'_>) -> Result<()> {
    let mut latest = vec![PhaseStats::default(); devices];
    let mut result = Ok(());
    for o in rx {
        // A failed preparation reports empty counters: keep the worker's last real ones.
        if o.stats.prompts >= latest[o.device].prompts {
            latest[o.device] = o.stats;
        }
        if result.is_ok() {
            result = sink(o.index, o.outcome, &sum(&latest));
        }
    }
    result
}

/// The counters of several devices added up.
fn sum<'a>(parts: impl IntoIterator<Item = &'a PhaseStats>) -> PhaseStats {
    let mut total = PhaseStats::default();
    for p in parts {
        total.add(p);
    }
    total
}

impl Backend for MultiBackend<'_> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn image_config(&self) -> &ImageProcessorConfig {
        self.devices[0].image_config()
    }

    fn limits(&self) -> BatchLimits {
        self.devices[0].limits()
    }

    fn prompt_tokens(
        &self,
        messages: &serde_json::Value,
        image_sizes: &[[u32; 2]],
    ) -> Option<Result<usize>> {
        self.devices[0].prompt_tokens(messages, image_sizes)
    }

    fn cpu_facts(&self) -> Result<Option<super::CpuFacts>> {
        self.devices[0].cpu_facts()
    }

    fn run(
        &self,
        jobs: &JobQueue,
        make: &MakeRequest<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<PhaseStats> {
        let (results, delivered) = self.run_workers(jobs, make, sink);
        delivered?;
        self.conclude(results)
    }
}
