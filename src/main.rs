//! `mobile-r1-eval` binary: parse the command line, run, map errors to an exit code.
fn main() -> std::process::ExitCode {
    mobile_r1_eval::cli::main()
}
