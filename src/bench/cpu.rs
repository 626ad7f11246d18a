//! The CPU a benchmark ran on (model, vector features, clock) and its ISA peak f32 rate, the second MFU
//! denominator beside the best measured GEMM rate: cores × FMA units × lanes × 2 × clock, with the unit count and
//! the clock stated as assumptions in the report.

use serde::{Deserialize, Serialize};

/// The vector features reported (those that decide which GEMM and fused-op kernels run).
const FEATURES: [&str; 12] = [
    "sse4.2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512vnni",
    "avx512bf16",
    "avx512fp16",
];

/// What `/proc/cpuinfo` and run-time feature detection say about this CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuInfo {
    /// `model name` (empty where unknown).
    pub model: String,
    /// `vendor_id` (`GenuineIntel`, `AuthenticAMD`).
    pub vendor: String,
    /// `cpu family` (AMD: 25 for Zen 3/4, 26 for Zen 5).
    pub family: Option<u32>,
    /// The vector features of [`FEATURES`] this CPU has (run-time detection).
    pub features: Vec<String>,
    /// Logical CPUs the process may use.
    pub logical_cpus: usize,
    /// `cpu MHz` of the first CPU (under a hypervisor usually the nominal clock).
    pub clock_mhz: Option<f64>,
}

impl CpuInfo {
    /// Read this machine's.
    pub fn detect() -> Self {
        let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| crate::ops::gemm::blas::cpuinfo_field(&text, name);
        Self {
            model: field("model name").unwrap_or_default(),
            vendor: field("vendor_id").unwrap_or_default(),
            family: field("cpu family").and_then(|f| f.parse().ok()),
            features: FEATURES
                .iter()
                .filter(|f| has_feature(f))
                .map(|f| f.to_string())
                .collect(),
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            clock_mhz: field("cpu MHz").and_then(|f| f.parse().ok()),
        }
    }

    fn has(&self, feature: &str) -> bool {
        self.features.iter().any(|f| f == feature)
    }
}

fn has_feature(name: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as on;
        match name {
            "sse4.2" => on!("sse4.2"),
            "avx" => on!("avx"),
            "avx2" => on!("avx2"),
            "fma" => on!("fma"),
            "f16c" => on!("f16c"),
            "avx512f" => on!("avx512f"),
            "avx512dq" => on!("avx512dq"),
            "avx512bw" => on!("avx512bw"),
            "avx512vl" => on!("avx512vl"),
            "avx512vnni" => on!("avx512vnni"),
            "avx512bf16" => on!("avx512bf16"),
            "avx512fp16" => on!("avx512fp16"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = name;
        false
    }
}

/// The ISA peak f32 rate of the cores a run uses, with the numbers it multiplies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IsaPeak {
    /// cores × fma_units × lanes × 2 × clock, in FLOP/s.
    pub flops: f64,
    /// Cores counted: the run's compute threads.
    pub cores: usize,
    /// FMA instructions of `lanes` f32 lanes each core starts per cycle.
    pub fma_units: u32,
    /// f32 lanes of the widest vector the GEMMs use.
    pub lanes: u32,
    /// Clock assumed for every core, GHz.
    pub clock_ghz: f64,
    /// What the numbers assume, in words.
    pub assumptions: String,
}

/// The ISA peak for `threads` compute threads on `cpu`; `None` off x86-64, without FMA, or without a clock.
pub fn isa_peak(cpu: &CpuInfo, threads: usize) -> Option<IsaPeak> {
    let clock_ghz = cpu.clock_mhz? / 1000.0;
    if !cpu.has("fma") || clock_ghz <= 0.0 {
        return None;
    }
    let amd = cpu.vendor == "AuthenticAMD";
    // Zen 3/4 (family 25) run a 512-bit FMA as two halves on their two 256-bit FMA pipes.
    let (lanes, fma_units, units_why) = match (cpu.has("avx512f"), amd, cpu.family) {
        (true, true, Some(25)) => (
            16,
            1,
            "AMD family 25 (Zen 4): AVX-512 on two 256-bit FMA pipes, one 512-bit FMA a cycle",
        ),
        (true, true, _) => (16, 2, "AMD with AVX-512 past Zen 4: two 512-bit FMA pipes"),
        (true, false, _) => (
            16,
            2,
            "two 512-bit FMA units (Xeon Gold/Platinum; some Silver/Bronze parts have one)",
        ),
        (false, _, _) => (8, 2, "two 256-bit FMA units (AVX2)"),
    };
    let flops = threads as f64 * f64::from(fma_units) * f64::from(lanes) * 2.0 * clock_ghz * 1e9;
    Some(IsaPeak {
        flops,
        cores: threads,
        fma_units,
        lanes,
        clock_ghz,
        assumptions: format!(
            "{units_why}; every core at /proc/cpuinfo's {clock_ghz:.3} GHz (no turbo, no AVX-512 down-clocking); \
             each of the {threads} compute threads on its own physical core"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(vendor: &str, family: u32, features: &[&str]) -> CpuInfo {
        CpuInfo {
            model: String::new(),
            vendor: vendor.into(),
            family: Some(family),
            features: features.iter().map(|f| f.to_string()).collect(),
            logical_cpus: 2,
            clock_mhz: Some(2500.0),
        }
    }

    #[test]
    fn isa_peak_counts_units_lanes_and_clock() {
        let zen4 = isa_peak(&cpu("AuthenticAMD", 25, &["avx2", "fma", "avx512f"]), 2).unwrap();
        assert_eq!((zen4.fma_units, zen4.lanes), (1, 16));
        assert!((zen4.flops - 2.0 * 16.0 * 2.0 * 2.5e9).abs() < 1.0);
        let xeon = isa_peak(&cpu("GenuineIntel", 6, &["avx2", "fma", "avx512f"]), 2).unwrap();
        assert!((xeon.flops - 2.0 * 2.0 * 16.0 * 2.0 * 2.5e9).abs() < 1.0);
        let avx2 = isa_peak(&cpu("AuthenticAMD", 25, &["avx2", "fma"]), 4).unwrap();
        assert!((avx2.flops - 4.0 * 2.0 * 8.0 * 2.0 * 2.5e9).abs() < 1.0);
        assert!(
            avx2.assumptions.contains("2.500 GHz"),
            "{}",
            avx2.assumptions
        );
        assert!(isa_peak(&cpu("GenuineIntel", 6, &["avx"]), 2).is_none());
    }

    #[test]
    fn this_cpu_is_described() {
        let c = CpuInfo::detect();
        eprintln!("{c:?}");
        assert!(c.logical_cpus >= 1);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(c.has("avx2"), is_x86_feature_detected!("avx2"));
    }
}
