//! Qwen3-VL's learned position embedding, bilinearly interpolated from a square table to each image's patch
//! grid (`align_corners=True`), as pure index/weight computations; the model gathers the table rows.

/// The four bilinear taps of every patch: rows of the table and their weights, tap order
/// (r0,c0), (r0,c1), (r1,c0), (r1,c1).
#[derive(Debug, Clone, PartialEq)]
pub struct PositionTaps {
    /// Table rows per tap, one entry per patch.
    pub index: [Vec<u32>; 4],
    /// Weights per tap, one entry per patch.
    pub weight: [Vec<f32>; 4],
}

/// Source coordinate on the table's axis of `side` rows for grid line `i` of `n`, split into the lower row, the
/// upper row (clamped) and the fraction.
fn source(i: usize, n: usize, side: usize) -> (usize, usize, f32) {
    let s = (i as f32 * (side - 1) as f32) / (n.saturating_sub(1).max(1)) as f32;
    let lo = (s.floor() as usize).min(side - 1);
    let hi = (lo + 1).min(side - 1);
    (lo, hi, s - lo as f32)
}

/// Row and column of patch `q` of an `h × w` frame whose patches come in `merge × merge` blocks (the
/// processor's order: blocks in raster order, patches raster within a block).
pub fn merge_block_position(q: usize, w: usize, merge: usize) -> (usize, usize) {
    let unit = merge * merge;
    let (block, within) = (q / unit, q % unit);
    let blocks_per_row = w / merge;
    (
        (block / blocks_per_row) * merge + within / merge,
        (block % blocks_per_row) * merge + within % merge,
    )
}

/// Taps of every patch of `grids` (t, h, w), images in order and frames repeated, for a `side × side` table.
pub fn position_taps(grids: &[[usize; 3]], side: usize, merge: usize) -> PositionTaps {
    let mut index: [Vec<u32>; 4] = Default::default();
    let mut weight: [Vec<f32>; 4] = Default::default();
    for &[t, h, w] in grids {
        for _ in 0..t {
            for q in 0..h * w {
                let (r, c) = merge_block_position(q, w, merge);
                let (r0, r1, fr) = source(r, h, side);
                let (c0, c1, fc) = source(c, w, side);
                let taps = [
                    (r0 * side + c0, (1.0 - fr) * (1.0 - fc)),
                    (r0 * side + c1, (1.0 - fr) * fc),
                    (r1 * side + c0, fr * (1.0 - fc)),
                    (r1 * side + c1, fr * fc),
                ];
                for (k, (i, wt)) in taps.into_iter().enumerate() {
                    index[k].push(i as u32);
                    weight[k].push(wt);
                }
            }
        }
    }
    PositionTaps { index, weight }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_block_order_walks_two_by_two_blocks() {
        // A 4×6 grid: the first block covers rows 0-1, columns 0-1; the second columns 2-3.
        let order: Vec<(usize, usize)> = (0..8).map(|q| merge_block_position(q, 6, 2)).collect();
        assert_eq!(
            order,
            [
                (0, 0),
                (0, 1),
                (1, 0),
                (1, 1),
                (0, 2),
                (0, 3),
                (1, 2),
                (1, 3)
            ]
        );
        assert_eq!(merge_block_position(12, 6, 2), (2, 0));
        assert_eq!(merge_block_position(23, 6, 2), (3, 5));
    }

    #[test]
    fn taps_interpolate_with_aligned_corners() {
        // A 2×4 grid on a 3×3 table: rows map to 0 and 2 exactly, columns to 0, 2/3, 4/3, 2.
        let taps = position_taps(&[[1, 2, 4]], 3, 2);
        let (r, c) = merge_block_position(1, 4, 2);
        assert_eq!((r, c), (0, 1));
        // Patch 1: row 0, column 1 → source column 2/3: rows 0/1 of the table, weights 1/3, 2/3.
        assert_eq!(taps.index[0][1], 0);
        assert_eq!(taps.index[1][1], 1);
        assert!((taps.weight[0][1] - 1.0 / 3.0).abs() < 1e-6);
        assert!((taps.weight[1][1] - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(taps.weight[2][1], 0.0);
        // The last patch (row 1 → table row 2, column 3 → table column 2) is the corner row 8, weight 1 on tap 0.
        let last = taps.index[0].len() - 1;
        assert_eq!(taps.index[0][last], 8);
        assert_eq!(taps.weight[0][last], 1.0);
        for k in 0..taps.index[0].len() {
            let sum: f32 = (0..4).map(|t| taps.weight[t][k]).sum();
            assert!((sum - 1.0).abs() < 1e-6);
        }
        // Frames repeat the same taps.
        let two = position_taps(&[[2, 2, 4]], 3, 2);
        assert_eq!(two.index[0][..8], two.index[0][8..]);
    }
}
