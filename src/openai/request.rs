//! Reading a `POST /v1/chat/completions` body. Every field is checked by hand so that a refusal names the field
//! (`param`) and says what was expected; unknown fields are ignored (clients send extensions), and `null` counts as
//! absent, as in the official client.

use serde_json::{Map, Value};

use super::ApiError;

/// Most stop strings in one request (OpenAI's limit).
pub const MAX_STOP_STRINGS: usize = 4;
/// Most alternatives per position for `top_logprobs` (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `system` (also `developer`, OpenAI's newer name for it).
    System,
    /// `user`.
    User,
    /// `assistant`.
    Assistant,
}

impl Role {
    /// The role's name in the chat template.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// `{"type": "text", "text": …}`.
    Text(String),
    /// `{"type": "image_url", "image_url": {"url": …}}`: the URL as sent (a `data:` URL to be of use).
    Image(String),
}

/// A message's content.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// A plain string.
    Text(String),
    /// A list of parts.
    Parts(Vec<Part>),
}

/// One chat message.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    /// Who speaks.
    pub role: Role,
    /// What is said.
    pub content: Content,
}

/// A chat-completions request as the server uses it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatCompletionRequest {
    /// `model`, if given.
    pub model: Option<String>,
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// `max_completion_tokens`, else `max_tokens`.
    pub max_tokens: Option<usize>,
    /// `temperature` (0–2); absent or 0 is greedy.
    pub temperature: Option<f64>,
    /// `top_p` (0–1].
    pub top_p: Option<f64>,
    /// `stop` strings (at most [`MAX_STOP_STRINGS`], none empty).
    pub stop: Vec<String>,
    /// `seed` for sampling.
    pub seed: Option<u64>,
    /// `logprobs`: report the log-probability of each generated token.
    pub logprobs: bool,
    /// `top_logprobs`: alternatives per position (needs `logprobs`).
    pub top_logprobs: usize,
    /// `stream`: answer with server-sent events.
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the token counts.
    pub include_usage: bool,
    /// `ignore_eos` (a vLLM extension): generate exactly `max_tokens`.
    pub ignore_eos: bool,
}

impl ChatCompletionRequest {
    /// Bytes of text over all messages (what the tokeniser will read, less the chat template's own).
    pub(crate) fn text_bytes(&self) -> usize {
        self.messages
            .iter()
            .map(|m| match &m.content {
                Content::Text(t) => t.len(),
                Content::Parts(p) => p
                    .iter()
                    .map(|p| match p {
                        Part::Text(t) => t.len(),
                        Part::Image(_) => 0,
                    })
                    .sum(),
            })
            .sum()
    }

    /// Number of image parts over all messages.
    pub(crate) fn image_count(&self) -> usize {
        self.messages
            .iter()
            .map(|m| match &m.content {
                Content::Text(_) => 0,
                Content::Parts(p) => p.iter().filter(|p| matches!(p, Part::Image(_))).count(),
            })
            .sum()
    }
}

/// A JSON type's name for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong(param: &str, expected: &str, got: &Value) -> ApiError {
    ApiError::invalid(
        param,
        format!("`{param}` must be {expected}, not {}", kind(got)),
    )
}

/// The field `name` of `obj`, `null` counting as absent.
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn opt_bool(obj: &Map<String, Value>, name: &str) -> Result<bool, ApiError> {
    match field(obj, name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(wrong(name, "true or false", v)),
    }
}

fn opt_f64(
    obj: &Map<String, Value>,
    name: &str,
    lo: f64,
    hi: f64,
) -> Result<Option<f64>, ApiError> {
    let Some(v) = field(obj, name) else {
        return Ok(None);
    };
    let x = v.as_f64().ok_or_else(|| wrong(name, "a number", v))?;
    if !(lo..=hi).contains(&x) {
        return Err(ApiError::invalid(
            name,
            format!("`{name}` must be between {lo} and {hi}, not {x}"),
        ));
    }
    Ok(Some(x))
}

fn opt_count(obj: &Map<String, Value>, name: &str) -> Result<Option<u64>, ApiError> {
    match field(obj, name) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| wrong(name, "a non-negative integer", v)),
    }
}

