//! Helpers shared by every area: the binary under test.

use std::process::Command;

/// The `mobile-r1-eval` binary built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_mobile-r1-eval");

/// A command running the binary under test.
pub fn bin() -> Command {
    Command::new(BIN)
}
