//! Which rows of a packed activation belong together, so that the CPU's GEMMs give every row the same bits
//! whatever else is in the batch.
//!
//! A prefill packs the new tokens of several prompts (and the vision tower the patches of several screenshots)
//! into one activation. OpenBLAS's sums for a row depend on the shape of the call and on the row's place in it,
//! so [`crate::ops::Ops::matmul_nt`] multiplies each segment (one prompt, one image) by its own call: a row's result
//! then depends only on its own segment, and on its length where that picks the product (the library from 4
//! rows, the built-in packed kernel from 768, [`super::packed`]). Independent rows (decode, the logits of
//! last positions) are separate sequences: in f32 on a CPU whose built-in GEMM is the packed kernel each output
//! is one dot product in a fixed order ([`super::row`]); elsewhere they run on the `gemm` crate in products
//! of a fixed number of rows ([`super::ROW_BLOCK`]), whose sums for a row do not depend on the other rows of the
//! product. Together this makes greedy outputs on the CPU independent of the batch's size and composition, bit
//! for bit.

/// How the rows of one GEMM's input group, passed by the model with every linear layer's call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows<'a> {
    /// Consecutive segments of these many rows (adding up to all rows; empty segments are ignored): each
    /// segment is multiplied on its own.
    Segments(&'a [usize]),
    /// Every row is its own sequence.
    Independent,
}

impl Rows<'_> {
    /// The non-empty segment lengths, checked against the input's `rows`; `None` for independent rows.
    pub(super) fn lens(&self, rows: usize) -> candle_core::Result<Option<Vec<usize>>> {
        match self {
            Rows::Independent => Ok(None),
            Rows::Segments(lens) => {
                if lens.iter().sum::<usize>() != rows {
                    candle_core::bail!("matmul_nt: segments {lens:?} do not add up to {rows} rows");
                }
                Ok(Some(lens.iter().copied().filter(|&l| l > 0).collect()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_must_cover_the_rows_and_drop_empty_ones() {
        assert_eq!(
            Rows::Segments(&[3, 0, 2]).lens(5).unwrap(),
            Some(vec![3, 2])
        );
        assert!(Rows::Segments(&[3, 2]).lens(4).is_err());
        assert_eq!(Rows::Independent.lens(7).unwrap(), None);
    }
}
