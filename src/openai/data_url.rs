//! `data:` URLs, the one way a picture reaches the server (it fetches nothing): `data:image/png;base64,…` or
//! `data:image/jpeg;base64,…` (RFC 2397 with base64).

use base64::Engine as _;

/// A decoded `data:` URL.
#[derive(Debug, Clone, PartialEq)]
pub struct DataUrl {
    /// The media type as written (`image/png`).
    pub media_type: String,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// Decode a base64 `data:` URL of a PNG or JPEG picture; the error says what is wrong, without echoing the data.
pub fn parse_data_url(url: &str) -> Result<DataUrl, String> {
    let Some(rest) = url.strip_prefix("data:") else {
        let scheme = url
            .split(':')
            .next()
            .unwrap_or("")
            .chars()
            .take(16)
            .collect::<String>();
        return Err(format!(
            "only `data:` URLs are accepted (the server fetches nothing), not a `{scheme}:` URL"
        ));
    };
    let Some((meta, payload)) = rest.split_once(',') else {
        return Err("a data URL needs a `,` before its data".into());
    };
    let mut fields = meta.split(';');
    let media_type = fields.next().unwrap_or("").trim().to_ascii_lowercase();
    if !fields.any(|f| f.trim().eq_ignore_ascii_case("base64")) {
        return Err("the data URL must be base64-encoded (`;base64,`)".into());
    }
    if !matches!(
        media_type.as_str(),
        "image/png" | "image/jpeg" | "image/jpg" | ""
    ) {
        return Err(format!(
            "unsupported media type `{media_type}`: send image/png or image/jpeg"
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload.trim())
        .map_err(|e| format!("bad base64 in the data URL: {e}"))?;
    if bytes.is_empty() {
        return Err("the data URL holds no data".into());
    }
    Ok(DataUrl { media_type, bytes })
}

/// `data:image/png;base64,…` of PNG bytes.
pub fn png_data_url(png: &[u8]) -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let url = png_data_url(&[1, 2, 3]);
        assert_eq!(
            parse_data_url(&url).unwrap(),
            DataUrl {
                media_type: "image/png".into(),
                bytes: vec![1, 2, 3]
            }
        );
        assert!(parse_data_url("https://example.com/a.png")
            .unwrap_err()
            .contains("`https:`"));
        assert!(parse_data_url("data:image/png;base64")
            .unwrap_err()
            .contains("`,`"));
        assert!(parse_data_url("data:image/png,abc")
            .unwrap_err()
            .contains("base64"));
        assert!(parse_data_url("data:image/gif;base64,AAAA")
            .unwrap_err()
            .contains("image/gif"));
        assert!(parse_data_url("data:image/png;base64,@@@")
            .unwrap_err()
            .contains("bad base64"));
        assert!(parse_data_url("data:image/png;base64,")
            .unwrap_err()
            .contains("no data"));
    }
}
