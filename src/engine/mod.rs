//! The evaluation engine: every step of every trajectory as an independent prompt, packed into continuous
//! batches under a token budget (phase 1), one aggregation (judge) prompt per trajectory (phase 2), then the
//! scorer. Results are appended as they finish, so a killed run resumes without losing or duplicating a step.

pub mod batcher;
pub mod eval;
pub mod judge;
pub mod loaded;
pub mod memory;
pub mod pipeline;
pub mod prepare;
pub mod prompts;
pub mod rundir;
pub mod scheduler;
pub mod steps;

pub mod progress;

pub use eval::{run_eval, EvalConfig, EvalOutcome, JudgeChoice};
pub use loaded::{LoadedModel, ModelSpec};
