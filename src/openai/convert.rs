//! Between the protocol's messages and the program's own (the Hugging Face chat format the checkpoint's template
//! renders: string content, or parts `{"type": "text", "text"}` and `{"type": "image"}` whose pictures travel
//! beside the messages). Both directions keep the parts in order, so a prompt rendered by the server is the prompt
//! the local engine renders.

use serde_json::{json, Map, Value};

use super::{ChatCompletionRequest, Content, Part};

/// The request's messages in the Hugging Face format, and the URL of each image part in order.
pub(crate) fn hf_messages(req: &ChatCompletionRequest) -> (Value, Vec<&str>) {
    let mut urls = Vec::new();
    let messages = req
        .messages
        .iter()
        .map(|m| {
            let content = match &m.content {
                Content::Text(s) => Value::String(s.clone()),
                Content::Parts(parts) => Value::Array(
                    parts
                        .iter()
                        .map(|p| match p {
                            Part::Text(t) => json!({"type": "text", "text": t}),
                            Part::Image(url) => {
                                urls.push(url.as_str());
                                json!({"type": "image"})
                            }
                        })
                        .collect(),
                ),
            };
            json!({"role": m.role.as_str(), "content": content})
        })
        .collect();
    (Value::Array(messages), urls)
}

/// The generation settings of a request a client sends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClientParams<'a> {
    /// The served model's name.
    pub model: &'a str,
    /// `max_tokens`.
    pub max_tokens: usize,
    /// `temperature` (0: greedy).
    pub temperature: f64,
    /// `logprobs` with this many alternatives (`None`: no log-probabilities).
    pub top_logprobs: Option<usize>,
    /// `ignore_eos` (vLLM's extension, also `serve`'s).
    pub ignore_eos: bool,
}

/// A chat-completions body from messages in the Hugging Face format whose `{"type": "image"}` parts are filled,
/// in order, by `image_urls`; errors when the counts differ or a message is not an object with a role.
pub(crate) fn chat_body(
    messages: &Value,
    image_urls: &[String],
    params: &ClientParams<'_>,
) -> Result<Value, String> {
    let list = messages.as_array().ok_or("messages must be an array")?;
    let mut urls = image_urls.iter();
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("message {i} has no role"))?;
        let content = match m.get("content") {
            Some(Value::Array(parts)) => Value::Array(
                parts
                    .iter()
                    .map(|p| match p.get("type").and_then(Value::as_str) {
                        Some("image") => urls
                            .next()
                            .map(|u| json!({"type": "image_url", "image_url": {"url": u}}))
                            .ok_or_else(|| format!("message {i} has more image parts than images")),
                        _ => Ok(p.clone()),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Some(other) => other.clone(),
            None => Value::String(String::new()),
        };
        out.push(json!({"role": role, "content": content}));
    }
    if urls.next().is_some() {
        return Err(format!("{} images for fewer image parts", image_urls.len()));
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(params.model));
    body.insert("messages".into(), Value::Array(out));
    body.insert("max_tokens".into(), json!(params.max_tokens));
    body.insert("temperature".into(), json!(params.temperature));
    body.insert("stream".into(), json!(false));
    if let Some(k) = params.top_logprobs {
        body.insert("logprobs".into(), json!(true));
        body.insert("top_logprobs".into(), json!(k));
    }
    if params.ignore_eos {
        body.insert("ignore_eos".into(), json!(true));
    }
    Ok(Value::Object(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::parse_chat_request;

    #[test]
    fn a_step_prompt_survives_the_round_trip() {
        let hf = json!([
            {"role": "system", "content": "You are a phone agent."},
            {"role": "user", "content": [{"type": "text", "text": "Open the app"}, {"type": "image"}]},
        ]);
        let urls = vec!["data:image/png;base64,AAAA".to_string()];
        let params = ClientParams {
            model: "m",
            max_tokens: 9,
            temperature: 0.0,
            top_logprobs: None,
            ignore_eos: false,
        };
        let body = chat_body(&hf, &urls, &params).unwrap();
        assert_eq!(
            body["messages"][1]["content"][1]["image_url"]["url"],
            urls[0].as_str()
        );
        assert_eq!(
            (body["max_tokens"].as_u64(), body.get("logprobs")),
            (Some(9), None)
        );
        let req = parse_chat_request(body.to_string().as_bytes()).unwrap();
        let (back, got) = hf_messages(&req);
        assert_eq!(back, hf);
        assert_eq!(got, vec![urls[0].as_str()]);
    }

    #[test]
    fn image_counts_must_agree() {
        let hf = json!([{"role": "user", "content": [{"type": "image"}, {"type": "image"}]}]);
        let params = ClientParams {
            model: "m",
            max_tokens: 1,
            temperature: 0.0,
            top_logprobs: Some(2),
            ignore_eos: true,
        };
        assert!(chat_body(&hf, &["a".into()], &params).is_err());
        assert!(chat_body(&hf, &["a".into(), "b".into(), "c".into()], &params).is_err());
        let body = chat_body(&hf, &["a".into(), "b".into()], &params).unwrap();
        assert_eq!(
            (body["logprobs"].clone(), body["ignore_eos"].clone()),
            (json!(true), json!(true))
        );
    }
}
