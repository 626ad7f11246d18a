//! What answered a run's prompts, as the manifest records it ([`BackendRecord`]): a checkpoint on this machine
//! with its dtype, device, KV-cache size and ops, or a model served over an OpenAI-compatible API with the
//! endpoint, the model id, the client's settings and what the server publishes about the model. Each kind records
//! only what is true of it.

use std::path::PathBuf;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{DecodeAttention, OpsManifest};
/// What the server's model list says of the model: the protocol's own type, recorded as read.
pub use crate::openai::PublishedModel;

/// What answered a run's prompts (`manifest.json`'s `backend`, tagged by `kind`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BackendRecord {
    /// A checkpoint on this machine, through the engine.
    Local(LocalRecord),
    /// A model served over an OpenAI-compatible API (`eval --backend openai`).
    Served(ServedRecord),
}

/// A checkpoint that ran on this machine (its dtype is the run settings').
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalRecord {
    /// The local folder the checkpoint was read from.
    pub model_path: PathBuf,
    /// The device it ran on (several joined by commas).
    pub device: String,
    /// KV-cache bytes per cached token.
    pub kv_bytes_per_token: usize,
    /// The fused ops and GEMM library it ran with.
    pub ops: OpsRecord,
}

/// The ops a model ran with: the ops' own record, the decode attention path, and whether sections were timed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpsRecord {
    /// Fused ops, CUDA kernels, GEMM library and blocking.
    #[serde(flatten)]
    pub ops: OpsManifest,
    /// How decode attention ran (`PerSequence`, `Padded`, `Fused`); null in the placeholder records of older
    /// served runs' manifests.
    #[serde(default)]
    pub decode_attention: Option<DecodeAttention>,
    /// Whether the model's sections were timed (a slower run).
    pub profiled: bool,
}

/// Where the prompts of a run through an OpenAI-compatible API went (`eval --backend openai`); never the API key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServedRecord {
    /// The base URL of the step prompts' server (`…/v1`).
    pub endpoint: String,
    /// The model id it served them with.
    pub model: String,
    /// The judge prompts' server, when the judge ran elsewhere (`--judge-endpoint`, `--judge-api-model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_endpoint: Option<String>,
    /// The judge's model id there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_model: Option<String>,
    /// Most requests in flight (`--concurrency`).
    pub concurrency: usize,
    /// Seconds one HTTP call may take (`--request-timeout`).
    pub request_timeout_seconds: f64,
    /// Retries of one prompt after a connection error, a timeout, a 429 or a 5xx (`--max-retries`).
    pub max_retries: u32,
    /// Seconds one prompt may wait out busy answers (429) before it fails (`--busy-wait`; absent in older
    /// manifests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_wait_seconds: Option<f64>,
    /// Connection failures in a row after which the run stops (`--max-connection-failures`; absent in older
    /// manifests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connection_failures: Option<usize>,
    /// Where the pixel bounds of the screenshots came from (the client resizes them to the smart-resized size
    /// itself): `--model DIR`'s `preprocessor_config.json`, or the Qwen2-VL processor's defaults.
    pub pixel_bounds_from: String,
    /// What the step prompts' server publishes about the model in its model list (absent in older manifests).
    #[serde(default, skip_serializing_if = "PublishedModel::is_empty")]
    pub published: PublishedModel,
}

/// `manifest.json`'s `backend` in the current format, or built from the fields by which a manifest of schema
/// version 1 described it at its top level: a checkpoint's folder, device, KV-cache size and ops, and for a
/// served model the `served` record (next to placeholders in the others, which are left out).
pub(super) fn read_backend<'de, D: Deserializer<'de>>(d: D) -> Result<BackendRecord, D::Error> {
    #[derive(Deserialize)]
    struct Either {
        #[serde(default)]
        backend: Option<BackendRecord>,
        #[serde(default)]
        model_path: Option<PathBuf>,
        #[serde(default)]
        device: Option<String>,
        #[serde(default)]
        kv_bytes_per_token: Option<usize>,
        #[serde(default)]
        ops: Option<OpsRecord>,
        #[serde(default)]
        served: Option<ServedRecord>,
    }
    let e = Either::deserialize(d)?;
    if let Some(b) = e.backend {
        return Ok(b);
    }
    if let Some(served) = e.served {
        return Ok(BackendRecord::Served(served));
    }
    let missing = |field: &str| D::Error::custom(format!("neither `backend` nor `{field}`"));
    Ok(BackendRecord::Local(LocalRecord {
        model_path: e.model_path.ok_or_else(|| missing("model_path"))?,
        device: e.device.ok_or_else(|| missing("device"))?,
        kv_bytes_per_token: e
            .kv_bytes_per_token
            .ok_or_else(|| missing("kv_bytes_per_token"))?,
        ops: e.ops.ok_or_else(|| missing("ops"))?,
    }))
}

