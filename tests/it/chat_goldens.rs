//! Chat template rendering and tokenisation against transformers 5.24 goldens (`goldens/tokenizer.json`,
//! `goldens/tiny-a.json`, `goldens/tiny-b.json`): identical text and identical ids, including the image pad
//! expansion.

use std::path::{Path, PathBuf};

use mobile_r1_eval::chat::{ChatTemplate, PromptBuilder, Tokenizer};
use mobile_r1_eval::preprocess::{load_and_prepare, ImageProcessorConfig};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn json(rel: &str) -> Value {
    let p = fixtures().join(rel);
    let bytes =
        std::fs::read(&p).unwrap_or_else(|e| panic!("missing fixture {}: {e}", p.display()));
    serde_json::from_slice(&bytes).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_model_dir(&fixtures().join("tokenizer")).unwrap()
}

#[test]
fn encode_matches_transformers_including_cjk_and_specials() {
    let tok = tokenizer();
    let g = json("goldens/tokenizer.json");
    assert_eq!(
        tok.vocab_size(),
        g["len_tokenizer"].as_u64().unwrap() as usize
    );
    assert_eq!(
        (
            tok.image_pad_id(),
            tok.vision_start_id(),
            tok.vision_end_id(),
            tok.im_end_id()
        ),
        (151655, 151652, 151653, 151645)
    );
    for case in g["encode"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(tok.encode(text).unwrap(), ids(&case["ids"]), "{text:?}");
    }
}

#[test]
fn chinese_round_trip() {
    let tok = tokenizer();
    for text in [
        "请点击屏幕上的搜索按钮，然后输入“咖啡”。",
        "日本語のテキストと한국어 텍스트",
        "café 👍🏽",
    ] {
        assert_eq!(tok.decode(&tok.encode(text).unwrap(), false).unwrap(), text);
    }
    let with_special = tok.encode("<|im_start|>user\nhi<|im_end|>").unwrap();
    assert_eq!(tok.decode(&with_special, true).unwrap(), "user\nhi");
}

#[test]
fn chat_template_cases_render_and_encode_identically() {
    let tok = tokenizer();
    let t = ChatTemplate::from_model_dir(&fixtures().join("models/tiny-a")).unwrap();
    let g = json("goldens/tokenizer.json");
    let cases = g["chat_template"].as_object().unwrap();
    assert!(!cases.is_empty());
    for (name, case) in cases {
        let flag = |k: &str| name.split('|').any(|part| part == format!("{k}=True"));
        let extra = serde_json::json!({"add_vision_id": flag("add_vision_id")});
        let text = t
            .render_with(&case["messages"], flag("add_generation_prompt"), &extra)
            .unwrap();
        assert_eq!(text, case["text"].as_str().unwrap(), "{name}");
        assert_eq!(tok.encode(&text).unwrap(), ids(&case["ids"]), "{name}");
    }
}

#[test]
fn tiny_a_prompt_ids_with_expanded_pads() {
    let g = json("goldens/tiny-a.json");
    let b = PromptBuilder::from_model_dir(&fixtures().join("models/tiny-a")).unwrap();
    let img = load_and_prepare(&fixtures().join(g["image"].as_str().unwrap()), &b.image).unwrap();
    let input = b
        .build_user_turn(vec![img], g["text"].as_str().unwrap())
        .unwrap();
    assert_eq!(input.input_ids, ids(&g["input_ids"]));
    assert_eq!(
        b.template
            .render(
                &mobile_r1_eval::chat::user_turn_messages(1, "Describe this image."),
                true
            )
            .unwrap(),
        g["prompt"].as_str().unwrap()
    );
}

#[test]
fn tiny_b_three_prompts_ids_identical() {
    let g = json("goldens/tiny-b.json");
    let dir = fixtures().join("models/tiny-b");
    let b = PromptBuilder::from_model_dir(&dir).unwrap();
    let cfg = ImageProcessorConfig::from_model_dir(&dir).unwrap();
    let cases = g["cases"].as_object().unwrap();
    assert_eq!(cases.len(), 3);
    for (name, case) in cases {
        let img = load_and_prepare(
            &fixtures().join(case["image"].as_str().expect("image")),
            &cfg,
        )
        .unwrap();
        let text = case["text"].as_str().unwrap();
        let input = b.build_user_turn(vec![img], text).unwrap();
        assert_eq!(
            b.template
                .render(&mobile_r1_eval::chat::user_turn_messages(1, text), true)
                .unwrap(),
            case["prompt"].as_str().unwrap(),
            "{name}"
        );
        assert_eq!(input.input_ids, ids(&case["input_ids"]), "{name}");
    }
}

#[test]
fn placeholder_count_mismatch_is_an_error() {
    let tok = tokenizer();
    assert!(tok
        .encode_prompt("<|vision_start|><|image_pad|><|vision_end|>", &[])
        .is_err());
}
