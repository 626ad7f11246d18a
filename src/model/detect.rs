//! Which family a checkpoint is, from its `config.json`, and the refusal of everything else.

use serde_json::Value;

use super::ModelError;
use crate::settings::ModelFamily;

fn cfg_err(msg: String) -> ModelError {
    ModelError::Config(msg)
}

/// Names of the supported families for error messages: "Qwen2.5-VL (model_type qwen2_5_vl, ...)".
fn supported_list() -> String {
    ModelFamily::ALL
        .iter()
        .map(|f| {
            format!(
                "{} (model_type {}; architectures {})",
                f.display_name(),
                f.model_type(),
                f.architectures().join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The family of a checkpoint from its `model_type`, else its `architectures`; other architectures are refused
/// (Qwen2-VL's `config.json` has Qwen2.5-VL's fields but another vision tower and positions, and Qwen3-VL-MoE
/// has Qwen3-VL's but sparse MLPs: both would load and answer wrongly). A config that names neither field is
/// read as Qwen2.5-VL, as hand-written test configs do.
pub(crate) fn detect_family(root: &Value) -> Result<ModelFamily, ModelError> {
    let listed: Vec<&str> = root
        .get("architectures")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let by_type = match root.get("model_type").and_then(Value::as_str) {
        Some(t) => Some(
            ModelFamily::ALL
                .into_iter()
                .find(|f| f.model_type() == t)
                .ok_or_else(|| {
                    cfg_err(format!(
                        "config.json has model_type {t:?}; this program runs {} and their fine-tunes",
                        supported_list()
                    ))
                })?,
        ),
        None => None,
    };
    let by_arch = |a: &str| {
        ModelFamily::ALL
            .into_iter()
            .find(|f| f.architectures().contains(&a))
    };
    for a in &listed {
        match by_arch(a) {
            Some(f) if by_type.is_none_or(|t| t == f) => {}
            _ => {
                return Err(cfg_err(format!(
                    "config.json has architectures [{a:?}]; supported: {}",
                    supported_list()
                )))
            }
        }
    }
    Ok(by_type
        .or_else(|| listed.first().and_then(|a| by_arch(a)))
        .unwrap_or(ModelFamily::Qwen25Vl))
}
