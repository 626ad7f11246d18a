//! How the kernels of `kernels/fused.cu` are launched: grid and block sizes, and the varlen kernels' int32
//! metadata. Shared by the CUDA launchers (`src/ops/cuda/`) and the CPU emulation of the kernels
//! (`tests/it/kernels_emulated.rs`), so that the emulated launches are the real ones. No CUDA needed.

use candle_core::{bail, DType, Result};

/// The entry point of kernel family `base` for tensors of `dtype`: `base_f32`, `base_bf16` or `base_f16`.
pub fn kernel_name(base: &str, dtype: DType) -> Result<String> {
    let suffix = match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        other => bail!("no fused kernel for dtype {other:?}"),
    };
    Ok(format!("{base}_{suffix}"))
}

/// The decode attention family for `head_dim`: `decode_attn_d{1,2,4}` (each lane holds head_dim / 32 values), for
/// head_dim 32, 64 or 128.
pub fn decode_family(head_dim: usize) -> Result<String> {
    match head_dim {
        32 | 64 | 128 => Ok(format!("decode_attn_d{}", head_dim / 32)),
        _ => bail!("decode_attention: head_dim {head_dim} has no kernel"),
    }
}

/// Grid and block dimensions of one launch (x, y, z).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
}

/// Threads of the row-parallel and element-wise kernels.
const THREADS: u32 = 256;

/// `rmsnorm_hf_*`: one block per row, a power of two of threads between 32 and 1024 covering the row.
pub fn rms_norm(rows: usize, cols: usize) -> Geometry {
    Geometry {
        grid: (rows as u32, 1, 1),
        block: (cols.next_power_of_two().clamp(32, 1024) as u32, 1, 1),
    }
}

/// The kernels that loop over (rows, cols), grid-stride in both (`swiglu_packed_*`, `bias_*`): `blockIdx.y` over
/// rows, `blockIdx.x` over blocks of columns.
pub fn rows_cols(rows: usize, cols: usize) -> Geometry {
    Geometry {
        grid: (
            cols.div_ceil(THREADS as usize).min(64) as u32,
            rows.min(65_535) as u32,
            1,
        ),
        block: (THREADS, 1, 1),
    }
}

/// `qkv_rope_*`: one block per row.
pub fn qkv_rope(rows: usize) -> Geometry {
    Geometry {
        grid: (rows as u32, 1, 1),
        block: (THREADS, 1, 1),
    }
}

/// `decode_attn_*`: one block of 8 warps per (sequence, kv head).
pub fn decode(batch: usize, kv_heads: usize) -> Geometry {
    Geometry {
        grid: (batch as u32, kv_heads as u32, 1),
        block: (THREADS, 1, 1),
    }
}

/// Query rows of one tile of the CUDA-core varlen kernel (`VA_ROWS`), each served by `VA_TPR` = 4 threads.
pub(crate) const VA_ROWS: usize = 32;
/// Query rows of one tile of the tensor-core varlen kernel (`VM_ROWS`: 4 warps × 16 rows).
pub(crate) const VM_ROWS: usize = 64;

/// Rows of one varlen tile: `mma` is the tensor-core kernel.
pub fn varlen_tile_rows(mma: bool) -> usize {
    if mma {
        VM_ROWS
    } else {
        VA_ROWS
    }
}

/// `varlen_attn_*` / `varlen_mma_*`: one block per (tile, query head).
pub fn varlen(tiles: usize, heads: usize, mma: bool) -> Geometry {
    Geometry {
        grid: (tiles as u32, heads as u32, 1),
        block: (if mma { 128 } else { (VA_ROWS * 4) as u32 }, 1, 1),
    }
}

/// One segment as the varlen kernels see it: packed rows `start..start + len`, after `prefix_len` cached positions
/// held in buffers of capacity `prefix_cap` (0 and 0 without a prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentMeta {
    pub start: usize,
    pub len: usize,
    pub prefix_len: usize,
    pub prefix_cap: usize,
}

