//! `bench`: throughput of the real architecture with random weights, on synthetic Mobile-R1-like step prompts,
//! through the same engine as `eval` (prefetch, continuous batching, prefix cache), plus the aggregation phase.
//! Reports steps/s, images/s, prefill and decode tokens/s, the time split, peak memory, and MFU estimates against
//! two denominators: the best matmul rate of every GEMM path measured in the same run, and (on the CPU) the ISA
//! peak of the cores used, with the CPU's model and features.

pub mod cpu;
mod phases;
pub mod random;
mod report;
mod silicon;
pub mod yardstick;

pub use report::{
    BenchReport, BenchmarkEstimate, HistoryCost, MfuTriple, Params, TimeSplit, BENCH_SCHEMA_VERSION,
};
pub(crate) mod workload;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::DType;

use crate::backend::{
    choose_device, Backend, LoadedModel, LocalBackend, ModelSource, MultiBackend,
};
use crate::chat::{ChatTemplate, PromptBuilder, Tokenizer};
use crate::engine::memory;
use crate::model::VlModel;
use crate::ops::gemm::peak::{best_rate, matmul_rates};
use crate::preprocess::ImageProcessorConfig;
use crate::records::{MatmulRate, PhaseStats};
use crate::settings::BatchLimits;
use crate::settings::BenchModel;
use crate::settings::{DTypeSpec, DeviceSpec};
use phases::{run_phases, StepRuns};

/// Settings of one benchmark run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Preset (`tiny`, `small`, `3b`, `7b`) or a `config.json` path / model folder.
    pub config: BenchModel,
    /// The devices: one copy of the model per device, sharing the prompts as `eval` does.
    pub devices: Vec<DeviceSpec>,
    /// Dtype (the device's default when `None`).
    pub dtype: Option<DTypeSpec>,
    /// Number of step prompts.
    pub steps: usize,
    /// Sequence cap.
    pub batch_size: usize,
    /// Token budget; automatic when `None`.
    pub max_batch_tokens: Option<usize>,
    /// New tokens per prompt (generated to the end: random weights rarely stop).
    pub max_new_tokens: usize,
    /// Image pixel bounds.
    pub min_pixels: u64,
    /// Image pixel bounds.
    pub max_pixels: u64,
    /// Folder with `tokenizer.json` and a chat template (`tokenizer_config.json` or `chat_template.json`).
    pub tokenizer: PathBuf,
    /// Also benchmark the aggregation (judge) phase.
    pub judge: bool,
    /// Weight seed.
    pub seed: u64,
    /// How the ops run.
    pub ops: crate::ops::OpsConfig,
    /// `--history predicted`: also run the steps as semi-online chains under this procedure (every step counted
    /// right, so each chain runs to its end) and compare with the gold history on the same prompts.
    pub semi_online: Option<crate::records::Procedure>,
    /// torch's matmul rate on this machine in the run's dtype (FLOP/s, `--torch-gflops`), measured elsewhere
    /// (`compare.py`): one more rate the MFU figures are held against.
    pub torch_flops: Option<f64>,
}

/// The random model of `model_cfg` built on `spec` (its dtype from `cfg`), served under its own batch limits,
/// and the seconds building the model took.
/// The image processor of the family's released checkpoints for a random model of `model_cfg`: patch sizes
/// from its tower; Qwen3-VL normalises with mean = std = 0.5, Qwen2.5-VL with the class's CLIP defaults.
fn image_config(model_cfg: &crate::model::ModelConfig) -> ImageProcessorConfig {
    let v = &model_cfg.vision;
    let base = ImageProcessorConfig {
        patch_size: v.patch_size,
        temporal_patch_size: v.temporal_patch_size,
        merge_size: v.spatial_merge_size,
        ..ImageProcessorConfig::default()
    };
    match model_cfg.family {
        crate::settings::ModelFamily::Qwen25Vl => base,
        crate::settings::ModelFamily::Qwen3Vl => ImageProcessorConfig {
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            ..base
        },
    }
}

