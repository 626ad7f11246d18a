//! The `bench` report: one serde type, written by `bench --json` and read back (by the text rendering, tests and
//! scripts) through the same type.

use serde::{Deserialize, Serialize};

use super::cpu::{CpuInfo, IsaPeak};
use super::yardstick::{DecodeBandwidth, PerCore};
use crate::ops::ProfileSnapshot;
use crate::records::MatmulRate;
use crate::records::{DeviceShare, PhaseSummary};

/// Version of the report format (4: `isa_peak` measured, with the clock run at and FMAs a cycle).
pub const BENCH_SCHEMA_VERSION: u32 = 4;

/// What one `bench` run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// Version of this format.
    pub schema_version: u32,
    /// The preset or config path.
    pub config: String,
    /// The device (`auto` resolved); several are comma-separated.
    pub device: String,
    /// Each device's share of the step phase, when several ran it (since version 2; the judge phase's is in
    /// `phases`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceShare>,
    /// Activation dtype.
    pub dtype: String,
    /// Step prompts run.
    pub steps: usize,
    /// Steps per wall-clock second.
    pub steps_per_second: f64,
    /// Screenshots per wall-clock second.
    pub images_per_second: f64,
    /// Prefilled tokens per second of prefill (with several devices, per device-second: their seconds add up).
    pub prefill_tokens_per_second: f64,
    /// Generated tokens per second of decode (per device-second, as above).
    pub decode_tokens_per_second: f64,
    /// Peak device memory in use, else peak host RSS (bytes).
    pub peak_memory_bytes: Option<u64>,
    /// Peak host RSS (bytes).
    pub peak_host_rss_bytes: Option<u64>,
    /// Peak device memory in use, on CUDA (bytes).
    pub peak_device_bytes: Option<u64>,
    /// Model FLOPs per second of the whole step phase / the best matmul rate measured in the run (times the number
    /// of distinct devices: `cuda:0,cuda:1` two, `cpu,cpu` one).
    pub mfu: f64,
    /// The same for the prefill (vision included), per device-second of prefill.
    pub mfu_prefill: f64,
    /// The same for the separate vision-tower pass.
    pub mfu_vision: f64,
    /// The best matmul rate measured in the run (FLOP/s).
    pub matmul_peak_flops: f64,
    /// What reached it.
    pub matmul_peak_source: String,
    /// Every matmul path measured.
    pub matmul_rates: Vec<MatmulRate>,
    /// The CPU.
    pub cpu: CpuInfo,
    /// The instruction-set peak of the CPU (f32 on the CPU only), with its assumptions.
    pub isa_peak: Option<IsaPeak>,
    /// The three MFUs against the instruction-set peak.
    pub mfu_isa: Option<MfuTriple>,
    /// FLOPs of the step phase's work.
    pub model_flops: f64,
    /// Where the time went.
    pub time_split_seconds: TimeSplit,
    /// Parameter counts.
    pub params: Params,
    /// `--batch-size`.
    pub batch_size: usize,
    /// `--max-new-tokens`.
    pub max_new_tokens: usize,
    /// `[min_pixels, max_pixels]`.
    pub pixel_bounds: [u64; 2],
    /// The step phase, then the judge phase when it ran.
    pub phases: Vec<PhaseSummary>,
    /// The full benchmark's time at these rates.
    pub benchmark_estimate: BenchmarkEstimate,
    /// Decode's weight traffic against the stream read bandwidth measured in the run, on the CPU (since version 3).
    #[serde(default)]
    pub decode_bandwidth: Option<DecodeBandwidth>,
    /// The step phase's rates per compute thread, on the CPU (since version 3).
    #[serde(default)]
    pub per_core: Option<PerCore>,
    /// Per-section model timings when profiling was on.
    pub profile: Option<ProfileSnapshot>,
    /// With `--history predicted`: the gold-history and the semi-online step phases on the same trajectories
    /// (the figures above are the semi-online phase's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryCost>,
}

/// The cost of the model's own history against the gold one, on the same trajectories and screenshots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryCost {
    /// The semi-online procedure (`uis1-sop`, `guievalkit`).
    pub procedure: String,
    /// The step phase with the gold history (every prompt ready at the start).
    pub gold: PhaseSummary,
    /// The step phase as semi-online chains (step t+1 ready when step t's answer is known).
    pub predicted: PhaseSummary,
    /// Wall time of the semi-online phase / the gold one.
    pub wall_ratio: f64,
    /// Prompt tokens of the semi-online phase / the gold one (prefilled plus prefix-cached).
    pub prompt_tokens_ratio: f64,
}

impl HistoryCost {
    /// The comparison of the gold-history phase `gold` with the semi-online phase `predicted`.
    pub fn of(
        procedure: crate::records::Procedure,
        gold: &crate::records::PhaseStats,
        predicted: &crate::records::PhaseStats,
    ) -> Self {
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let tokens =
            |s: &crate::records::PhaseStats| (s.prefill_tokens + s.prefix_cached_tokens) as f64;
        Self {
            procedure: procedure.to_string(),
            gold: gold.summary(),
            predicted: predicted.summary(),
            wall_ratio: ratio(predicted.wall_seconds, gold.wall_seconds),
            prompt_tokens_ratio: ratio(tokens(predicted), tokens(gold)),
        }
    }
}

