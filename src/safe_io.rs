//! Small file helpers shared by the writers and readers of run files: atomic replacement that leaves no temporary
//! file behind when it fails, and tolerance of a UTF-8 byte-order mark at the start of a text file.

use std::path::Path;

/// The UTF-8 byte-order mark some editors (and Windows tools) put at the start of a text file.
pub(crate) const UTF8_BOM: char = '\u{feff}';

/// `text` without a leading UTF-8 byte-order mark.
pub(crate) fn strip_bom(text: &str) -> &str {
    text.strip_prefix(UTF8_BOM).unwrap_or(text)
}

/// Write `contents` to `tmp`, then rename it over `path`, so a reader never sees half a file. When either step
/// fails (a full disk, a read-only folder) the temporary file is removed before the error is returned.
pub(crate) fn replace_atomic(path: &Path, tmp: &Path, contents: &[u8]) -> std::io::Result<()> {
    let result = std::fs::write(tmp, contents).and_then(|()| std::fs::rename(tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bom_is_stripped_once() {
        assert_eq!(strip_bom("\u{feff}{\"a\":1}"), "{\"a\":1}");
        assert_eq!(strip_bom("{}"), "{}");
    }

    #[test]
    fn a_failed_rename_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // Renaming a file over a non-empty folder fails.
        let target = dir.path().join("manifest.json");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("x"), "").unwrap();
        let tmp = dir.path().join("manifest.json.tmp");
        assert!(replace_atomic(&target, &tmp, b"{}").is_err());
        assert!(!tmp.exists());
    }
}
