//! Build script. The CPU build needs nothing; the `cuda` feature's own kernels are compiled by candle's
//! build machinery, so this script only records the git revision for the run manifest.
fn main() {
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=MOBILE_R1_EVAL_GIT_REV={rev}");
    println!("cargo:rerun-if-changed=.git/HEAD");
}
