//! Locating a checkpoint: a local folder in the Hugging Face layout, or a hub repo id fetched through
//! [`crate::hub`] into the standard cache (or found there alone when the hub is offline).

use std::path::{Path, PathBuf};

use super::ModelError;
use crate::hub::{Hub, HubError, HubRepo, RepoKind};

/// Resolved paths of one checkpoint's files.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelFiles {
    /// Folder holding `config.json` (a snapshot folder for hub checkpoints).
    pub dir: PathBuf,
    /// `config.json`.
    pub config: PathBuf,
    /// Safetensors shards (one file, or all files of `model.safetensors.index.json`).
    pub weights: Vec<PathBuf>,
    /// `model.safetensors.index.json`, when the weights are sharded.
    pub weight_index: Option<PathBuf>,
    /// `tokenizer.json`, if present.
    pub tokenizer: Option<PathBuf>,
    /// `tokenizer_config.json`, if present.
    pub tokenizer_config: Option<PathBuf>,
    /// `chat_template.json`, if present.
    pub chat_template: Option<PathBuf>,
    /// `chat_template.jinja`, if present (newer checkpoints keep the template there).
    pub chat_template_jinja: Option<PathBuf>,
    /// `preprocessor_config.json`, if present.
    pub preprocessor_config: Option<PathBuf>,
    /// `generation_config.json`, if present.
    pub generation_config: Option<PathBuf>,
}

/// The files a run reads besides `config.json` and the weights, when the checkpoint has them.
pub(crate) const OPTIONAL: [&str; 6] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.json",
    "chat_template.jinja",
    "preprocessor_config.json",
    "generation_config.json",
];

/// The index of sharded weights.
pub(crate) const WEIGHT_INDEX: &str = "model.safetensors.index.json";

fn files_err(msg: impl Into<String>) -> ModelError {
    ModelError::Files(msg.into())
}

/// Shard file names listed by a `model.safetensors.index.json` (`weight_map` values, deduplicated, sorted).
pub(crate) fn shard_names(index_json: &str) -> Result<Vec<String>, ModelError> {
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

impl ModelFiles {
    /// Resolve `spec`: an existing folder, else a hub repo id (`org/name`) fetched through `hub` (from its cache
    /// alone when it is offline).
    pub fn resolve(spec: &str, hub: &Hub) -> Result<Self, ModelError> {
        let p = Path::new(spec);
        if p.is_dir() {
            return Self::from_dir(p);
        }
        if p.exists() {
            return Err(files_err(format!(
                "--model {spec} is a file; expected a folder or a hub repo id"
            )));
        }
        if crate::hub::check_repo_id(spec).is_err() {
            return Err(files_err(format!(
                "--model {spec}: no such folder, and not a hub repo id (org/name)"
            )));
        }
        Self::from_hub(spec, hub)
    }

    /// A local folder in the HF layout.
    pub fn from_dir(dir: &Path) -> Result<Self, ModelError> {
        let fetch = |name: &str| -> Result<Option<PathBuf>, ModelError> {
            let p = dir.join(name);
            Ok(p.is_file().then_some(p))
        };
        Self::assemble(dir, &fetch).map_err(|e| match e {
            ModelError::Files(m) => files_err(format!(
                "{}: {m}. Copy the file from the checkpoint, or carry a complete checkpoint over with \
                 `mobile-r1-eval pack --model ORG/NAME --data … --out BUNDLE` on a connected machine \
                 (docs/air-gap.md)",
                dir.display()
            )),
            other => other,
        })
    }

    /// Hub repo `repo_id` at `main`: each file from the cache's snapshot when it has it, else fetched (offline:
    /// the cache alone).
    pub(crate) fn from_hub(repo_id: &str, hub: &Hub) -> Result<Self, ModelError> {
        let repo = hub.repo(RepoKind::Model, repo_id, "main")?;
        let config = repo.get_required("config.json")?;
        let dir = config.parent().map(Path::to_path_buf).unwrap_or_default();
        let fetch = |name: &str| -> Result<Option<PathBuf>, ModelError> { fetch_hub(&repo, name) };
        Self::assemble(&dir, &fetch).map_err(|e| match e {
            ModelError::Files(m) => files_err(format!("{repo_id}: {m}")),
            other => other,
        })
    }

    /// Every file a run reads: `config.json`, the weights (and their index), and the optional files present.
    pub(crate) fn run_files(&self) -> Vec<&Path> {
        let optional = [
            &self.tokenizer,
            &self.tokenizer_config,
            &self.chat_template,
            &self.chat_template_jinja,
            &self.preprocessor_config,
            &self.generation_config,
        ];
        std::iter::once(self.config.as_path())
            .chain(self.weight_index.as_deref())
            .chain(self.weights.iter().map(PathBuf::as_path))
            .chain(optional.into_iter().flatten().map(PathBuf::as_path))
            .collect()
    }

    /// Collect the files through `fetch` (None = absent).
    fn assemble(
        dir: &Path,
        fetch: &dyn Fn(&str) -> Result<Option<PathBuf>, ModelError>,
    ) -> Result<Self, ModelError> {
        let config = fetch("config.json")?.ok_or_else(|| files_err("no config.json"))?;
        let (weights, weight_index) = match fetch("model.safetensors")? {
            Some(p) => (vec![p], None),
            None => {
                let index = fetch(WEIGHT_INDEX)?.ok_or_else(|| {
                    files_err(format!("neither model.safetensors nor {WEIGHT_INDEX}"))
                })?;
                let text = std::fs::read_to_string(&index)
                    .map_err(|e| files_err(format!("{}: {e}", index.display())))?;
                let shards = shard_names(&text)?
                    .iter()
                    .map(|n| {
                        fetch(n)?.ok_or_else(|| files_err(format!("missing weight shard {n}")))
                    })
                    .collect::<Result<_, _>>()?;
                (shards, Some(index))
            }
        };
        let [tokenizer, tokenizer_config, chat_template, chat_template_jinja, preprocessor_config, generation_config] =
            OPTIONAL.map(fetch);
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            weights,
            weight_index,
            tokenizer: tokenizer?,
            tokenizer_config: tokenizer_config?,
            chat_template: chat_template?,
            chat_template_jinja: chat_template_jinja?,
            preprocessor_config: preprocessor_config?,
            generation_config: generation_config?,
        })
    }
}

/// One file of a hub checkpoint: a shard or `config.json` must be there; the optional files and the probe for
/// single-file weights may be absent (HTTP 404; offline, not in the cache).
fn fetch_hub(repo: &HubRepo, name: &str) -> Result<Option<PathBuf>, ModelError> {
    let optional = OPTIONAL.contains(&name) || name == "model.safetensors";
    if !optional {
        return Ok(Some(repo.get_required(name)?));
    }
    match repo.get(name) {
        Ok(found) => Ok(found),
        // Offline, a cache filled by another tool may lack an optional file without marking it absent; a sharded
        // checkpoint has its index instead of `model.safetensors`.
        Err(e @ HubError::NotCached { .. }) => {
            if name != "model.safetensors" || matches!(repo.get(WEIGHT_INDEX), Ok(Some(_))) {
                Ok(None)
            } else {
                Err(e.into())
            }
        }
        Err(e) => Err(e.into()),
    }
}