/// Writes [`BackendRecord`] as `manifest.json`'s `backend` field (the manifest flattens this in, so that its
/// reader can also take the older top-level fields).
pub(super) fn write_backend<S: Serializer>(b: &BackendRecord, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Field<'a> {
        backend: &'a BackendRecord,
    }
    Field { backend: b }.serialize(s)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::records::Manifest;

    /// A manifest of schema version 1 as `eval` wrote it: `settings` with its `dtype`, the backend's fields at the
    /// top level.
    fn v1(dtype: &str, backend: Value) -> Value {
        let mut m = json!({
            "schema_version": 1, "line_schema_version": 2,
            "settings": {
                "model": "m", "model_hash": "h", "dtype": dtype, "data_hash": "d", "prompt_hashes": {},
                "system_prompt": "default", "image_processor": crate::preprocess::ImageProcessorConfig::default(),
                "max_new_tokens": 8, "judge": null, "version": "v"
            },
            "data": "d", "rules": crate::settings::RulePreset::default(),
            "batch_limits": {"max_seqs": 1, "max_batch_tokens": 1, "max_new_tokens": 1},
            "versions": {"mobile-r1-eval": "v", "candle": "c", "git_revision": "g"},
            "started_at_unix": 0, "resumed_at_unix": null, "finished_at_unix": null
        });
        m.as_object_mut()
            .unwrap()
            .extend(backend.as_object().unwrap().clone());
        m
    }

    fn ops(gemm: &str) -> Value {
        json!({"fused": false, "cuda_kernels": false, "tensor_core_attention": false, "kernels_sha256": "",
            "cpu_f32_gemm": gemm, "cpu_threads": 0, "cpu_gemm_row_block": 0, "cpu_gemm_blas_min_rows": 0,
            "decode_attention": null, "profiled": false})
    }

    #[test]
    fn a_version_1_checkpoint_manifest_reads_as_a_local_backend_and_is_written_in_the_current_shape(
    ) {
        let old = v1(
            "f32",
            json!({"model_path": "/ckpt", "device": "cpu", "kv_bytes_per_token": 64, "ops": ops("gemm")}),
        );
        let m: Manifest = serde_json::from_value(old).unwrap();
        assert_eq!(m.settings.dtype.as_deref(), Some("f32"));
        let BackendRecord::Local(local) = &m.backend else {
            panic!("{:?}", m.backend)
        };
        assert_eq!(
            (
                local.model_path.to_str(),
                local.device.as_str(),
                local.kv_bytes_per_token
            ),
            (Some("/ckpt"), "cpu", 64)
        );
        assert_eq!(local.ops.ops.cpu_f32_gemm, "gemm");
        let written = serde_json::to_value(&m).unwrap();
        assert_eq!(written["backend"]["kind"], "local");
        assert_eq!(written["backend"]["model_path"], "/ckpt");
        for gone in [
            "model_path",
            "device",
            "kv_bytes_per_token",
            "ops",
            "served",
        ] {
            assert!(written.get(gone).is_none(), "{gone}");
        }
        assert_eq!(serde_json::from_value::<Manifest>(written).unwrap(), m);
    }

    #[test]
    fn a_version_1_served_manifest_drops_its_placeholders() {
        let served = json!({"endpoint": "http://127.0.0.1:9/v1", "model": "m", "concurrency": 4,
            "request_timeout_seconds": 60.0, "max_retries": 2, "pixel_bounds_from": "defaults"});
        let old = v1(
            "served",
            json!({"model_path": "", "device": "http://127.0.0.1:9/v1", "kv_bytes_per_token": 0,
                "ops": ops("served"), "served": served}),
        );
        let m: Manifest = serde_json::from_value(old).unwrap();
        // No dtype: a resumed run's settings (which have none) compare equal.
        assert_eq!(m.settings.dtype, None);
        let BackendRecord::Served(s) = &m.backend else {
            panic!("{:?}", m.backend)
        };
        assert_eq!(
            (s.endpoint.as_str(), s.concurrency),
            ("http://127.0.0.1:9/v1", 4)
        );
        assert!(s.published.is_empty());
        let written = serde_json::to_value(&m).unwrap();
        assert_eq!(written["backend"]["kind"], "served");
        assert!(written["settings"].get("dtype").is_none());
        assert!(written.get("ops").is_none() && written.get("device").is_none());
        assert_eq!(serde_json::from_value::<Manifest>(written).unwrap(), m);
    }

    #[test]
    fn a_manifest_without_a_backend_names_the_missing_field() {
        let old = v1(
            "f32",
            json!({"model_path": "/ckpt", "kv_bytes_per_token": 64, "ops": ops("gemm")}),
        );
        let e = serde_json::from_value::<Manifest>(old)
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither `backend` nor `device`"), "{e}");
    }
}
