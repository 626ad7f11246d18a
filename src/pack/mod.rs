//! Bundles for machines without network: one folder holding the model folder(s) with only the files a run reads,
//! the benchmark (`data.jsonl`, the screenshots it references, `benchmark.json` when present), a copy of this
//! binary, `bundle.json` (what was packed, from where, by which command) and `SHA256SUMS` (written last, in
//! `sha256sum` format). [`verify`] checks a bundle on the far side and names every missing or damaged file.

mod sums;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub(crate) use sums::{check_path, hash_file, SumLine};

use crate::dataset::{Benchmark, DatasetError, DATA_FILE};
use crate::interrupt::Cancel;
use crate::model::{ModelConfig, ModelError, ModelFiles};
use crate::preprocess::ImageProcessorConfig;
use crate::records::DataSource;

/// The checksum file of a bundle.
pub(crate) const SUMS_FILE: &str = "SHA256SUMS";
/// What a bundle holds.
pub(crate) const BUNDLE_FILE: &str = "bundle.json";
/// Version of the `bundle.json` format.
pub(crate) const BUNDLE_SCHEMA_VERSION: u32 = 1;
/// The folders of a bundle.
pub(crate) const MODEL_DIR: &str = "model";
/// The judge model's folder.
pub(crate) const JUDGE_DIR: &str = "judge-model";
/// The benchmark's folder.
pub(crate) const DATA_DIR: &str = "data";
/// The binary's place.
pub(crate) const BINARY: &str = "bin/mobile-r1-eval";