/// Parse a request body; every refusal is a 400 naming the field.
pub fn parse_chat_request(body: &[u8]) -> Result<ChatCompletionRequest, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid("body", format!("the body is not valid JSON: {e}")))?;
    let Value::Object(obj) = &v else {
        return Err(wrong("body", "a JSON object", &v));
    };
    let model = match field(obj, "model") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(wrong("model", "a string", v)),
    };
    let messages = match field(obj, "messages") {
        None => return Err(ApiError::invalid("messages", "`messages` is required")),
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(ApiError::invalid(
                "messages",
                "`messages` must not be empty",
            ))
        }
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, m)| message(i, m))
            .collect::<Result<Vec<_>, _>>()?,
        Some(v) => return Err(wrong("messages", "an array", v)),
    };
    unsupported(obj)?;
    let max_tokens = match opt_count(obj, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => opt_count(obj, "max_tokens")?,
    };
    if max_tokens == Some(0) {
        return Err(ApiError::invalid(
            "max_tokens",
            "`max_tokens` must be at least 1",
        ));
    }
    let logprobs = opt_bool(obj, "logprobs")?;
    let top_logprobs = opt_count(obj, "top_logprobs")?;
    if let Some(n) = top_logprobs {
        if n as usize > MAX_TOP_LOGPROBS {
            return Err(ApiError::invalid(
                "top_logprobs",
                format!("`top_logprobs` must be between 0 and {MAX_TOP_LOGPROBS}, not {n}"),
            ));
        }
        if n > 0 && !logprobs {
            return Err(ApiError::invalid(
                "top_logprobs",
                "`top_logprobs` needs `logprobs` set to true",
            ));
        }
    }
    let top_p = opt_f64(obj, "top_p", 0.0, 1.0)?;
    if top_p == Some(0.0) {
        return Err(ApiError::invalid("top_p", "`top_p` must be above 0"));
    }
    Ok(ChatCompletionRequest {
        model,
        messages,
        max_tokens: max_tokens.map(|n| n.min(usize::MAX as u64) as usize),
        temperature: opt_f64(obj, "temperature", 0.0, 2.0)?,
        top_p,
        stop: stop_strings(obj)?,
        seed: seed(obj)?,
        logprobs,
        top_logprobs: top_logprobs.unwrap_or(0) as usize,
        stream: opt_bool(obj, "stream")?,
        include_usage: stream_options(obj)?,
        ignore_eos: opt_bool(obj, "ignore_eos")?,
    })
}

