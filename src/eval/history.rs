//! The step prompts of a semi-online run: the model's own earlier outputs in place of the gold history, laid out
//! as each published procedure does (the screenshots stay the recorded ones).
//!
//! * `uis1-sop` (UI-S1, `X-PLUG/MobileAgent`: `UI-S1/x/data/agent/json.py` `gen_next_round`, and
//!   `UI-S1/x/qwen/data_format.py` `slim_messages`): one conversation per trajectory. Each step adds a user
//!   turn (text, then its screenshot), and each earlier step's reply comes back verbatim as an assistant turn;
//!   only the most recent screenshots keep their image (two), older user turns keep their text. The first
//!   user turn is this project's step prompt with an empty history (so step 0 is the gold-history prompt), the
//!   later ones `prompts/step_turn.jinja`.
//! * `guievalkit` (GUIEvalKit, `xiaomi-research/guievalkit`: `guieval/models/qwen2_5_vl.py`
//!   `model_2_contents`, `build_user_message`, `prepare_task_input`): one user turn, the project's step prompt
//!   with `Step k: <entry>;` per earlier step and only the current screenshot. An entry is the model's own tool
//!   call (the text inside `<tool_call>`) where that step was right, else the gold action as the tool call
//!   `{"name": "mobile_use", "arguments": {…}}` written as Python's `json.dumps` writes it (`", "` and `": "`
//!   separators, non-ASCII as `\uXXXX`), its points in the pixels of the current screenshot as the model sees it
//!   (on the run's relative grid when the agent answers on one).

use serde_json::{json, Value};

use super::prompts::{step_user_text, system_text, PromptStyle, STEP_TURN_TEMPLATE};
use crate::action::{Action, Point};
use crate::chat::{self, ChatError};
use crate::dataset::Trajectory;
use crate::records::Procedure;

/// What the history keeps of one earlier step of a trajectory.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OwnStep {
    /// The model's raw reply.
    pub response: String,
    /// Whether the step was right (under the run's rules).
    pub correct: bool,
    /// The tool-call text the reply's action was parsed from, when it had one.
    pub tool_call: Option<String>,
}

/// The chat messages of step `step` of `traj` under `procedure`, with `own` the model's outputs of the steps
/// before it (`own.len() == step`), and the indices of the steps whose screenshots fill the image slots, in order.
pub(crate) fn semi_online_messages(
    procedure: Procedure,
    traj: &Trajectory,
    step: usize,
    own: &[OwnStep],
    resized_wh: [u32; 2],
    style: PromptStyle,
) -> Result<(Value, Vec<usize>), ChatError> {
    debug_assert_eq!(own.len(), step);
    match procedure {
        Procedure::Uis1Sop => {
            let messages = conversation(traj, step, own, resized_wh, style, procedure.images())?;
            let first_image = (step + 1).saturating_sub(procedure.images());
            Ok((messages, (first_image..=step).collect()))
        }
        Procedure::GuiEvalKit => {
            let seen = style.declared_size(resized_wh);
            let entries: Vec<String> = own
                .iter()
                .zip(&traj.steps)
                .map(|(o, gold)| history_entry(o, gold, traj, seen))
                .collect();
            let refs: Vec<&str> = entries.iter().map(String::as_str).collect();
            let messages =
                super::prompts::step_messages_with(traj, step, &refs, resized_wh, style)?;
            Ok((messages, vec![step]))
        }
    }
}

