//! The ops behind the model code, and the context they run in.
//!
//! Each fused op has a reference made of candle ops (the transformers order, used wherever no fused path runs
//! and whenever the fused ops are off), a fused CPU path where one exists and, with the `cuda` feature, one of the
//! project's own CUDA kernels (`kernels/fused.cu`). `mobile-r1-eval self-test` compares them on a device
//! ([`selftest`]).
//!
//! The ops run through an [`Ops`] value built from the run's [`OpsConfig`] at load: it says which paths are on,
//! holds the loaded CBLAS library and the section profiler, and chooses each op's implementation. The folders:
//!
//! * [`gemm`]: the linear layers' `matmul_nt` on the CPU: row segmentation ([`Rows`]), the built-in packed and
//!   row kernels, the optional CBLAS library with its choice and calibration, and the matmul rates measured
//!   for MFU figures.
//! * `attention`: varlen (prefill, vision) and decode attention: their selection, the fused CPU path, the CUDA
//!   launchers, and the composed candle fallback ([`composed`]).
//! * `elementwise`: RMSNorm, bias epilogues, SwiGLU, q/k/v + rotary: selection, fused CPU loops, CUDA launchers,
//!   references.
//! * [`cuda`]: how the kernels are launched (also used by their CPU emulation) and, with the `cuda` feature, the
//!   kernel module and the helpers of the launchers, which sit with their ops (`attention`, `elementwise`).
//! * [`reference`](mod@reference): every fused op's candle reference, the ground truth of the comparisons.
//! * [`selftest`]: the comparisons behind `self-test`.
//! * `profile`: the optional section timings; `simd` and `cpu_data`: helpers of the fused CPU paths.

mod attention;
mod config;
mod cpu_data;
pub mod cuda;
mod elementwise;
pub mod gemm;
mod profile;
pub mod selftest;
mod simd;
pub mod threads;

/// The candle reference of every fused op, in transformers' order: what the fused paths are compared with.
pub mod reference {
    pub use super::attention::reference::*;
    pub use super::elementwise::reference::*;
}

use std::sync::Arc;

use candle_core::{DType, Device};

pub(crate) use crate::records::{OpsManifest, ProfileSnapshot};
pub use attention::{composed, DecodeKv, DecodeStep, Varlen, VarlenSeg};
pub use config::{kernels_sha256, CpuGemm, GemmCalibration, OpsConfig};
pub(crate) use cpu_data::map_rows;
pub use elementwise::{QkHeads, QkvRope};
pub(crate) use gemm::peak::matmul_peak;
pub use gemm::{HeldWeight, Rows, BLAS_MIN_ROWS, ROW_BLOCK};

use gemm::blas;
use gemm::packed::BuiltinGemm;
use profile::Profiler;

/// The ops' runtime context: the settings, the CBLAS library they loaded and the section profiler. Cheap to
/// clone (the library and the profiler's table are shared).
#[derive(Clone)]
pub struct Ops {
    config: OpsConfig,
    blas: Option<Arc<blas::Blas>>,
    /// Why no library is loaded, for the manifest, when none is.
    gemm_note: String,
    /// The built-in f32 GEMM of large segments when no library is used.
    builtin: BuiltinGemm,
    /// What runs the f32 CPU attention's tiles of long segments, chosen apart from `builtin`.
    attention_tiles: attention::cpu::Tiles,
    /// What multiplies independent f32 rows (decode, last positions), chosen apart from `builtin`.
    rows: gemm::row::RowGemm,
    /// What multiplies bf16 activations by bf16 weights.
    bf16: gemm::bf16::Bf16Gemm,
    /// The CBLAS library whose bf16 GEMM multiplies bf16 row segments instead, where one does.
    bf16_blas: Option<Arc<blas::Blas>>,
    /// How that was decided, where a library with a bf16 GEMM was loaded for a bf16 CPU run.
    bf16_blas_choice: Option<blas::BlasChoice>,
    /// How the library was chosen, on the CPU.
    blas_choice: Option<blas::BlasChoice>,
    profiler: Profiler,
    attention_budget: usize,
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops")
            .field("config", &self.config)
            .field("cpu_f32_gemm", &self.gemm_description())
            .field("attention_budget", &self.attention_budget)
            .finish()
    }
}

