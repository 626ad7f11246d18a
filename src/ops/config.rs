//! The ops' settings as one value ([`OpsConfig`], chosen by the command line), the runtime context built from it
//! at load ([`super::Ops`]), whose record in the run manifest is [`crate::records::OpsManifest`].

use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How the ops run: which fused paths are on, what the CPU's f32 GEMMs run on, whether sections are timed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpsConfig {
    /// The project's fused ops (CUDA kernels, fused CPU paths); off routes every op through its composed
    /// reference, to measure what the fused paths bring.
    pub fused_kernels: bool,
    /// bf16/f16 varlen attention on CUDA runs on tensor cores (`varlen_mma_*`) instead of the CUDA-core kernel.
    pub tensor_core_attention: bool,
    /// What the CPU's f32 GEMMs run on.
    pub cpu_gemm: CpuGemm,
    /// Where the calibration of a CBLAS library against the built-in GEMM is kept, so that it is measured once
    /// per machine.
    #[serde(default)]
    pub cpu_gemm_calibration: GemmCalibration,
    /// Time the model's sections, waiting for the device before and after each (slower; see
    /// [`super::profile`]).
    pub profile: bool,
}

impl Default for OpsConfig {
    /// Fused ops on, tensor-core attention on, CPU GEMM `auto` calibrated once per process, profiling off.
    fn default() -> Self {
        Self {
            fused_kernels: true,
            tensor_core_attention: true,
            cpu_gemm: CpuGemm::Auto,
            cpu_gemm_calibration: GemmCalibration::EachStart,
            profile: false,
        }
    }
}

/// The spelling of [`CpuGemm::GemmCrate`].
const GEMM_CRATE: &str = "gemm-crate";

/// The library behind the CPU's f32 GEMMs ([`super::gemm::blas`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuGemm {
    /// OpenBLAS where it is installed, fits the CPU and is at least as fast as the built-in GEMM; else the
    /// built-in GEMM (`auto`).
    #[default]
    Auto,
    /// The built-in GEMM, no library (`off`): [`super::gemm::packed`] for large segments on a CPU with AVX2 and no
    /// AVX-512, the `gemm` crate behind candle's matmul otherwise.
    Builtin,
    /// The `gemm` crate behind candle's matmul only (`gemm-crate`), to compare the built-in kernels.
    GemmCrate,
    /// OpenBLAS, required: loading fails without it (`on`).
    Blas,
    /// A shared library exporting the LP64 `cblas_sgemm` (OpenBLAS, MKL's `libmkl_rt`, BLIS), required.
    Library(PathBuf),
}

impl FromStr for CpuGemm {
    type Err = std::convert::Infallible;

    /// `auto` (or empty), `off`/`0`/`false`/`no`, `gemm-crate`, `on`/`1`/`true`/`yes`; anything else is a
    /// library's path.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim() {
            "" | "auto" => Self::Auto,
            "off" | "0" | "false" | "no" => Self::Builtin,
            GEMM_CRATE => Self::GemmCrate,
            "on" | "1" | "true" | "yes" => Self::Blas,
            path => Self::Library(PathBuf::from(path)),
        })
    }
}

impl std::fmt::Display for CpuGemm {
    /// The spelling [`CpuGemm::from_str`] reads back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Builtin => f.write_str("off"),
            Self::GemmCrate => f.write_str(GEMM_CRATE),
            Self::Blas => f.write_str("on"),
            Self::Library(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Where the calibration deciding `--cpu-gemm auto` (a CBLAS library's rate against the built-in GEMM's) is kept
/// (`--cpu-gemm-calibration FILE|none`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GemmCalibration {
    /// In this file: measured once per machine, then read by every later start, so that every run, resume and
    /// shard on the machine makes the same choice.
    File(PathBuf),
    /// No file (`none`): measured at each start, once per process.
    #[default]
    EachStart,
}

/// The spelling of [`GemmCalibration::EachStart`].
const NO_CALIBRATION_FILE: &str = "none";

impl FromStr for GemmCalibration {
    type Err = String;

    /// `none`, else the file's path; an empty value is refused.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "" => Err(format!(
                "an empty value: give a file or `{NO_CALIBRATION_FILE}`"
            )),
            NO_CALIBRATION_FILE => Ok(Self::EachStart),
            path => Ok(Self::File(PathBuf::from(path))),
        }
    }
}

impl std::fmt::Display for GemmCalibration {
    /// The spelling [`GemmCalibration::from_str`] reads back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(p) => write!(f, "{}", p.display()),
            Self::EachStart => f.write_str(NO_CALIBRATION_FILE),
        }
    }
}

/// SHA-256 (hex) of `kernels/fused.cu` as compiled into this build.
pub fn kernels_sha256() -> String {
    crate::fingerprint::sha256_hex(include_str!("../../kernels/fused.cu").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_gemm_reads_the_old_spellings_and_round_trips() {
        let cases = [
            ("auto", CpuGemm::Auto),
            ("", CpuGemm::Auto),
            ("off", CpuGemm::Builtin),
            ("no", CpuGemm::Builtin),
            ("gemm-crate", CpuGemm::GemmCrate),
            ("on", CpuGemm::Blas),
            ("1", CpuGemm::Blas),
            (
                "/opt/lib/libblis.so",
                CpuGemm::Library("/opt/lib/libblis.so".into()),
            ),
        ];
        for (text, want) in cases {
            let got: CpuGemm = text.parse().unwrap();
            assert_eq!(got, want, "{text:?}");
            assert_eq!(got.to_string().parse::<CpuGemm>().unwrap(), want);
        }
    }

    #[test]
    fn the_calibration_reads_none_and_a_file_and_refuses_an_empty_value() {
        assert_eq!("none".parse(), Ok(GemmCalibration::EachStart));
        let file = GemmCalibration::File("/tmp/cpu-gemm.json".into());
        assert_eq!(" /tmp/cpu-gemm.json ".parse(), Ok(file.clone()));
        for c in [GemmCalibration::EachStart, file] {
            assert_eq!(c.to_string().parse(), Ok(c));
        }
        assert!(" "
            .parse::<GemmCalibration>()
            .unwrap_err()
            .contains("empty"));
    }

    #[test]
    fn config_round_trips_through_json_and_defaults_as_documented() {
        let d = OpsConfig::default();
        assert!(d.fused_kernels && d.tensor_core_attention && !d.profile);
        assert_eq!(d.cpu_gemm, CpuGemm::Auto);
        let c = OpsConfig {
            cpu_gemm: CpuGemm::Library("/x/libmkl_rt.so".into()),
            cpu_gemm_calibration: GemmCalibration::File("/x/cpu-gemm.json".into()),
            profile: true,
            ..d
        };
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<OpsConfig>(&json).unwrap(), c);
    }
}
