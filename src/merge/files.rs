//! The merged files' contents: JSONL lines of all shards in benchmark order, and the summed throughput.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::dataset::Benchmark;

/// The whole, newline-terminated lines of a JSONL text: a torn last line (a shard killed mid-write, or still
/// running under `--allow-partial`) is left out, as the shard itself would cut it off on resume.
pub fn whole_lines(text: &str) -> Vec<&str> {
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    complete.lines().filter(|l| !l.trim().is_empty()).collect()
}

/// A line's `trajectory` (string or integer) and `step` (absent for judgements: 0).
fn line_key(v: &Value) -> Option<(String, u64)> {
    let t = match v.get("trajectory")? {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let step = match v.get("step") {
        None => 0,
        Some(s) => s.as_u64()?,
    };
    Some((t, step))
}

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
    let mut keyed: Vec<((usize, u64), usize, usize, &str)> = Vec::new();
    for (si, lines) in per_shard.iter().enumerate() {
        for (li, line) in lines.iter().enumerate() {
            let key = serde_json::from_str::<Value>(line)
                .ok()
                .as_ref()
                .and_then(line_key)
                .and_then(|(t, s)| Some((*position.get(t.as_str())?, s)))
                .unwrap_or((usize::MAX, u64::MAX));
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
    /// Per phase (`steps`, `judge`): counters and seconds summed over the shards; `*_per_second` are the sums of
    /// the shards' rates (the aggregate when the shards ran at the same time); `longest_shard_wall_seconds` is
    /// the slowest shard's phase wall time.
    pub phases: Vec<Map<String, Value>>,
    /// Largest peak resident memory of a shard, in bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Largest peak device memory of a shard, in bytes.
    pub peak_device_bytes: Option<u64>,
    /// Seconds from the earliest shard start to the latest shard finish (queueing between shards included).
    pub elapsed_seconds: Option<u64>,
    /// Each shard's `throughput.json` as written, under its `I/N` name.
    pub shards: Vec<ShardThroughput>,
}

/// One shard's throughput file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardThroughput {
    /// `I/N`.
    pub shard: String,
    /// Its `throughput.json` (null when absent).
    pub throughput: Value,
}

/// Add `v` into `acc[key]`: integers stay integers, anything else numeric becomes a float sum.
fn add_number(acc: &mut Map<String, Value>, key: &str, v: &Value) {
    let sum = match (acc.get(key), v) {
        (None, _) => v.clone(),
        (Some(Value::Number(a)), Value::Number(b)) => match (a.as_u64(), b.as_u64()) {
            (Some(x), Some(y)) => Value::from(x + y),
            _ => Value::from(a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0)),
        },
        (Some(a), _) => a.clone(),
    };
    acc.insert(key.to_string(), sum);
}

/// Sum the shards' phases by name, in order of first appearance.
fn sum_phases(files: &[&Value]) -> Vec<Map<String, Value>> {
    let mut order: Vec<String> = Vec::new();
    let mut sums: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for f in files {
        let phases = f.get("phases").and_then(Value::as_array);
        for p in phases.into_iter().flatten().filter_map(Value::as_object) {
            let name = p
                .get("phase")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            if !sums.contains_key(&name) {
                order.push(name.clone());
            }
            let acc = sums.entry(name.clone()).or_default();
            acc.insert("phase".into(), name.into());
            for (k, v) in p.iter().filter(|(_, v)| v.is_number()) {
                if k == "mean_batch_occupancy" {
                    continue; // a ratio: the sum means nothing
                }
                add_number(acc, k, v);
                if k == "wall_seconds" {
                    let longest = acc
                        .get("longest_shard_wall_seconds")
                        .and_then(Value::as_f64);
                    let this = v.as_f64().unwrap_or(0.0);
                    acc.insert(
                        "longest_shard_wall_seconds".into(),
                        Value::from(longest.map_or(this, |l| l.max(this))),
                    );
                }
            }
        }
    }
    order.into_iter().filter_map(|n| sums.remove(&n)).collect()
}

fn max_u64(files: &[&Value], key: &str) -> Option<u64> {
    files.iter().filter_map(|f| f.get(key)?.as_u64()).max()
}

/// The merged throughput of shards `(name, throughput.json or null)`, and the span of their run times.
pub fn merge_throughput(
    shards: Vec<(String, Value)>,
    span: Option<(u64, u64)>,
) -> MergedThroughput {
    let present: Vec<&Value> = shards
        .iter()
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
        .collect();
    MergedThroughput {
        schema_version: 1,
        phases: sum_phases(&present),
        peak_rss_bytes: max_u64(&present, "peak_rss_bytes"),
        peak_device_bytes: max_u64(&present, "peak_device_bytes"),
        elapsed_seconds: span.map(|(start, end)| end.saturating_sub(start)),
        shards: shards
            .into_iter()
            .map(|(shard, throughput)| ShardThroughput { shard, throughput })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn torn_last_line_is_left_out() {
        assert_eq!(whole_lines("{\"a\":1}\n\n{\"b\""), vec!["{\"a\":1}"]);
        assert!(whole_lines("{\"a\"").is_empty());
    }

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

    #[test]
    fn phases_are_summed_and_rates_added() {
        let a = json!({"phases": [{"phase": "steps", "prompts": 3, "wall_seconds": 2.0,
                                   "prompts_per_second": 1.5, "mean_batch_occupancy": 2.0}],
                       "peak_rss_bytes": 10});
        let b = json!({"phases": [{"phase": "steps", "prompts": 4, "wall_seconds": 3.0,
                                   "prompts_per_second": 1.0}, {"phase": "judge", "prompts": 1}],
                       "peak_rss_bytes": 30});
        let t = merge_throughput(
            vec![
                ("0/3".into(), a),
                ("1/3".into(), b),
                ("2/3".into(), Value::Null),
            ],
            Some((100, 160)),
        );
        assert_eq!(t.phases[0]["prompts"], json!(7));
        assert_eq!(t.phases[0]["wall_seconds"], json!(5.0));
        assert_eq!(t.phases[0]["longest_shard_wall_seconds"], json!(3.0));
        assert_eq!(t.phases[0]["prompts_per_second"], json!(2.5));
        assert!(t.phases[0].get("mean_batch_occupancy").is_none());
        assert_eq!(t.phases[1]["phase"], json!("judge"));
        assert_eq!(t.peak_rss_bytes, Some(30));
        assert_eq!(t.elapsed_seconds, Some(60));
        assert_eq!(t.shards.len(), 3);
    }
}
