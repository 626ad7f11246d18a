//! A parsed chat request made into the engine's input, off the engine thread. The cheap refusals come first, before
//! anything costly is held: the counts, the text's length (over `--max-text-bytes`, or too long for the context by
//! a bound that cannot be wrong: a token of the vocabulary stands for at most its longest token's bytes), then each
//! picture's size and token count read from its header (PNG or JPEG only, nothing decoded yet), the pictures'
//! tokens plus that text bound checked against the context. Only then is each picture decoded (the decoder's
//! memory capped, so a decompression bomb is refused, not unpacked), smart-resized and patchified as the
//! checkpoint's image processor does, and the messages rendered with the chat template and tokenised, exactly as
//! `eval` builds its prompts.

use std::io::Cursor;

use image::{ImageFormat, ImageReader};

use crate::chat::PromptBuilder;
use crate::openai::{hf_messages, parse_data_url, ApiError, ChatCompletionRequest};
use crate::preprocess::{prepare_rgb8, ModelInput, PreparedImage};

/// How many times the tokenizer's normalisation (NFC) can shorten a text at most: three 3-byte Hangul jamo become
/// one 3-byte syllable; with a margin, so the text bound stays a bound.
const NORMALISATION_SHRINK: usize = 4;

/// What one request may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Most bytes of a request body (`--max-body-bytes`).
    pub max_body_bytes: usize,
    /// Most bytes of text over all messages (`--max-text-bytes`): bounds the tokeniser's work and memory.
    pub max_text_bytes: usize,
    /// Most pictures in one request (`--max-images`).
    pub max_images: usize,
    /// Most pixels of one picture as sent, before resizing (`--max-image-pixels`).
    pub max_image_pixels: u64,
    /// Most tokens one request may generate (`--max-new-tokens`): the default `max_tokens`.
    pub max_new_tokens: usize,
    /// Most prompt plus generated tokens of one request.
    pub context_tokens: usize,
    /// Most bytes one vocabulary token stands for (read from the tokenizer at load; `usize::MAX`, no bound, until
    /// then): a text of `n` bytes is at least `n / (this · 4)` tokens.
    pub longest_token_bytes: usize,
}

/// A request ready for the engine.
#[derive(Debug)]
pub(crate) struct PreparedPrompt {
    /// Token ids and pictures.
    pub input: ModelInput,
    /// Length of the shareable prefix (the system turn).
    pub prefix_len: usize,
    /// Tokens to generate at most.
    pub max_new_tokens: usize,
    /// Tokens of the prompt that stand for pictures.
    pub image_tokens: usize,
}

/// A picture whose header was read: its bytes, size and token count, not yet decoded.
struct Sized {
    bytes: Vec<u8>,
    wh: (u32, u32),
    tokens: usize,
}

/// Check the request's counts against the limits, before any work (the cheap refusals).
pub(crate) fn check_counts(
    req: &ChatCompletionRequest,
    limits: &RequestLimits,
) -> Result<usize, ApiError> {
    let images = req.image_count();
    if images > limits.max_images {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "{images} images in one request; this server takes at most {} (--max-images)",
                limits.max_images
            ),
        )
        .with_code("too_many_images"));
    }
    let max_new = req.max_tokens.unwrap_or(limits.max_new_tokens);
    if max_new > limits.max_new_tokens {
        return Err(ApiError::invalid(
            "max_tokens",
            format!(
                "`max_tokens` is {max_new}; this server generates at most {} tokens per request (--max-new-tokens)",
                limits.max_new_tokens
            ),
        ));
    }
    let text = req.text_bytes();
    if text > limits.max_text_bytes {
        return Err(ApiError::too_large(
            Some("messages".into()),
            format!(
                "the messages hold {text} bytes of text, over this server's limit of {} (--max-text-bytes)",
                limits.max_text_bytes
            ),
        ));
    }
    Ok(max_new)
}

