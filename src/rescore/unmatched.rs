//! Predictions that match no step of the benchmark: refused when none matches (scoring them would write 0 % for
//! every step, which reads as a result, when the predictions were made on another benchmark), told about when
//! some do not.

use std::collections::BTreeSet;
use std::path::Path;

use crate::dataset::Benchmark;
use crate::predictions::PredictionSet;

/// How many ids each side of the error shows.
const SHOWN: usize = 5;

/// Refuse `preds` (read from `file`) when not one of them is a step of `bench` (`unknown` of them match no
/// step), naming both and a sample of each side's trajectory ids.
pub(super) fn refuse_unmatched(
    bench: &Benchmark,
    preds: &PredictionSet,
    unknown: usize,
    file: &Path,
) -> anyhow::Result<()> {
    if preds.is_empty() || unknown < preds.len() {
        return Ok(());
    }
    let theirs: BTreeSet<&str> = preds.iter().map(|p| p.trajectory.as_str()).collect();
    let ours: Vec<&str> = bench.trajectories.iter().map(|t| t.id.as_str()).collect();
    anyhow::bail!(
        "{}: none of its {} predictions is a step of the benchmark {} (its trajectories: {}; the predictions': \
         {}); pass the --data the predictions were made on",
        file.display(),
        preds.len(),
        bench.root.display(),
        sample(ours.iter().copied()),
        sample(theirs.iter().copied()),
    )
}

/// The first [`SHOWN`] ids, quoted, with `…` when there are more.
fn sample<'a>(ids: impl ExactSizeIterator<Item = &'a str>) -> String {
    let n = ids.len();
    let mut shown: Vec<String> = ids.take(SHOWN).map(|id| format!("{id:?}")).collect();
    if n > SHOWN {
        shown.push(format!("… ({n} in all)"));
    }
    shown.join(", ")
}

/// One line about predictions that match no benchmark step; a hint about `--data` when they are most of them.
pub(super) fn warn_unknown(bench: &Benchmark, preds: &PredictionSet, unknown: &[(String, usize)]) {
    if unknown.is_empty() {
        return;
    }
    let total = preds.len();
    let shown: Vec<String> = unknown
        .iter()
        .take(10)
        .map(|(t, s)| format!("({t}, {s})"))
        .collect();
    let more = if unknown.len() > 10 { " …" } else { "" };
    let hint = if 2 * unknown.len() > total {
        format!(
            "; most predictions are for another benchmark than {} (pass the right --data)",
            bench.root.display()
        )
    } else {
        String::new()
    };
    eprintln!(
        "warning: {} of {total} predictions match no benchmark step (trajectory, step): {}{more}{hint}",
        unknown.len(),
        shown.join(" "),
    );
}
