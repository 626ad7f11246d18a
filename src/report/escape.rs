//! Escaping for the HTML pages: every string that comes from a model, a data file or the command line goes
//! through [`html`] (text and attribute values) or [`json_script`] (the data block read by the page's script).

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// Escape text for HTML element content and double- or single-quoted attribute values.
pub fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON text that is safe inside `<script type="application/json">`: `<`, `>` and `&` become `\u003c`-style
/// escapes (so no `</script>` or `<!--` can end the block), as do U+2028 and U+2029.
pub(crate) fn json_script(value: &serde_json::Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len() + 64);
    for c in text.chars() {
        match c {
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Standard base64 (with padding), for the Content-Security-Policy hashes.
fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The CSP source expression `'sha256-…'` allowing exactly this inline script or style text.
pub(crate) fn csp_hash(text: &str) -> String {
    format!("'sha256-{}'", base64(&Sha256::digest(text.as_bytes())))
}

/// The Content-Security-Policy of a report page: nothing from the network; only the page's own inline script
/// (by hash, so no injected script could run even if some text escaped its escaping), inline styles (the
/// charts' SVG carries style attributes) and images from beside the page.
pub(crate) fn csp(script: &str) -> String {
    format!(
        "default-src 'none'; img-src 'self' file:; script-src {}; style-src 'unsafe-inline'; \
         base-uri 'none'; form-action 'none'",
        csp_hash(script)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            html(r#""><img onerror='x'>&"#),
            "&quot;&gt;&lt;img onerror=&#39;x&#39;&gt;&amp;"
        );
    }

    #[test]
    fn json_block_cannot_close_the_script() {
        let v = serde_json::json!({"r": "</script><!--&"});
        let s = json_script(&v);
        assert!(!s.contains('<') && !s.contains('>') && !s.contains('&'));
        assert_eq!(serde_json::from_str::<serde_json::Value>(&s).unwrap(), v);
    }

    #[test]
    fn base64_of_known_inputs() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
    }
}
