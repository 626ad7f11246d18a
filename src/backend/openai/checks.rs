//! What the client checks about a server before and while it sends prompts, so that a server preparing pictures
//! differently cannot make a run score coordinates in the wrong frame without a word:
//!
//! * at the start, the image settings a `serve` publishes in its model card (pixel bounds, patch and merge sizes,
//!   coordinate frame, context length) against the run's; a server that publishes none (vLLM, SGLang) is
//!   named in a warning saying what was not checked;
//! * with `--model DIR`, each answer's `usage.prompt_tokens` against the count the checkpoint's own tokenizer and
//!   chat template give for the same messages and picture sizes: the count moves with every image token, so
//!   another resize (or another template) shows.

use crate::chat::PromptBuilder;
use crate::openai::{ImageSettings, ModelCard};
use crate::preprocess::{ImageProcessorConfig, PreparedImage};
use crate::settings::{CoordinateFrame, ModelFamily};

/// Refuse a server whose published settings would change what the client sends: another patch grid, or pixel
/// bounds that do not contain the run's (the server would resize the pictures again, and points in image pixels
/// would be scored in the wrong frame), or a context shorter than the answers asked for. `Ok(Some(warning))` when
/// the server publishes nothing to check; when it would resize the pictures but the run reads points on a relative
/// grid (their scores do not depend on the picture's size); or when it names another frame than the family the
/// run prompts (`--model-family` overrides what a server says, so that is the user's call).
pub(crate) fn check_card(
    card: &ModelCard,
    endpoint: &str,
    run: &ImageProcessorConfig,
    family: ModelFamily,
    max_new_tokens: usize,
) -> Result<Option<String>, String> {
    let at = format!("the server at {endpoint} (model `{}`)", card.id);
    if let Some(len) = card
        .published
        .max_model_len
        .filter(|&n| n <= max_new_tokens)
    {
        return Err(format!(
            "{at} has a context of {len} tokens, not more than --max-new-tokens {max_new_tokens}: lower \
             --max-new-tokens"
        ));
    }
    let Some(im) = &card.image else {
        return Ok(Some(format!(
            "{at} does not publish its image settings: not checked that it leaves the pictures at their size \
             ({}–{} pixels, multiples of {}); give it these bounds (docs/openai.md), and pass --model DIR to \
             compare its prompt token counts with the checkpoint's",
            run.min_pixels,
            run.max_pixels,
            run.factor()
        )));
    };
    let frame = family.default_coordinate_frame();
    if let Some(m) = resized_again(&at, im, run) {
        return match frame {
            CoordinateFrame::ImagePixels => Err(format!(
                "{m}; the answers' points would be scored in the wrong frame"
            )),
            CoordinateFrame::Relative(_) => Ok(Some(format!(
                "{m}; the run reads points on a relative grid, so their scores do not depend on the picture's \
                 size, but the answers may differ from a local run's"
            ))),
        };
    }
    let frame = frame.to_string();
    Ok((im.coordinate_frame != frame).then(|| {
        format!(
            "{at} says its model answers points in the frame {}, the run prompts it as a {family} model and reads \
             them in {frame}: check --model-family",
            im.coordinate_frame
        )
    }))
}

/// How the server would change the pictures the run sends (another patch grid, or pixel bounds that do not
/// contain the run's), with the fix; `None` when it leaves them as they are.
fn resized_again(at: &str, im: &ImageSettings, run: &ImageProcessorConfig) -> Option<String> {
    if (im.patch_size, im.merge_size) != (run.patch_size, run.merge_size) {
        return Some(format!(
            "{at} cuts pictures into {}-pixel patches merged {}×{}, the run into {}-pixel patches merged {}×{}, \
             so it would resize them again (give eval --model the checkpoint folder of the served model)",
            im.patch_size, im.merge_size, im.merge_size, run.patch_size, run.merge_size, run.merge_size
        ));
    }
    if im.min_pixels > run.min_pixels || im.max_pixels < run.max_pixels {
        return Some(format!(
            "{at} resizes pictures to {}–{} pixels, the run sends pictures of {}–{} pixels, so it would resize \
             some again (run eval with --min-pixels {} --max-pixels {}, or start the server with --min-pixels {} \
             --max-pixels {})",
            im.min_pixels,
            im.max_pixels,
            run.min_pixels,
            run.max_pixels,
            run.min_pixels.max(im.min_pixels),
            run.max_pixels.min(im.max_pixels),
            run.min_pixels,
            run.max_pixels
        ));
    }
    None
}

/// Counts prompt tokens as the checkpoint of `--model DIR` would, to compare with a server's `usage`.
pub(crate) struct PromptCount {
    kit: PromptBuilder,
}

impl PromptCount {
    /// The tokenizer and chat template of the checkpoint folder `dir`, pictures prepared under `image`.
    pub fn new(dir: &std::path::Path, image: &ImageProcessorConfig) -> Result<Self, String> {
        let mut kit = PromptBuilder::from_model_dir(dir)
            .map_err(|e| format!("--model {}: {e}", dir.display()))?;
        kit.image = image.clone();
        Ok(Self { kit })
    }

