//! Errors in the protocol's shape: `{"error": {"message", "type", "param", "code"}}` with an HTTP status. The server
//! writes this nested form; a client also reads the flat form (`{"object": "error", "message", …}`) of older vLLM
//! servers, as openai-python does (`_client.py` takes `body.get("error", body)`).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A request the server refuses, or cannot answer: the status and the body's fields.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status} {kind}: {message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// `type`: `invalid_request_error`, `authentication_error`, `rate_limit_error`, `server_error`, …
    pub kind: &'static str,
    /// What went wrong, for a person.
    pub message: String,
    /// The request field at fault (`messages[1].content[0].image_url`), if one is.
    pub param: Option<String>,
    /// A short machine-readable reason (`context_length_exceeded`, `model_not_found`, …).
    pub code: Option<&'static str>,
}

impl ApiError {
    fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// 400: a malformed or unsupported request; `param` names the field.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", message).with_param(param)
    }

    /// 413: the body, or an image in it, is over a limit.
    pub(crate) fn too_large(param: Option<String>, message: impl Into<String>) -> Self {
        let mut e = Self::new(413, "invalid_request_error", message);
        e.param = param;
        e.code = Some("request_too_large");
        e
    }

    /// 401: a missing or wrong API key (the key itself is never echoed).
    pub(crate) fn unauthorized() -> Self {
        Self::new(
            401,
            "authentication_error",
            "missing or incorrect API key: send `Authorization: Bearer <key>`",
        )
        .with_code("invalid_api_key")
    }

    /// 404: a model this server does not serve, or an unknown path.
    pub fn not_found(message: impl Into<String>, code: &'static str) -> Self {
        Self::new(404, "invalid_request_error", message).with_code(code)
    }

    /// 429: the queue is full; the client should retry later.
    pub(crate) fn overloaded(message: impl Into<String>) -> Self {
        Self::new(429, "rate_limit_error", message).with_code("rate_limit_exceeded")
    }

    /// 500: the server failed while answering.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "server_error", message)
    }

    /// 503: the server is stopping or its engine is down.
    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "server_error", message).with_code("unavailable")
    }

    /// The same error naming the request field at fault.
    pub(crate) fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// The same error with a machine-readable `code`.
    pub(crate) fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The JSON body, nested under `error`.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

/// An error body as a client reads it (nested or flat); `code` may be a string or a number.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ErrorBody {
    /// What went wrong.
    #[serde(default)]
    pub message: String,
    /// The error's `type`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// The field at fault.
    #[serde(default)]
    pub param: Option<String>,
    /// The code, as JSON (a string for OpenAI, a number for some servers).
    #[serde(default)]
    pub code: Option<Value>,
}

/// The error of a response body: `{"error": {...}}`, `{"error": "text"}`, or the flat form; `None` when the body
/// is not JSON or holds no message.
pub(crate) fn parse_error_body(body: &[u8]) -> Option<ErrorBody> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let inner = match v.get("error") {
        Some(Value::String(s)) => {
            return Some(ErrorBody {
                message: s.clone(),
                ..ErrorBody::default()
            })
        }
        Some(e @ Value::Object(_)) => e.clone(),
        _ => v,
    };
    let e: ErrorBody = serde_json::from_value(inner).ok()?;
    (!e.message.is_empty()).then_some(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_writes_the_nested_form() {
        let e = ApiError::invalid("messages[0].role", "unknown role `tool`");
        assert_eq!(e.status, 400);
        assert_eq!(
            e.body(),
            json!({"error": {"message": "unknown role `tool`", "type": "invalid_request_error",
                "param": "messages[0].role", "code": null}})
        );
        let b = ApiError::overloaded("full").body();
        assert_eq!(b["error"]["code"], "rate_limit_exceeded");
        assert_eq!(ApiError::unauthorized().status, 401);
        assert_eq!(ApiError::too_large(None, "x").status, 413);
    }

    #[test]
    fn a_client_reads_nested_flat_and_string_errors() {
        let nested = br#"{"error": {"message": "too long", "type": "invalid_request_error", "param": null, "code": "context_length_exceeded"}}"#;
        let e = parse_error_body(nested).unwrap();
        assert_eq!(
            (e.message.as_str(), e.code),
            ("too long", Some(json!("context_length_exceeded")))
        );
        let flat = br#"{"object": "error", "message": "At most 1 image(s) may be provided in one request.", "type": "BadRequestError", "param": null, "code": 400}"#;
        let e = parse_error_body(flat).unwrap();
        assert_eq!(e.kind.as_deref(), Some("BadRequestError"));
        assert_eq!(e.code, Some(json!(400)));
        assert_eq!(
            parse_error_body(br#"{"error": "boom"}"#).unwrap().message,
            "boom"
        );
        assert!(parse_error_body(b"<html>502</html>").is_none());
        assert!(parse_error_body(b"{}").is_none());
    }
}
