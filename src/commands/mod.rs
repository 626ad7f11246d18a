//! One entry function per subcommand; each takes the validated arguments from `cli`.
pub mod bench;
pub mod data;
pub mod eval;
pub mod generate;
pub mod sample;
pub mod score;
