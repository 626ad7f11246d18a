//! Checks of command-line values made before any work, each error naming the flag and the valid range, so a bad
//! value never reaches a run folder's manifest or turns every step into an error.

use std::path::Path;

/// The side of one merged vision patch of Qwen2.5-VL (`patch_size 14 · merge_size 2`): the smallest image the
/// model can see is one 28×28 patch, so a pixel bound must allow at least 784 pixels.
pub(crate) const PATCH_SIDE: u64 = 28;

/// A value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ValidateError {
    /// A flag's value is outside its valid range.
    #[error("{flag} {value}: {expected}")]
    Flag {
        /// The flag, e.g. `--max-pixels`.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What is valid.
        expected: String,
    },
    /// A prompt plus the generated tokens does not fit in `--max-batch-tokens`.
    #[error(
        "--max-batch-tokens {max_batch_tokens}: {prompt} has {prompt_tokens} prompt tokens, which with \
         --max-new-tokens {max_new_tokens} need {needed}; give --max-batch-tokens at least {needed}, or leave it out \
         to size batches from free memory"
    )]
    PromptTooLong {
        /// Which prompt (e.g. `trajectory 7 step 3`).
        prompt: String,
        /// Its length in tokens.
        prompt_tokens: usize,
        /// `--max-new-tokens`.
        max_new_tokens: usize,
        /// Prompt plus new tokens.
        needed: usize,
        /// `--max-batch-tokens`.
        max_batch_tokens: usize,
    },
}

fn flag(flag: &'static str, value: impl ToString, expected: impl Into<String>) -> ValidateError {
    ValidateError::Flag {
        flag,
        value: value.to_string(),
        expected: expected.into(),
    }
}

/// `--min-pixels` / `--max-pixels`: each at least 1, `--max-pixels` at least one `factor`×`factor` patch, and
/// min ≤ max. Either may be absent (the checkpoint's value applies); pass the checkpoint's values once known to
/// check the combination.
pub(crate) fn pixel_bounds(
    min: Option<u64>,
    max: Option<u64>,
    factor: u64,
) -> Result<(), ValidateError> {
    let patch = factor * factor;
    if let Some(m) = min.filter(|&m| m == 0) {
        return Err(flag("--min-pixels", m, "must be at least 1"));
    }
    if let Some(m) = max.filter(|&m| m < patch) {
        return Err(flag(
            "--max-pixels",
            m,
            format!("must be at least {patch} (one {factor}×{factor} patch, the smallest image the model sees)"),
        ));
    }
    if let (Some(lo), Some(hi)) = (min, max) {
        if lo > hi {
            return Err(flag(
                "--min-pixels",
                lo,
                format!("must not exceed --max-pixels ({hi})"),
            ));
        }
    }
    Ok(())
}

/// The pixel bounds in effect — the flags given, else the checkpoint's `preprocessor_config.json` values — must
/// still satisfy [`pixel_bounds`]; a conflict with a checkpoint value says so.
pub(crate) fn effective_pixel_bounds(
    given: (Option<u64>, Option<u64>),
    checkpoint: (u64, u64),
    factor: u64,
) -> Result<(u64, u64), ValidateError> {
    pixel_bounds(given.0, given.1, factor)?;
    let (min, max) = (
        given.0.unwrap_or(checkpoint.0),
        given.1.unwrap_or(checkpoint.1),
    );
    match given {
        (None, Some(hi)) if min > hi => Err(flag(
            "--max-pixels",
            hi,
            format!("is below the checkpoint's min_pixels ({min}, preprocessor_config.json); pass --min-pixels too"),
        )),
        (Some(lo), None) if lo > max => Err(flag(
            "--min-pixels",
            lo,
            format!("exceeds the checkpoint's max_pixels ({max}, preprocessor_config.json); pass --max-pixels too"),
        )),
        _ => Ok((min, max)),
    }
}

/// `--max-new-tokens` ≥ 1, `--batch-size` ≥ 1 and, when given, `--max-batch-tokens` ≥ `--max-new-tokens` + 1
/// (the shortest possible prompt; the real prompts are checked by [`prompt_fits`] once they are known).
pub fn counts(
    max_new_tokens: usize,
    batch_size: usize,
    max_batch_tokens: Option<usize>,
) -> Result<(), ValidateError> {
    if max_new_tokens == 0 {
        return Err(flag("--max-new-tokens", 0, "must be at least 1"));
    }
    if batch_size == 0 {
        return Err(flag("--batch-size", 0, "must be at least 1"));
    }
    if let Some(t) = max_batch_tokens.filter(|&t| t <= max_new_tokens) {
        return Err(flag(
            "--max-batch-tokens",
            t,
            format!(
                "must exceed --max-new-tokens ({max_new_tokens}) by at least the longest prompt's length; leave it \
                 out to size batches from free memory"
            ),
        ));
    }
    Ok(())
}