/// A `uis1-sop` conversation: the system turn, then per step a user turn (its screenshot only when among the
/// last `images`) and, before the current step, the model's reply.
fn conversation(
    traj: &Trajectory,
    step: usize,
    own: &[OwnStep],
    resized_wh: [u32; 2],
    style: PromptStyle,
    images: usize,
) -> Result<Value, ChatError> {
    let first_image = (step + 1).saturating_sub(images);
    let mut messages =
        vec![json!({"role": "system", "content": system_text(traj, resized_wh, style)?})];
    for k in 0..=step {
        let text = if k == 0 {
            step_user_text(traj, 0, &[])?
        } else {
            // A step's own (low-level) instruction, when the benchmark has one, as the step prompt shows it.
            let own = traj.steps[k].instruction.as_deref();
            chat::render_str(STEP_TURN_TEMPLATE, &json!({"step_instruction": own}))?
        };
        let mut content = vec![json!({"type": "text", "text": text})];
        if k >= first_image {
            content.push(json!({"type": "image"}));
        }
        messages.push(json!({"role": "user", "content": content}));
        if let Some(reply) = own.get(k).filter(|_| k < step) {
            messages.push(json!({"role": "assistant", "content": reply.response}));
        }
    }
    Ok(Value::Array(messages))
}

/// A `guievalkit` history entry: the model's own tool call where the step was right, else the gold action with
/// its points in `seen`, the frame the model answers in (the resized screenshot, or the relative grid).
fn history_entry(
    own: &OwnStep,
    gold: &crate::dataset::Step,
    traj: &Trajectory,
    seen: [u32; 2],
) -> String {
    match (&own.tool_call, own.correct) {
        (Some(text), true) => text.clone(),
        _ => {
            let screen = [traj.image_width, traj.image_height];
            python_json(&in_model_frame(&gold.action, screen, seen).to_tool_call())
        }
    }
}

/// `action` with its points moved from screen pixels to the pixels of a `seen` (`[w, h]`) picture of the
/// screen, rounded to whole pixels.
pub(crate) fn in_model_frame(action: &Action, screen: [u32; 2], seen: [u32; 2]) -> Action {
    let map = |p: &Point| -> Point {
        let scale = |v: f64, from: u32, to: u32| {
            if from == 0 {
                v
            } else {
                (v * to as f64 / from as f64).round()
            }
        };
        [
            scale(p[0], screen[0], seen[0]),
            scale(p[1], screen[1], seen[1]),
        ]
    };
    match action {
        Action::Click { coordinate } => Action::Click {
            coordinate: map(coordinate),
        },
        Action::LongPress { coordinate, time } => Action::LongPress {
            coordinate: map(coordinate),
            time: *time,
        },
        Action::Swipe {
            coordinate,
            coordinate2,
        } => Action::Swipe {
            coordinate: map(coordinate),
            coordinate2: map(coordinate2),
        },
        other => other.clone(),
    }
}

/// A JSON value as Python's `json.dumps` writes it by default: `", "` and `": "` separators and every non-ASCII
/// character escaped as `\uXXXX` (UTF-16 surrogate pairs above U+FFFF).
pub(crate) fn python_json(v: &Value) -> String {
    let mut out = String::new();
    write_python(v, &mut out);
    out
}

