//! What the run manifest and the throughput record say about the ops: the fused paths and GEMM library a model
//! ran with ([`OpsManifest`], with the choice of the CBLAS library in [`BlasChoice`]), the decode attention mode
//! ([`DecodeAttention`]), the optional section timings ([`ProfileSnapshot`]) and the matmul rates `bench` reports
//! ([`MatmulRate`]). Plain data: `ops` fills them in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the run manifest records about the ops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpsManifest {
    /// Whether the fused ops are on (`OpsConfig::fused_kernels` of the ops).
    pub fused: bool,
    /// Whether this build has the CUDA kernels (the `cuda` feature).
    pub cuda_kernels: bool,
    /// Whether bf16/f16 varlen attention on CUDA runs on tensor cores (the setting: no effect on the CPU or in
    /// f32).
    pub tensor_core_attention: bool,
    /// SHA-256 of `kernels/fused.cu` as compiled into this build.
    pub kernels_sha256: String,
    /// What the CPU's f32 GEMMs run on (`cblas: …`, the built-in GEMM, or why none is loaded).
    pub cpu_f32_gemm: String,
    /// How the CBLAS library was chosen (its corename, the calibration rates, why), on the CPU.
    #[serde(default)]
    pub cpu_blas_choice: Option<BlasChoice>,
    /// Compute threads of the CPU kernels: rayon's pool, which the `gemm` crate and a CBLAS library share
    /// (`--threads`).
    #[serde(default)]
    pub cpu_threads: usize,
    /// Rows per `gemm` crate product for independent rows where they take the `gemm` crate
    /// (`ops::ROW_BLOCK`).
    pub cpu_gemm_row_block: usize,
    /// What independent rows (decode, the logits of last positions) are multiplied by in f32 on the CPU.
    #[serde(default)]
    pub cpu_gemm_independent_rows: String,
    /// Fewest rows of a segment multiplied by the CBLAS library (`ops::BLAS_MIN_ROWS`).
    pub cpu_gemm_blas_min_rows: usize,
    /// Fewest rows of a segment multiplied by the built-in packed kernel when it is the run's built-in GEMM
    /// (`ops::gemm::packed::MIN_ROWS`; fewer go to the `gemm` crate).
    #[serde(default)]
    pub cpu_gemm_packed_min_rows: usize,
    /// Fewest keys of a segment whose f32 CPU attention runs through GEMM tiles rather than the four-row kernel
    /// (the ops' `TILED_MIN_KEYS`).
    #[serde(default)]
    pub cpu_attention_tiled_min_keys: usize,
    /// Fewest keys of a segment whose attention tiles run on the built-in packed kernel (where the CPU runs it and
    /// the run did not ask for the `gemm` crate only; `None` elsewhere: the `gemm` crate's tiles).
    #[serde(default)]
    pub cpu_attention_packed_min_keys: Option<usize>,
    /// How the segments of `cpu_attention_packed_min_keys` keys or more attend on the packed kernel, in words
    /// (`None` where none does).
    #[serde(default)]
    pub cpu_attention_packed: Option<String>,
    /// What multiplies bf16 activations by bf16 weights on the CPU (`ops::gemm::bf16`).
    #[serde(default)]
    pub cpu_bf16_gemm: String,
    /// How the CBLAS library's own bf16 GEMM was chosen for bf16 row segments (or not), where a library with one
    /// was loaded for a bf16 CPU run.
    #[serde(default)]
    pub cpu_bf16_blas_choice: Option<Box<BlasChoice>>,
    /// What computes the bf16 prefill attention on the CPU, in words.
    #[serde(default)]
    pub cpu_bf16_attention: String,
}

/// What the run's CPU f32 GEMMs use and why: the manifest's record of the choice, also logged in one line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlasChoice {
    /// `--cpu-gemm` (`MOBILE_R1_EVAL_BLAS`) as the program spells it (`auto` when unset).
    pub spec: String,
    /// The library found (its description), if any.
    pub library: Option<String>,
    /// The kernels OpenBLAS picked for this CPU (`openblas_get_corename`), when the library says.
    pub corename: Option<String>,
    /// Whether the GEMMs of declared row segments run on the library (else on the built-in GEMM).
    pub used: bool,
    /// GFLOP/s of the calibration product through the library.
    pub blas_gflops: Option<f64>,
    /// GFLOP/s of the calibration product through the built-in path.
    pub builtin_gflops: Option<f64>,
    /// Where the rates come from: measured at this load, or once on this machine and kept in a file.
    #[serde(default)]
    pub calibration: Option<String>,
    /// Why, in one sentence.
    pub reason: String,
}

