//! Qwen3-VL's chat template and tokenizer against transformers 5.24 goldens (`goldens/qwen3-chat-template.json`,
//! made with `qwen3-tiny-a`'s files): the special tokens' ids, and every rendering (with and without the
//! generation prompt, `enable_thinking`, `add_vision_id`, tools and tool calls, a `<think>` block in the history)
//! identical in text and in ids.

use mobile_r1_eval::chat::{ChatTemplate, Tokenizer};
use serde_json::Value;

use crate::model_support::{fixture, json_u64s};

fn goldens() -> Value {
    let p = fixture("goldens/qwen3-chat-template.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    json_u64s(v).into_iter().map(|x| x as u32).collect()
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_model_dir(&fixture("models/qwen3-tiny-a")).unwrap()
}

#[test]
fn qwen3_special_tokens_encode_as_transformers_does() {
    let (tok, g) = (tokenizer(), goldens());
    assert_eq!(
        tok.vocab_size(),
        g["len_tokenizer"].as_u64().unwrap() as usize
    );
    let cases = g["encode"].as_array().unwrap();
    assert!(cases.len() >= 12);
    for case in cases {
        let text = case["text"].as_str().unwrap();
        assert_eq!(tok.encode(text).unwrap(), ids(&case["ids"]), "{text:?}");
    }
}

#[test]
fn qwen3_chat_template_cases_render_and_encode_identically() {
    let (tok, g) = (tokenizer(), goldens());
    let t = ChatTemplate::from_model_dir(&fixture("models/qwen3-tiny-a")).unwrap();
    let cases = g["chat_template"].as_object().unwrap();
    assert_eq!(cases.len(), 20);
    for (name, case) in cases {
        // The template's variables: the keyword arguments transformers was given, and the tools when there are.
        let mut extra = case["kwargs"].as_object().unwrap().clone();
        let generation = extra
            .remove("add_generation_prompt")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        if !case["tools"].is_null() {
            extra.insert("tools".into(), case["tools"].clone());
        }
        let text = t
            .render_with(&case["messages"], generation, &Value::Object(extra))
            .unwrap();
        assert_eq!(text, case["text"].as_str().unwrap(), "{name}");
        assert_eq!(tok.encode(&text).unwrap(), ids(&case["ids"]), "{name}");
    }
}