/// MFU of the whole run, the prefill and the vision tower against one denominator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MfuTriple {
    /// Whole step phase.
    pub mfu: f64,
    /// Prefill (vision included).
    pub mfu_prefill: f64,
    /// Vision tower alone.
    pub mfu_vision: f64,
}

/// Seconds by activity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimeSplit {
    /// Preparing prompts, summed over worker threads.
    pub preprocess_cpu: f64,
    /// Waiting for prepared prompts.
    pub preprocess_wait: f64,
    /// The separate vision-tower pass.
    pub vision_separate_pass: f64,
    /// Prefill calls (vision included).
    pub prefill_including_vision: f64,
    /// Decode calls.
    pub decode: f64,
    /// Wall time of the step phase.
    pub wall: f64,
    /// Building the random model.
    pub model_build: f64,
}

/// Parameter counts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Vision tower.
    pub vision: u64,
    /// Language model.
    pub language_model: u64,
}

/// How long the full benchmark would take at the measured rates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkEstimate {
    /// Trajectories of the benchmark.
    pub trajectories: usize,
    /// Its steps.
    pub steps: usize,
    /// Whether the judge phase was measured and counted.
    pub judge_included: bool,
    /// Seconds.
    pub seconds: f64,
}

impl BenchReport {
    /// The report as a few readable lines (what `bench` prints without `--json`).
    pub fn render(&self) -> String {
        let (t, e) = (&self.time_split_seconds, &self.benchmark_estimate);
        format!(
            "bench {} on {} ({}), {} steps\n\
             steps/s {:.3}   images/s {:.3}   prefill tok/s {:.1}   decode tok/s {:.1}\n\
             time: wall {:.2}s = prefill {:.2}s (vision alone {:.2}s) + decode {:.2}s; preprocessing {:.2}s CPU, \
             {:.2}s waited\n\
             MFU {:.1}% (prefill {:.1}%, vision alone {:.1}%) of a measured matmul peak of {:.1} GFLOP/s ({}); \
             peak RSS {:.0} MiB\n\
             the full benchmark ({} trajectories, ≈{} steps{}) would take ≈{:.0} s at these rates",
            self.config,
            self.device,
            self.dtype,
            self.steps,
            self.steps_per_second,
            self.images_per_second,
            self.prefill_tokens_per_second,
            self.decode_tokens_per_second,
            t.wall,
            t.prefill_including_vision,
            t.vision_separate_pass,
            t.decode,
            t.preprocess_cpu,
            t.preprocess_wait,
            100.0 * self.mfu,
            100.0 * self.mfu_prefill,
            100.0 * self.mfu_vision,
            self.matmul_peak_flops / 1e9,
            self.matmul_peak_source,
            self.peak_memory_bytes.unwrap_or(0) as f64 / 1048576.0,
            e.trajectories,
            e.steps,
            if e.judge_included {
                ", judge prompts included"
            } else {
                ", judge not measured"
            },
            e.seconds,
        ) + &self.render_yardstick()
            + &self.render_devices()
            + &self.render_history()
    }

    /// Decode against the memory bandwidth and the rates per thread, on the CPU (empty elsewhere).
    fn render_yardstick(&self) -> String {
        let mut out = String::new();
        if let Some(d) = &self.decode_bandwidth {
            out += &format!(
                "\ndecode reads {:.2} GB of weights a step: {:.1} GB/s, {:.0}% of the {:.1} GB/s stream read \
                 bandwidth measured ({} loads; {:.2} sequences a step)",
                d.weight_bytes_per_step / 1e9,
                d.weight_bytes_per_second / 1e9,
                100.0 * d.share_of_bandwidth,
                d.stream_read_bytes_per_second / 1e9,
                d.stream_read_kernel,
                d.sequences_per_step,
            );
        }
        if let Some(p) = &self.per_core {
            out += &format!(
                "\nper thread ({} threads): {:.4} steps/s, prefill {:.1} GFLOP/s, decode {:.2} tok/s",
                p.threads,
                p.steps_per_second,
                p.prefill_flops_per_second / 1e9,
                p.decode_tokens_per_second,
            );
        }
        out
    }

    /// The gold against the semi-online history, when both ran (empty otherwise).
    fn render_history(&self) -> String {
        self.history.as_ref().map_or_else(String::new, |h| {
            format!(
                "\nhistory: gold {:.3} steps/s, {} history {:.3} steps/s (wall ×{:.2}, prompt tokens ×{:.2}, \
                 mean batch occupancy {:.2} → {:.2})",
                h.gold.prompts_per_second,
                h.procedure,
                h.predicted.prompts_per_second,
                h.wall_ratio,
                h.prompt_tokens_ratio,
                h.gold.mean_batch_occupancy,
                h.predicted.mean_batch_occupancy,
            )
        })
    }

    /// One line per device when several shared the step phase (empty otherwise).
    fn render_devices(&self) -> String {
        self.devices
            .iter()
            .map(|d| {
                format!(
                    "\n  {}: {} steps, {} prefill + {} generated tokens, {:.2}s busy",
                    d.device, d.prompts, d.prefill_tokens, d.decode_tokens, d.busy_seconds
                )
            })
            .collect()
    }
}
