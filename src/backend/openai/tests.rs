//! The OpenAI backend: endpoints, what a run records of them, answers turned into results.
use super::*;

#[test]
fn endpoints_end_in_the_api_root() {
    assert_eq!(
        normalize_endpoint("http://127.0.0.1:8000").unwrap(),
        "http://127.0.0.1:8000/v1"
    );
    assert_eq!(
        normalize_endpoint("http://h:1/v1/").unwrap(),
        "http://h:1/v1"
    );
    assert_eq!(
        normalize_endpoint("https://h/openai/v1").unwrap(),
        "https://h/openai/v1"
    );
    assert!(normalize_endpoint("h:8000").is_err());
    assert!(normalize_endpoint("http://").is_err());
}

#[test]
fn a_recorded_endpoint_keeps_no_credentials() {
    assert_eq!(
        public_endpoint("https://user:secret@h:1/v1?key=k"),
        "https://h:1/v1"
    );
    assert_eq!(public_endpoint("http://h/v1"), "http://h/v1");
    assert_eq!(public_endpoint("http://a@b@h"), "http://h");
}

#[test]
fn an_answer_becomes_a_result() {
    let v = serde_json::json!({"id": "x", "choices": [{"index": 0, "message": {"role": "assistant",
        "content": "hi"}, "finish_reason": "length"}], "usage": {"prompt_tokens": 7, "completion_tokens": 3,
        "total_tokens": 10}});
    let r = answer("u", v, vec![[28, 56]]).unwrap();
    assert_eq!(
        (
            r.text.as_str(),
            r.finish,
            r.prompt_tokens,
            r.generated_tokens
        ),
        ("hi", FinishReason::Length, 7, 3)
    );
    assert_eq!(r.image_sizes, vec![[28, 56]]);
    let none = serde_json::json!({"choices": []});
    assert!(answer("u", none, vec![]).unwrap_err().contains("no choice"));
    let null = serde_json::json!({"choices": [{"message": {"content": null}}]});
    assert_eq!(answer("u", null, vec![]).unwrap().text, "");
}
