//! Shards: a deterministic split of a benchmark into `N` parts of whole trajectories balanced by estimated cost,
//! and the `--shard I/N | auto | auto/N` specification, resolved from the scheduler's environment (Slurm job
//! arrays, torchrun/accelerate, Kubernetes Indexed Jobs).
//!
//! Pure: no I/O. The environment is read once by the command line ([`SchedulerEnv::from_process`]) and passed
//! down as a value, so every function here is testable with a made-up environment.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::dataset::Benchmark;
use crate::preprocess::{smart_resize, ImageProcessorConfig};

/// Errors of the shard specification.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShardError {
    /// `--shard` is not `I/N`, `auto` or `auto/N`.
    #[error("--shard {given:?}: {reason} (expected I/N with 0 <= I < N, `auto` or `auto/N`)")]
    BadSpec {
        /// The text given.
        given: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `--shard auto` found none of the schedulers' variables.
    #[error(
        "--shard {given}: no scheduler environment found; looked for {} (Slurm job array), {} (torchrun, \
         accelerate) and {} (Kubernetes Indexed Job, with the count given as --shard auto/N)",
        SLURM_VARS.join(", "), TORCHRUN_VARS.join(", "), K8S_VAR
    )]
    NoScheduler {
        /// `auto` or `auto/N`.
        given: String,
    },
    /// A scheduler variable is set but unusable.
    #[error("--shard auto: {source_name}: {reason}")]
    BadEnv {
        /// The scheduler and the variables read, e.g. `Slurm job array (SLURM_ARRAY_TASK_ID=…)`.
        source_name: String,
        /// What is wrong.
        reason: String,
    },
}

/// The variables of a Slurm job array (`SLURM_ARRAY_TASK_STEP` is read too when set, for `--array=0-10:2`).
pub(crate) const SLURM_VARS: [&str; 3] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
];
const SLURM_STEP: &str = "SLURM_ARRAY_TASK_STEP";
/// The variables torchrun and accelerate set in each worker.
pub(crate) const TORCHRUN_VARS: [&str; 2] = ["RANK", "WORLD_SIZE"];
/// The variable of a Kubernetes Indexed Job's pod.
pub(crate) const K8S_VAR: &str = "JOB_COMPLETION_INDEX";

/// One shard: part `index` (0-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardSpec {
    /// 0-based part number, `< count`.
    pub index: usize,
    /// Number of parts, `>= 1`.
    pub count: usize,
}

impl ShardSpec {
    /// A checked spec: `count >= 1` and `index < count`.
    pub fn new(index: usize, count: usize) -> Result<ShardSpec, String> {
        if count == 0 {
            return Err("the shard count must be at least 1".into());
        }
        if index >= count {
            return Err(format!(
                "shard index {index} is not below the count {count}"
            ));
        }
        Ok(ShardSpec { index, count })
    }

    /// The shard's folder name inside `RUN/shards/`: `I-of-N`.
    pub(crate) fn dir_name(&self) -> String {
        format!("{}-of-{}", self.index, self.count)
    }
}

impl fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The `shard` entry of a shard's `manifest.json`, written by `eval --shard` and read by `merge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardManifestEntry {
    /// Version of this entry's layout.
    pub schema_version: u32,
    /// 0-based shard number.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
    /// Ids of the shard's trajectories, in benchmark order.
    pub trajectories: Vec<String>,
}

impl ShardManifestEntry {
    /// The entry of `shard` holding these trajectory ids.
    pub fn new(shard: ShardSpec, trajectories: Vec<String>) -> ShardManifestEntry {
        ShardManifestEntry {
            schema_version: 1,
            index: shard.index,
            count: shard.count,
            trajectories,
        }
    }
}

/// The `--shard` argument as written: fixed, or taken from the scheduler's environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardArg {
    /// `I/N`.
    Fixed(ShardSpec),
    /// `auto` (`count: None`) or `auto/N`.
    Auto {
        /// `N` of `auto/N`: required for Kubernetes, checked against Slurm's and torchrun's own count.
        count: Option<usize>,
    },
}