/// The varlen kernels' int32 metadata `[cu (S+1) | prefix_len (S) | prefix_cap (S) | tile_seg (T) | tile_row0 (T)]`
/// and the tile count T, for segments that cover rows `0..rows` in order, in tiles of `tile_rows` rows.
pub fn varlen_meta(
    segs: &[SegmentMeta],
    rows: usize,
    tile_rows: usize,
) -> Result<(Vec<i32>, usize)> {
    let i = |x: usize| {
        i32::try_from(x).map_err(|_| candle_core::Error::Msg(format!("{x} overflows i32")))
    };
    let mut cu = vec![0i32];
    let (mut plen, mut pcap, mut tseg, mut trow) = (vec![], vec![], vec![], vec![]);
    let mut next = 0;
    for (s, seg) in segs.iter().enumerate() {
        if seg.start != next {
            bail!(
                "varlen_attention: segment {s} starts at row {} instead of {next}",
                seg.start
            );
        }
        if seg.prefix_len > seg.prefix_cap {
            bail!(
                "varlen_attention: segment {s} has a prefix of {} positions in buffers of {}",
                seg.prefix_len,
                seg.prefix_cap
            );
        }
        next += seg.len;
        cu.push(i(next)?);
        plen.push(i(seg.prefix_len)?);
        pcap.push(i(seg.prefix_cap)?);
        for row0 in (0..seg.len).step_by(tile_rows.max(1)) {
            tseg.push(i(s)?);
            trow.push(i(row0)?);
        }
    }
    if next != rows {
        bail!("varlen_attention: the segments cover {next} of {rows} rows");
    }
    let tiles = tseg.len();
    Ok(([cu, plen, pcap, tseg, trow].concat(), tiles))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(start: usize, len: usize, prefix_len: usize, prefix_cap: usize) -> SegmentMeta {
        SegmentMeta {
            start,
            len,
            prefix_len,
            prefix_cap,
        }
    }

    #[test]
    fn meta_lists_segments_then_tiles() {
        let segs = [seg(0, 70, 33, 40), seg(70, 1, 0, 0), seg(71, 33, 5, 5)];
        let (meta, tiles) = varlen_meta(&segs, 104, 32).unwrap();
        assert_eq!(tiles, 3 + 1 + 2);
        let want = [
            vec![0, 70, 71, 104],
            vec![33, 0, 5],
            vec![40, 0, 5],
            vec![0, 0, 0, 1, 2, 2],
            vec![0, 32, 64, 0, 0, 32],
        ]
        .concat();
        assert_eq!(meta, want);
        assert_eq!(varlen(tiles, 14, false).grid, (6, 14, 1));
    }

    #[test]
    fn meta_refuses_gaps_short_cover_and_overfull_prefixes() {
        let gap = varlen_meta(&[seg(0, 5, 0, 0), seg(6, 5, 0, 0)], 11, 32).unwrap_err();
        assert!(
            gap.to_string()
                .contains("segment 1 starts at row 6 instead of 5"),
            "{gap}"
        );
        let short = varlen_meta(&[seg(0, 5, 0, 0)], 7, 32).unwrap_err();
        assert!(short.to_string().contains("cover 5 of 7 rows"), "{short}");
        let full = varlen_meta(&[seg(0, 5, 9, 8)], 5, 32).unwrap_err();
        assert!(
            full.to_string()
                .contains("prefix of 9 positions in buffers of 8"),
            "{full}"
        );
        assert_eq!(varlen_meta(&[], 0, 64).unwrap(), (vec![0], 0));
    }

    #[test]
    fn geometry_covers_rows_and_columns() {
        assert_eq!(rms_norm(3, 100).block, (128, 1, 1));
        assert_eq!(rms_norm(3, 5000).block, (1024, 1, 1));
        assert_eq!(rows_cols(70_000, 100_000).grid, (64, 65_535, 1));
        assert_eq!(varlen_tile_rows(true), 64);
        assert_eq!(varlen(2, 3, true).block, (128, 1, 1));
    }

    #[test]
    fn kernel_names_follow_the_entry_points() {
        assert_eq!(
            kernel_name("rmsnorm_hf", DType::BF16).unwrap(),
            "rmsnorm_hf_bf16"
        );
        assert!(kernel_name("rmsnorm_hf", DType::U8).is_err());
        assert_eq!(decode_family(64).unwrap(), "decode_attn_d2");
        assert!(decode_family(80).is_err());
    }
}
