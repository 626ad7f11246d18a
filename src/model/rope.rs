//! Rotary position helpers as pure functions over plain vectors: the 3-D M-RoPE positions of a prompt
//! (HF `get_rope_index`), the text M-RoPE cos/sin half-tables, and the vision 2-D rotary tables.

use super::ModelError;

/// Token ids that `rope_index` needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RopeTokens {
    /// `<|image_pad|>` id.
    pub image_token_id: u32,
    /// Spatial merge factor (2): an image of grid (t, h, w) has an llm grid (t, h/m, w/m).
    pub spatial_merge_size: usize,
}

/// 3-D positions of one prompt: `pos[i] = [t, h, w]` for token i, plus the next free position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RopePositions {
    /// Per-token (t, h, w) positions.
    pub pos: Vec<[i64; 3]>,
    /// `max(pos) + 1`: the position of the first generated token (all three axes).
    pub next: i64,
}

impl RopePositions {
    /// HF `rope_deltas`: `next - len`.
    pub fn delta(&self) -> i64 {
        self.next - self.pos.len() as i64
    }
}

/// HF `get_rope_index` for one unpadded sequence of images: text tokens advance all three axes together;
/// each run of image-pad tokens (one image per run, `grids` in order) gets (t, h, w) = base + (0, row, col)
/// over its llm grid, and the following text resumes at `max + 1`.
pub fn rope_index(
    ids: &[u32],
    grids: &[[usize; 3]],
    tok: RopeTokens,
) -> Result<RopePositions, ModelError> {
    let m = tok.spatial_merge_size;
    let mut pos = Vec::with_capacity(ids.len());
    let mut next: i64 = 0;
    let mut i = 0;
    let mut img = 0;
    while i < ids.len() {
        if ids[i] != tok.image_token_id {
            pos.push([next; 3]);
            next += 1;
            i += 1;
            continue;
        }
        let g = grids.get(img).ok_or_else(|| {
            ModelError::Input(format!(
                "image-pad run #{} at token {i} has no matching image",
                img + 1
            ))
        })?;
        let (t, h, w) = (g[0], g[1] / m, g[2] / m);
        let n = t * h * w;
        if i + n > ids.len() || ids[i..i + n].iter().any(|&x| x != tok.image_token_id) {
            return Err(ModelError::Input(format!(
                "image #{} needs {n} consecutive image-pad tokens at token {i}",
                img + 1
            )));
        }
        let base = next;
        let mut max = base;
        for _tt in 0..t {
            // Still images: the temporal index is 0 for every frame (second_per_grid_t = 0).
            for hh in 0..h {
                for ww in 0..w {
                    let p = [base, base + hh as i64, base + ww as i64];
                    max = max.max(p[1]).max(p[2]);
                    pos.push(p);
                }
            }
        }
        next = max + 1;
        i += n;
        img += 1;
    }
    if img != grids.len() {
        return Err(ModelError::Input(format!(
            "{} images given but {img} image-pad runs in the prompt",
            grids.len()
        )));
    }
    Ok(RopePositions { pos, next })
}

/// Text RoPE inverse frequencies `1 / theta^(2j/head_dim)`, j < head_dim/2, in f32 like HF.
pub(crate) fn text_inv_freq(head_dim: usize, theta: f64) -> Vec<f32> {
    let theta = theta as f32;
    (0..head_dim / 2)
        .map(|j| 1.0 / theta.powf((2 * j) as f32 / head_dim as f32))
        .collect()
}

/// The position axis (0 = t, 1 = h, 2 = w) of each of the `half` rotary frequencies. Contiguous (Qwen2.5-VL):
/// t for j < s0, h for j < s0+s1, w after. Interleaved (Qwen3-VL): h where `j % 3 == 1 && j < 3·s1`, w where
/// `j % 3 == 2 && j < 3·s2`, t everywhere else.
pub fn mrope_axes(half: usize, section: [usize; 3], interleaved: bool) -> Vec<usize> {
    (0..half)
        .map(|j| {
            if interleaved {
                match j % 3 {
                    1 if j < 3 * section[1] => 1,
                    2 if j < 3 * section[2] => 2,
                    _ => 0,
                }
            } else if j < section[0] {
                0
            } else if j < section[0] + section[1] {
                1
            } else {
                2
            }
        })
        .collect()
}