/// The fewest tokens a text of `bytes` bytes can become.
fn text_token_floor(bytes: usize, limits: &RequestLimits) -> usize {
    bytes.div_ceil(
        limits
            .longest_token_bytes
            .saturating_mul(NORMALISATION_SHRINK)
            .max(1),
    )
}

/// The refusal of a request that needs `needed` tokens (`what` says of what) beyond the context.
fn over_context(limits: &RequestLimits, needed: usize, what: String) -> ApiError {
    ApiError::invalid(
        "messages",
        format!(
            "this model's maximum context length is {} tokens; the request needs {needed} ({what})",
            limits.context_tokens
        ),
    )
    .with_code("context_length_exceeded")
}

/// Decode, resize, render and tokenise a request (on a blocking thread), refusing what cannot fit first.
pub fn prepare(
    kit: &PromptBuilder,
    req: &ChatCompletionRequest,
    limits: &RequestLimits,
) -> Result<PreparedPrompt, ApiError> {
    let max_new_tokens = check_counts(req, limits)?;
    let (messages, urls) = hf_messages(req);
    let sized = urls
        .iter()
        .enumerate()
        .map(|(i, url)| sized_picture(kit, i, url, limits.max_image_pixels))
        .collect::<Result<Vec<_>, _>>()?;
    let image_tokens: usize = sized.iter().map(|s| s.tokens).sum();
    let floor = text_token_floor(req.text_bytes(), limits);
    if image_tokens + floor + max_new_tokens > limits.context_tokens {
        let what = format!(
            "{image_tokens} for the pictures, at least {floor} for the text, {max_new_tokens} to generate"
        );
        return Err(over_context(
            limits,
            image_tokens + floor + max_new_tokens,
            what,
        ));
    }
    let images = sized
        .into_iter()
        .enumerate()
        .map(|(i, s)| picture(kit, i, s))
        .collect::<Result<Vec<_>, _>>()?;
    let (input, prefix_len) = kit.build_with_prefix(&messages, images).map_err(|e| {
        ApiError::invalid(
            "messages",
            format!("the messages cannot be made into a prompt: {e}"),
        )
    })?;
    let prompt = input.input_ids.len();
    if prompt + max_new_tokens > limits.context_tokens {
        let what = format!("{prompt} in the messages, {max_new_tokens} to generate");
        return Err(over_context(limits, prompt + max_new_tokens, what));
    }
    Ok(PreparedPrompt {
        input,
        prefix_len,
        max_new_tokens,
        image_tokens,
    })
}

/// The refusal of picture `i`.
fn bad_picture(i: usize, msg: String) -> ApiError {
    ApiError::invalid("messages", format!("image {i} (counting from 0): {msg}"))
        .with_code("invalid_image")
}

/// Picture `i` of the request, its header read: PNG or JPEG, within the pixel limit, and its token count after
/// smart-resize.
fn sized_picture(
    kit: &PromptBuilder,
    i: usize,
    url: &str,
    max_pixels: u64,
) -> Result<Sized, ApiError> {
    let bad = |msg: String| bad_picture(i, msg);
    let bytes = parse_data_url(url).map_err(bad)?.bytes;
    let probe = ImageReader::new(Cursor::new(bytes.as_slice()))
        .with_guessed_format()
        .map_err(|e| bad(format!("cannot read the picture: {e}")))?;
    if !matches!(probe.format(), Some(ImageFormat::Png | ImageFormat::Jpeg)) {
        return Err(bad("not a PNG or JPEG picture".into()));
    }
    let (w, h) = probe
        .into_dimensions()
        .map_err(|e| bad(format!("cannot read the picture's size: {e}")))?;
    let pixels = w as u64 * h as u64;
    if pixels > max_pixels {
        return Err(bad(format!(
            "{w}x{h} is {pixels} pixels, over this server's limit of {max_pixels} (--max-image-pixels)"
        ))
        .with_code("image_too_large"));
    }
    let [rw, rh] = kit
        .image
        .resized_size([w, h])
        .map_err(|e| bad(e.to_string()))?;
    let factor = kit.image.factor() as u32;
    let tokens = (rw / factor) as usize * (rh / factor) as usize;
    Ok(Sized {
        bytes,
        wh: (w, h),
        tokens,
    })
}

