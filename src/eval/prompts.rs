//! The project's prompt templates (`prompts/*.jinja`, embedded in the binary) and the chat messages built from
//! them: one step prompt per benchmark step, one aggregation (judge) prompt per trajectory.
//!
//! Templates are rendered with the same Jinja engine as the checkpoint's chat template (`crate::chat`), and their
//! SHA-256 goes into the run manifest.

use std::collections::BTreeMap;

use crate::fingerprint::sha256_hex;
use serde_json::{json, Value};

use crate::chat;
use crate::dataset::Trajectory;
use crate::parse::ParsedOutput;

/// The `mobile_use` system prompt (Qwen-Agent NousFnCallPrompt wrapper of the Qwen2.5-VL MobileUse tool).
/// Variables: `width`, `height` — the smart-resized screenshot size the model sees.
pub(crate) const SYSTEM_TEMPLATE: &str = include_str!("../../prompts/system_mobile_use.jinja");
/// Qwen3-VL's `mobile_use` system prompt, as its cookbook (`cookbooks/mobile_agent.ipynb`) gives it: the tool
/// description on a relative grid (no `key` or `open`; `answer` added) and a Thought / Action / tool-call response
/// format. Variables: `width`, `height` — the grid (`999`, `999` in the cookbook).
pub(crate) const SYSTEM_TEMPLATE_QWEN3: &str =
    include_str!("../../prompts/system_mobile_use_qwen3.jinja");
/// The step user turn (Qwen2.5-VL mobile-agent convention). Variables: `instruction`, `history` (the gold
/// `subtask` sentences of the previous steps).
pub(crate) const STEP_TEMPLATE: &str = include_str!("../../prompts/step_user.jinja");
/// The aggregation (judge) prompt. Variables: `app_name`, `instruction`, `steps` (thought, action_text,
/// tool_call per predicted step).
pub(crate) const JUDGE_TEMPLATE: &str = include_str!("../../prompts/judge.jinja");

use crate::settings::SystemPrompt;
use crate::settings::{CoordinateFrame, ModelFamily};

/// What the step prompts' system turn is made from: its source, the evaluated model's family (which picks the
/// default prompt) and the coordinate frame the prompt declares as the screen's resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptStyle {
    /// `--system-prompt`: the family's prompt, or the trajectory's own.
    pub source: SystemPrompt,
    /// The model family.
    pub family: ModelFamily,
    /// The frame the agent answers in.
    pub frame: CoordinateFrame,
}

impl From<SystemPrompt> for PromptStyle {
    /// The Qwen2.5-VL prompt in image pixels.
    fn from(source: SystemPrompt) -> Self {
        PromptStyle {
            source,
            family: ModelFamily::Qwen25Vl,
            frame: CoordinateFrame::ImagePixels,
        }
    }
}

impl PromptStyle {
    /// The family's default system template and its file name.
    fn template(self) -> (&'static str, &'static str) {
        match self.family {
            ModelFamily::Qwen25Vl => ("system_mobile_use.jinja", SYSTEM_TEMPLATE),
            ModelFamily::Qwen3Vl => ("system_mobile_use_qwen3.jinja", SYSTEM_TEMPLATE_QWEN3),
        }
    }

    /// The screen size the system prompt declares, and the frame points are written in for the model: the
    /// frame's grid, else the resized screenshot.
    pub(crate) fn declared_size(self, resized_wh: [u32; 2]) -> [u32; 2] {
        self.frame.extent(Some(resized_wh)).unwrap_or(resized_wh)
    }
}

/// The user turn of each later step of a `uis1-sop` conversation (the first step's is [`STEP_TEMPLATE`] with no
/// history). Variables: `step_instruction` (the step's own instruction, when the benchmark has one).
pub(crate) const STEP_TURN_TEMPLATE: &str = include_str!("../../prompts/step_turn.jinja");

