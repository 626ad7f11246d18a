//! `SHA256SUMS` in the format of GNU `sha256sum` (`<64 hex digits>  <path>`, one file a line), so that
//! `sha256sum -c SHA256SUMS` run in the bundle checks it too; and copying a file while hashing it.

use std::io::{Read, Write};
use std::path::Path;

use sha2::Digest;

use super::{io_err, PackError};
use crate::interrupt::Cancel;

/// One line of `SHA256SUMS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SumLine {
    /// Lower-case hex SHA-256.
    pub sha256: String,
    /// `/`-separated path relative to the bundle.
    pub path: String,
}

/// A path `sha256sum` writes without escaping and that stays inside the bundle.
pub(crate) fn check_path(path: &str) -> Result<(), String> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.contains(['\\', '\n', '\r', '\0'])
        || path
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..");
    if bad {
        Err(format!("{path:?} cannot be a file of a bundle"))
    } else {
        Ok(())
    }
}

/// The text of `SHA256SUMS` for `lines` (sorted by path).
pub fn render(lines: &[SumLine]) -> String {
    let mut sorted: Vec<&SumLine> = lines.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    sorted
        .iter()
        .map(|l| format!("{}  {}\n", l.sha256, l.path))
        .collect()
}

/// Parse `SHA256SUMS` text: the lines, and a message per line that is not `<hash>  <path>` (text or `*` binary
/// mode).
pub fn parse(text: &str) -> (Vec<SumLine>, Vec<String>) {
    let mut lines = Vec::new();
    let mut bad = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let parsed = raw.split_once(' ').and_then(|(hash, rest)| {
            let path = rest.strip_prefix(' ').or_else(|| rest.strip_prefix('*'))?;
            let ok = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
            (ok && check_path(path).is_ok()).then(|| SumLine {
                sha256: hash.to_ascii_lowercase(),
                path: path.to_string(),
            })
        });
        match parsed {
            Some(l) => lines.push(l),
            None => bad.push(format!(
                "SHA256SUMS line {}: not `<sha256>  <path>`: {raw:?}",
                i + 1
            )),
        }
    }
    (lines, bad)
}

/// Copy `from` to `to` (created; its folder too), returning the SHA-256 and size of the bytes copied; stops
/// between chunks when `cancel` is set.
pub(crate) fn copy_hashed(
    from: &Path,
    to: &Path,
    cancel: &Cancel,
) -> Result<(String, u64), PackError> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let mut src = std::fs::File::open(from).map_err(io_err(from))?;
    let mut dst = std::fs::File::create(to).map_err(io_err(to))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        if cancel.is_cancelled() {
            return Err(PackError::Cancelled);
        }
        let n = src.read(&mut buf).map_err(io_err(from))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        dst.write_all(&buf[..n]).map_err(io_err(to))?;
        size += n as u64;
    }
    dst.sync_all().map_err(io_err(to))?;
    Ok((crate::fingerprint::hex(&h.finalize()), size))
}

/// The SHA-256 of a file.
pub(crate) fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(crate::fingerprint::hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_round_trip_and_bad_lines_are_named() {
        let h = "a".repeat(64);
        let lines = vec![
            SumLine {
                sha256: h.clone(),
                path: "model/config.json".into(),
            },
            SumLine {
                sha256: h.clone(),
                path: "bin/mobile-r1-eval".into(),
            },
        ];
        let text = render(&lines);
        assert!(text.starts_with(&format!("{h}  bin/mobile-r1-eval\n")));
        let (back, bad) = parse(&format!("{text}{h} *data/x.png\nnonsense\n{h}  ../x\n"));
        assert_eq!(back.len(), 3);
        assert_eq!(back[2].path, "data/x.png");
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].contains("line 4"));
    }
}