/// One log line saying what the CPU's f32 GEMMs run on and why (a warning when the library misfits the CPU).
fn log_blas_choice(c: &blas::BlasChoice, builtin: BuiltinGemm) {
    let what = match (&c.library, c.used) {
        (Some(lib), true) => format!("CBLAS {lib}"),
        _ => format!("the {}", builtin.describe()),
    };
    if blas::needs_attention(c) {
        tracing::warn!("CPU f32 GEMMs: {what}: {}", c.reason);
    } else {
        tracing::info!("CPU f32 GEMMs: {what}: {}", c.reason);
    }
}

/// Whether the loaded library's bf16 GEMM multiplies a bf16 run's row segments instead of `builtin`
/// ([`gemm::bf16::blas::decide`]), logged; `None` where it has no bf16 GEMM.
fn decide_bf16_blas(
    lib: &blas::Blas,
    config: &OpsConfig,
    builtin: gemm::bf16::Bf16Gemm,
) -> Option<blas::BlasChoice> {
    let required = matches!(config.cpu_gemm, CpuGemm::Blas | CpuGemm::Library(_));
    let spec = config.cpu_gemm.to_string();
    let calibration = &config.cpu_gemm_calibration;
    let c = gemm::bf16::blas::decide(lib, (&spec, required), builtin, calibration)?;
    let what = c.library.as_deref().unwrap_or_default();
    tracing::info!("CPU bf16 GEMMs of row segments: {what}: {}", c.reason);
    Some(c)
}

impl Ops {
    /// The context of `config` for work on `device` with weights of `dtype`: on the CPU the CBLAS library asked for
    /// is loaded here (a required one that cannot be loaded is an error), and the bf16 kernels are chosen (timed)
    /// only for bf16 weights, the library's own bf16 GEMM among them where it has one; elsewhere neither.
    pub fn new(
        config: &OpsConfig,
        device: &Device,
        dtype: DType,
    ) -> std::result::Result<Self, blas::BlasError> {
        let builtin = BuiltinGemm::for_this_cpu(config.cpu_gemm == CpuGemm::GemmCrate);
        let rows = gemm::row::RowGemm::for_this_cpu(config.cpu_gemm == CpuGemm::GemmCrate);
        let bf16 = match device.is_cpu() && dtype == DType::BF16 {
            true => gemm::bf16::Bf16Gemm::for_this_cpu(
                config.cpu_gemm == CpuGemm::GemmCrate,
                &config.cpu_gemm_calibration,
            ),
            false => gemm::bf16::Bf16Gemm::Candle,
        };
        let (loaded, blas_choice) = match device.is_cpu() {
            true => {
                let calibration = &config.cpu_gemm_calibration;
                let (blas, choice) = blas::choose(&config.cpu_gemm, calibration, builtin)?;
                log_blas_choice(&choice, builtin);
                (blas.map(Arc::new), Some(choice))
            }
            false => (None, None),
        };
        let blas = loaded
            .clone()
            .filter(|_| blas_choice.as_ref().is_some_and(|c| c.used));
        let gemm_note = match (device.is_cpu(), &blas) {
            (false, _) => "none (not a CPU run)".to_string(),
            (true, Some(_)) => String::new(),
            (true, None) => builtin.describe(),
        };
        let bf16_run =
            device.is_cpu() && dtype == DType::BF16 && config.cpu_gemm != CpuGemm::GemmCrate;
        // The library whose bf16 GEMM may take the segments: the one loaded where it has one, else under `auto`
        // an installed one that has (MKL).
        let bf16_candidate = match (bf16_run, loaded) {
            (false, _) => None,
            (true, Some(lib)) if lib.bf16_gemm().is_some() => Some(lib),
            (true, _) if config.cpu_gemm == CpuGemm::Auto => blas::Blas::find_bf16().map(Arc::new),
            (true, _) => None,
        };
        let bf16_blas_choice = bf16_candidate
            .as_deref()
            .and_then(|lib| decide_bf16_blas(lib, config, bf16));
        let bf16_blas =
            bf16_candidate.filter(|_| bf16_blas_choice.as_ref().is_some_and(|c| c.used));
        Ok(Self {
            config: config.clone(),
            blas,
            gemm_note,
            builtin,
            attention_tiles: attention::cpu::Tiles::for_this_cpu(
                config.cpu_gemm == CpuGemm::GemmCrate,
            ),
            rows,
            bf16,
            bf16_blas,
            bf16_blas_choice,
            blas_choice,
            profiler: Profiler::new(config.profile),
            attention_budget: composed::DEFAULT_MAX_SCORE_ELEMS,
        })
    }

