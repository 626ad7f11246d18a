//! The merged files' contents: JSONL lines of all shards in benchmark order, and the summed throughput.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::dataset::Benchmark;
use crate::records::{LineKey, PhaseStats, Throughput};

/// Concatenate the shards' lines (`per_shard[i]` holds shard `i`'s lines, in file order) sorted by benchmark
/// position (trajectory order in `bench`, then step); lines of one step keep their shard and file order, so a
/// later line still replaces an earlier one. Lines that name no benchmark step (unparseable, unknown ids) come
/// last, in shard and file order. Independent of completion order, so merging twice gives the same text.
pub fn merge_lines(bench: &Benchmark, per_shard: &[Vec<&str>]) -> String {
    let position: HashMap<&str, usize> = bench
        .trajectories
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    let mut keyed: Vec<((usize, usize), usize, usize, &str)> = Vec::new();
    for (si, lines) in per_shard.iter().enumerate() {
        for (li, line) in lines.iter().enumerate() {
            let key = serde_json::from_str::<LineKey>(line)
                .ok()
                .and_then(|k| Some((*position.get(k.trajectory.as_str())?, k.step.unwrap_or(0))))
                .unwrap_or((usize::MAX, usize::MAX));
            keyed.push((key, si, li, line));
        }
    }
    keyed.sort_by_key(|&(key, si, li, _)| (key, si, li));
    let mut out = String::new();
    for (_, _, _, line) in keyed {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `throughput.json` of a merged run: the shards' phases summed, and each shard's own file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergedThroughput {
    /// Version of this file's layout.
    pub schema_version: u32,
    /// Per phase (`steps`, `judge`), in order of first appearance.
    pub phases: Vec<MergedPhase>,
    /// Largest peak resident memory of a shard, in bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Largest peak device memory of a shard, in bytes.
    pub peak_device_bytes: Option<u64>,
    /// Seconds from the earliest shard start to the latest shard finish (queueing between shards included).
    pub elapsed_seconds: Option<u64>,
    /// Each shard's `throughput.json` as written, under its `I/N` name (null when absent or unreadable).
    pub shards: Vec<ShardThroughput>,
}

/// One phase of a merged run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MergedPhase {
    /// The shards' counters and seconds summed (`wall_seconds` too: the shards' wall times added).
    #[serde(flatten)]
    pub stats: PhaseStats,
    /// Sum of the shards' rates: the aggregate rate when the shards ran at the same time.
    pub prompts_per_second: f64,
    /// Sum of the shards' rates.
    pub images_per_second: f64,
    /// Sum of the shards' rates.
    pub prefill_tokens_per_second: f64,
    /// Sum of the shards' rates.
    pub decode_tokens_per_second: f64,
    /// The slowest shard's wall time of the phase.
    pub longest_shard_wall_seconds: f64,
}

/// One shard's throughput file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardThroughput {
    /// `I/N`.
    pub shard: String,
    /// Its `throughput.json`.
    pub throughput: Option<Throughput>,
}

/// Sum the shards' phases by name, in order of first appearance.
fn sum_phases(files: &[&Throughput]) -> Vec<MergedPhase> {
    let mut merged: Vec<MergedPhase> = Vec::new();
    for p in files.iter().flat_map(|f| &f.phases) {
        let name = &p.stats.phase;
        let at = match merged.iter().position(|m| &m.stats.phase == name) {
            Some(i) => i,
            None => {
                let mut m = MergedPhase::default();
                m.stats.phase = name.clone();
                merged.push(m);
                merged.len() - 1
            }
        };
        let m = &mut merged[at];
        m.stats.add(&p.stats);
        m.stats.wall_seconds += p.stats.wall_seconds;
        m.longest_shard_wall_seconds = m.longest_shard_wall_seconds.max(p.stats.wall_seconds);
        m.prompts_per_second += p.prompts_per_second;
        m.images_per_second += p.images_per_second;
        m.prefill_tokens_per_second += p.prefill_tokens_per_second;
        m.decode_tokens_per_second += p.decode_tokens_per_second;
    }
    merged
}

