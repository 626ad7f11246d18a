//! The evaluation program: every step of every trajectory as an independent prompt (phase 1), one aggregation
//! (judge) prompt per trajectory (phase 2), then the scorer. Both phases run through a
//! [`Backend`](crate::backend::Backend) and append each result as it finishes, so a killed run resumes without
//! losing or duplicating a step.

mod backends;
mod checks;
mod config;
mod dump;
pub mod history;
mod judge;
mod manifest;
mod phase;
pub mod progress;
pub mod prompts;
mod run;
mod screens;
mod semi_online;
mod steps;

pub use backends::load_devices;
pub(crate) use backends::step_backend;
pub(crate) use checks::{error_causes, step_errors};
pub use config::{EvalConfig, EvalOutcome, JudgeChoice, ServedConfig};
pub(crate) use dump::check_target as check_dump_target;
pub(crate) use judge::{pending_trajectories, JudgePhase};
pub use phase::{run_phase, run_phase_dumping, Phase};
pub use run::run_eval_with;
pub(crate) use semi_online::{Decide, SemiOnlineConfig, SemiOnlinePhase};
pub use steps::{pending_steps, prediction_line, StepJob, StepPhase};
