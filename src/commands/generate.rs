//! `generate`: one user turn (the image, then the text) rendered with the checkpoint's chat template and the
//! generation prompt, decoded greedily (no sampling, no repetition penalty).

use anyhow::{Context, Result};
use serde_json::json;

use crate::cli::GenerateArgs;
use crate::engine::LoadedModel;
use crate::model::{FinishReason, GenerateOptions};

/// Number of `[token_id, logprob]` pairs reported per generated position with `--json`.
const TOP_LOGPROBS: usize = 5;

/// Entry point.
pub fn run(args: GenerateArgs) -> Result<()> {
    let LoadedModel {
        model,
        kit: builder,
        ..
    } = LoadedModel::load(&super::model_spec(&args.model))?;
    let input = builder
        .build_user_turn_from_files(&[args.image.as_path()], &args.prompt)
        .with_context(|| format!("preparing the prompt with image {}", args.image.display()))?;
    let mut eos = model.config().eos_token_ids.clone();
    if eos.is_empty() {
        eos = builder.tokenizer.stop_ids();
    }
    let opts = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        ignore_eos: args.ignore_eos,
        top_logprobs: if args.json { TOP_LOGPROBS } else { 0 },
        eos_token_ids: Some(eos),
    };
    let gen = model.generate(&[&input], &opts)?.remove(0);
    let text = builder.tokenizer.decode(&gen.token_ids, true)?;
    if args.json {
        let top: Vec<Vec<serde_json::Value>> = gen
            .top_logprobs
            .iter()
            .map(|row| row.iter().map(|&(id, lp)| json!([id, lp])).collect())
            .collect();
        let out = json!({
            "text": text,
            "token_ids": gen.token_ids,
            "prompt_tokens": gen.prompt_tokens,
            "finish_reason": match gen.finish { FinishReason::Eos => "eos", FinishReason::Length => "length" },
            "top_logprobs": top,
        });
        println!("{out}");
    } else {
        println!("{text}");
    }
    Ok(())
}