/// The merged throughput of shards `(name, throughput.json when readable)`, and the span of their run times.
pub fn merge_throughput(
    shards: Vec<(String, Option<Throughput>)>,
    span: (Option<u64>, Option<u64>),
) -> MergedThroughput {
    let present: Vec<&Throughput> = shards.iter().filter_map(|(_, t)| t.as_ref()).collect();
    let max = |f: fn(&Throughput) -> Option<u64>| present.iter().filter_map(|t| f(t)).max();
    MergedThroughput {
        schema_version: 1,
        phases: sum_phases(&present),
        peak_rss_bytes: max(|t| t.peak_rss_bytes),
        peak_device_bytes: max(|t| t.peak_device_bytes),
        elapsed_seconds: span
            .0
            .zip(span.1)
            .map(|(start, end)| end.saturating_sub(start)),
        shards: shards
            .into_iter()
            .map(|(shard, throughput)| ShardThroughput { shard, throughput })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn lines_follow_benchmark_order_not_completion_order() {
        let bench = Benchmark::load(crate::sample::materialize_default().unwrap()).unwrap();
        let (a, b) = (&bench.trajectories[0].id, &bench.trajectories[1].id);
        let line = |t: &str, s: u64, r: &str| {
            json!({"trajectory": t, "step": s, "response": r}).to_string()
        };
        let shard0 = [line(b, 1, "x"), line(b, 0, "first"), line(b, 0, "redone")];
        let shard1 = [
            "not json".to_string(),
            line(a, 2, "y"),
            line("nope", 0, "z"),
            line(a, 0, "w"),
        ];
        let per: Vec<Vec<&str>> = [&shard0[..], &shard1[..]]
            .iter()
            .map(|s| s.iter().map(String::as_str).collect())
            .collect();
        let merged = merge_lines(&bench, &per);
        let responses: Vec<String> = merged
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).map_or("?".into(), |v| v["response"].to_string())
            })
            .collect();
        assert_eq!(
            responses,
            [
                "\"w\"",
                "\"y\"",
                "\"first\"",
                "\"redone\"",
                "\"x\"",
                "?",
                "\"z\""
            ]
        );
        let reversed: Vec<Vec<&str>> = vec![per[0].iter().rev().copied().collect(), per[1].clone()];
        assert_ne!(
            merge_lines(&bench, &reversed),
            merged,
            "file order of one step is kept"
        );
        assert_eq!(merge_lines(&bench, &per), merged);
    }

    fn throughput(phases: &[(&str, usize, f64)], rss: u64) -> Throughput {
        let summaries = phases
            .iter()
            .map(|&(phase, prompts, wall)| {
                PhaseStats {
                    phase: phase.into(),
                    prompts,
                    wall_seconds: wall,
                    decode_steps: 1,
                    decode_seq_sum: 2,
                    ..PhaseStats::default()
                }
                .summary()
            })
            .collect();
        let limits = crate::settings::BatchLimits {
            max_seqs: 1,
            max_batch_tokens: 1,
            max_new_tokens: 1,
        };
        let mut t = Throughput::new(summaries, limits);
        t.peak_rss_bytes = Some(rss);
        t
    }

    #[test]
    fn phases_are_summed_and_rates_added() {
        let a = throughput(&[("steps", 3, 2.0)], 10);
        let b = throughput(&[("steps", 4, 4.0), ("judge", 1, 1.0)], 30);
        let t = merge_throughput(
            vec![
                ("0/3".into(), Some(a)),
                ("1/3".into(), Some(b)),
                ("2/3".into(), None),
            ],
            (Some(100), Some(160)),
        );
        let steps = &t.phases[0];
        assert_eq!(
            (steps.stats.phase.as_str(), steps.stats.prompts),
            ("steps", 7)
        );
        assert_eq!(steps.stats.wall_seconds, 6.0);
        assert_eq!(steps.longest_shard_wall_seconds, 4.0);
        assert_eq!(steps.prompts_per_second, 1.5 + 1.0);
        assert_eq!(t.phases[1].stats.phase, "judge");
        assert_eq!(t.peak_rss_bytes, Some(30));
        assert_eq!(t.elapsed_seconds, Some(60));
        assert_eq!(t.shards.len(), 3);
        let phases = serde_json::to_string(&t.phases).unwrap();
        assert!(
            !phases.contains("mean_batch_occupancy"),
            "a ratio: its sum means nothing"
        );
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<MergedThroughput>(&text).unwrap(), t);
    }
}
