//! Chat templates rendered with minijinja under the settings transformers uses for Jinja chat templates
//! (`trim_blocks`, `lstrip_blocks`, no trailing newline kept, `raise_exception`, Python-style `tojson`).

use std::path::Path;

use minijinja::{Environment, Error, ErrorKind};
use serde_json::Value;

use super::{json, ChatError};

const NAME: &str = "chat_template";

/// An environment with transformers' chat-template settings.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.add_function("raise_exception", |msg: String| -> Result<(), Error> {
        Err(Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_filter("tojson", json::tojson);
    env
}

/// Renders a one-off template source with `context` (a JSON object), under the same engine settings as chat
/// templates. Used for the project's own prompt templates in `prompts/`.
pub fn render_str(source: &str, context: &Value) -> Result<String, ChatError> {
    Ok(environment().render_str(source, context)?)
}

/// A model's chat template, compiled once.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
}

impl ChatTemplate {
    /// Compiles a template source.
    pub(crate) fn from_source(source: impl Into<String>) -> Result<Self, ChatError> {
        let source = source.into();
        let mut env = environment();
        env.add_template_owned(NAME, source.clone())?;
        Ok(Self { env, source })
    }

    /// Loads the template of a model folder, looking in order at `chat_template.json` (`{"chat_template": …}`),
    /// `chat_template.jinja` (transformers 5), and the `chat_template` field of `tokenizer_config.json` (a string,
    /// or a list of `{name, template}` from which `default` is taken).
    pub fn from_model_dir(dir: &Path) -> Result<Self, ChatError> {
        let json_file = dir.join("chat_template.json");
        if json_file.is_file() {
            let v = read_json(&json_file)?;
            if let Some(s) = v.get("chat_template").and_then(Value::as_str) {
                return Self::from_source(s);
            }
        }
        let jinja = dir.join("chat_template.jinja");
        if jinja.is_file() {
            let s = std::fs::read_to_string(&jinja).map_err(|e| read_error(&jinja, e))?;
            return Self::from_source(s);
        }
        let cfg = dir.join("tokenizer_config.json");
        if cfg.is_file() {
            if let Some(s) = template_field(&read_json(&cfg)?) {
                return Self::from_source(s);
            }
        }
        Err(ChatError::NoTemplate(dir.display().to_string()))
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` (a JSON array of `{"role", "content"}` in the OpenAI/transformers shape; content is a
    /// string or a list of `{"type": "image"}` / `{"type": "text", "text": …}` parts), optionally ending with the
    /// assistant turn opener.
    pub fn render(
        &self,
        messages: &Value,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        self.render_with(messages, add_generation_prompt, &Value::Null)
    }

    /// Like [`render`](Self::render) with extra template variables (a JSON object, e.g.
    /// `{"add_vision_id": true}`); `messages` and `add_generation_prompt` take precedence.
    pub fn render_with(
        &self,
        messages: &Value,
        add_generation_prompt: bool,
        extra: &Value,
    ) -> Result<String, ChatError> {
        let mut ctx = match extra {
            Value::Object(m) => m.clone(),
            _ => serde_json::Map::new(),
        };
        ctx.insert("messages".into(), messages.clone());
        ctx.insert(
            "add_generation_prompt".into(),
            Value::Bool(add_generation_prompt),
        );
        Ok(self.env.get_template(NAME)?.render(Value::Object(ctx))?)
    }
}

fn template_field(cfg: &Value) -> Option<String> {
    match cfg.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template").and_then(Value::as_str))
            .map(str::to_string),
        _ => None,
    }
}

fn read_error(path: &Path, e: impl ToString) -> ChatError {
    ChatError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

fn read_json(path: &Path) -> Result<Value, ChatError> {
    let text = std::fs::read_to_string(path).map_err(|e| read_error(path, e))?;
    serde_json::from_str(&text).map_err(|e| read_error(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The Qwen2-VL / Qwen2.5-VL Instruct template (1,050 B as shipped in `chat_template.json`).
    const QWEN25VL: &str = "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

    #[test]
    fn qwen_single_image_prompt() {
        let t = ChatTemplate::from_source(QWEN25VL).unwrap();
        let msgs = json!([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this image."}]}]);
        assert_eq!(
            t.render(&msgs, true).unwrap(),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n<|im_start|>assistant\n"
        );
        let with_ids = t
            .render_with(&msgs, false, &json!({"add_vision_id": true}))
            .unwrap();
        assert!(with_ids.contains("Picture 1: <|vision_start|>"));
        assert!(!with_ids.ends_with("assistant\n"));
    }

    #[test]
    fn tojson_is_python_style() {
        let out = render_str(
            "{{ x | tojson }}|{{ x | tojson(indent=2) }}",
            &json!({"x": {"a": [1, "<b>"], "é": null}}),
        )
        .unwrap();
        assert_eq!(out, "{\"a\": [1, \"<b>\"], \"é\": null}|{\n  \"a\": [\n    1,\n    \"<b>\"\n  ],\n  \"é\": null\n}");
    }

    #[test]
    fn raise_exception_is_an_error() {
        assert!(render_str("{{ raise_exception('nope') }}", &json!({})).is_err());
    }

    #[test]
    fn trim_and_lstrip_blocks() {
        let out = render_str("a\n  {% if true %}\nb\n  {% endif %}\nc\n", &json!({})).unwrap();
        assert_eq!(out, "a\nb\nc");
    }
}