fn parse_count(given: &str, n: &str) -> Result<usize, ShardError> {
    let bad = |reason: String| ShardError::BadSpec {
        given: given.into(),
        reason,
    };
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| bad(format!("{n:?} is not a number")))?;
    if n == 0 {
        return Err(bad("the shard count must be at least 1".into()));
    }
    Ok(n)
}

impl FromStr for ShardArg {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<ShardArg, ShardError> {
        let bad = |reason: &str| ShardError::BadSpec {
            given: s.into(),
            reason: reason.into(),
        };
        let t = s.trim();
        if t == "auto" {
            return Ok(ShardArg::Auto { count: None });
        }
        let (i, n) = t.split_once('/').ok_or_else(|| bad("no `/`"))?;
        let count = parse_count(s, n)?;
        if i.trim() == "auto" {
            return Ok(ShardArg::Auto { count: Some(count) });
        }
        let index: usize = i
            .trim()
            .parse()
            .map_err(|_| bad("the index is not a number"))?;
        ShardSpec::new(index, count)
            .map(ShardArg::Fixed)
            .map_err(|r| bad(&r))
    }
}

impl fmt::Display for ShardArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardArg::Fixed(s) => write!(f, "{s}"),
            ShardArg::Auto { count: None } => write!(f, "auto"),
            ShardArg::Auto { count: Some(n) } => write!(f, "auto/{n}"),
        }
    }
}

/// The scheduler variables of the process environment, read once at startup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerEnv {
    vars: BTreeMap<String, String>,
}

impl SchedulerEnv {
    /// Every variable `--shard auto` may read, in reading order.
    pub const NAMES: [&'static str; 7] = [
        SLURM_VARS[0],
        SLURM_VARS[1],
        SLURM_VARS[2],
        SLURM_STEP,
        TORCHRUN_VARS[0],
        TORCHRUN_VARS[1],
        K8S_VAR,
    ];

    /// Read the variables of [`SchedulerEnv::NAMES`] from this process's environment.
    pub(crate) fn from_process() -> SchedulerEnv {
        Self::from_pairs(
            Self::NAMES
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (*k, v))),
        )
    }

    /// An environment made of the given pairs (tests, or a caller with its own source).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> SchedulerEnv {
        SchedulerEnv {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .filter(|(_, v): &(String, String)| !v.trim().is_empty())
                .collect(),
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    fn number(&self, key: &str, source_name: &str) -> Result<usize, ShardError> {
        let v = self.get(key).unwrap_or_default();
        v.trim().parse().map_err(|_| ShardError::BadEnv {
            source_name: source_name.into(),
            reason: format!("{key}={v:?} is not a non-negative integer"),
        })
    }
}

impl ShardArg {
    /// The shard this process evaluates: `I/N` as given, or from the first scheduler found in `env` (Slurm
    /// job array, then torchrun/accelerate, then a Kubernetes Indexed Job).
    pub fn resolve(&self, env: &SchedulerEnv) -> Result<ShardSpec, ShardError> {
        let want = match *self {
            ShardArg::Fixed(s) => return Ok(s),
            ShardArg::Auto { count } => count,
        };
        let (source_name, index, count) = if SLURM_VARS.iter().all(|k| env.get(k).is_some()) {
            slurm(env)?
        } else if TORCHRUN_VARS.iter().all(|k| env.get(k).is_some()) {
            let name = "torchrun/accelerate (RANK, WORLD_SIZE)";
            (
                name.to_string(),
                env.number("RANK", name)?,
                env.number("WORLD_SIZE", name)?,
            )
        } else if env.get(K8S_VAR).is_some() {
            let name = format!("Kubernetes Indexed Job ({K8S_VAR})");
            let count = want.ok_or_else(|| ShardError::BadEnv {
                source_name: name.clone(),
                reason: "the shard count is not in the environment: give it as --shard auto/N \
                         (N = the Job's completions)"
                    .into(),
            })?;
            (name.clone(), env.number(K8S_VAR, &name)?, count)
        } else {
            return Err(ShardError::NoScheduler {
                given: self.to_string(),
            });
        };
        let bad = |reason: String| ShardError::BadEnv {
            source_name: source_name.clone(),
            reason,
        };
        if let Some(n) = want.filter(|&n| n != count) {
            return Err(bad(format!(
                "--shard auto/{n} disagrees with the scheduler's count {count}"
            )));
        }
        ShardSpec::new(index, count).map_err(bad)
    }
}