/// SHA-256 (hex) of every embedded template, by file name, for the manifest.
pub(crate) fn template_hashes() -> BTreeMap<&'static str, String> {
    [
        ("system_mobile_use.jinja", SYSTEM_TEMPLATE),
        ("step_user.jinja", STEP_TEMPLATE),
        ("judge.jinja", JUDGE_TEMPLATE),
    ]
    .into_iter()
    .map(|(name, text)| (name, sha256_hex(text.as_bytes())))
    .collect()
}

/// SHA-256 of the family's own system template when it is not in [`template_hashes`] (so a Qwen2.5-VL run's
/// manifest does not change).
pub(crate) fn family_template_hashes(family: ModelFamily) -> BTreeMap<&'static str, String> {
    let (name, text) = PromptStyle::from(SystemPrompt::Default).template();
    let (own, own_text) = PromptStyle {
        family,
        ..SystemPrompt::Default.into()
    }
    .template();
    let mut out = BTreeMap::new();
    if own != name {
        debug_assert_ne!(own_text, text);
        out.insert(own, sha256_hex(own_text.as_bytes()));
    }
    out
}

/// SHA-256 of the templates the step prompts of `procedure` use beyond [`template_hashes`] (only those, so a
/// gold-history run's manifest does not change).
pub(crate) fn procedure_template_hashes(
    procedure: crate::records::Procedure,
) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    if procedure == crate::records::Procedure::Uis1Sop {
        out.insert("step_turn.jinja", sha256_hex(STEP_TURN_TEMPLATE.as_bytes()));
    }
    out
}

/// Chat messages for step `step` of `traj`: system prompt, then one user turn with the instruction, the golden
/// history (previous steps' `subtask`) and the screenshot, whose resized size is `resized_wh`.
pub(crate) fn step_messages(
    traj: &Trajectory,
    step: usize,
    resized_wh: [u32; 2],
    style: PromptStyle,
) -> Result<Value, chat::ChatError> {
    let history: Vec<&str> = traj.steps[..step]
        .iter()
        .map(|s| s.subtask.as_str())
        .collect();
    step_messages_with(traj, step, &history, resized_wh, style)
}

/// The system message of `traj`'s step prompts: the trajectory's own (`--system-prompt data`, when it has one)
/// or the family's `mobile_use` prompt declaring the frame's grid, or in image pixels the resized screenshot size
/// `resized_wh`.
pub(crate) fn system_text(
    traj: &Trajectory,
    resized_wh: [u32; 2],
    style: PromptStyle,
) -> Result<String, chat::ChatError> {
    match (style.source, &traj.system) {
        (SystemPrompt::Data, Some(s)) if !s.trim().is_empty() => Ok(s.clone()),
        _ => {
            let [width, height] = style.declared_size(resized_wh);
            let (_, template) = style.template();
            chat::render_str(template, &json!({"width": width, "height": height}))
        }
    }
}

/// The step user turn's text of step `step`: the instruction (with the step's own, when it has one) and
/// `history`, one entry per earlier step.
pub(crate) fn step_user_text(
    traj: &Trajectory,
    step: usize,
    history: &[&str],
) -> Result<String, chat::ChatError> {
    // A step's own (low-level) instruction follows the trajectory's, as GUIEvalKit's Qwen2.5-VL prompt for
    // AndroidControl-low does (xiaomi-research/guievalkit guieval/models/qwen2_5_vl.py, "Current step query").
    let instruction = match &traj.steps[step].instruction {
        Some(own) => format!("{} \nCurrent step query: {own}", traj.instruction),
        None => traj.instruction.clone(),
    };
    chat::render_str(
        STEP_TEMPLATE,
        &json!({"instruction": instruction, "history": history}),
    )
}

/// [`step_messages`] with the given `history` entries in place of the gold `subtask` sentences.
pub(crate) fn step_messages_with(
    traj: &Trajectory,
    step: usize,
    history: &[&str],
    resized_wh: [u32; 2],
    style: PromptStyle,
) -> Result<Value, chat::ChatError> {
    let system = system_text(traj, resized_wh, style)?;
    let user = step_user_text(traj, step, history)?;
    Ok(json!([
        {"role": "system", "content": system},
        {"role": "user", "content": [{"type": "text", "text": user}, {"type": "image"}]},
    ]))
}

