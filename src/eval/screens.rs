//! The benchmark's screenshots as part of a run's identity: each is fingerprinted at start (its size and three
//! sampled 4 KiB blocks, [`crate::fingerprint::of_plain_file`]) and recorded in the manifest, and a resume is
//! refused when a screenshot changed whose answer is already saved, so a run never mixes answers to two
//! different images for one step. A screenshot whose steps have no saved answer may change (that is how an
//! unreadable screenshot is fixed before a resume redoes its step). Screenshots smaller than one patch are
//! reported too: the model would see an upscaled blur.

use std::collections::{BTreeSet, HashSet};

use anyhow::Result;

use crate::dataset::Benchmark;
use crate::fingerprint::{changed_files, of_plain_file, FilesFingerprint, PLAIN_SCHEME};
use crate::records::Manifest;
use crate::rundir::{step_key, RunDir};

/// Sides below this many pixels are smaller than one 28×28 patch of the vision tower.
const MIN_SIDE: u32 = 28;

/// Fingerprint every screenshot of `bench`, warning once about those smaller than one patch.
pub fn fingerprint(bench: &Benchmark) -> Result<FilesFingerprint> {
    let names: BTreeSet<&str> = bench
        .trajectories
        .iter()
        .flat_map(|t| t.steps.iter().map(|s| s.image.as_str()))
        .collect();
    let mut files = Vec::with_capacity(names.len());
    let mut tiny = Vec::new();
    for name in names {
        let path = bench.resolve(name);
        files.push(of_plain_file(&path, name)?);
        if let Ok([w, h]) = crate::preprocess::image_dimensions(&path) {
            if w < MIN_SIDE || h < MIN_SIDE {
                tiny.push(format!("{name} ({w}×{h})"));
            }
        }
    }
    if !tiny.is_empty() {
        let more = if tiny.len() > 5 { ", …" } else { "" };
        tracing::warn!(
            "{} screenshot(s) smaller than one {MIN_SIDE}×{MIN_SIDE} patch, which the model sees as an upscaled \
             blur: {}{more}",
            tiny.len(),
            tiny[..tiny.len().min(5)].join(", ")
        );
    }
    Ok(FilesFingerprint {
        schema_version: 1,
        scheme: PLAIN_SCHEME.into(),
        files,
    })
}

/// Refuse to resume `previous` when a screenshot changed that a saved answer was given for (a step's own
/// screenshot, or a judged trajectory's last one).
pub(crate) fn check_resume(
    out: &RunDir,
    bench: &Benchmark,
    previous: &Manifest,
    now: &FilesFingerprint,
) -> Result<()> {
    // A manifest written before screenshots were recorded cannot be checked.
    if previous.screenshots.scheme != now.scheme {
        return Ok(());
    }
    let changed: HashSet<String> = changed_files(&previous.screenshots, now)
        .into_iter()
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    let steps = out.completed_steps()?;
    let judged = out.completed_trajectories()?;
    let mut used = BTreeSet::new();
    for t in &bench.trajectories {
        for (si, s) in t.steps.iter().enumerate() {
            let last = si + 1 == t.steps.len() && judged.contains(&t.id);
            if changed.contains(&s.image) && (steps.contains(&step_key(&t.id, si)) || last) {
                used.insert(s.image.as_str());
            }
        }
    }
    if used.is_empty() {
        return Ok(());
    }
    let list: Vec<&str> = used.iter().take(10).copied().collect();
    let more = if used.len() > 10 { ", …" } else { "" };
    anyhow::bail!(
        "{}: {} screenshot(s) of the benchmark changed since this run started, and answers to them are saved: \
         {}{more}. Resuming would mix answers to two different images; restore the screenshots, or use another \
         --out folder.",
        out.path(crate::rundir::MANIFEST).display(),
        used.len(),
        list.join(", ")
    )
}
