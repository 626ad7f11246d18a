//! The warning printed when a real checkpoint is about to be evaluated on the CPU: how long the run would take,
//! from the prompts' FLOPs and an f32 matmul rate measured on this machine, and how to use a GPU build instead.
//! A user who followed the README on a GPU workstation without a GPU build learns this before waiting hours.

/// Checkpoints with fewer parameters (the test fixtures, a few million) are not worth a warning.
pub(crate) const MIN_PARAMS: u64 = 100_000_000;

/// What the estimate needs to know about the run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Workload {
    /// Parameters of the vision tower (each vision patch costs about 2 FLOPs per parameter).
    pub vision_params: u64,
    /// Parameters of the language model (each prompt or generated token costs about 2 FLOPs per parameter).
    pub lm_params: u64,
    /// Vision patches over all prompts (four per merged image token).
    pub vision_patches: u64,
    /// Prompt tokens over all prompts.
    pub prompt_tokens: u64,
    /// Generated tokens at most (`--max-new-tokens` per prompt).
    pub new_tokens: u64,
}

impl Workload {
    /// Dense FLOPs of the run (matmuls only; attention's quadratic part is left out, so this is a lower bound).
    pub fn flops(&self) -> f64 {
        2.0 * self.vision_params as f64 * self.vision_patches as f64
            + 2.0 * self.lm_params as f64 * (self.prompt_tokens + self.new_tokens) as f64
    }
}

/// The warning for `work` at `flops_per_second`, or `None` when the checkpoint is small.
pub(crate) fn cpu_warning(
    work: &Workload,
    prompts: usize,
    flops_per_second: f64,
) -> Option<String> {
    if work.vision_params + work.lm_params < MIN_PARAMS || flops_per_second <= 0.0 {
        return None;
    }
    let seconds = work.flops() / flops_per_second;
    Some(format!(
        "this {:.1}B-parameter model runs on the CPU: the {prompts} prompts need about {:.0} TFLOP, about {} at \
         this machine's measured f32 matmul rate ({:.0} GFLOP/s) and likely more. A GPU is far faster: on an \
         NVIDIA machine install with `cargo install --path . --features cuda` and pass --device cuda; on a Mac use \
         `--features metal` and --device metal",
        (work.vision_params + work.lm_params) as f64 / 1e9,
        work.flops() / 1e12,
        human_duration(seconds),
        flops_per_second / 1e9,
    ))
}

/// `42 s`, `17 min`, `3.4 h`, `2.1 days`.
pub(crate) fn human_duration(seconds: f64) -> String {
    if seconds < 90.0 {
        format!("{seconds:.0} s")
    } else if seconds < 5400.0 {
        format!("{:.0} min", seconds / 60.0)
    } else if seconds < 172_800.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else {
        format!("{:.1} days", seconds / 86_400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_3b_model_on_a_slow_cpu_gets_hours_and_the_gpu_instructions() {
        let work = Workload {
            vision_params: 670_000_000,
            lm_params: 3_090_000_000,
            vision_patches: 600 * 4 * 1280,
            prompt_tokens: 600 * 2300,
            new_tokens: 600 * 256,
        };
        let w = cpu_warning(&work, 600, 100e9).unwrap();
        assert!(w.contains("3.8B-parameter"), "{w}");
        assert!(w.contains(" h at"), "{w}");
        assert!(
            w.contains("--features cuda") && w.contains("--device cuda"),
            "{w}"
        );
        let tiny = Workload {
            vision_params: 1_000_000,
            lm_params: 2_000_000,
            ..work
        };
        assert!(cpu_warning(&tiny, 600, 100e9).is_none());
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(42.0), "42 s");
        assert_eq!(human_duration(1020.0), "17 min");
        assert_eq!(human_duration(3.4 * 3600.0), "3.4 h");
    }
}
