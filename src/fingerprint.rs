//! A content fingerprint of a checkpoint's weight files, recorded in a run's manifest and checked on resume, so
//! that a `model.safetensors` replaced between a kill and a resume is refused instead of mixing predictions of
//! two models in one run.
//!
//! It also holds the project's SHA-256-in-hex helper ([`sha256_hex`]), which hashes a benchmark's `data.jsonl`
//! and the prompt templates.
//!
//! Hashing every byte of a 7 GB checkpoint costs seconds to minutes on every start; instead each file's hash
//! covers its size, its whole safetensors header (names, dtypes, shapes, offsets) and three 4 KiB blocks of
//! *every tensor* (its first, middle and last bytes). Any realistic replacement changes every element of the
//! tensors it touches (another checkpoint, a full fine-tune, a merged LoRA update — dense over each adapted
//! matrix —, a re-quantisation), so it changes sampled bytes of each such tensor. An edit of a few isolated
//! elements between sampled blocks would pass unseen; that is the price of reading ~12 KiB per tensor.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bytes hashed at each sampled position of a tensor.
const BLOCK: u64 = 4096;
/// The scheme's name, stored with the hashes so a different scheme is never compared as a content change.
pub(crate) const SCHEME: &str = "safetensors-sampled-v1";

/// Errors of fingerprinting or of comparing fingerprints.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    /// Reading a weight file or the manifest failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A weight file is not a readable safetensors file.
    #[error("{path}: not a safetensors file: {reason}")]
    NotSafetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The weights differ from those the run was started with.
    #[error(
        "{manifest}: the model's weights changed since this run started ({changes}); its results came from the \
         old weights, so they cannot be resumed with these. Resume with the original weights, or use another --out \
         folder."
    )]
    Changed {
        /// The run's manifest.
        manifest: PathBuf,
        /// What changed, per file.
        changes: String,
    },
}

/// The fingerprint of one weight file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFingerprint {
    /// The file's name (shards are named by the index, so the name identifies the shard).
    pub file: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 (hex) over the size, the header and the sampled blocks of every tensor.
    pub sampled_sha256: String,
}

/// The fingerprint of a set of files: a checkpoint's weight files (`settings.weights`), a benchmark's screenshots
/// (`screenshots`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesFingerprint {
    /// Version of this record's layout.
    pub schema_version: u32,
    /// How the hashes were computed ([`SCHEME`]).
    pub scheme: String,
    /// One entry per weight file, in load order.
    pub files: Vec<FileFingerprint>,
}