/// Chat messages of the aggregation prompt of `traj`: the instruction, the predicted steps (thought, action
/// sentence, tool call) and the final screenshot; the judge answers with a JSON verdict.
pub(crate) fn judge_messages(
    traj: &Trajectory,
    predicted: &[&ParsedOutput],
) -> Result<Value, chat::ChatError> {
    let steps: Vec<Value> = predicted
        .iter()
        .map(|p| {
            let tool_call = match &p.action {
                Ok(a) => a.to_tool_call().to_string(),
                Err(e) => format!("(invalid: {e})"),
            };
            json!({"thought": p.think, "action_text": p.action_text, "tool_call": tool_call})
        })
        .collect();
    let text = chat::render_str(
        JUDGE_TEMPLATE,
        &json!({"app_name": traj.app_name, "instruction": traj.instruction, "steps": steps}),
    )?;
    Ok(json!([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]))
}

/// A judge's verdict parsed from its raw answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Verdict {
    /// Whether the judge said the trajectory accomplishes the task; `None` when the answer had no verdict.
    pub success: Option<bool>,
    /// The judge's reason, when given.
    pub reason: Option<String>,
}

/// Parse a judge answer: the first JSON object in it with a boolean-like `success` field (`true`/`false`,
/// `"yes"`/`"no"`, `"success"`/`"failure"`). Anything else is an unparseable verdict (`success: None`).
pub(crate) fn parse_verdict(answer: &str) -> Verdict {
    for (start, _) in answer.match_indices('{') {
        let mut stream = serde_json::Deserializer::from_str(&answer[start..]).into_iter::<Value>();
        let Some(Ok(Value::Object(obj))) = stream.next() else {
            continue;
        };
        let success = match obj.get("success") {
            Some(Value::Bool(b)) => Some(*b),
            Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "yes" | "success" => Some(true),
                "false" | "no" | "failure" => Some(false),
                _ => None,
            },
            _ => None,
        };
        if success.is_some() {
            let reason = obj
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_string);
            return Verdict { success, reason };
        }
    }
    Verdict {
        success: None,
        reason: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testing::step;

    #[test]
    fn verdicts_parse_from_noisy_answers() {
        let v = parse_verdict("Sure. {\"success\": true, \"reason\": \"done\"} bye");
        assert_eq!(
            v,
            Verdict {
                success: Some(true),
                reason: Some("done".into())
            }
        );
        assert_eq!(
            parse_verdict("```json\n{\"success\": \"No\"}\n```").success,
            Some(false)
        );
        assert_eq!(
            parse_verdict("{\"x\": 1} {\"success\": false}").success,
            Some(false)
        );
        assert_eq!(parse_verdict("I think it worked").success, None);
        assert_eq!(parse_verdict("{\"success\": \"maybe\"}").success, None);
    }

    fn trajectory(system: Option<&str>) -> Trajectory {
        let wait = |subtask| step(subtask, crate::action::Action::Wait { time: None });
        let steps = vec![wait("打开淘宝"), wait("点击搜索框"), wait("输入耳机")];
        Trajectory {
            system: system.map(str::to_string),
            ..crate::dataset::testing::trajectory("7", [1080, 2400], steps)
        }
    }

    #[test]
    fn step_prompt_holds_resized_size_golden_history_and_the_screenshot() {
        let m = step_messages(
            &trajectory(None),
            2,
            [644, 1428],
            SystemPrompt::Default.into(),
        )
        .unwrap();
        let system = m[0]["content"].as_str().unwrap();
        assert!(
            system.contains("The screen's resolution is 644x1428."),
            "{system}"
        );
        let user = m[1]["content"][0]["text"].as_str().unwrap();
        assert_eq!(
            user,
            "The user query:  搜索耳机 \nTask progress (You have done the following operation on the current device): \
             Step 1: 打开淘宝; Step 2: 点击搜索框; "
        );
        assert_eq!(m[1]["content"][1]["type"], "image");
        let mut low = trajectory(None);
        low.steps[2].instruction = Some("输入耳机".into());
        let m = step_messages(&low, 2, [644, 1428], SystemPrompt::Default.into()).unwrap();
        assert!(m[1]["content"][0]["text"].as_str().unwrap().starts_with(
            "The user query:  搜索耳机 \nCurrent step query: 输入耳机 \nTask progress"
        ));
        let first = step_messages(
            &trajectory(None),
            0,
            [644, 1428],
            SystemPrompt::Default.into(),
        )
        .unwrap();
        assert!(first[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .ends_with("current device): "));
    }

    #[test]
    fn data_system_prompt_uses_the_trajectory_field_else_the_default() {
        let own = step_messages(
            &trajectory(Some("你是手机助手。")),
            0,
            [644, 1428],
            SystemPrompt::Data.into(),
        )
        .unwrap();
        assert_eq!(own[0]["content"], "你是手机助手。");
        let none =
            step_messages(&trajectory(None), 0, [644, 1428], SystemPrompt::Data.into()).unwrap();
        assert!(none[0]["content"].as_str().unwrap().contains("mobile_use"));
    }

    #[test]
    fn template_hashes_cover_every_template() {
        let h = template_hashes();
        assert_eq!(h.len(), 3);
        assert!(h.values().all(|v| v.len() == 64));
        assert!(family_template_hashes(ModelFamily::Qwen25Vl).is_empty());
        let own = family_template_hashes(ModelFamily::Qwen3Vl);
        assert_eq!(
            own.keys().copied().collect::<Vec<_>>(),
            ["system_mobile_use_qwen3.jinja"]
        );
    }

    #[test]
    fn qwen3_system_prompt_is_the_cookbook_prompt_on_the_frame_grid() {
        let style = PromptStyle {
            source: SystemPrompt::Default,
            family: ModelFamily::Qwen3Vl,
            frame: ModelFamily::Qwen3Vl.default_coordinate_frame(),
        };
        let m = step_messages(&trajectory(None), 1, [644, 1428], style).unwrap();
        let system = m[0]["content"].as_str().unwrap();
        // No default "You are a helpful assistant." line: the tools block opens the turn, as in the cookbook.
        assert!(
            system.starts_with("\n\n# Tools\n\nYou may call one or more functions"),
            "{system:?}"
        );
        assert!(
            system.contains(r"* The screen's resolution is 999x999.\n* Make sure"),
            "{system}"
        );
        assert!(!system.contains("644x1428"), "{system}");
        let tools = system
            .split("<tools>\n")
            .nth(1)
            .and_then(|t| t.split("\n</tools>").next())
            .unwrap();
        let tool: Value = serde_json::from_str(tools).expect("the tool block is JSON");
        let actions = &tool["function"]["parameters"]["properties"]["action"]["enum"];
        assert_eq!(
            actions,
            &json!([
                "click",
                "long_press",
                "swipe",
                "type",
                "answer",
                "system_button",
                "wait",
                "terminate"
            ])
        );
        assert!(system.ends_with("- If finishing, use action=terminate in the tool call."));
        // Another grid is declared as such; image pixels declare the resized screenshot.
        let thousand = PromptStyle {
            frame: CoordinateFrame::Relative(1000),
            ..style
        };
        let text = system_text(&trajectory(None), [644, 1428], thousand).unwrap();
        assert!(text.contains("resolution is 1000x1000."), "{text}");
        let pixels = PromptStyle {
            frame: CoordinateFrame::ImagePixels,
            ..style
        };
        let text = system_text(&trajectory(None), [644, 1428], pixels).unwrap();
        assert!(text.contains("resolution is 644x1428."), "{text}");
        // The benchmark's own system prompt still wins with --system-prompt data.
        let data = PromptStyle {
            source: SystemPrompt::Data,
            ..style
        };
        let own = system_text(&trajectory(Some("你是手机助手。")), [644, 1428], data).unwrap();
        assert_eq!(own, "你是手机助手。");
    }
}
