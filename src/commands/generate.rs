//! `generate`: one user turn (the image, then the text) rendered with the checkpoint's chat template and the
//! generation prompt, decoded greedily (no sampling, no repetition penalty) by the same engine as `eval`.

use anyhow::{Context, Result};
use serde_json::json;

use crate::backend::{Backend, ChatRequest, ChatResult, JobQueue, LoadedModel, LocalBackend};
use crate::chat::user_turn_messages;
use crate::cli::GenerateArgs;
use crate::settings::BatchLimits;

/// Number of `[token_id, logprob]` pairs reported per generated position with `--json`.
const TOP_LOGPROBS: usize = 5;

/// Entry point.
pub fn run(args: GenerateArgs) -> Result<()> {
    if args.model.device.len() > 1 {
        anyhow::bail!(
            "--device: generate runs on one device, not {}",
            args.model.device.len()
        );
    }
    let spec = super::model_spec(&args.model);
    let loaded = LoadedModel::load(&spec)?;
    let context = loaded.model.config().text.max_position_embeddings;
    crate::validate::new_tokens_fit_context(args.max_new_tokens, context)?;
    let limits = BatchLimits {
        max_seqs: 1,
        max_batch_tokens: usize::MAX,
        max_new_tokens: args.max_new_tokens.max(1),
    };
    let backend = LocalBackend::new(&spec.model, loaded, limits);
    let request = ChatRequest {
        messages: user_turn_messages(1, &args.prompt),
        images: vec![args.image.clone()],
        max_new_tokens: args.max_new_tokens,
        top_logprobs: if args.json { TOP_LOGPROBS } else { 0 },
        ignore_eos: args.ignore_eos,
    };
    let mut answer: Option<Result<ChatResult, String>> = None;
    backend.run(
        &JobQueue::ungrouped(1),
        &|_| Ok(request.clone()),
        &mut |_, outcome, _| {
            answer = Some(outcome);
            Ok(())
        },
    )?;
    let gen = answer
        .context("the engine returned no answer")?
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("preparing the prompt with image {}", args.image.display()))?;
    if args.json {
        println!("{}", json_report(&gen));
    } else {
        println!("{}", gen.text);
    }
    Ok(())
}

/// The `--json` object: the text, the generated ids (a stop token included, as transformers reports them), the
/// prompt length, why it stopped, and the top log-probabilities per position.
fn json_report(gen: &ChatResult) -> serde_json::Value {
    let ids: Vec<u32> = gen
        .token_ids
        .iter()
        .copied()
        .chain(gen.stop_token)
        .collect();
    let top: Vec<Vec<serde_json::Value>> = gen
        .top_logprobs
        .iter()
        .map(|row| row.iter().map(|&(id, lp)| json!([id, lp])).collect())
        .collect();
    json!({
        "text": gen.text,
        "token_ids": ids,
        "prompt_tokens": gen.prompt_tokens,
        "finish_reason": gen.finish,
        "top_logprobs": top,
    })
}
