//! Which rows of a packed activation belong together, so that the CPU's GEMMs give every row the same bits
//! whatever else is in the batch.
//!
//! A prefill packs the new tokens of several prompts (and the vision tower the patches of several screenshots)
//! into one activation. OpenBLAS's sums for a row depend on the shape of the call and on the row's place in it,
//! so [`super::matmul_nt`] multiplies each segment (one prompt, one image) by its own call: a row's result then
//! depends only on its own segment. Rows outside any declared segment (decode, the logits of last positions) are
//! independent sequences and run on the `gemm` crate, whose sums for a row do not depend on how many rows are
//! multiplied with it, for two rows or more: a single row is padded to two. Together this makes greedy outputs
//! on the CPU independent of the batch's size and composition, bit for bit.
//!
//! The segments are declared by the model around the calls that use them ([`segments`]); the declaration is per
//! thread and restored when its guard drops, so nested declarations (the vision tower inside a prefill) work.

use std::cell::RefCell;

thread_local! {
    static SEGMENTS: RefCell<Option<Vec<usize>>> = const { RefCell::new(None) };
}

/// While alive, [`super::matmul_nt`] calls on this thread whose row count is the sum of the declared lengths
/// multiply each segment separately. Dropping it restores the previous declaration.
#[must_use = "the segments are declared only while the guard lives"]
pub struct SegmentsGuard {
    previous: Option<Vec<usize>>,
}

/// Declare that packed rows come in consecutive segments of `lens` rows (empty segments are ignored).
pub fn segments(lens: impl IntoIterator<Item = usize>) -> SegmentsGuard {
    let lens: Vec<usize> = lens.into_iter().filter(|&l| l > 0).collect();
    SegmentsGuard {
        previous: SEGMENTS.with(|s| s.replace(Some(lens))),
    }
}

impl Drop for SegmentsGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SEGMENTS.with(|s| *s.borrow_mut() = previous);
    }
}

/// The declared segments, if their lengths add up to `rows`.
pub fn current_for(rows: usize) -> Option<Vec<usize>> {
    SEGMENTS.with(|s| {
        s.borrow()
            .as_ref()
            .filter(|lens| lens.iter().sum::<usize>() == rows)
            .cloned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_nest_and_match_only_their_total() {
        assert_eq!(current_for(5), None);
        {
            let _outer = segments([3, 0, 2]);
            assert_eq!(current_for(5), Some(vec![3, 2]));
            assert_eq!(current_for(4), None);
            {
                let _inner = segments([8]);
                assert_eq!(current_for(8), Some(vec![8]));
                assert_eq!(current_for(5), None);
            }
            assert_eq!(current_for(5), Some(vec![3, 2]));
        }
        assert_eq!(current_for(5), None);
    }

    #[test]
    fn declarations_are_per_thread() {
        let _g = segments([4]);
        let other = std::thread::spawn(|| current_for(4)).join().unwrap();
        assert_eq!((current_for(4), other), (Some(vec![4]), None));
    }
}