/// Picture `i`, decoded and made ready for the vision tower.
fn picture(kit: &PromptBuilder, i: usize, s: Sized) -> Result<PreparedImage, ApiError> {
    let bad = |msg: String| bad_picture(i, msg);
    let mut decoder = ImageReader::new(Cursor::new(s.bytes.as_slice()))
        .with_guessed_format()
        .map_err(|e| bad(format!("cannot read the picture: {e}")))?;
    let (w, h) = s.wh;
    let mut caps = image::Limits::default();
    caps.max_image_width = Some(w);
    caps.max_image_height = Some(h);
    // 16-bit RGBA is the widest a PNG decodes to; a little more for the decoder's own buffers.
    caps.max_alloc = Some(w as u64 * h as u64 * 8 + (16 << 20));
    decoder.limits(caps);
    let rgb = decoder
        .decode()
        .map_err(|e| bad(format!("cannot decode the picture: {e}")))?
        .to_rgb8();
    prepare_rgb8(&rgb, &kit.image).map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::parse_chat_request;
    use serde_json::json;

    fn kit() -> PromptBuilder {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b");
        let mut k = PromptBuilder::from_model_dir(&dir).unwrap();
        k.image = k.image.clone().with_pixel_bounds(3136, 40_000);
        k
    }

    fn limits() -> RequestLimits {
        RequestLimits {
            max_body_bytes: 1 << 20,
            max_text_bytes: 4096,
            max_images: 2,
            max_image_pixels: 10_000,
            max_new_tokens: 16,
            context_tokens: 4096,
            longest_token_bytes: 128,
        }
    }

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 7]));
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    }

    fn request(url: &str, extra: serde_json::Value) -> ChatCompletionRequest {
        let mut body = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "hi"}]}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        parse_chat_request(body.to_string().as_bytes()).unwrap()
    }

    fn refusal(url: &str, extra: serde_json::Value) -> ApiError {
        prepare(&kit(), &request(url, extra), &limits()).unwrap_err()
    }

    #[test]
    fn a_picture_becomes_the_prompt_eval_builds() {
        let kit = kit();
        let bytes = png(60, 90);
        let req = request(
            &crate::openai::png_data_url(&bytes),
            json!({"max_tokens": 5}),
        );
        let got = prepare(&kit, &req, &limits()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.png");
        std::fs::write(&path, &bytes).unwrap();
        let image = crate::preprocess::load_and_prepare(&path, &kit.image).unwrap();
        let local = kit.build_user_turn(vec![image], "hi").unwrap();
        assert_eq!(got.input, local);
        assert_eq!(got.max_new_tokens, 5);
    }

    #[test]
    fn bad_pictures_and_counts_are_refused_with_reasons() {
        let png_url = crate::openai::png_data_url(&png(60, 90));
        let cases: Vec<(ApiError, u16, &str)> = vec![
            (
                refusal("data:image/png;base64,!!", json!({})),
                400,
                "bad base64",
            ),
            (
                refusal(
                    &crate::openai::png_data_url(b"hello, not a picture"),
                    json!({}),
                ),
                400,
                "not a PNG or JPEG",
            ),
            (
                refusal(&crate::openai::png_data_url(&png(200, 100)), json!({})),
                400,
                "over this server's limit",
            ),
            (
                refusal("https://example.com/x.png", json!({})),
                400,
                "only `data:` URLs",
            ),
            (
                refusal(&png_url, json!({"max_tokens": 17})),
                400,
                "at most 16 tokens",
            ),
        ];
        for (e, status, text) in cases {
            assert_eq!(e.status, status, "{e}");
            assert!(e.message.contains(text), "{} lacks {text}", e.message);
        }
        let mut truncated = png(60, 90);
        truncated.truncate(truncated.len() / 2);
        let e = refusal(&crate::openai::png_data_url(&truncated), json!({}));
        assert!(e.message.contains("cannot decode"), "{}", e.message);
        let three = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": png_url}},
            {"type": "image_url", "image_url": {"url": png_url}},
            {"type": "image_url", "image_url": {"url": png_url}}]}]});
        let req = parse_chat_request(three.to_string().as_bytes()).unwrap();
        assert_eq!(
            check_counts(&req, &limits()).unwrap_err().code,
            Some("too_many_images")
        );
        let mut tight = limits();
        tight.context_tokens = 20;
        let e = prepare(&kit(), &request(&png_url, json!({})), &tight).unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"));
    }

    #[test]
    fn text_too_long_is_refused_from_its_length() {
        let text = |n: usize| {
            let body = json!({"messages": [{"role": "user", "content": "ab".repeat(n / 2)}], "max_tokens": 4});
            parse_chat_request(body.to_string().as_bytes()).unwrap()
        };
        let e = prepare(&kit(), &text(5000), &limits()).unwrap_err();
        assert_eq!((e.status, e.code), (413, Some("request_too_large")));
        assert!(e.message.contains("--max-text-bytes"), "{}", e.message);
        // 4000 bytes are at least 4000 / (2 · 4) = 500 tokens when no token is longer than 2 bytes: over 100.
        let mut tight = limits();
        tight.context_tokens = 100;
        tight.longest_token_bytes = 2;
        let e = prepare(&kit(), &text(4000), &tight).unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"));
        assert!(
            e.message.contains("at least 500 for the text"),
            "{}",
            e.message
        );
        // With the real bound (128-byte tokens) the same text is tokenised and then found too long.
        tight.longest_token_bytes = 128;
        let e = prepare(&kit(), &text(4000), &tight).unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"));
        assert!(e.message.contains("in the messages"), "{}", e.message);
    }

    #[test]
    fn pictures_over_the_context_are_refused_from_their_headers_before_decoding() {
        // A PNG whose pixel data is cut off: decoding it would fail, so a context refusal proves it was not decoded.
        let mut cut = png(60, 90);
        cut.truncate(cut.len() / 2);
        let url = crate::openai::png_data_url(&cut);
        let mut tight = limits();
        // 60x90 becomes 56x84: 2 · 3 = 6 image tokens, plus 5 to generate, over 8.
        tight.context_tokens = 8;
        let e = prepare(&kit(), &request(&url, json!({"max_tokens": 5})), &tight).unwrap_err();
        assert_eq!(e.code, Some("context_length_exceeded"), "{}", e.message);
        assert!(e.message.contains("6 for the pictures"), "{}", e.message);
        let e = prepare(&kit(), &request(&url, json!({"max_tokens": 5})), &limits()).unwrap_err();
        assert!(e.message.contains("cannot decode"), "{}", e.message);
        let got = prepare(
            &kit(),
            &request(&crate::openai::png_data_url(&png(60, 90)), json!({})),
            &limits(),
        )
        .unwrap();
        assert_eq!(got.image_tokens, 6);
    }

    #[test]
    fn a_header_that_lies_about_a_huge_picture_is_refused_before_decoding() {
        // A PNG whose IHDR claims 100000 x 100000 pixels (a decompression bomb's shape).
        let mut bytes = png(4, 4);
        bytes[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        bytes[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        let e = refusal(&crate::openai::png_data_url(&bytes), json!({}));
        assert!(
            e.message.contains("limit") || e.message.contains("cannot"),
            "{}",
            e.message
        );
        assert_eq!(e.status, 400);
    }
}