fn device_backend(
    cfg: &BenchConfig,
    spec: DeviceSpec,
    model_cfg: &crate::model::ModelConfig,
) -> Result<(LocalBackend, f64)> {
    let (device, device_spec) = choose_device(spec)?;
    let dtype = crate::model::dtype_for(cfg.dtype, &device);
    let t_build = Instant::now();
    let model = random::random_model(model_cfg.clone(), cfg.seed, &device, dtype, &cfg.ops)?;
    let build_seconds = t_build.elapsed().as_secs_f64();
    let context = model.config().text.max_position_embeddings;
    crate::validate::new_tokens_fit_context(cfg.max_new_tokens, context)?;
    let kit = PromptBuilder {
        tokenizer: Tokenizer::from_model_dir(&cfg.tokenizer)
            .with_context(|| format!("--tokenizer {}", cfg.tokenizer.display()))?,
        template: ChatTemplate::from_model_dir(&cfg.tokenizer)?,
        image: image_config(model_cfg).with_pixel_bounds(cfg.min_pixels, cfg.max_pixels),
    };
    let limits = BatchLimits::auto(
        &model,
        cfg.batch_size,
        cfg.max_new_tokens,
        cfg.max_batch_tokens,
    );
    let loaded = LoadedModel {
        model,
        kit,
        device: device_spec,
        source: ModelSource::Random { seed: cfg.seed },
    };
    Ok((
        LocalBackend::new(&cfg.config.to_string(), loaded, limits),
        build_seconds,
    ))
}

/// The benchmark's backend: the random model on each of `cfg.devices` (the same weights on every device),
/// several sharing the work through a [`MultiBackend`] as in `eval`; and the seconds the models took to build.
fn devices(
    cfg: &BenchConfig,
    model_cfg: &crate::model::ModelConfig,
) -> Result<(Vec<LocalBackend>, f64)> {
    let built = cfg
        .devices
        .iter()
        .map(|&d| device_backend(cfg, d, model_cfg))
        .collect::<Result<Vec<_>>>()?;
    let build_seconds = built.iter().map(|(_, s)| s).sum();
    let devices: Vec<LocalBackend> = built.into_iter().map(|(b, _)| b).collect();
    if devices.is_empty() {
        anyhow::bail!("--device: no device given");
    }
    Ok((devices, build_seconds))
}

/// The backend of `devices`: the one device, or all of them sharing the work (lent, so they stay the caller's).
fn backend(devices: &[LocalBackend]) -> Result<Box<dyn Backend + '_>> {
    Ok(match devices {
        [one] => Box::new(one),
        many => Box::new(MultiBackend::new(
            many.iter()
                .map(|d| Box::new(d) as Box<dyn crate::backend::DeviceBackend + '_>)
                .collect(),
        )?),
    })
}

/// Run the benchmark and return its report (what `bench --json` prints).
pub fn run_bench(cfg: &BenchConfig) -> Result<BenchReport> {
    let model_cfg = random::load_config(&cfg.config)?;
    let params = crate::model::flops::param_counts(&model_cfg);
    let (devices, build_seconds) = devices(cfg, &model_cfg)?;
    let backend = backend(&devices)?;
    let tmp = tempfile::tempdir()?;
    let bench = workload::write(tmp.path(), cfg.steps)?;
    let StepRuns {
        steps,
        judge,
        history,
    } = run_phases(cfg, backend.as_ref(), &bench, tmp.path())?;
    // The separate vision pass, the GEMM rates and the profile are the first device's.
    let loaded = devices[0].loaded();
    let model = &loaded.model;
    let (device, dtype) = (model.device(), model.dtype());
    let (vision_seconds, vision_attention_flops) = time_vision(model, &loaded.kit, &bench)?;
    let n = if device.is_cpu() { 2048 } else { 8192 };
    // The library this run uses for its dtype's products (in bf16, the one whose bf16 GEMM runs, if any).
    let ops = model.ops();
    let library = match dtype {
        DType::BF16 => ops.bf16_blas().or(ops.blas()),
        _ => ops.blas(),
    };
    let mut rates = matmul_rates(device, dtype, n, library)?;
    rates.extend(cfg.torch_flops.map(|flops| MatmulRate {
        path: "torch".to_string(),
        detail: "given with --torch-gflops, measured outside this run".to_string(),
        flops,
    }));
    // The bandwidth pass allocates a large buffer: the run's peak RSS is read before it.
    let peak_rss = memory::peak_rss_bytes();
    let bandwidth = device
        .is_cpu()
        .then(yardstick::stream_read_bandwidth)
        .unwrap_or((0.0, String::new()));
    let cpu_info = cpu::CpuInfo::detect();
    let isa = (device.is_cpu() && dtype == DType::F32)
        .then(|| cpu::isa_peak(&cpu_info, rayon::current_num_threads(), silicon::measure()))
        .flatten();
    let measured = Measured {
        steps,
        judge,
        vision_seconds,
        vision_attention_flops,
        rates,
        cpu: cpu_info,
        isa,
        params,
        build_seconds,
        peak_rss,
        bandwidth,
        profile: model.profile_snapshot(),
    };
    let mut r = report(cfg, backend.info().place(), model, &measured);
    r.history = history;
    Ok(r)
}

