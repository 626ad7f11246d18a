//! Vision window bookkeeping as pure functions (HF `get_window_index` and the cu_seqlens of MQ L365-445).

/// Window layout of a batch of images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowIndex {
    /// Merged-token ids (global over the batch) in window-major order: position k of the permuted sequence
    /// holds merged token `window_index[k]`.
    pub window_index: Vec<usize>,
    /// Window boundaries in patch units (deduplicated, starts with 0).
    pub cu_window_seqlens: Vec<usize>,
    /// Per image and frame boundaries in patch units (full-attention layers).
    pub cu_seqlens: Vec<usize>,
}

impl WindowIndex {}

/// HF `get_window_index` (windows of `win × win` merged tokens, `unit` patches per merged token) plus the
/// full-attention `cu_seqlens`, for images of patch grids `grids` (t, h, w).
pub fn window_index(grids: &[[usize; 3]], merge: usize, win: usize) -> WindowIndex {
    let unit = merge * merge;
    let mut window_index = Vec::new();
    let mut cu_window = vec![0usize];
    let mut cu_full = vec![0usize];
    let mut offset = 0;
    for &[t, h, w] in grids {
        let (gh, gw) = (h / merge, w / merge);
        let (nh, nw) = (gh.div_ceil(win), gw.div_ceil(win));
        for tt in 0..t {
            for wy in 0..nh {
                for wx in 0..nw {
                    let mut count = 0;
                    for y in wy * win..((wy + 1) * win).min(gh) {
                        for x in wx * win..((wx + 1) * win).min(gw) {
                            window_index.push(offset + tt * gh * gw + y * gw + x);
                            count += 1;
                        }
                    }
                    // Empty windows cannot occur with div_ceil (HF's "pad = 4" windows are dropped by its
                    // unique_consecutive).
                    let last = *cu_window.last().unwrap_or(&0);
                    cu_window.push(last + count * unit);
                }
            }
            let last = *cu_full.last().unwrap_or(&0);
            cu_full.push(last + h * w);
        }
        offset += t * gh * gw;
    }
    WindowIndex {
        window_index,
        cu_window_seqlens: cu_window,
        cu_seqlens: cu_full,
    }
}