/// M-RoPE cos/sin half-tables (n × head_dim/2, row-major, f32): entry j of row i uses the position of `pos[i]`
/// on the axis `axes[j]` ([`mrope_axes`]).
pub(crate) fn mrope_tables(
    pos: &[[i64; 3]],
    inv_freq: &[f32],
    axes: &[usize],
) -> (Vec<f32>, Vec<f32>) {
    let half = inv_freq.len();
    let mut cos = Vec::with_capacity(pos.len() * half);
    let mut sin = Vec::with_capacity(pos.len() * half);
    for p in pos {
        for j in 0..half {
            let a = p[axes[j]] as f32 * inv_freq[j];
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    (cos, sin)
}

/// Vision rotary half-tables (N × head_dim/2, f32) for images of `grids`, rows in the processor's merge-block
/// order: entries [0, q) rotate by the patch row, [q, 2q) by the patch column, q = head_dim/4,
/// with frequencies `1 / 10000^(2k/(head_dim/2))`.
pub(crate) fn vision_rope_tables(
    grids: &[[usize; 3]],
    head_dim: usize,
    merge: usize,
) -> (Vec<f32>, Vec<f32>) {
    let dim = head_dim / 2;
    let inv: Vec<f32> = (0..dim / 2)
        .map(|k| 1.0 / 10000f32.powf((2 * k) as f32 / dim as f32))
        .collect();
    let mut cos = Vec::new();
    let mut sin = Vec::new();
    for &[t, h, w] in grids {
        let mut rows = Vec::with_capacity(h * w);
        for bh in 0..h / merge {
            for bw in 0..w / merge {
                for mh in 0..merge {
                    for mw in 0..merge {
                        rows.push(((bh * merge + mh) as f32, (bw * merge + mw) as f32));
                    }
                }
            }
        }
        for _ in 0..t {
            for &(hp, wp) in &rows {
                for p in [hp, wp] {
                    for f in &inv {
                        let a = p * f;
                        cos.push(a.cos());
                        sin.push(a.sin());
                    }
                }
            }
        }
    }
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_axes_follow_the_qwen3_layout() {
        let axes = mrope_axes(64, [24, 20, 20], true);
        let of = |a: usize| -> Vec<usize> { (0..64).filter(|&j| axes[j] == a).collect() };
        assert_eq!(of(1), (0..20).map(|k| 3 * k + 1).collect::<Vec<_>>());
        assert_eq!(of(2), (0..20).map(|k| 3 * k + 2).collect::<Vec<_>>());
        let t: Vec<usize> = (0..20).map(|k| 3 * k).chain(60..64).collect();
        assert_eq!(of(0), t);
        let contiguous = mrope_axes(8, [2, 3, 3], false);
        assert_eq!(contiguous, [0, 0, 1, 1, 1, 2, 2, 2]);
        // The tiny test sections [8, 4, 4]: h and w only in the first 12 frequencies.
        let tiny = mrope_axes(16, [8, 4, 4], true);
        assert_eq!(tiny, [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 0, 0]);
    }

    #[test]
    fn rope_index_of_text_then_an_image() {
        let (img, txt) = (7u32, 1u32);
        let mut ids = vec![txt; 15];
        ids.extend(std::iter::repeat_n(img, 6));
        ids.push(txt);
        let tok = RopeTokens {
            image_token_id: img,
            spatial_merge_size: 2,
        };
        let rp = rope_index(&ids, &[[1, 4, 6]], tok).unwrap();
        for (i, p) in rp.pos[..15].iter().enumerate() {
            assert_eq!(*p, [i as i64; 3]);
        }
        let image: Vec<[i64; 3]> = rp.pos[15..21].to_vec();
        let hs = [0, 0, 0, 1, 1, 1];
        let ws = [0, 1, 2, 0, 1, 2];
        for k in 0..6 {
            assert_eq!(image[k], [15, 15 + hs[k], 15 + ws[k]]);
        }
        assert_eq!(rp.pos[21], [18; 3]);
        assert_eq!(rp.next, 19);
    }
}