/// Why a bundle could not be written or read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PackError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The output folder exists and is not empty.
    #[error("--out {}: the folder exists and is not empty; give a new folder (a bundle is never written over another)", .0.display())]
    Exists(PathBuf),
    /// The benchmark does not load.
    #[error(transparent)]
    Data(#[from] DatasetError),
    /// A model's `config.json` is one `eval` refuses; nothing was written.
    #[error("{}: {source}; a bundle must hold a model eval runs, so nothing was packed", path.display())]
    Model {
        /// The model's `config.json`.
        path: PathBuf,
        /// Why the model layer refuses it (boxed: the error is large).
        source: Box<ModelError>,
    },
    /// The benchmark names a screenshot its folder does not have.
    #[error("{}: line {line} step {step} references {image}, which is not in the benchmark folder; a bundle must be complete", file.display())]
    MissingImage {
        /// `data.jsonl`.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// 0-based step.
        step: usize,
        /// The path as written.
        image: String,
    },
    /// A file name a bundle cannot hold.
    #[error("{0}")]
    BadPath(String),
    /// `bundle.json` cannot be read.
    #[error("{}: {message}", path.display())]
    BadBundle {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Files of a bundle are missing or damaged.
    #[error("{} is incomplete: {}. {hint}", bundle.display(), problems.join("; "))]
    Incomplete {
        /// The bundle folder.
        bundle: PathBuf,
        /// One message per missing or damaged file.
        problems: Vec<String>,
        /// How to make a whole bundle.
        hint: String,
    },
    /// A stop was requested while packing (the bundle has no `SHA256SUMS`, so it does not verify).
    #[error("stopped while packing; the bundle is incomplete (no SHA256SUMS)")]
    Cancelled,
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PackError + '_ {
    move |source| PackError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `bundle.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct BundleManifest {
    /// Version of this format.
    pub schema_version: u32,
    /// The program that packed it.
    pub program_version: String,
    /// When (Unix seconds).
    pub created_at_unix: u64,
    /// The command line that packed it (run it again on the connected machine to re-pack).
    pub command: String,
    /// The evaluated model.
    pub model: PackedModel,
    /// A separate judge model, if packed.
    #[serde(default)]
    pub judge_model: Option<PackedModel>,
    /// The benchmark.
    pub data: PackedData,
    /// The copy of the binary, relative to the bundle.
    pub binary: String,
    /// Every file of the bundle but `SHA256SUMS`, with its size.
    pub files: Vec<PackedFile>,
}

/// A model in a bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PackedModel {
    /// `--model` as given (a hub id or a folder).
    pub source: String,
    /// The hub commit, for a hub id.
    #[serde(default)]
    pub commit: Option<String>,
    /// Its folder in the bundle.
    pub folder: String,
}

/// The benchmark in a bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PackedData {
    /// `--data` as given.
    pub source: String,
    /// The Hub dataset it came from, if any.
    #[serde(default)]
    pub hub: Option<DataSource>,
    /// Its folder in the bundle.
    pub folder: String,
    /// SHA-256 of `data.jsonl` (the manifest's `data_hash` of runs on it).
    pub data_hash: String,
    /// Trajectories.
    pub trajectories: usize,
    /// Distinct screenshots.
    pub screenshots: usize,
}

/// One file of a bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PackedFile {
    /// `/`-separated path relative to the bundle.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
}

/// A model to pack.
#[derive(Debug, Clone)]
pub struct ModelInput {
    /// `--model` as given.
    pub source: String,
    /// Its resolved files.
    pub files: ModelFiles,
}

/// What to pack.
#[derive(Debug, Clone)]
pub(crate) struct PackInput {
    /// The evaluated model.
    pub model: ModelInput,
    /// A separate judge model.
    pub judge: Option<ModelInput>,
    /// `--data` as given.
    pub data_source: String,
    /// The benchmark folder.
    pub data: PathBuf,
    /// The Hub dataset it came from.
    pub data_hub: Option<DataSource>,
    /// The bundle folder to create.
    pub out: PathBuf,
    /// The command line (recorded for re-packing).
    pub command: String,
    /// The binary to copy.
    pub binary: PathBuf,
}

/// One file to copy: where from, where to (relative to the bundle).
struct Copy {
    from: PathBuf,
    to: String,
}

/// Write the bundle; returns its manifest.
pub fn write(input: &PackInput, cancel: &Cancel) -> Result<BundleManifest, PackError> {
    let out = &input.out;
    if std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
        return Err(PackError::Exists(out.clone()));
    }
    check_model(&input.model.files)?;
    if let Some(j) = &input.judge {
        check_model(&j.files)?;
    }
    let mut copies = model_copies(&input.model.files, MODEL_DIR)?;
    if let Some(j) = &input.judge {
        copies.extend(model_copies(&j.files, JUDGE_DIR)?);
    }
    let (data, data_copies) = data_copies(input)?;
    copies.extend(data_copies);
    copies.push(Copy {
        from: input.binary.clone(),
        to: BINARY.into(),
    });
    let mut lines = Vec::with_capacity(copies.len() + 1);
    let mut files = Vec::with_capacity(copies.len() + 1);
    for c in &copies {
        check_path(&c.to).map_err(PackError::BadPath)?;
        let (sha256, size) = sums::copy_hashed(&c.from, &out.join(&c.to), cancel)?;
        lines.push(SumLine {
            sha256,
            path: c.to.clone(),
        });
        files.push(PackedFile {
            path: c.to.clone(),
            size,
        });
    }
    make_executable(&out.join(BINARY))?;
    let manifest = BundleManifest {
        schema_version: BUNDLE_SCHEMA_VERSION,
        program_version: env!("CARGO_PKG_VERSION").into(),
        created_at_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        command: input.command.clone(),
        model: packed_model(&input.model, MODEL_DIR),
        judge_model: input.judge.as_ref().map(|j| packed_model(j, JUDGE_DIR)),
        data,
        binary: BINARY.into(),
        files,
    };
    let json = serde_json::to_vec_pretty(&manifest).expect("a bundle manifest serialises");
    let path = out.join(BUNDLE_FILE);
    std::fs::write(&path, &json).map_err(io_err(&path))?;
    lines.push(SumLine {
        sha256: crate::fingerprint::sha256_hex(&json),
        path: BUNDLE_FILE.into(),
    });
    // Written last: a bundle cut short has no SHA256SUMS and does not verify.
    let sums_path = out.join(SUMS_FILE);
    std::fs::write(&sums_path, sums::render(&lines)).map_err(io_err(&sums_path))?;
    Ok(manifest)
}

/// Parse a model's `config.json` (with `generation_config.json` when present) with the model layer's parser, the
/// one `eval` loads the model with, so that a bundle never carries a checkpoint `eval` refuses.
fn check_model(files: &ModelFiles) -> Result<(), PackError> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(io_err(p));
    let config = read(&files.config)?;
    let generation = files.generation_config.as_deref().map(read).transpose()?;
    let model_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PackError::Model {
            path,
            source: Box::new(source),
        }
    };
    let model =
        ModelConfig::from_json(&config, generation.as_deref()).map_err(model_err(&files.config))?;
    // The image processor eval will load must cut pictures into the patches the vision tower reads.
    if let Some(p) = &files.preprocessor_config {
        let image = ImageProcessorConfig::from_file(p)
            .map_err(|e| model_err(p)(ModelError::Config(e.to_string())))?;
        model.check_image_processor(&image).map_err(model_err(p))?;
    }
    Ok(())
}

fn packed_model(m: &ModelInput, folder: &str) -> PackedModel {
    let snapshot = m.files.dir.file_name().and_then(|n| n.to_str());
    let from_hub = !Path::new(&m.source).is_dir();
    PackedModel {
        source: m.source.clone(),
        commit: snapshot
            .filter(|s| from_hub && crate::hub::is_commit(s))
            .map(str::to_string),
        folder: folder.into(),
    }
}

/// The files a run reads of `files`, into `folder` under their own names (shards as the index names them).
fn model_copies(files: &ModelFiles, folder: &str) -> Result<Vec<Copy>, PackError> {
    files
        .run_files()
        .into_iter()
        .map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
                PackError::BadPath(format!("{}: not a UTF-8 file name", p.display()))
            })?;
            Ok(Copy {
                from: p.to_path_buf(),
                to: format!("{folder}/{name}"),
            })
        })
        .collect()
}

/// `data.jsonl`, `benchmark.json` when present, and every screenshot `data.jsonl` references (once each, at the
/// path the loader finds it under).
fn data_copies(input: &PackInput) -> Result<(PackedData, Vec<Copy>), PackError> {
    let dir = &input.data;
    let bench = Benchmark::load(dir)?;
    let file = dir.join(DATA_FILE);
    let bytes = std::fs::read(&file).map_err(io_err(&file))?;
    let mut copies = vec![Copy {
        from: file.clone(),
        to: format!("{DATA_DIR}/{DATA_FILE}"),
    }];
    let extra = dir.join(crate::dataset::INFO_FILE);
    if extra.is_file() {
        copies.push(Copy {
            from: extra,
            to: format!("{DATA_DIR}/{}", crate::dataset::INFO_FILE),
        });
    }
    let mut seen = BTreeSet::new();
    for t in &bench.trajectories {
        for (k, s) in t.steps.iter().enumerate() {
            let rel = s.image.replace('\\', "/");
            if !seen.insert(rel.clone()) {
                continue;
            }
            let from = bench.resolve(&s.image);
            if !from.is_file() {
                return Err(PackError::MissingImage {
                    file: file.clone(),
                    line: t.line,
                    step: k,
                    image: s.image.clone(),
                });
            }
            copies.push(Copy {
                from,
                to: format!("{DATA_DIR}/{rel}"),
            });
        }
    }
    let data = PackedData {
        source: input.data_source.clone(),
        hub: input.data_hub.clone(),
        folder: DATA_DIR.into(),
        data_hash: crate::fingerprint::sha256_hex(&bytes),
        trajectories: bench.trajectories.len(),
        screenshots: seen.len(),
    };
    Ok((data, copies))
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), PackError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(io_err(path))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> Result<(), PackError> {
    Ok(())
}

/// Read `BUNDLE/bundle.json`.
pub(crate) fn read_manifest(bundle: &Path) -> Result<BundleManifest, PackError> {
    let path = bundle.join(BUNDLE_FILE);
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    let m: BundleManifest =
        serde_json::from_str(crate::safe_io::strip_bom(&text)).map_err(|e| {
            PackError::BadBundle {
                path: path.clone(),
                message: e.to_string(),
            }
        })?;
    if m.schema_version > BUNDLE_SCHEMA_VERSION {
        return Err(PackError::BadBundle {
            path,
            message: format!(
                "schema_version {} is newer than this program reads ({BUNDLE_SCHEMA_VERSION})",
                m.schema_version
            ),
        });
    }
    Ok(m)
}

/// What [`verify`] checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VerifyReport {
    /// Files whose checksum matched.
    pub ok: usize,
    /// Bytes read.
    pub bytes: u64,
}

/// Check every file of `bundle` against `SHA256SUMS` (and that `bundle.json`'s files are all listed); any
/// missing or damaged file is an [`PackError::Incomplete`] naming each one.
pub fn verify(bundle: &Path) -> Result<VerifyReport, PackError> {
    let sums_path = bundle.join(SUMS_FILE);
    let text = std::fs::read_to_string(&sums_path).map_err(|e| PackError::Incomplete {
        bundle: bundle.to_path_buf(),
        problems: vec![format!(
            "{SUMS_FILE}: {e} (pack writes it last, so the packing did not finish)"
        )],
        hint: repack_hint(bundle),
    })?;
    let (lines, mut problems) = sums::parse(&text);
    let mut report = VerifyReport { ok: 0, bytes: 0 };
    for l in &lines {
        let path = bundle.join(&l.path);
        match hash_file(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                problems.push(format!("{} is missing", l.path));
            }
            Err(e) => problems.push(format!("{}: {e}", l.path)),
            Ok(h) if h != l.sha256 => problems.push(format!(
                "{} is damaged (sha256 {}…, expected {}…)",
                l.path,
                &h[..12],
                &l.sha256[..12]
            )),
            Ok(_) => {
                report.ok += 1;
                report.bytes += std::fs::metadata(&path).map_or(0, |m| m.len());
            }
        }
    }
    if let Ok(m) = read_manifest(bundle) {
        let listed: BTreeSet<&str> = lines.iter().map(|l| l.path.as_str()).collect();
        for f in m.files.iter().filter(|f| !listed.contains(f.path.as_str())) {
            problems.push(format!("{} is not listed in {SUMS_FILE}", f.path));
        }
    }
    if problems.is_empty() {
        Ok(report)
    } else {
        Err(PackError::Incomplete {
            bundle: bundle.to_path_buf(),
            problems,
            hint: repack_hint(bundle),
        })
    }
}

/// How to make the bundle again: its recorded command, when `bundle.json` can be read.
fn repack_hint(bundle: &Path) -> String {
    match read_manifest(bundle) {
        Ok(m) => format!(
            "Copy the bundle again, or re-pack it on the connected machine with: {}",
            m.command
        ),
        Err(_) => "Copy the bundle again, or re-pack it on the connected machine with `mobile-r1-eval pack \
                   --model M --data D --out BUNDLE`"
            .into(),
    }
}

/// The bundle a folder belongs to, when it is one of a bundle's folders (`BUNDLE/model`, `BUNDLE/data`, …).
fn bundle_of(dir: &Path) -> Option<(PathBuf, String, BundleManifest)> {
    let name = dir.file_name()?.to_str()?.to_string();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let m = read_manifest(&parent).ok()?;
    Some((parent, name, m))
}

/// For a folder of a bundle: every file `bundle.json` lists under it must be there with its size, and the
/// benchmark's `data.jsonl` must have the hash `pack` recorded (a file changed in place keeps its size); the error
/// names each missing, cut or changed file and the command that packed the bundle. Other folders pass unchecked.
pub(crate) fn check_present(dir: &Path) -> Result<(), PackError> {
    let Some((bundle, name, m)) = bundle_of(dir) else {
        return Ok(());
    };
    let prefix = format!("{name}/");
    let mut problems: Vec<String> = m
        .files
        .iter()
        .filter(|f| f.path.starts_with(&prefix))
        .filter_map(|f| match std::fs::metadata(bundle.join(&f.path)) {
            Ok(md) if md.len() == f.size => None,
            Ok(md) => Some(format!(
                "{} has {} of its {} bytes",
                f.path,
                md.len(),
                f.size
            )),
            Err(_) => Some(format!("{} is missing", f.path)),
        })
        .collect();
    if problems.is_empty() && m.data.folder == name {
        problems.extend(changed_data(dir, &prefix, &m.data.data_hash)?);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(PackError::Incomplete {
            bundle,
            problems,
            hint: format!(
                "Copy the bundle again, or re-pack it on the connected machine with: {}",
                m.command
            ),
        })
    }
}

/// A problem when `DIR/data.jsonl` no longer has the SHA-256 `packed` that `bundle.json` records.
fn changed_data(dir: &Path, prefix: &str, packed: &str) -> Result<Option<String>, PackError> {
    let path = dir.join(DATA_FILE);
    let bytes = std::fs::read(&path).map_err(io_err(&path))?;
    let now = crate::fingerprint::sha256_hex(&bytes);
    Ok((now != packed).then(|| {
        format!("{prefix}{DATA_FILE} was changed since it was packed: its SHA-256 is {now}, bundle.json records {packed}")
    }))
}

/// The Hub origin `pack` recorded for a bundle's benchmark folder, when its `data.jsonl` is the one packed.
pub(crate) fn data_source_of(dir: &Path) -> Option<DataSource> {
    let (_, name, m) = bundle_of(dir)?;
    let hub = m.data.hub.filter(|_| m.data.folder == name)?;
    let bytes = std::fs::read(dir.join(DATA_FILE)).ok()?;
    (crate::fingerprint::sha256_hex(&bytes) == m.data.data_hash).then_some(hub)
}