/// Features this server does not have: several choices, tools, structured output, penalties and logit biases.
/// Their neutral values are accepted (clients send them by default); anything else is refused naming the field,
/// never ignored.
fn unsupported(obj: &Map<String, Value>) -> Result<(), ApiError> {
    for name in ["presence_penalty", "frequency_penalty"] {
        if let Some(x) = opt_f64(obj, name, -2.0, 2.0)? {
            if x != 0.0 {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` is not supported: send 0 or leave it out"),
                ));
            }
        }
    }
    neutral_object(
        obj,
        "logit_bias",
        |m| m.is_empty(),
        "`logit_bias` is not supported: send {} or leave it out",
    )?;
    neutral_object(
        obj,
        "response_format",
        |m| m.get("type") == Some(&Value::from("text")),
        "only `response_format` {\"type\": \"text\"} is supported (no JSON mode or schema)",
    )?;
    match field(obj, "tool_choice") {
        None => {}
        Some(Value::String(s)) if s == "none" || s == "auto" => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "tool_choice",
                "only `tool_choice` \"none\" or \"auto\" is supported (this server calls no tools)",
            ))
        }
    }
    if let Some(n) = opt_count(obj, "n")? {
        if n != 1 {
            return Err(ApiError::invalid(
                "n",
                format!("only `n` = 1 is supported, not {n}"),
            ));
        }
    }
    for name in ["tools", "functions"] {
        match field(obj, name) {
            Some(Value::Array(a)) if !a.is_empty() => {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` are not supported"),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The object field `name`: absent or `neutral`, else refused with `refusal`.
fn neutral_object(
    obj: &Map<String, Value>,
    name: &str,
    neutral: impl Fn(&Map<String, Value>) -> bool,
    refusal: &str,
) -> Result<(), ApiError> {
    match field(obj, name) {
        None => Ok(()),
        Some(Value::Object(m)) if neutral(m) => Ok(()),
        Some(Value::Object(_)) => Err(ApiError::invalid(name, refusal)),
        Some(v) => Err(wrong(name, "an object", v)),
    }
}

fn seed(obj: &Map<String, Value>) -> Result<Option<u64>, ApiError> {
    match field(obj, "seed") {
        None => Ok(None),
        // Negative seeds are legal for OpenAI; their bits are as good a seed as any.
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_i64().map(|i| i as u64))
            .map(Some)
            .ok_or_else(|| wrong("seed", "an integer", v)),
    }
}

fn stream_options(obj: &Map<String, Value>) -> Result<bool, ApiError> {
    match field(obj, "stream_options") {
        None => Ok(false),
        Some(Value::Object(o)) => match field(o, "include_usage") {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(wrong("stream_options.include_usage", "true or false", v)),
        },
        Some(v) => Err(wrong("stream_options", "an object", v)),
    }
}

fn stop_strings(obj: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let list: Vec<String> = match field(obj, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| wrong(&format!("stop[{i}]"), "a string", s))
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(wrong("stop", "a string or an array of strings", v)),
    };
    if list.len() > MAX_STOP_STRINGS {
        return Err(ApiError::invalid(
            "stop",
            format!(
                "at most {MAX_STOP_STRINGS} stop strings, not {}",
                list.len()
            ),
        ));
    }
    if list.iter().any(String::is_empty) {
        return Err(ApiError::invalid("stop", "a stop string must not be empty"));
    }
    Ok(list)
}

fn message(i: usize, v: &Value) -> Result<ChatMessage, ApiError> {
    let at = format!("messages[{i}]");
    let Value::Object(m) = v else {
        return Err(wrong(&at, "an object", v));
    };
    let role = match field(m, "role") {
        Some(Value::String(r)) => match r.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(ApiError::invalid(
                    format!("{at}.role"),
                    format!(
                        "unknown role `{other}`: expected system, developer, user or assistant"
                    ),
                ))
            }
        },
        Some(v) => return Err(wrong(&format!("{at}.role"), "a string", v)),
        None => {
            return Err(ApiError::invalid(
                format!("{at}.role"),
                format!("`{at}.role` is required"),
            ))
        }
    };
    let content = match field(m, "content") {
        Some(Value::String(s)) => Content::Text(s.clone()),
        Some(Value::Array(parts)) => Content::Parts(
            parts
                .iter()
                .enumerate()
                .map(|(j, p)| part(&format!("{at}.content[{j}]"), p))
                .collect::<Result<_, _>>()?,
        ),
        Some(v) => {
            return Err(wrong(
                &format!("{at}.content"),
                "a string or an array of parts",
                v,
            ))
        }
        None => {
            return Err(ApiError::invalid(
                format!("{at}.content"),
                format!("`{at}.content` is required"),
            ))
        }
    };
    if role != Role::User
        && matches!(&content, Content::Parts(p) if p.iter().any(|p| matches!(p, Part::Image(_))))
    {
        return Err(ApiError::invalid(
            format!("{at}.content"),
            format!(
                "images are accepted in user messages only, not in a {} message",
                role.as_str()
            ),
        ));
    }
    Ok(ChatMessage { role, content })
}

fn part(at: &str, v: &Value) -> Result<Part, ApiError> {
    let Value::Object(p) = v else {
        return Err(wrong(at, "an object", v));
    };
    match field(p, "type") {
        Some(Value::String(t)) if t == "text" => match field(p, "text") {
            Some(Value::String(s)) => Ok(Part::Text(s.clone())),
            Some(v) => Err(wrong(&format!("{at}.text"), "a string", v)),
            None => Err(ApiError::invalid(
                format!("{at}.text"),
                format!("`{at}.text` is required"),
            )),
        },
        Some(Value::String(t)) if t == "image_url" => {
            let url = match field(p, "image_url") {
                Some(Value::Object(o)) => field(o, "url"),
                // Some clients send the URL itself.
                Some(s @ Value::String(_)) => Some(s),
                Some(v) => {
                    return Err(wrong(&format!("{at}.image_url"), "an object with `url`", v))
                }
                None => None,
            };
            match url {
                Some(Value::String(u)) => Ok(Part::Image(u.clone())),
                Some(v) => Err(wrong(&format!("{at}.image_url.url"), "a string", v)),
                None => Err(ApiError::invalid(
                    format!("{at}.image_url.url"),
                    format!("`{at}.image_url.url` is required"),
                )),
            }
        }
        Some(Value::String(t)) => Err(ApiError::invalid(
            format!("{at}.type"),
            format!("unsupported content part type `{t}`: expected text or image_url"),
        )),
        Some(v) => Err(wrong(&format!("{at}.type"), "a string", v)),
        None => Err(ApiError::invalid(
            format!("{at}.type"),
            format!("`{at}.type` is required"),
        )),
    }
}

#[cfg(test)]
mod tests;
