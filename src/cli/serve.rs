//! The arguments of `serve` and of a served model (`eval --backend openai`).

use clap::Args;

use super::values::{model_family, seconds, whole};
use super::ModelArgs;

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The served checkpoint.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to bind. Loopback by default; any other address needs `--api-key-env`.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// Port to listen on (0: any free port; the address is printed on stdout).
    #[arg(long, default_value_t = 8000, value_parser = whole::<u16>, allow_negative_numbers = true)]
    pub port: u16,
    /// Most sequences decoded together.
    #[arg(long, default_value_t = 16, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub batch_size: usize,
    /// Token budget of one batch (prompt + generated tokens); automatic from free memory when absent. Also the
    /// longest prompt plus `max_tokens` a request may ask for.
    #[arg(long, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_batch_tokens: Option<usize>,
    /// Most tokens one request may generate, and the `max_tokens` of a request that gives none (less than the
    /// model's context, `max_position_embeddings`).
    #[arg(long, default_value_t = 1024, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_new_tokens: usize,
    /// Most requests waiting beyond the running batch; more are answered 429 with `Retry-After`.
    #[arg(long, default_value_t = 64, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_queue: usize,
    /// Name of the environment variable holding the API key clients must send (`Authorization: Bearer <key>`).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// The model id of `/v1/models` and of requests (default: `--model` as given).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Most bytes of a request body (413 beyond).
    #[arg(long, default_value_t = 16 << 20, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_body_bytes: usize,
    /// Most bytes of text over a request's messages (413 beyond), checked before anything is tokenised.
    #[arg(long, default_value_t = 1 << 20, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_text_bytes: usize,
    /// Most requests reading and preparing their body at once (the others hold their queue slot and wait).
    #[arg(long, default_value_t = 2, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_preparing: usize,
    /// Most open connections; more wait to be accepted.
    #[arg(long, default_value_t = 256, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_connections: usize,
    /// Seconds a client has to send a whole request head: from the accept on a new connection, from the head's
    /// first byte on a kept-alive one.
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    pub header_timeout: f64,
    /// Seconds a kept-alive connection may stay silent between requests before the server closes it.
    #[arg(long, default_value_t = 15.0, value_parser = seconds)]
    pub keep_alive_timeout: f64,
    /// Seconds a client has to send a whole request body, once the server reads it (408 beyond).
    #[arg(long, default_value_t = 60.0, value_parser = seconds)]
    pub body_timeout: f64,
    /// Seconds from Ctrl-C or SIGTERM to the exit: the requests in flight that are not answered by then get an
    /// error.
    #[arg(long, default_value_t = 60.0, value_parser = seconds)]
    pub shutdown_timeout: f64,
    /// Most pictures in one request.
    #[arg(long, default_value_t = 8, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_images: usize,
    /// Most pixels of one picture as sent (checked from its header before it is decoded).
    #[arg(long, default_value_t = 16_000_000, value_parser = whole::<u64>, allow_negative_numbers = true)]
    pub max_image_pixels: u64,
}

/// Where `eval` sends its prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendKind {
    /// The checkpoint of `--model`, run here.
    #[default]
    Local,
    /// An OpenAI-compatible server (`--endpoint`, `--api-model`).
    Openai,
}

/// `eval`'s flags for `--backend openai`.
#[derive(Debug, Args, Clone)]
pub struct ServedArgs {
    /// `local` (the checkpoint of `--model`, run here) or `openai` (an OpenAI-compatible server).
    #[arg(long, value_enum, default_value = "local")]
    pub backend: BackendKind,
    /// The server's base URL, e.g. `http://127.0.0.1:8000/v1` (`/v1` is added to a URL without a path).
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// The model id the server serves (as `GET /v1/models` lists it).
    #[arg(long, value_name = "NAME")]
    pub api_model: Option<String>,
    /// Name of the environment variable holding the server's API key.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Most requests in flight at once.
    #[arg(long, default_value_t = 8, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub concurrency: usize,
    /// Seconds one HTTP call may take before it is retried (more than 0).
    #[arg(long, value_name = "S", default_value_t = 600.0, value_parser = seconds, allow_negative_numbers = true)]
    pub request_timeout: f64,
    /// Retries of a request after a connection error, a timeout, a 408, 409 or a 5xx; then it is recorded as an
    /// error.
    #[arg(long, default_value_t = 5, value_parser = whole::<u32>, allow_negative_numbers = true)]
    pub max_retries: u32,
    /// Seconds one request may spend waiting out busy answers (HTTP 429, after each `Retry-After`) before it is
    /// recorded as an error; a 429 costs no retry.
    #[arg(long, value_name = "S", default_value_t = 600.0, value_parser = seconds, allow_negative_numbers = true)]
    pub busy_wait: f64,
    /// Connection failures in a row, over all requests, after which the server counts as gone and the run stops
    /// as on Ctrl-C, saying how to resume (0: never).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = whole::<usize>, allow_negative_numbers = true)]
    pub max_connection_failures: usize,
    /// The judge prompts' server (default: `--endpoint`).
    #[arg(long, value_name = "URL")]
    pub judge_endpoint: Option<String>,
    /// The judge's model id there (default: `--api-model`).
    #[arg(long, value_name = "NAME")]
    pub judge_api_model: Option<String>,
    /// The served model's family, for its system prompt and coordinate frame: `qwen2.5-vl` or `qwen3-vl`
    /// (default: the family the server's `/v1/models` names, as `serve` does, else qwen2.5-vl).
    #[arg(long, value_name = "FAMILY", value_parser = model_family)]
    pub model_family: Option<crate::settings::ModelFamily>,
}
