//! The CPU a benchmark ran on (model, vector features, clock) and its ISA peak f32 rate, the second MFU
//! denominator beside the best measured GEMM rate: the FMA rate its cores reach from registers, with the clock
//! they ran at and the FMAs a cycle that makes, beside what the kind of core is expected to do.

use serde::{Deserialize, Serialize};

use super::silicon::Silicon;

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
    /// f32 FLOP/s of FMA loops from registers on every compute thread at once ([`super::silicon`]): the rate no
    /// product exceeds at the clock the cores ran.
    pub flops: f64,
    /// Cores counted: the run's compute threads.
    pub cores: usize,
    /// FMA instructions of `lanes` f32 lanes a core of this kind starts per cycle, by its vendor, family and
    /// features (what `fma_per_cycle` is expected to show).
    pub fma_units: u32,
    /// f32 lanes of the widest vector the GEMMs use.
    pub lanes: u32,
    /// The clock the compute threads ran at, measured (a chain of dependent multiplies on each), GHz.
    pub clock_ghz: f64,
    /// `cpu MHz` of `/proc/cpuinfo` in GHz (under a hypervisor usually the nominal clock, not the one run at).
    #[serde(default)]
    pub nominal_clock_ghz: Option<f64>,
    /// Vector FMAs a core ran per cycle in the FMA loops: `flops` / (cores × lanes × 2 × clock).
    #[serde(default)]
    pub fma_per_cycle: f64,
    /// What the numbers assume, in words.
    pub assumptions: String,
}

/// The ISA peak for `threads` compute threads on `cpu` from what the threads reached (`measured`); `None` off
/// x86-64 or without AVX2 and FMA.
pub fn isa_peak(cpu: &CpuInfo, threads: usize, measured: Option<Silicon>) -> Option<IsaPeak> {
    let m = measured?;
    if !cpu.has("fma") || m.clock_ghz <= 0.0 || threads == 0 {
        return None;
    }
    let amd = cpu.vendor == "AuthenticAMD";
    // Zen 3/4 (family 25) run a 512-bit FMA as two halves on their two 256-bit FMA pipes.
    let (fma_units, units_why) = match (m.lanes == 16, amd, cpu.family) {
        (true, true, Some(25)) => (
            1,
            "AMD family 25 (Zen 4): AVX-512 on two 256-bit FMA pipes, one 512-bit FMA a cycle",
        ),
        (true, true, _) => (2, "AMD with AVX-512 past Zen 4: two 512-bit FMA pipes"),
        (true, false, _) => (
            2,
            "two 512-bit FMA units (Xeon Gold/Platinum; some Silver/Bronze parts have one)",
        ),
        (false, _, _) => (2, "two 256-bit FMA units (AVX2)"),
    };
    let fma_per_cycle =
        m.fma_flops / (threads as f64 * f64::from(m.lanes) * 2.0 * m.clock_ghz * 1e9);
    Some(IsaPeak {
        flops: m.fma_flops,
        cores: threads,
        fma_units,
        lanes: m.lanes,
        clock_ghz: m.clock_ghz,
        nominal_clock_ghz: cpu.clock_mhz.map(|c| c / 1000.0),
        fma_per_cycle,
        assumptions: format!(
            "measured: {threads} compute threads at once, each running independent {}-lane FMAs from registers \
             ({fma_per_cycle:.2} a cycle at the measured {:.3} GHz; expected {fma_units}: {units_why}); \
             each thread on its own physical core",
            m.lanes, m.clock_ghz
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
    fn isa_peak_is_the_measured_fma_rate_with_units_expected_by_kind() {
        let at = |lanes, fma_flops| {
            Some(Silicon {
                clock_ghz: 3.5,
                fma_flops,
                lanes,
            })
        };
        // Two Zen 4 cores running one 16-lane FMA a cycle at 3.5 GHz, above the nominal 2.5.
        let zen4 = isa_peak(
            &cpu("AuthenticAMD", 25, &["avx2", "fma", "avx512f"]),
            2,
            at(16, 224e9),
        )
        .unwrap();
        assert_eq!((zen4.fma_units, zen4.lanes, zen4.flops), (1, 16, 224e9));
        assert!((zen4.fma_per_cycle - 1.0).abs() < 1e-9, "{zen4:?}");
        assert_eq!(zen4.nominal_clock_ghz, Some(2.5));
        assert!(
            zen4.assumptions.contains("3.500 GHz"),
            "{}",
            zen4.assumptions
        );
        let xeon = isa_peak(
            &cpu("GenuineIntel", 6, &["avx2", "fma", "avx512f"]),
            2,
            at(16, 448e9),
        )
        .unwrap();
        assert_eq!(xeon.fma_units, 2);
        assert!((xeon.fma_per_cycle - 2.0).abs() < 1e-9, "{xeon:?}");
        let avx2 = isa_peak(&cpu("AuthenticAMD", 25, &["avx2", "fma"]), 4, at(8, 448e9)).unwrap();
        assert_eq!((avx2.fma_units, avx2.lanes), (2, 8));
        assert!((avx2.fma_per_cycle - 2.0).abs() < 1e-9, "{avx2:?}");
        assert!(isa_peak(&cpu("GenuineIntel", 6, &["avx"]), 2, at(8, 1e9)).is_none());
        assert!(isa_peak(&cpu("GenuineIntel", 6, &["avx2", "fma"]), 2, None).is_none());
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