/// A prompt of `prompt_tokens` tokens plus `max_new_tokens` must fit in `max_batch_tokens`.
pub(crate) fn prompt_fits(
    prompt: &str,
    prompt_tokens: usize,
    max_new_tokens: usize,
    max_batch_tokens: usize,
) -> Result<(), ValidateError> {
    let needed = prompt_tokens + max_new_tokens;
    if needed <= max_batch_tokens {
        return Ok(());
    }
    Err(ValidateError::PromptTooLong {
        prompt: prompt.into(),
        prompt_tokens,
        max_new_tokens,
        needed,
        max_batch_tokens,
    })
}

/// `--max-new-tokens` against the model's context (`max_position_embeddings`): the context holds the prompt and the
/// generated tokens, so a value that leaves no room for even a one-token prompt can never be generated and is
/// refused. A prompt longer than what is left stops at the context (the engine caps it, finish `length`).
pub(crate) fn new_tokens_fit_context(
    max_new_tokens: usize,
    context_tokens: usize,
) -> Result<(), ValidateError> {
    if max_new_tokens < context_tokens {
        return Ok(());
    }
    Err(flag(
        "--max-new-tokens",
        max_new_tokens,
        format!(
            "exceeds the model's context of {context_tokens} tokens (max_position_embeddings in its config.json), \
             which holds the prompt as well; give at most {} (a prompt leaving less room stops at the context)",
            context_tokens.saturating_sub(1)
        ),
    ))
}

/// A model flag (`--model`, `--judge-model`): an existing folder, or something shaped like a hub repo id
/// (`org/name`). Whether the hub has it is checked when it is fetched.
pub(crate) fn model_location(flag_name: &'static str, spec: &str) -> Result<(), ValidateError> {
    let p = Path::new(spec);
    if p.is_dir() {
        return Ok(());
    }
    if p.exists() {
        return Err(flag(
            flag_name,
            spec,
            "is a file; expected a model folder or a hub repo id such as Qwen/Qwen2.5-VL-3B-Instruct",
        ));
    }
    let hub_like = spec.split('/').count() == 2
        && !spec.starts_with(['.', '/'])
        && spec.split('/').all(|s| !s.is_empty());
    if hub_like {
        Ok(())
    } else {
        Err(flag(
            flag_name,
            spec,
            "no such folder, and not a hub repo id (org/name, e.g. Qwen/Qwen2.5-VL-3B-Instruct)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_tokens_must_leave_room_for_a_prompt_in_the_context() {
        assert!(new_tokens_fit_context(32_767, 32_768).is_ok());
        let e = new_tokens_fit_context(99_999_999_999, 32_768)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "--max-new-tokens 99999999999: exceeds the model's context of 32768 tokens"
            ),
            "{e}"
        );
        assert!(e.contains("give at most 32767"), "{e}");
        assert!(new_tokens_fit_context(32_768, 32_768).is_err());
    }

    #[test]
    fn pixel_bounds_name_the_flag_and_the_range() {
        let e = pixel_bounds(None, Some(10), PATCH_SIDE)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--max-pixels 10: must be at least 784 (one 28×28 patch, the smallest image the model sees)"
        );
        let e = pixel_bounds(Some(0), None, PATCH_SIDE)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--min-pixels 0: must be at least 1"), "{e}");
        let e = pixel_bounds(Some(5000), Some(4000), PATCH_SIDE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("must not exceed --max-pixels (4000)"), "{e}");
        pixel_bounds(Some(784), Some(784), PATCH_SIDE).unwrap();
        pixel_bounds(None, None, PATCH_SIDE).unwrap();
    }

    #[test]
    fn a_conflict_with_the_checkpoint_names_its_value() {
        let ckpt = (3136, 12_845_056);
        let e = effective_pixel_bounds((None, Some(1000)), ckpt, PATCH_SIDE).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("--max-pixels 1000: is below the checkpoint's min_pixels (3136"));
        let e = effective_pixel_bounds((Some(20_000_000), None), ckpt, PATCH_SIDE).unwrap_err();
        assert!(e
            .to_string()
            .contains("exceeds the checkpoint's max_pixels (12845056"));
        assert_eq!(
            effective_pixel_bounds((None, Some(200_704)), ckpt, PATCH_SIDE).unwrap(),
            (3136, 200_704)
        );
    }

    #[test]
    fn counts_and_prompts() {
        assert!(counts(0, 1, None)
            .unwrap_err()
            .to_string()
            .starts_with("--max-new-tokens 0"));
        assert!(counts(8, 0, None)
            .unwrap_err()
            .to_string()
            .starts_with("--batch-size 0"));
        assert!(counts(8, 1, Some(8))
            .unwrap_err()
            .to_string()
            .starts_with("--max-batch-tokens 8"));
        counts(8, 1, Some(9)).unwrap();
        let e = prompt_fits("trajectory 3 step 1", 100, 8, 50)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("trajectory 3 step 1 has 100 prompt tokens"),
            "{e}"
        );
        assert!(e.contains("at least 108"), "{e}");
        prompt_fits("p", 42, 8, 50).unwrap();
    }

    #[test]
    fn model_flags() {
        let e = model_location("--judge-model", "/nope")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--judge-model /nope: no such folder"), "{e}");
        model_location("--judge-model", "Qwen/Qwen2.5-VL-3B-Instruct").unwrap();
    }
}
