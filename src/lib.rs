//! mobile-r1-eval: offline evaluation of Qwen2.5-VL GUI agents on the Mobile-R1 benchmark.
//!
//! Layers: `dataset`, `action`, `parse`, `score`, `report`, `predictions` and `sample` are pure Rust (no candle);
//! `preprocess` and `chat` turn screenshots and prompts into plain vectors; `model` and `engine` own candle.
//! `cli` is the only module that knows clap; `commands` holds one entry function per subcommand.

pub mod action;
pub mod bench;
pub mod chat;
pub mod cli;
pub mod commands;
pub mod cpu_estimate;
pub mod dataset;
pub mod engine;
pub mod eval_checks;
pub mod fingerprint;
pub mod interrupt;
pub mod model;
pub mod ops;
pub mod parse;
pub mod predictions;
pub mod preprocess;
pub mod report;
pub mod runlock;
pub mod safe_io;
pub mod sample;
pub mod score;
pub mod validate;
