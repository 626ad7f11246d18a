//! Locating a checkpoint: a local folder in the Hugging Face layout, or a hub repo id fetched with `hf-hub`
//! into the standard cache (`$HF_HOME/hub`), resolved from that cache alone when `HF_HUB_OFFLINE` is set.

use std::path::{Path, PathBuf};

use super::ModelError;

/// Resolved paths of one checkpoint's files.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelFiles {
    /// Folder holding `config.json` (a snapshot folder for hub checkpoints).
    pub dir: PathBuf,
    /// `config.json`.
    pub config: PathBuf,
    /// Safetensors shards (one file, or all files of `model.safetensors.index.json`).
    pub weights: Vec<PathBuf>,
    /// `tokenizer.json`, if present.
    pub tokenizer: Option<PathBuf>,
    /// `tokenizer_config.json`, if present.
    pub tokenizer_config: Option<PathBuf>,
    /// `chat_template.json`, if present.
    pub chat_template: Option<PathBuf>,
    /// `preprocessor_config.json`, if present.
    pub preprocessor_config: Option<PathBuf>,
    /// `generation_config.json`, if present.
    pub generation_config: Option<PathBuf>,
}

const OPTIONAL: [&str; 5] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.json",
    "preprocessor_config.json",
    "generation_config.json",
];

fn files_err(msg: impl Into<String>) -> ModelError {
    ModelError::Files(msg.into())
}

/// Shard file names listed by a `model.safetensors.index.json` (`weight_map` values, deduplicated, sorted).
pub fn shard_names(index_json: &str) -> Result<Vec<String>, ModelError> {
    let v: serde_json::Value = serde_json::from_str(index_json)
        .map_err(|e| files_err(format!("invalid safetensors index: {e}")))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| files_err("safetensors index has no `weight_map`"))?;
    let mut names: Vec<String> = map
        .values()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Retries of a broken download; each resumes from the bytes already on disk (`hf-hub` backs off 300 ms, doubling).
pub const DOWNLOAD_RETRIES: usize = 4;

impl ModelFiles {
    /// Resolve `spec`: an existing folder, else a hub repo id (`org/name`).
    pub fn resolve(spec: &str) -> Result<Self, ModelError> {
        let p = Path::new(spec);
        if p.is_dir() {
            return Self::from_dir(p);
        }
        if p.exists() {
            return Err(files_err(format!(
                "--model {spec} is a file; expected a folder or a hub repo id"
            )));
        }
        if spec.split('/').count() != 2 || spec.starts_with('.') || spec.starts_with('/') {
            return Err(files_err(format!(
                "--model {spec}: no such folder, and not a hub repo id (org/name)"
            )));
        }
        if hub_offline() {
            Self::from_cache(spec)
        } else {
            Self::from_hub(spec)
        }
    }

    /// A local folder in the HF layout.
    pub fn from_dir(dir: &Path) -> Result<Self, ModelError> {
        let fetch = |name: &str| -> Result<Option<PathBuf>, ModelError> {
            let p = dir.join(name);
            Ok(p.is_file().then_some(p))
        };
        Self::assemble(dir, &fetch).map_err(|e| match e {
            ModelError::Files(m) => files_err(format!("{}: {m}", dir.display())),
            other => other,
        })
    }

    /// A hub repo from the local cache only (`$HF_HOME/hub/models--org--name/snapshots/<refs/main>/`).
    pub fn from_cache(repo_id: &str) -> Result<Self, ModelError> {
        let cache = hf_hub::Cache::from_env();
        let repo = cache.model(repo_id.to_string());
        let config = repo.get("config.json").ok_or_else(|| {
            files_err(format!(
                "{repo_id} is not in the local Hugging Face cache ({}) and HF_HUB_OFFLINE is set",
                cache.path().display()
            ))
        })?;
        let dir = config.parent().map(Path::to_path_buf).unwrap_or_default();
        let fetch = |name: &str| -> Result<Option<PathBuf>, ModelError> { Ok(repo.get(name)) };
        Self::assemble(&dir, &fetch).map_err(|e| match e {
            ModelError::Files(m) => files_err(format!("{repo_id} (offline cache): {m}")),
            other => other,
        })
    }