/// How decode attention runs over sequences of different lengths; the manifest's `ops.decode_attention` records
/// it by its variant's name (`PerSequence`, `Padded`, `Fused`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DecodeAttention {
    /// One small composed attention per sequence over its exact cache (the CPU's choice where the fused one does
    /// not cover the shape).
    PerSequence,
    /// One composed attention over caches padded to the longest, with a length mask (fewer kernel launches;
    /// the choice on GPUs without a fused kernel for the head shape).
    Padded,
    /// The project's fused decode attention: it writes every new K/V and attends over each sequence's own cache,
    /// no padding and no copies; on CUDA one kernel launch per layer, on the CPU one pass per (sequence, KV head,
    /// chunk of keys) reading f32 or bf16 buffers directly (the choice wherever it covers the shape).
    Fused,
}

/// One GEMM path's measured rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatmulRate {
    /// `candle` (the device's default matmul) or `cblas: <library>`.
    pub path: String,
    /// What runs behind it (the `gemm` crate's kernels on the CPU).
    pub detail: String,
    /// FLOP/s.
    pub flops: f64,
}

/// Calls and total seconds of one section.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SectionTime {
    /// Times the section ran.
    pub calls: u64,
    /// Total device-synchronised seconds.
    pub seconds: f64,
}

/// The sections so far: name → calls and seconds. Nested sections are counted in their parents too. Serialised
/// as `{section: {"calls", "seconds"}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProfileSnapshot(pub BTreeMap<String, SectionTime>);

#[cfg(test)]
mod tests {
    use super::*;

    /// The ops part of a manifest as the program writes it: read back and written again, byte for byte.
    #[test]
    fn the_ops_record_reads_back_and_writes_the_same_bytes() {
        let json = concat!(
            r#"{"fused":true,"cuda_kernels":false,"tensor_core_attention":false,"kernels_sha256":"ab12","#,
            r#""cpu_f32_gemm":"cblas: OpenBLAS (libopenblas.so.0)","cpu_blas_choice":{"spec":"auto","#,
            r#""library":"OpenBLAS (libopenblas.so.0)","corename":"Haswell","used":true,"blas_gflops":100.5,"#,
            r#""builtin_gflops":90.25,"calibration":"measured at load","reason":"fits"},"cpu_threads":2,"#,
            r#""cpu_gemm_row_block":16,"cpu_gemm_independent_rows":"the gemm crate","#,
            r#""cpu_gemm_blas_min_rows":4,"cpu_gemm_packed_min_rows":768,"#,
            r#""cpu_attention_tiled_min_keys":64,"cpu_attention_packed_min_keys":2048,"#,
            r#""cpu_attention_packed":"attention of 2048 keys or more in query blocks on the packed kernel","#,
            r#""cpu_bf16_gemm":"gemm crate (candle's bf16 matmul)","cpu_bf16_blas_choice":{"spec":"mkl.so","#,
            r#""library":"mkl.so (cblas_gemm_bf16bf16f32)","corename":null,"used":true,"blas_gflops":900.0,"#,
            r#""builtin_gflops":800.5,"calibration":"measured at load","reason":"asked for"},"#,
            r#""cpu_bf16_attention":"the f32 attention on f32 copies"}"#
        );
        let m: OpsManifest = serde_json::from_str(json).unwrap();
        assert_eq!(serde_json::to_string(&m).unwrap(), json);
        let profile = r#"{"text.mlp":{"calls":2,"seconds":0.5}}"#;
        let p: ProfileSnapshot = serde_json::from_str(profile).unwrap();
        assert_eq!(p.0["text.mlp"].calls, 2);
        assert_eq!(serde_json::to_string(&p).unwrap(), profile);
    }

    /// The decode attention mode is written as its name, as manifests have always had it.
    #[test]
    fn decode_attention_is_recorded_by_name() {
        for (mode, name) in [
            (DecodeAttention::PerSequence, "PerSequence"),
            (DecodeAttention::Padded, "Padded"),
            (DecodeAttention::Fused, "Fused"),
        ] {
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{name}\""));
            assert_eq!(json, format!("\"{mode:?}\""));
            assert_eq!(
                serde_json::from_str::<DecodeAttention>(&json).unwrap(),
                mode
            );
        }
    }
}