/// Lower-case hex of `bytes` (a digest).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of `bytes`, in hex: the hash of a benchmark's `data.jsonl` (`settings.data_hash`) and of the prompt
/// templates.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Fingerprint the weight files `paths` (safetensors).
pub(crate) fn of_files(paths: &[PathBuf]) -> Result<FilesFingerprint, FingerprintError> {
    let files = paths
        .iter()
        .map(|p| of_file(p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(FilesFingerprint {
        schema_version: 1,
        scheme: SCHEME.into(),
        files,
    })
}

/// Fingerprint one safetensors file.
pub(crate) fn of_file(path: &Path) -> Result<FileFingerprint, FingerprintError> {
    let io = |source| FingerprintError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bad = |reason: String| FingerprintError::NotSafetensors {
        path: path.to_path_buf(),
        reason,
    };
    let mut f = File::open(path).map_err(io)?;
    let size = f.metadata().map_err(io)?.len();
    let mut len = [0u8; 8];
    f.read_exact(&mut len)
        .map_err(|_| bad("shorter than 8 bytes".into()))?;
    let header_len = u64::from_le_bytes(len);
    if header_len > size - 8 {
        return Err(bad(format!(
            "header length {header_len} exceeds the file size {size}"
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    f.read_exact(&mut header).map_err(io)?;
    let ranges = tensor_ranges(&header).map_err(bad)?;
    let data_start = 8 + header_len;
    let mut h = Sha256::new();
    h.update(size.to_le_bytes());
    h.update(&header);
    let mut buf = vec![0u8; BLOCK as usize];
    for (start, end) in ranges {
        let (a, b) = (data_start + start, (data_start + end).min(size));
        for at in sample_offsets(a, b) {
            let n = BLOCK.min(b - at) as usize;
            f.seek(SeekFrom::Start(at)).map_err(io)?;
            f.read_exact(&mut buf[..n]).map_err(io)?;
            h.update(&buf[..n]);
        }
    }
    Ok(FileFingerprint {
        file: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        size,
        sampled_sha256: hex(&h.finalize()),
    })
}

/// The data byte ranges of every tensor in a safetensors header, sorted by offset.
fn tensor_ranges(header: &[u8]) -> Result<Vec<(u64, u64)>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(header).map_err(|e| format!("header is not JSON: {e}"))?;
    let obj = v.as_object().ok_or("header is not a JSON object")?;
    let mut ranges = Vec::with_capacity(obj.len());
    for (name, t) in obj.iter().filter(|(k, _)| *k != "__metadata__") {
        let offs = t
            .get("data_offsets")
            .and_then(|o| o.as_array())
            .filter(|o| o.len() == 2)
            .ok_or_else(|| format!("tensor {name:?} has no data_offsets"))?;
        match (offs[0].as_u64(), offs[1].as_u64()) {
            (Some(a), Some(b)) if a <= b => ranges.push((a, b)),
            _ => return Err(format!("tensor {name:?} has bad data_offsets")),
        }
    }
    ranges.sort_unstable();
    Ok(ranges)
}

/// The starts of the sampled blocks of the byte range `[a, b)`: its first, middle and last block (deduplicated).
fn sample_offsets(a: u64, b: u64) -> Vec<u64> {
    if b <= a {
        return Vec::new();
    }
    let last = b.saturating_sub(BLOCK).max(a);
    let mid = (a + (b - a) / 2).min(last);
    let mut v = vec![a, mid, last];
    v.dedup();
    v
}

/// The scheme of [`of_plain_file`]: the size and the first, middle and last 4 KiB of the whole file.
pub(crate) const PLAIN_SCHEME: &str = "file-sampled-v1";

/// Fingerprint any file (a screenshot) by its size and its first, middle and last 4 KiB; `name` is how the
/// record names it. A missing file has size 0 and the hash `missing`.
pub(crate) fn of_plain_file(path: &Path, name: &str) -> Result<FileFingerprint, FingerprintError> {
    let io = |source| FingerprintError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FileFingerprint {
                file: name.into(),
                size: 0,
                sampled_sha256: "missing".into(),
            })
        }
        Err(e) => return Err(io(e)),
    };
    let size = f.metadata().map_err(io)?.len();
    let mut h = Sha256::new();
    h.update(size.to_le_bytes());
    let mut buf = vec![0u8; BLOCK as usize];
    for at in sample_offsets(0, size) {
        let n = BLOCK.min(size - at) as usize;
        f.seek(SeekFrom::Start(at)).map_err(io)?;
        f.read_exact(&mut buf[..n]).map_err(io)?;
        h.update(&buf[..n]);
    }
    Ok(FileFingerprint {
        file: name.into(),
        size,
        sampled_sha256: hex(&h.finalize()),
    })
}

/// The files whose fingerprint differs between `old` and `new` (changed, gone or new), by name.
pub(crate) fn changed_files(old: &FilesFingerprint, new: &FilesFingerprint) -> Vec<String> {
    let key = |f: &FileFingerprint| (f.size, f.sampled_sha256.clone());
    let old_map: std::collections::HashMap<&str, _> = old
        .files
        .iter()
        .map(|f| (f.file.as_str(), key(f)))
        .collect();
    let new_map: std::collections::HashMap<&str, _> = new
        .files
        .iter()
        .map(|f| (f.file.as_str(), key(f)))
        .collect();
    let mut out: Vec<String> = old_map
        .keys()
        .chain(new_map.keys())
        .filter(|n| old_map.get(*n) != new_map.get(*n))
        .map(|n| n.to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Check that the weights of a resumed run (`now`) are those recorded in its manifest (`old`, read from
/// `manifest`). A manifest without a fingerprint of this scheme (written by an older version) passes here; the
/// settings comparison reports it.
pub(crate) fn check_unchanged(
    manifest: &Path,
    old: &FilesFingerprint,
    now: &FilesFingerprint,
) -> Result<(), FingerprintError> {
    if old.scheme != now.scheme {
        return Ok(());
    }
    let changes = describe_changes(old, now);
    if changes.is_empty() {
        Ok(())
    } else {
        Err(FingerprintError::Changed {
            manifest: manifest.to_path_buf(),
            changes: changes.join("; "),
        })
    }
}

/// One line per weight file that differs between `old` and `new`.
fn describe_changes(old: &FilesFingerprint, new: &FilesFingerprint) -> Vec<String> {
    let mut out = Vec::new();
    for n in &new.files {
        match old.files.iter().find(|o| o.file == n.file) {
            None => out.push(format!("{} is new", n.file)),
            Some(o) if o.size != n.size => {
                out.push(format!("{}: size {} → {} bytes", n.file, o.size, n.size))
            }
            Some(o) if o.sampled_sha256 != n.sampled_sha256 => {
                out.push(format!("{}: same size, different content", n.file))
            }
            Some(_) => {}
        }
    }
    for o in old
        .files
        .iter()
        .filter(|o| !new.files.iter().any(|n| n.file == o.file))
    {
        out.push(format!("{} is gone", o.file));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file with two f32 tensors of `n` elements each, filled with `fill`.
    fn write_st(path: &Path, n: usize, fill: f32) {
        let bytes = (n * 4) as u64;
        let header = format!(
            "{{\"a\":{{\"dtype\":\"F32\",\"shape\":[{n}],\"data_offsets\":[0,{bytes}]}},\
             \"b\":{{\"dtype\":\"F32\",\"shape\":[{n}],\"data_offsets\":[{bytes},{}]}}}}",
            2 * bytes
        );
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        for _ in 0..2 * n {
            out.extend_from_slice(&fill.to_le_bytes());
        }
        std::fs::write(path, out).unwrap();
    }

    #[test]
    fn same_shapes_other_values_differ() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        write_st(&p, 10_000, 1.0);
        let a = of_files(std::slice::from_ref(&p)).unwrap();
        assert_eq!(a, of_files(std::slice::from_ref(&p)).unwrap());
        write_st(&p, 10_000, 2.0);
        let b = of_files(std::slice::from_ref(&p)).unwrap();
        assert_eq!(a.files[0].size, b.files[0].size);
        assert_ne!(a, b);
        let changes = describe_changes(&a, &b);
        assert_eq!(changes, ["model.safetensors: same size, different content"]);
    }

    #[test]
    fn sample_offsets_stay_inside_the_range() {
        assert_eq!(sample_offsets(10, 10), Vec::<u64>::new());
        assert_eq!(sample_offsets(0, 100), vec![0]);
        assert_eq!(sample_offsets(0, 10 * BLOCK), vec![0, 5 * BLOCK, 9 * BLOCK]);
    }

    #[test]
    fn a_truncated_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.safetensors");
        std::fs::write(&p, [200, 0, 0, 0, 0, 0, 0, 0, b'{']).unwrap();
        let err = of_file(&p).unwrap_err().to_string();
        assert!(err.contains("header length 200"), "{err}");
    }
}
