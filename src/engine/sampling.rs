//! How a sequence picks its next token: greedily (the evaluation's way, and the default), or by sampling with a
//! temperature, an optional nucleus (`top_p`) and a seed, through candle-transformers' `LogitsProcessor`, so a
//! seeded request draws the same tokens every time (on the CPU, whatever else is in its batch, since its logits do
//! not depend on the batch).

use candle_transformers::generation::{LogitsProcessor, Sampling as Rule};

/// A request's token choice.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Sampling {
    /// The most likely token (the first of equals).
    #[default]
    Greedy,
    /// A draw from the softmax of the logits divided by `temperature` (> 0), restricted to the smallest set of
    /// tokens whose probabilities reach `top_p` when given, with a random generator seeded by `seed`.
    Random {
        /// Divides the logits (> 0).
        temperature: f64,
        /// Nucleus mass in (0, 1); `None` or 1 for all tokens.
        top_p: Option<f64>,
        /// The generator's seed.
        seed: u64,
    },
}

impl Sampling {
    /// The sampler of one sequence; `None` for greedy choice (the batch's argmax is used as it is).
    pub(crate) fn processor(&self) -> Option<LogitsProcessor> {
        match *self {
            Sampling::Greedy => None,
            Sampling::Random {
                temperature,
                top_p,
                seed,
            } => {
                let rule = match top_p.filter(|&p| p < 1.0) {
                    Some(p) => Rule::TopP { p, temperature },
                    None => Rule::All { temperature },
                };
                Some(LogitsProcessor::from_sampling(seed, rule))
            }
        }
    }
}
