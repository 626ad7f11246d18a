//! Build script. The CPU build needs nothing; the `cuda` feature's kernels are compiled by candle's own build
//! machinery. This script records the git revision and the candle version for the run manifest.
fn main() {
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=MOBILE_R1_EVAL_GIT_REV={rev}");
    let candle = std::fs::read_to_string("Cargo.lock")
        .ok()
        .and_then(|lock| {
            let at = lock.find("name = \"candle-core\"\nversion = \"")?
                + "name = \"candle-core\"\nversion = \"".len();
            lock[at..].split('"').next().map(str::to_string)
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=MOBILE_R1_EVAL_CANDLE_VERSION={candle}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=Cargo.lock");
}
