//! One entry function per subcommand; each takes the validated arguments from `cli`.
pub mod bench;
pub mod data;
pub mod eval;
pub mod generate;
pub mod report;
pub mod sample;
pub mod score;
pub mod selftest;

/// The model-loading arguments as an engine model spec.
pub fn model_spec(a: &crate::cli::ModelArgs) -> crate::engine::ModelSpec {
    crate::engine::ModelSpec {
        model: a.model.clone(),
        device: a.device.clone(),
        dtype: a.dtype.clone(),
        min_pixels: a.min_pixels,
        max_pixels: a.max_pixels,
    }
}