/// What one benchmark run measured.
struct Measured {
    /// The step phase.
    steps: PhaseStats,
    /// The aggregation phase, when run.
    judge: Option<PhaseStats>,
    /// Seconds of the separate vision-tower pass.
    vision_seconds: f64,
    /// FLOPs of that pass's attention.
    vision_attention_flops: f64,
    /// Every GEMM path measured.
    rates: Vec<MatmulRate>,
    /// The CPU.
    cpu: cpu::CpuInfo,
    /// The ISA peak of the CPU cores used (f32 on the CPU only).
    isa: Option<cpu::IsaPeak>,
    /// Parameter counts `(vision, language model)`.
    params: (u64, u64),
    /// Seconds to build the random model.
    build_seconds: f64,
    /// Peak host RSS of the run (bytes), read before the bandwidth pass.
    peak_rss: Option<u64>,
    /// The stream read bandwidth (bytes per second; 0 off the CPU) and the read loop that reached it.
    bandwidth: (f64, String),
    /// Section times of the step and judge phases (profiling on): name → calls and seconds.
    profile: Option<crate::ops::ProfileSnapshot>,
}

/// Seconds the vision tower alone takes over every step screenshot (a separate pass, batched by 8 images), and
/// the FLOPs of its attention.
fn time_vision(
    model: &VlModel,
    kit: &PromptBuilder,
    bench: &crate::dataset::Benchmark,
) -> Result<(f64, f64)> {
    let images: Vec<_> = bench
        .trajectories
        .iter()
        .flat_map(|t| t.steps.iter().map(|s| bench.root.join(&s.image)))
        .map(|p| crate::preprocess::load_and_prepare(&p, &kit.image))
        .collect::<std::result::Result<_, _>>()?;
    let grids: Vec<[usize; 3]> = images.iter().map(|i| i.grid_thw).collect();
    let shape = crate::model::flops::PromptShape {
        grids: &grids,
        new_tokens: 0,
        cached_tokens: 0,
    };
    let attention = crate::model::flops::prefill_attention_flops(model.config(), &[shape]);
    let t0 = Instant::now();
    for chunk in images.chunks(8) {
        let refs: Vec<_> = chunk.iter().collect();
        let _ = model.encode_images(&refs, None)?;
        model.device().synchronize()?;
    }
    Ok((t0.elapsed().as_secs_f64(), attention))
}

/// FLOPs of the prefills: vision ≈ 2·params per patch, language model ≈ 2·(non-embedding params) per prompt
/// token, plus their attention itself (counted by the engine from each prompt's shapes).
fn prefill_flops(
    model: &VlModel,
    stats: &PhaseStats,
    (vision_params, lm_params): (u64, u64),
) -> f64 {
    2.0 * vision_params as f64 * stats.patches as f64
        + 2.0 * lm_body_params(model, lm_params) * stats.prefill_tokens as f64
        + stats.prefill_attention_flops
}

/// FLOPs of the decode steps: 2·(all language-model params, the head included) per generated token, plus their
/// attention itself (counted by the engine from each step's sequence lengths).
fn decode_flops(stats: &PhaseStats, lm_params: u64) -> f64 {
    2.0 * lm_params as f64 * stats.decode_tokens as f64 + stats.decode_attention_flops
}

/// The language model's parameters less its head (vocabulary × hidden), which prompt tokens do not run.
fn lm_body_params(model: &VlModel, lm_params: u64) -> f64 {
    let t = &model.config().text;
    lm_params as f64 - (t.vocab_size * t.hidden_size) as f64
}