/// Slurm: the index is the task's rank in the array (`(ID − MIN) / STEP`), the count the array's size.
fn slurm(env: &SchedulerEnv) -> Result<(String, usize, usize), ShardError> {
    let name =
        "Slurm job array (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT, SLURM_ARRAY_TASK_MIN)";
    let id = env.number(SLURM_VARS[0], name)?;
    let count = env.number(SLURM_VARS[1], name)?;
    let min = env.number(SLURM_VARS[2], name)?;
    let step = match env.get(SLURM_STEP) {
        Some(_) => env.number(SLURM_STEP, name)?.max(1),
        None => 1,
    };
    if id < min || (id - min) % step != 0 {
        return Err(ShardError::BadEnv {
            source_name: name.into(),
            reason: format!("task {id} is not on the array's grid (min {min}, step {step})"),
        });
    }
    Ok((name.to_string(), (id - min) / step, count))
}

/// Estimated cost of a trajectory: steps × image tokens of its screen after smart-resize under the pixel bounds
/// (resized patches / merge²). Integer arithmetic, so every machine computes the same value; a screen size
/// that cannot be resized (zero side, extreme ratio) counts one token per step (its steps fail fast).
pub(crate) fn trajectory_cost(
    steps: usize,
    width: u32,
    height: u32,
    image: &ImageProcessorConfig,
) -> u64 {
    let tokens = smart_resize(
        height as usize,
        width as usize,
        image.factor(),
        image.min_pixels,
        image.max_pixels,
    )
    .map_or(1, |(h, w)| {
        let patches = (h / image.patch_size.max(1)) * (w / image.patch_size.max(1));
        (patches / (image.merge_size * image.merge_size).max(1)).max(1)
    });
    steps as u64 * tokens as u64
}

/// Split items with the given costs into `count` parts: longest first (ties: lower item index first), each to
/// the part with the least load so far (ties: lower part index). Returns each part's item indices in increasing
/// order. Every item is in exactly one part; parts may be empty when `count` exceeds the items. The largest and
/// the smallest load differ by at most the largest single cost.
pub(crate) fn partition(costs: &[u64], count: usize) -> Vec<Vec<usize>> {
    let count = count.max(1);
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(costs[i]), i));
    let mut loads = vec![0u64; count];
    let mut parts = vec![Vec::new(); count];
    for i in order {
        let p = (0..count)
            .min_by_key(|&p| (loads[p], p))
            .expect("count >= 1");
        loads[p] += costs[i];
        parts[p].push(i);
    }
    for p in &mut parts {
        p.sort_unstable();
    }
    parts
}

/// The costs of a benchmark's trajectories, in benchmark order.
pub(crate) fn benchmark_costs(bench: &Benchmark, image: &ImageProcessorConfig) -> Vec<u64> {
    bench
        .trajectories
        .iter()
        .map(|t| trajectory_cost(t.steps.len(), t.image_width, t.image_height, image))
        .collect()
}

/// Indices (benchmark order) of the trajectories in `shard`.
pub(crate) fn shard_trajectories(
    bench: &Benchmark,
    image: &ImageProcessorConfig,
    shard: ShardSpec,
) -> Vec<usize> {
    partition(&benchmark_costs(bench, image), shard.count).swap_remove(shard.index)
}

/// The benchmark restricted to `shard`'s trajectories (same root, benchmark order kept).
pub(crate) fn select(
    bench: &Benchmark,
    image: &ImageProcessorConfig,
    shard: ShardSpec,
) -> Benchmark {
    let keep = shard_trajectories(bench, image, shard);
    Benchmark {
        root: bench.root.clone(),
        trajectories: keep
            .into_iter()
            .map(|i| bench.trajectories[i].clone())
            .collect(),
        info: bench.info.clone(),
    }
}

#[cfg(test)]
mod tests;
