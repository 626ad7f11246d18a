//! Parser cases: good outputs, each malformed kind, Chinese text, fences, no tags.
use mobile_r1_eval::action::{Action, ActionError, ActionType, Button, Status};
use mobile_r1_eval::parse::{parse_response, ParseFailure};

fn call(args: &str) -> String {
    format!("{{\"name\": \"mobile_use\", \"arguments\": {args}}}")
}

#[test]
fn full_mobile_r1_format_chinese() {
    let r = format!(
        "<think>当前在闲鱼首页，下一步点击搜索框。</think>\n<action>点击“搜索”框</action>\n<tool_call>\n{}\n</tool_call>",
        call(r#"{"action": "type", "text": "GTX 5090 显卡"}"#)
    );
    let p = parse_response(&r);
    assert_eq!(
        p.action,
        Ok(Action::Type {
            text: "GTX 5090 显卡".into()
        })
    );
    assert!(p.full_format);
    assert_eq!(
        p.think.as_deref(),
        Some("当前在闲鱼首页，下一步点击搜索框。")
    );
    assert_eq!(p.action_text.as_deref(), Some("点击“搜索”框"));
}

#[test]
fn whitespace_newlines_and_every_action() {
    let cases = [
        (r#"{"action": "key", "text": "volume_up"}"#, ActionType::Key),
        (
            r#"{"action": "click", "coordinate": [548, 1064]}"#,
            ActionType::Click,
        ),
        (
            r#"{"action": "long_press", "coordinate": [1, 2], "time": 2}"#,
            ActionType::LongPress,
        ),
        (
            r#"{"action": "swipe", "coordinate": [1, 2], "coordinate2": [3, 4]}"#,
            ActionType::Swipe,
        ),
        (r#"{"action": "type", "text": "x"}"#, ActionType::Type),
        (
            r#"{"action": "system_button", "button": "Enter"}"#,
            ActionType::SystemButton,
        ),
        (r#"{"action": "open", "text": "淘宝"}"#, ActionType::Open),
        (r#"{"action": "wait", "time": 1}"#, ActionType::Wait),
        (
            r#"{"action": "terminate", "status": "success"}"#,
            ActionType::Terminate,
        ),
    ];
    for (args, ty) in cases {
        let r = format!("  <think>\n x \n</think>\n\n<action> y </action>\n  <tool_call>\n\n {} \n\n</tool_call>\n", call(args));
        let p = parse_response(&r);
        assert_eq!(p.action.as_ref().map(Action::action_type), Ok(ty), "{r}");
        assert!(p.full_format);
        assert_eq!(p.think.as_deref(), Some("x"));
    }
}

#[test]
fn fences_and_case_variants() {
    let r = format!(
        "<tool_call>\n```json\n{}\n```\n</tool_call>",
        call(r#"{"action": "System_Button", "button": "BACK"}"#)
    );
    let p = parse_response(&r);
    assert_eq!(
        p.action,
        Ok(Action::SystemButton {
            button: Button::Back
        })
    );
    assert!(!p.full_format);
    let r = format!(
        "<tool_call>```{}```</tool_call>",
        call(r#"{"action": "Terminate", "status": "Failure"}"#)
    );
    assert_eq!(
        parse_response(&r).action,
        Ok(Action::Terminate {
            status: Status::Failure
        })
    );
}

#[test]
fn no_tags_bare_json_and_unclosed_tag() {
    let p = parse_response(&call(r#"{"action": "click", "coordinate": [10, 20]}"#));
    assert_eq!(
        p.action,
        Ok(Action::Click {
            coordinate: [10.0, 20.0]
        })
    );
    assert!(!p.full_format && p.think.is_none());
    let p = parse_response(&format!(
        "好的，我来点击。\n```json\n{}\n```",
        call(r#"{"action": "wait"}"#)
    ));
    assert_eq!(p.action, Ok(Action::Wait { time: None }));
    let p = parse_response(&format!(
        "<think>a</think><action>b</action><tool_call>{}",
        call(r#"{"action": "wait"}"#)
    ));
    assert!(p.action.is_ok());
    assert!(
        !p.full_format,
        "an unclosed tool_call is not the full format"
    );
    // Arguments given as a JSON string.
    let p = parse_response(
        r#"<tool_call>{"name": "mobile_use", "arguments": "{\"action\": \"open\", \"text\": \"美团\"}"}</tool_call>"#,
    );
    assert_eq!(
        p.action,
        Ok(Action::Open {
            text: "美团".into()
        })
    );
}

#[test]
fn tags_out_of_order_are_not_full_format() {
    let r = format!(
        "<action>b</action><think>a</think><tool_call>{}</tool_call>",
        call(r#"{"action": "wait"}"#)
    );
    let p = parse_response(&r);
    assert!(p.action.is_ok());
    assert!(!p.full_format);
}

#[test]
fn each_malformed_kind() {
    let kind = |r: &str| parse_response(r).action.unwrap_err().kind();
    assert_eq!(kind(""), "empty");
    assert_eq!(kind("<think>只思考，不行动</think>"), "no_tool_call");
    assert_eq!(kind("<tool_call></tool_call>"), "no_tool_call");
    assert_eq!(kind("<tool_call>{\"name\": \"mobile_use\", \"arguments\": {\"action\": \"click\", </tool_call>"), "invalid_json");
    assert_eq!(
        kind("<tool_call>click(100, 200)</tool_call>"),
        "invalid_json"
    );
    assert_eq!(
        kind(
            r#"<tool_call>{"name": "computer_use", "arguments": {"action": "click", "coordinate": [1, 2]}}</tool_call>"#
        ),
        "wrong_name"
    );
    assert_eq!(
        kind(r#"<tool_call>{"arguments": {"action": "click", "coordinate": [1, 2]}}</tool_call>"#),
        "wrong_name"
    );
    assert_eq!(
        kind(&format!(
            "<tool_call>{}</tool_call>",
            call(r#"{"action": "scroll", "direction": "up"}"#)
        )),
        "unknown_action"
    );
    assert_eq!(
        kind(&format!(
            "<tool_call>{}</tool_call>",
            call(r#"{"action": "click"}"#)
        )),
        "missing_argument"
    );
    assert_eq!(
        kind(&format!(
            "<tool_call>{}</tool_call>",
            call(r#"{"action": "click", "coordinate": [1]}"#)
        )),
        "bad_argument"
    );
    assert_eq!(
        kind(&format!(
            "<tool_call>{}</tool_call>",
            call(r#"{"action": "click", "coordinate": "[1, 2]"}"#)
        )),
        "bad_argument"
    );
    assert_eq!(
        kind(&format!(
            "<tool_call>{}</tool_call>",
            call(r#"{"action": "type", "text": 5}"#)
        )),
        "bad_argument"
    );
    assert_eq!(
        kind(&format!(
            "<tool_call>{}</tool_call>",
            call(r#"{"action": "system_button", "button": "Power"}"#)
        )),
        "bad_argument"
    );
    assert_eq!(
        kind(&format!(
            "<tool_call>{}</tool_call>",
            call(r#"{"action": "terminate", "status": "done"}"#)
        )),
        "bad_argument"
    );
    assert_eq!(kind("just some words"), "no_tool_call");
}

#[test]
fn failure_messages_name_the_argument() {
    let p = parse_response(&format!(
        "<tool_call>{}</tool_call>",
        call(r#"{"action": "swipe", "coordinate": [1, 2]}"#)
    ));
    match p.action {
        Err(ParseFailure::Action(ActionError::MissingArg { arg, .. })) => {
            assert_eq!(arg, "coordinate2")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn first_tool_call_wins() {
    let r = format!(
        "<tool_call>{}</tool_call><tool_call>{}</tool_call>",
        call(r#"{"action": "wait"}"#),
        call(r#"{"action": "open", "text": "x"}"#)
    );
    assert_eq!(parse_response(&r).action, Ok(Action::Wait { time: None }));
}

#[test]
fn every_truncation_is_handled_without_panic() {
    let full = format!(
        "<think>当前在“设置”页面 {{ 括号 }}</think><action>向上滑动</action><tool_call>\n```json\n{}\n```\n</tool_call>",
        call(r#"{"action": "swipe", "coordinate": [360, 1200], "coordinate2": [360, 500]}"#)
    );
    let boundaries: Vec<usize> = full.char_indices().map(|(i, _)| i).collect();
    for &cut in &boundaries {
        let p = parse_response(&full[..cut]);
        assert!(
            !p.full_format,
            "a truncated response is never the full format (cut at {cut})"
        );
        let _ = parse_response(&full[cut..]);
    }
    let p = parse_response(&full);
    assert!(p.full_format);
    assert_eq!(p.action.map(|a| a.action_type()), Ok(ActionType::Swipe));
}

#[test]
fn qwen3_thinking_answer_without_an_opening_think_tag() {
    // The generation prompt ends with `<think>\n`: the answer starts inside the thought.
    let r = format!(
        "屏幕上有搜索框，点击它。 {{\"action\": \"wait\"}}\n</think>\n\n<tool_call>\n{}\n</tool_call>",
        call(r#"{"action": "click", "coordinate": [500, 120]}"#)
    );
    let p = parse_response(&r);
    assert_eq!(
        p.action,
        Ok(Action::Click {
            coordinate: [500.0, 120.0]
        })
    );
    assert_eq!(
        p.think.as_deref(),
        Some("屏幕上有搜索框，点击它。 {\"action\": \"wait\"}")
    );
    // Without tags after the thought, the bare tool call after `</think>` is the answer, not JSON in the thought.
    let bare = format!(
        "想一想 {}</think>\n\n{}",
        call(r#"{"action": "wait"}"#),
        call(r#"{"action": "open", "text": "淘宝"}"#)
    );
    assert_eq!(
        parse_response(&bare).action,
        Ok(Action::Open {
            text: "淘宝".into()
        })
    );
    let mai = format!(
        "<thinking>\n打开应用\n</thinking>\n<tool_call>\n{}\n</tool_call>",
        call(r#"{"action": "AWAKE", "text": "微信"}"#)
    );
    let p = parse_response(&mai);
    assert_eq!(p.think.as_deref(), Some("打开应用"));
    assert_eq!(
        p.action,
        Ok(Action::Open {
            text: "微信".into()
        }),
        "AWAKE is open"
    );
}

#[test]
fn extended_action_spaces_are_read_and_named() {
    for (name, canonical) in [
        ("answer", "answer"),
        ("ask_user", "ask_user"),
        ("INFO", "ask_user"),
        ("mcp_call", "mcp_call"),
        ("drag", "drag"),
    ] {
        let r = format!(
            "<tool_call>{}</tool_call>",
            call(&format!(r#"{{"action": "{name}", "text": "x"}}"#))
        );
        let e = parse_response(&r).action.unwrap_err();
        assert_eq!(e.kind(), "unsupported_action", "{name}");
        assert_eq!(e.unsupported_action(), Some(canonical), "{name}");
        assert_eq!(e, ParseFailure::Action(ActionError::Unsupported(canonical)));
    }
    let e = parse_response(&format!(
        "<tool_call>{}</tool_call>",
        call(r#"{"action": "fly"}"#)
    ))
    .action
    .unwrap_err();
    assert_eq!((e.kind(), e.unsupported_action()), ("unknown_action", None));
    let fail = parse_response(&format!(
        "<tool_call>{}</tool_call>",
        call(r#"{"action": "terminate", "status": "fail"}"#)
    ));
    assert_eq!(
        fail.action,
        Ok(Action::Terminate {
            status: Status::Failure
        })
    );
}