/// Trajectories of the Mobile-R1 benchmark.
const BENCHMARK_TRAJECTORIES: usize = 500;
/// Its steps: about 3.9 per trajectory in the public sample (1,007 trajectories, 3,924 steps).
const BENCHMARK_STEPS: usize = 2_000;

/// The time the full benchmark would take at the measured rates: its steps at the step phase's rate, plus one
/// judge prompt per trajectory at the judge phase's rate when that phase ran.
fn benchmark_estimate(steps: &PhaseStats, judge: Option<&PhaseStats>) -> BenchmarkEstimate {
    let per = |n: usize, s: &PhaseStats| {
        if s.prompts > 0 {
            n as f64 * s.wall_seconds / s.prompts as f64
        } else {
            0.0
        }
    };
    let judge_seconds = judge.map(|j| per(BENCHMARK_TRAJECTORIES, j));
    BenchmarkEstimate {
        trajectories: BENCHMARK_TRAJECTORIES,
        steps: BENCHMARK_STEPS,
        judge_included: judge_seconds.is_some(),
        seconds: per(BENCHMARK_STEPS, steps) + judge_seconds.unwrap_or(0.0),
    }
}

fn report(cfg: &BenchConfig, device: &str, model: &VlModel, m: &Measured) -> BenchReport {
    let (steps, params) = (&m.steps, m.params);
    let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    let prefill_work = prefill_flops(model, steps, params);
    let work = prefill_work + decode_flops(steps, params.1);
    let vision_work = 2.0 * params.0 as f64 * steps.patches as f64 + m.vision_attention_flops;
    let devices = distinct_devices(device);
    let rates = with_reached_rates(
        &m.rates,
        (devices == 1).then_some([
            (prefill_work, steps.prefill_seconds),
            (vision_work, m.vision_seconds),
        ]),
    );
    let (peak, peak_source) = best_rate(&rates);
    let hardware = devices as f64;
    let against = |peak: f64| MfuTriple {
        mfu: ratio(work, steps.wall_seconds, peak * hardware),
        mfu_prefill: ratio(prefill_work, steps.prefill_seconds, peak),
        mfu_vision: ratio(vision_work, m.vision_seconds, peak),
    };
    let measured = against(peak);
    let peak_device = steps
        .peak_device_bytes
        .max(m.judge.as_ref().and_then(|j| j.peak_device_bytes));
    BenchReport {
        schema_version: BENCH_SCHEMA_VERSION,
        config: cfg.config.to_string(),
        device: device.to_string(),
        devices: steps.devices.clone(),
        dtype: format!("{:?}", model.dtype()).to_lowercase(),
        steps: steps.prompts,
        steps_per_second: rate(steps.prompts, steps.wall_seconds),
        images_per_second: rate(steps.images, steps.wall_seconds),
        prefill_tokens_per_second: rate(steps.prefill_tokens, steps.prefill_seconds),
        decode_tokens_per_second: rate(steps.decode_tokens, steps.decode_seconds),
        peak_memory_bytes: peak_device.or(m.peak_rss),
        peak_host_rss_bytes: m.peak_rss,
        peak_device_bytes: peak_device,
        mfu: measured.mfu,
        mfu_prefill: measured.mfu_prefill,
        mfu_vision: measured.mfu_vision,
        matmul_peak_flops: peak,
        matmul_peak_source: peak_source,
        matmul_rates: rates,
        cpu: m.cpu.clone(),
        isa_peak: m.isa.clone(),
        mfu_isa: m.isa.as_ref().map(|i| against(i.flops)),
        model_flops: work,
        time_split_seconds: TimeSplit {
            preprocess_cpu: steps.prepare_seconds,
            preprocess_wait: steps.wait_seconds,
            vision_separate_pass: m.vision_seconds,
            prefill_including_vision: steps.prefill_seconds,
            decode: steps.decode_seconds,
            wall: steps.wall_seconds,
            model_build: m.build_seconds,
        },
        params: Params {
            vision: params.0,
            language_model: params.1,
        },
        batch_size: cfg.batch_size,
        max_new_tokens: cfg.max_new_tokens,
        pixel_bounds: [cfg.min_pixels, cfg.max_pixels],
        phases: std::iter::once(steps)
            .chain(m.judge.as_ref())
            .map(PhaseStats::summary)
            .collect(),
        benchmark_estimate: benchmark_estimate(steps, m.judge.as_ref()),
        decode_bandwidth: yardstick::decode_bandwidth(
            (m.bandwidth.0, &m.bandwidth.1),
            params.1,
            model.dtype().size_in_bytes(),
            (
                steps.decode_steps,
                steps.decode_seq_sum,
                steps.decode_seconds,
            ),
        ),
        per_core: model
            .device()
            .is_cpu()
            .then(|| per_core(steps, prefill_work)),
        profile: m.profile.clone(),
        history: None,
    }
}

