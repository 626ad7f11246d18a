//! mobile-r1-eval: offline evaluation of Qwen2.5-VL and Qwen3-VL GUI agents on the Mobile-R1 benchmark.
//!
//! Layers, from the bottom (checked from the source by `tests/it/layers.rs`, which lists every module's layer):
//! * pure Rust (no candle): `dataset`, `import` (other benchmarks into a benchmark folder), `action`, `parse`,
//!   `score`, `report`, `predictions`, `records` (the serde types of every file a run writes), `settings`,
//!   `sample`; `preprocess` and `chat` turn screenshots and prompts into plain vectors;
//! * `ops`, `model`: the fused ops and Qwen2.5-VL on candle;
//! * `engine`: token-level requests in, greedy generations out, with continuous batching;
//! * `backend`: chat requests answered by a checkpoint (the engine), behind the `Backend` trait;
//! * `eval`: the evaluation program (phases, run folder, manifest) driving a backend; `bench` measures it;
//! * `openai` (the OpenAI chat-completions protocol, pure) and `serve` (the HTTP server over the engine); the
//!   client half is `backend::openai`;
//! * `cli` (the command line as data, the only module that knows clap) and `commands` (one entry per subcommand).
//!
//! The documentation is written for the project's developers and built with `--document-private-items`, where
//! links to crate-private items resolve (CI builds it with warnings as errors).

#![allow(rustdoc::private_intra_doc_links)]

pub mod action;
pub mod backend;
pub mod bench;
pub mod chat;
pub mod cli;
pub mod commands;
mod cpu_estimate;
pub mod dataset;
pub mod engine;
pub mod eval;
pub mod fingerprint;
mod hub;
mod import;
mod interrupt;
pub mod merge;
pub mod model;
pub mod openai;
pub mod ops;
mod pack;
pub mod parse;
pub mod predictions;
pub mod preprocess;
pub mod records;
pub mod report;
mod rescore;
mod retry;
pub mod rundir;
mod safe_io;
pub mod sample;
pub mod score;
mod serve;
pub mod settings;
pub mod shard;
mod validate;
