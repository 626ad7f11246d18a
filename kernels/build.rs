//! Build script: records the git revision and the candle version for the run manifest and, with the `cuda`
//! feature, compiles the project's own kernels (`kernels/*.cu`) with nvcc (`$NVCC`, else `$CUDA_HOME/bin/nvcc`,
//! else `nvcc` on the PATH) into a fatbin holding machine code for `sm_$CUDA_COMPUTE_CAP` and PTX for
//! `compute_$CUDA_COMPUTE_CAP`, which the driver compiles for other (newer) GPUs. When `CUDA_COMPUTE_CAP` is unset,
//! the first GPU's compute capability from `nvidia-smi` is used (as candle's own build does), else 80. The CPU
//! build needs no CUDA at all.
fn main() {
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        compile_fatbin("fused");
    }
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

fn compile_fatbin(name: &str) {
    let src = format!("kernels/{name}.cu");
    println!("cargo:rerun-if-changed={src}");
    for var in ["NVCC", "CUDA_HOME", "CUDA_COMPUTE_CAP"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| match std::env::var("CUDA_HOME") {
        Ok(home) => format!("{home}/bin/nvcc"),
        Err(_) => "nvcc".to_string(),
    });
    let cap = std::env::var("CUDA_COMPUTE_CAP")
        .ok()
        .or_else(nvidia_smi_compute_cap)
        .unwrap_or_else(|| "80".to_string());
    let cap = cap.trim().trim_end_matches(['a', 'f']).replace('.', "");
    let out = format!(
        "{}/{name}.fatbin",
        std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")
    );
    let status = std::process::Command::new(&nvcc)
        .args([
            "--fatbin",
            "-O3",
            "-std=c++17",
            "-gencode",
            &format!("arch=compute_{cap},code=sm_{cap}"),
            "-gencode",
            &format!("arch=compute_{cap},code=compute_{cap}"),
            &src,
            "-o",
            &out,
        ])
        .status()
        .unwrap_or_else(|e| {
            panic!("the `cuda` feature needs nvcc to compile {src}: running `{nvcc}`: {e}")
        });
    assert!(
        status.success(),
        "`{nvcc}` failed to compile {src} (exit {status})"
    );
}

/// The first GPU's compute capability as `nvidia-smi` reports it (`9.0`), if there is a GPU and the tool.
fn nvidia_smi_compute_cap() -> Option<String> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=compute_cap", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next()?.trim();
    let valid = !first.is_empty() && first.chars().all(|c| c.is_ascii_digit() || c == '.');
    valid.then(|| {
        println!("cargo:warning=CUDA_COMPUTE_CAP unset: compiling the kernels for this machine's GPU (compute capability {first}, from nvidia-smi)");
        first.to_string()
    })
}