/// `rates` and, where the run had one device, the rates its prefill and its separate vision pass reached
/// (`reached`: model FLOPs and seconds of each). A product timed apart can meet a slow moment of the machine (a
/// virtual machine's neighbours, another job) that the run's phases did not; the model's own products ran at
/// least as fast as its phases' rate, so that rate is one the machine reached and counts among the measured
/// ones: no MFU exceeds 1, and the report names the source of its denominator.
fn with_reached_rates(rates: &[MatmulRate], reached: Option<[(f64, f64); 2]>) -> Vec<MatmulRate> {
    let names = ["this run's prefill", "this run's separate vision pass"];
    let reached = reached.into_iter().flatten().zip(names);
    rates
        .iter()
        .cloned()
        .chain(reached.filter(|((_, s), _)| *s > 0.0).map(|((work, s), path)| MatmulRate {
            path: path.to_string(),
            detail: "the phase's model FLOPs over its seconds, GEMMs and everything else between them: a rate \
                     the machine reached in this run"
                .to_string(),
            flops: work / s,
        }))
        .collect()
}

/// The step phase's rates per compute thread of the CPU.
fn per_core(steps: &PhaseStats, prefill_work: f64) -> yardstick::PerCore {
    let threads = rayon::current_num_threads().max(1);
    let per = |n: f64, s: f64| if s > 0.0 { n / s / threads as f64 } else { 0.0 };
    yardstick::PerCore {
        threads,
        steps_per_second: per(steps.prompts as f64, steps.wall_seconds),
        prefill_flops_per_second: per(prefill_work, steps.prefill_seconds),
        decode_tokens_per_second: per(steps.decode_tokens as f64, steps.decode_seconds),
    }
}

/// How many devices of `list` (comma-separated) are distinct hardware: `cuda:0,cuda:1` two, `cpu,cpu` one (both
/// copies share the same cores). The whole phase's MFU is against that many devices' peak.
fn distinct_devices(list: &str) -> usize {
    let names: std::collections::BTreeSet<&str> = list.split(',').collect();
    names.len().max(1)
}

/// `work` FLOPs in `seconds` as a share of `peak` FLOP/s (0 when either is 0).
fn ratio(work: f64, seconds: f64, peak: f64) -> f64 {
    if seconds > 0.0 && peak > 0.0 {
        work / seconds / peak
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::{distinct_devices, with_reached_rates, MatmulRate};

    /// A phase that ran faster than the products timed apart becomes the yardstick; phases without seconds and
    /// runs on several devices add nothing.
    #[test]
    fn the_rates_the_phases_reached_count_among_the_measured_ones() {
        let timed = vec![MatmulRate {
            path: "candle".to_string(),
            detail: String::new(),
            flops: 100.0,
        }];
        let rates = with_reached_rates(&timed, Some([(300.0, 1.0), (50.0, 0.0)]));
        let paths: Vec<(&str, f64)> = rates.iter().map(|r| (r.path.as_str(), r.flops)).collect();
        assert_eq!(paths, [("candle", 100.0), ("this run's prefill", 300.0)]);
        assert_eq!(
            super::best_rate(&rates),
            (300.0, "this run's prefill".to_string())
        );
        assert_eq!(with_reached_rates(&timed, None).len(), 1);
    }

    #[test]
    fn copies_on_one_device_count_once() {
        assert_eq!(distinct_devices("cpu"), 1);
        assert_eq!(distinct_devices("cpu,cpu"), 1);
        assert_eq!(distinct_devices("cuda:0,cuda:1"), 2);
        assert_eq!(distinct_devices("cuda:0,cuda:1,cuda:0"), 2);
    }
}
