//! The integration tests, one module per area, in one test binary (one link of candle instead of one per file).
//! Shared helpers: `util` (running the binary) and the `*_support` modules of each area.

mod hub_support;
mod model_support;
mod openai_support;
mod reliability_support;
mod report_support;
mod scale_support;
mod semi_online_support;
mod util;

mod bench_cli;
mod chat_goldens;
mod data_import;
mod docs_flags;
mod eval_e2e;
mod foundation_cli;
mod foundation_dataset;
mod foundation_metrics;
mod foundation_parse;
mod foundation_rules;
mod generate_cli;
mod hub_data;
mod hub_download;
mod kernels_emulated;
mod layers;
mod model_golden_a;
mod model_golden_b;
mod model_golden_q3;
mod model_units;
mod multi_device;
mod openai_client;
mod openai_eval;
mod ops_blas;
mod ops_kernels;
mod pack;
mod preprocess_cases;
mod preprocess_goldens;
mod reliability;
mod reliability_inputs;
mod reliability_starts;
mod report_browser;
mod report_html;
mod rules_reference;
mod scale_out;
mod semi_online;
mod semi_online_scripted;