fn write_python(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            out.push('{');
            for (i, (k, v)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python_str(k, out);
                out.push_str(": ");
                write_python(v, out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python(v, out);
            }
            out.push(']');
        }
        Value::String(s) => write_python_str(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn write_python_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;
    use crate::dataset::testing::step;
    use crate::settings::SystemPrompt;

    fn trajectory() -> Trajectory {
        crate::dataset::testing::trajectory(
            "7",
            [1000, 2000],
            vec![
                step(
                    "打开淘宝",
                    Action::Click {
                        coordinate: [500.0, 1000.0],
                    },
                ),
                step(
                    "输入耳机",
                    Action::Type {
                        text: "耳机".into(),
                    },
                ),
                step("返回", Action::Wait { time: None }),
            ],
        )
    }

    fn own(response: &str, correct: bool, tool_call: Option<&str>) -> OwnStep {
        OwnStep {
            response: response.into(),
            correct,
            tool_call: tool_call.map(str::to_string),
        }
    }

    #[test]
    fn python_json_matches_json_dumps() {
        let v = serde_json::json!({"name": "mobile_use", "arguments": {"action": "type", "text": "耳机 \"x\"\n😀"}});
        assert_eq!(
            python_json(&v),
            r#"{"name": "mobile_use", "arguments": {"action": "type", "text": "\u8033\u673a \"x\"\n\ud83d\ude00"}}"#
        );
        assert_eq!(
            python_json(&serde_json::json!([1, 2.5, null, true])),
            "[1, 2.5, null, true]"
        );
    }

    #[test]
    fn uis1_sop_is_a_conversation_with_the_replies_and_the_last_two_screenshots() {
        let t = trajectory();
        let history = [
            own("<tool_call>A</tool_call>", true, Some("A")),
            own("B", true, None),
        ];
        let (m, images) = semi_online_messages(
            Procedure::Uis1Sop,
            &t,
            2,
            &history,
            [500, 1000],
            SystemPrompt::Default.into(),
        )
        .unwrap();
        assert_eq!(images, vec![1, 2]);
        let roles: Vec<&str> = m
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "user", "assistant", "user"]
        );
        assert_eq!(m[2]["content"], "<tool_call>A</tool_call>");
        assert_eq!(m[4]["content"], "B");
        // The first user turn lost its screenshot, kept its text; the later two have theirs.
        assert_eq!(m[1]["content"].as_array().unwrap().len(), 1);
        assert!(m[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("搜索耳机"));
        assert_eq!(m[3]["content"][1]["type"], "image");
        assert_eq!(m[5]["content"][1]["type"], "image");
        // A step's own instruction, when the benchmark has one, is in its turn.
        let mut low = trajectory();
        low.steps[1].instruction = Some("点击搜索框".into());
        let (m, _) = semi_online_messages(
            Procedure::Uis1Sop,
            &low,
            1,
            &history[..1],
            [500, 1000],
            SystemPrompt::Default.into(),
        )
        .unwrap();
        let turn = m[3]["content"][0]["text"].as_str().unwrap();
        assert!(
            turn.ends_with(" \nCurrent step query: 点击搜索框"),
            "{turn:?}"
        );
        // Step 0 is the gold-history prompt of step 0.
        let (first, images) = semi_online_messages(
            Procedure::Uis1Sop,
            &t,
            0,
            &[],
            [500, 1000],
            SystemPrompt::Default.into(),
        )
        .unwrap();
        assert_eq!(images, vec![0]);
        let gold =
            super::super::prompts::step_messages(&t, 0, [500, 1000], SystemPrompt::Default.into())
                .unwrap();
        assert_eq!(first, gold);
    }

    #[test]
    fn guievalkit_keeps_right_tool_calls_and_puts_the_gold_action_after_a_wrong_step() {
        let t = trajectory();
        let history = [
            own("junk", false, Some("{\"bad\": 1}")),
            own(
                "<tool_call>{\"name\":\"mobile_use\"}</tool_call>",
                true,
                Some("{\"name\":\"mobile_use\"}"),
            ),
        ];
        let (m, images) = semi_online_messages(
            Procedure::GuiEvalKit,
            &t,
            2,
            &history,
            [500, 1000],
            SystemPrompt::Default.into(),
        )
        .unwrap();
        assert_eq!(images, vec![2]);
        let user = m[1]["content"][0]["text"].as_str().unwrap();
        assert!(
            user.ends_with(
                "Step 1: {\"name\": \"mobile_use\", \"arguments\": {\"action\": \"click\", \"coordinate\": [250, 500]}}; \
                 Step 2: {\"name\":\"mobile_use\"}; "
            ),
            "{user}"
        );
        // An agent answering on a relative grid sees the gold point on that grid.
        let grid = PromptStyle {
            frame: crate::settings::CoordinateFrame::Relative(100),
            ..SystemPrompt::Default.into()
        };
        let (m, _) = semi_online_messages(
            Procedure::GuiEvalKit,
            &t,
            1,
            &history[..1],
            [500, 1000],
            grid,
        )
        .unwrap();
        let user = m[1]["content"][0]["text"].as_str().unwrap();
        assert!(user.contains("\"coordinate\": [50, 50]}}; "), "{user}");
        assert!(m[0]["content"]
            .as_str()
            .unwrap()
            .contains("resolution is 100x100."));
    }
}