    /// `Err` naming both counts when the server's `served` count differs from this checkpoint's for `messages`
    /// with pictures of the (already resized) sizes `sizes`; a server that reports no count (0) is not checked.
    pub fn check(
        &self,
        messages: &serde_json::Value,
        sizes: &[[u32; 2]],
        served: usize,
    ) -> Result<(), String> {
        if served == 0 {
            return Ok(());
        }
        let p = self.kit.image.patch_size as u32;
        let images = sizes
            .iter()
            .map(|&[w, h]| PreparedImage {
                patches: Vec::new(),
                grid_thw: [1, (h / p) as usize, (w / p) as usize],
                resized_wh: [w, h],
                original_wh: [w, h],
            })
            .collect();
        let own = self
            .kit
            .build(messages, images)
            .map_err(|e| format!("counting the prompt's tokens: {e}"))?
            .input_ids
            .len();
        if own == served {
            return Ok(());
        }
        Err(format!(
            "the server counted {served} prompt tokens where the checkpoint of --model counts {own} for the same \
             messages and {} picture(s) of {sizes:?} pixels: the server prepares prompts differently (other pixel \
             bounds, another chat template or another model), so its answers cannot be scored in the run's frame. \
             Serve the checkpoint with the run's pixel bounds, or give eval --model the served checkpoint's folder",
            sizes.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(image: Option<ImageSettings>) -> ModelCard {
        ModelCard {
            id: "m".into(),
            object: "model".into(),
            created: 0,
            published: crate::openai::PublishedModel {
                max_model_len: Some(4096),
                ..Default::default()
            },
            family: None,
            image,
        }
    }

    fn published(min: u64, max: u64, frame: &str) -> ImageSettings {
        ImageSettings {
            min_pixels: min,
            max_pixels: max,
            patch_size: 14,
            merge_size: 2,
            factor: 28,
            coordinate_frame: frame.into(),
        }
    }

    #[test]
    fn a_server_is_checked_against_the_run() {
        let run = ImageProcessorConfig::default().with_pixel_bounds(3136, 40_000);
        let q25 = ModelFamily::Qwen25Vl;
        let check = |c: &ModelCard, f| check_card(c, "http://h/v1", &run, f, 64);
        // Bounds that contain the run's: nothing to say.
        let wide = card(Some(published(3136, 1_003_520, "image-pixels")));
        assert_eq!(check(&wide, q25), Ok(None));
        // Smaller bounds: refused, with both fixes.
        let small = card(Some(published(3136, 20_000, "image-pixels")));
        let e = check(&small, q25).unwrap_err();
        assert!(
            e.contains("--max-pixels 20000") && e.contains("--max-pixels 40000"),
            "{e}"
        );
        // A Qwen3-VL run reads relative points: smaller bounds are a warning only.
        let q3 = |min, max| card(Some(published(min, max, "relative-999")));
        let w = check(&q3(3136, 20_000), ModelFamily::Qwen3Vl)
            .unwrap()
            .unwrap();
        assert!(
            w.contains("relative grid") && w.contains("--max-pixels 20000"),
            "{w}"
        );
        assert_eq!(check(&q3(3136, 1_003_520), ModelFamily::Qwen3Vl), Ok(None));
        // Another frame: a warning (the flag that chose the family wins).
        let w = check(&wide, ModelFamily::Qwen3Vl).unwrap().unwrap();
        assert!(
            w.contains("--model-family") && w.contains("relative-999"),
            "{w}"
        );
        // A context too short for the answers.
        let mut short = wide.clone();
        short.published.max_model_len = Some(64);
        assert!(check(&short, q25).unwrap_err().contains("--max-new-tokens"));
        // Nothing published: a warning.
        let w = check(&card(None), q25).unwrap().unwrap();
        assert!(
            w.contains("does not publish") && w.contains("3136–40000"),
            "{w}"
        );
    }

    #[test]
    fn prompt_counts_are_compared_with_the_checkpoint() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/models/tiny-b");
        let image = ImageProcessorConfig::from_model_dir(&dir).unwrap();
        let count = PromptCount::new(&dir, &image).unwrap();
        let messages = crate::chat::user_turn_messages(1, "tap the button");
        let sizes = [[56, 84]];
        let own = count.kit.build(
            &messages,
            vec![PreparedImage {
                patches: Vec::new(),
                grid_thw: [1, 6, 4],
                resized_wh: [56, 84],
                original_wh: [56, 84],
            }],
        );
        let own = own.unwrap().input_ids.len();
        assert_eq!(count.check(&messages, &sizes, own), Ok(()));
        assert_eq!(count.check(&messages, &sizes, 0), Ok(()));
        let e = count.check(&messages, &sizes, own - 3).unwrap_err();
        assert!(e.contains(&format!("counts {own}")), "{e}");
    }
}
