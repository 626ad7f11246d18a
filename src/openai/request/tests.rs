//! A chat-completions body read field by field: full requests, the neutral values of features not served, nulls,
//! and a refusal naming each field.
use super::*;
use serde_json::json;

fn parse(v: Value) -> Result<ChatCompletionRequest, ApiError> {
    parse_chat_request(v.to_string().as_bytes())
}

fn param_of(v: Value) -> (u16, String) {
    let e = parse(v).unwrap_err();
    (e.status, e.param.unwrap_or_default())
}

#[test]
fn a_full_request_is_read() {
    let r = parse(json!({
        "model": "m", "max_tokens": 5, "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9,
        "stop": "\n", "seed": -3, "logprobs": true, "top_logprobs": 2, "stream": true,
        "stream_options": {"include_usage": true}, "user": "ignored", "n": 1,
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA==", "detail": "high"}}
            ]},
            {"role": "assistant", "content": "a cat"}
        ]
    }))
    .unwrap();
    assert_eq!(r.model.as_deref(), Some("m"));
    assert_eq!(r.max_tokens, Some(7));
    assert_eq!((r.temperature, r.top_p), (Some(0.5), Some(0.9)));
    assert_eq!(r.stop, vec!["\n".to_string()]);
    assert_eq!(r.seed, Some(-3i64 as u64));
    assert!(r.logprobs && r.stream && r.include_usage && !r.ignore_eos);
    assert_eq!(r.top_logprobs, 2);
    assert_eq!(r.messages[0].role, Role::System);
    assert_eq!(r.image_count(), 1);
    assert_eq!(
        r.messages[1].content,
        Content::Parts(vec![
            Part::Text("what is this?".into()),
            Part::Image("data:image/png;base64,AA==".into())
        ])
    );
}

#[test]
fn neutral_values_of_unsupported_features_are_accepted() {
    let r = parse(
        json!({"messages": [{"role": "user", "content": "hi"}], "presence_penalty": 0,
        "frequency_penalty": 0.0, "logit_bias": {}, "response_format": {"type": "text"},
        "tool_choice": "none", "tools": []}),
    );
    assert!(r.is_ok(), "{r:?}");
    let auto =
        parse(json!({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto"}));
    assert!(auto.is_ok(), "{auto:?}");
}

#[test]
fn nulls_are_absent() {
    let r = parse(
        json!({"messages": [{"role": "user", "content": "hi"}], "stop": null,
        "temperature": null, "max_tokens": null, "seed": null}),
    )
    .unwrap();
    assert_eq!((r.stop.len(), r.temperature, r.max_tokens), (0, None, None));
}

#[test]
fn each_refusal_names_its_field() {
    let user = json!({"role": "user", "content": "hi"});
    let cases = [
        (json!({"messages": []}), "messages"),
        (json!({"messages": "hi"}), "messages"),
        (json!({}), "messages"),
        (json!([1, 2]), "body"),
        (
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            "messages[0].role",
        ),
        (
            json!({"messages": [{"role": 3, "content": "x"}]}),
            "messages[0].role",
        ),
        (
            json!({"messages": [{"role": "user"}]}),
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}),
            "messages[0].content[0].type",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            "messages[0].content[0].text",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}),
            "messages[0].content[0].image_url.url",
        ),
        (
            json!({"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": "data:x"}]}]}),
            "messages[0].content",
        ),
        (
            json!({"messages": [user], "temperature": "hot"}),
            "temperature",
        ),
        (json!({"messages": [user], "temperature": 3}), "temperature"),
        (json!({"messages": [user], "top_p": 0}), "top_p"),
        (json!({"messages": [user], "max_tokens": -1}), "max_tokens"),
        (json!({"messages": [user], "max_tokens": 0}), "max_tokens"),
        (
            json!({"messages": [user], "stop": ["a", "b", "c", "d", "e"]}),
            "stop",
        ),
        (json!({"messages": [user], "stop": [""]}), "stop"),
        (json!({"messages": [user], "stop": [1]}), "stop[0]"),
        (
            json!({"messages": [user], "top_logprobs": 3}),
            "top_logprobs",
        ),
        (
            json!({"messages": [user], "logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
        ),
        (json!({"messages": [user], "n": 2}), "n"),
        (
            json!({"messages": [user], "tools": [{"type": "function"}]}),
            "tools",
        ),
        (json!({"messages": [user], "stream": "yes"}), "stream"),
        (json!({"messages": [user], "model": 1}), "model"),
        (json!({"messages": [user], "seed": 1.5}), "seed"),
        (
            json!({"messages": [user], "presence_penalty": 0.5}),
            "presence_penalty",
        ),
        (
            json!({"messages": [user], "frequency_penalty": -1}),
            "frequency_penalty",
        ),
        (
            json!({"messages": [user], "frequency_penalty": 3}),
            "frequency_penalty",
        ),
        (
            json!({"messages": [user], "logit_bias": {"50256": -100}}),
            "logit_bias",
        ),
        (json!({"messages": [user], "logit_bias": [1]}), "logit_bias"),
        (
            json!({"messages": [user], "response_format": {"type": "json_object"}}),
            "response_format",
        ),
        (
            json!({"messages": [user], "tool_choice": "required"}),
            "tool_choice",
        ),
        (
            json!({"messages": [user], "tool_choice": {"type": "function", "function": {"name": "f"}}}),
            "tool_choice",
        ),
    ];
    for (body, param) in cases {
        assert_eq!(param_of(body.clone()), (400, param.to_string()), "{body}");
    }
    let e = parse_chat_request(b"{\"messages\": [").unwrap_err();
    assert_eq!((e.status, e.param.as_deref()), (400, Some("body")));
    assert!(e.message.contains("not valid JSON"), "{}", e.message);
}