    /// A hub repo downloaded (or found) in the standard cache with `hf_hub::api::sync`.
    pub fn from_hub(repo_id: &str) -> Result<Self, ModelError> {
        let api = hf_hub::api::sync::ApiBuilder::from_env()
            .with_progress(true)
            .with_retries(DOWNLOAD_RETRIES)
            .build()
            .map_err(|e| files_err(format!("hub client: {e}")))?;
        let repo = api.model(repo_id.to_string());
        let config = repo.get("config.json").map_err(|e| {
            let hint = if unreachable(&e) { NO_NETWORK_HINT } else { "" };
            files_err(format!("{repo_id}: cannot fetch config.json: {e}{hint}"))
        })?;
        let dir = config.parent().map(Path::to_path_buf).unwrap_or_default();
        let fetch = |name: &str| -> Result<Option<PathBuf>, ModelError> {
            match repo.get(name) {
                Ok(p) => Ok(Some(p)),
                Err(e)
                    if is_not_found(&e)
                        && (OPTIONAL.contains(&name) || name == "model.safetensors") =>
                {
                    tracing::debug!("{repo_id}/{name}: {e}");
                    Ok(None)
                }
                Err(e) => Err(files_err(format!("{repo_id}: cannot fetch {name}: {e}"))),
            }
        };
        Self::assemble(&dir, &fetch)
    }

    /// Collect the files through `fetch` (None = absent).
    fn assemble(
        dir: &Path,
        fetch: &dyn Fn(&str) -> Result<Option<PathBuf>, ModelError>,
    ) -> Result<Self, ModelError> {
        let config = fetch("config.json")?.ok_or_else(|| files_err("no config.json"))?;
        let weights = match fetch("model.safetensors")? {
            Some(p) => vec![p],
            None => {
                let index = fetch("model.safetensors.index.json")?.ok_or_else(|| {
                    files_err("neither model.safetensors nor model.safetensors.index.json")
                })?;
                let text = std::fs::read_to_string(&index)
                    .map_err(|e| files_err(format!("{}: {e}", index.display())))?;
                shard_names(&text)?
                    .iter()
                    .map(|n| {
                        fetch(n)?.ok_or_else(|| files_err(format!("missing weight shard {n}")))
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        let [tokenizer, tokenizer_config, chat_template, preprocessor_config, generation_config] =
            OPTIONAL.map(fetch);
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            weights,
            tokenizer: tokenizer?,
            tokenizer_config: tokenizer_config?,
            chat_template: chat_template?,
            preprocessor_config: preprocessor_config?,
            generation_config: generation_config?,
        })
    }
}

/// Next steps printed when the hub cannot be reached at all.
const NO_NETWORK_HINT: &str = "\n  The Hugging Face hub could not be reached. Next steps: pass a local model folder \
     (--model path/to/Qwen2.5-VL-3B-Instruct, e.g. downloaded elsewhere and copied here); or, if the model is \
     already in the local cache ($HF_HOME/hub), set HF_HUB_OFFLINE=1; or set HF_ENDPOINT to a reachable hub mirror.";

/// No answer from the hub at all (connection refused, DNS, timeout), as opposed to an HTTP status.
fn unreachable(e: &hf_hub::api::sync::ApiError) -> bool {
    matches!(e, hf_hub::api::sync::ApiError::RequestError(r) if matches!(**r, ureq::Error::Transport(_)))
}

/// The Hub answered 404: the file is not in the repo (anything else, a dropped connection say, is an error).
fn is_not_found(e: &hf_hub::api::sync::ApiError) -> bool {
    matches!(e, hf_hub::api::sync::ApiError::RequestError(r) if matches!(**r, ureq::Error::Status(404, _)))
}

/// `HF_HUB_OFFLINE` set to a true value (`1`, `true`, `yes`, `on`).
pub fn hub_offline() -> bool {
    env_flag("HF_HUB_OFFLINE")
}

/// Environment variable `name` set to a true value (`1`, `true`, `yes`, `on`).
pub fn env_flag(name: &str) -> bool {
    std::env::var(name)
        .map(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        })
        .unwrap_or(false)
}
