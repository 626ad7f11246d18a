//! `serve`: a checkpoint behind an OpenAI-compatible HTTP API.

use std::time::Duration;

use anyhow::{bail, Result};

use super::model_spec;
use crate::cli::ServeArgs;
use crate::serve::{ConnLimits, RequestLimits, ServeConfig};

/// `n`, refused when 0 (naming `flag`).
fn positive(flag: &str, n: usize) -> Result<usize> {
    if n == 0 {
        bail!("{flag} 0: must be at least 1");
    }
    Ok(n)
}

/// The command line as the server's settings, each value checked and each error naming its flag.
pub fn config(a: ServeArgs) -> Result<ServeConfig> {
    use crate::validate;
    validate::counts(a.max_new_tokens, a.batch_size, a.max_batch_tokens)?;
    validate::pixel_bounds(a.model.min_pixels, a.model.max_pixels, validate::PATCH_SIDE)?;
    validate::model_location("--model", &a.model.model)?;
    if a.model.device.len() > 1 {
        bail!(
            "--device: serve runs on one device, not {}",
            a.model.device.len()
        );
    }
    if a.max_body_bytes < 1024 {
        bail!(
            "--max-body-bytes {}: must be at least 1024",
            a.max_body_bytes
        );
    }
    let cfg = ServeConfig {
        model: model_spec(&a.model),
        served_name: a.served_model_name.unwrap_or_else(|| a.model.model.clone()),
        host: a.host,
        port: a.port,
        batch_size: a.batch_size,
        max_batch_tokens: a.max_batch_tokens,
        max_queue: a.max_queue,
        limits: RequestLimits {
            max_body_bytes: a.max_body_bytes,
            max_text_bytes: a.max_text_bytes,
            max_images: a.max_images,
            max_image_pixels: a.max_image_pixels,
            max_new_tokens: a.max_new_tokens,
            context_tokens: usize::MAX,
            longest_token_bytes: usize::MAX,
        },
        max_preparing: positive("--max-preparing", a.max_preparing)?,
        conn: ConnLimits {
            max_connections: positive("--max-connections", a.max_connections)?,
            header_timeout: Duration::from_secs_f64(a.header_timeout),
            keep_alive_timeout: Duration::from_secs_f64(a.keep_alive_timeout),
            body_timeout: Duration::from_secs_f64(a.body_timeout),
            shutdown_timeout: Duration::from_secs_f64(a.shutdown_timeout),
        },
        api_key: super::setup::api_key("--api-key-env", a.api_key_env.as_deref())?,
    };
    cfg.check()?;
    Ok(cfg)
}

/// Entry point of `serve`.
pub fn run(a: ServeArgs) -> Result<()> {
    crate::serve::run(config(a)?)
}