    /// The settings this context was built from.
    pub fn config(&self) -> &OpsConfig {
        &self.config
    }

    /// The CBLAS library the CPU's f32 GEMMs use, if any.
    pub fn blas(&self) -> Option<&blas::Blas> {
        self.blas.as_deref()
    }

    /// The CBLAS library whose bf16 GEMM multiplies bf16 row segments, if any.
    pub fn bf16_blas(&self) -> Option<&blas::Blas> {
        self.bf16_blas.as_deref()
    }

    /// [`Profiler::section`] of this context's profiler.
    pub fn section<T, E: From<candle_core::Error>>(
        &self,
        name: &'static str,
        device: &Device,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        self.profiler.section(name, device, f)
    }

    /// The section table so far; `None` when profiling is off.
    pub fn profile_snapshot(&self) -> Option<ProfileSnapshot> {
        self.profiler.snapshot()
    }

    /// Lower (or raise) the cap on attention scores the composed attention materialises at once (elements) to
    /// trade speed for memory; at least 1.
    pub fn set_attention_budget(&mut self, max_score_elems: usize) {
        self.attention_budget = max_score_elems.max(1);
    }

    fn gemm_description(&self) -> String {
        match &self.blas {
            Some(b) => format!("cblas: {}", b.description),
            None => self.gemm_note.clone(),
        }
    }

    /// What multiplies bf16 products on the CPU, in words (`ops.cpu_bf16_gemm`).
    fn bf16_description(&self) -> String {
        let library = self
            .bf16_blas_choice
            .as_ref()
            .and_then(|c| c.library.as_deref());
        match (&self.bf16_blas, library) {
            (Some(_), Some(lib)) => format!(
                "row segments on {lib} (f32 sums, a linear layer's bias added before the one rounding to bf16); \
                 independent rows and the weights held in tiles on the built-in kernels: {}",
                self.bf16.describe()
            ),
            _ => self.bf16.describe(),
        }
    }

    /// What the run manifest records about the ops.
    pub fn manifest(&self) -> OpsManifest {
        OpsManifest {
            fused: self.config.fused_kernels,
            cuda_kernels: cfg!(feature = "cuda"),
            tensor_core_attention: self.config.tensor_core_attention,
            kernels_sha256: kernels_sha256(),
            cpu_f32_gemm: self.gemm_description(),
            cpu_blas_choice: self.blas_choice.clone(),
            cpu_threads: rayon::current_num_threads(),
            cpu_gemm_row_block: ROW_BLOCK,
            cpu_gemm_independent_rows: self.rows.describe().to_string(),
            cpu_gemm_blas_min_rows: BLAS_MIN_ROWS,
            cpu_gemm_packed_min_rows: gemm::packed::MIN_ROWS,
            cpu_attention_tiled_min_keys: attention::cpu::TILED_MIN_KEYS,
            cpu_attention_packed_min_keys: attention::cpu::packed_plan(self.attention_tiles)
                .map(|p| p.min_keys),
            cpu_attention_packed: attention::cpu::describe_packed_plan(self.attention_tiles),
            cpu_bf16_gemm: self.bf16_description(),
            cpu_bf16_blas_choice: self.bf16_blas_choice.clone().map(Box::new),
            cpu_bf16_attention: attention::describe_bf16(self.bf16),
        }
    }

    /// True when `device` is a CUDA device, the fused ops are on and `dtype` has a kernel.
    fn on_kernel_path(&self, device: &Device, dtype: DType) -> bool {
        cfg!(feature = "cuda")
            && device.is_cuda()
            && matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
            && self.config.fused_kernels
    }

    /// [`Self::on_kernel_path`] for an op's main operand `t`, which must not be empty (an empty input takes the
    /// composed path instead of launching an empty grid).
    #[cfg(feature = "cuda")]
    fn kernel_for(&self, t: &candle_core::Tensor) -> bool {
        self.on_kernel_path(t.device(), t.dtype()) && t.elem_count() > 0
    }
}
