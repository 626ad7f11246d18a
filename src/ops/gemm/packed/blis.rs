//! The loop order of BLIS for a tile whose `a` side is broadcast: a packed `a` micro-panel (`MR` rows × `KC`
//! depths) stays in L1 while the tile sweeps a block of `w` panels packed into the thread's own L2, and the
//! packed rows of `a` are shared by the threads from L3. The threads split the columns of the output into blocks
//! sized for L2 (each packs its own `w` block; no two write the same output), so they share nothing but the
//! packed `a` of a depth block.
//!
//! The sums are those of [`super::sgemm_nt`]: one FMA chain per depth block of `KC` from zero, the blocks added
//! to the output in order; the row and column blocks only change which tiles run when.

use std::cell::RefCell;
use std::sync::OnceLock;

use rayon::prelude::*;

use super::micro::Micro;
use super::{pack_panel, pack_rows, run_tile, SharedOut};

/// The cache sizes the blocking is derived from (bytes, per core for L1 and L2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Caches {
    pub l1d: usize,
    pub l2: usize,
}

impl Caches {
    /// Sizes assumed where the system does not say: a 32 KiB L1d and a 1 MiB L2.
    const FALLBACK: Self = Self {
        l1d: 32 << 10,
        l2: 1 << 20,
    };

    /// This CPU's data caches as Linux reports them (`/sys/devices/system/cpu/cpu0/cache`), looked up once; the
    /// fallback sizes elsewhere.
    pub fn this_cpu() -> Self {
        static CACHES: OnceLock<Caches> = OnceLock::new();
        *CACHES.get_or_init(|| {
            Self::from_sysfs("/sys/devices/system/cpu/cpu0/cache").unwrap_or(Self::FALLBACK)
        })
    }

    fn from_sysfs(dir: &str) -> Option<Self> {
        let mut found = Self { l1d: 0, l2: 0 };
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok();
            let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
            else {
                continue;
            };
            let Some(bytes) = parse_size(&size) else {
                continue;
            };
            match (level.trim(), kind.trim()) {
                ("1", "Data") => found.l1d = bytes,
                ("2", "Unified" | "Data") => found.l2 = bytes,
                _ => {}
            }
        }
        (found.l1d > 0 && found.l2 > 0).then_some(found)
    }
}

/// A cache size as sysfs writes it: `48K`, `2048K`, `2M`, or bytes.
fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().last()? {
        (i, 'K') => (&s[..i], 1 << 10),
        (i, 'M') => (&s[..i], 1 << 20),
        (i, 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<usize>().ok().map(|v| v * unit)
}

/// How a product is cut for the caches: rows of `a` packed at once (shared by the threads from L3) and the most
/// columns of `w` a thread packs at once (its L2 block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Blocking {
    /// Bytes of packed `a` at once: its rows are packed in blocks of this size over all depths.
    pub a_bytes: usize,
    /// Most columns of `w` per L2 block, a multiple of `NR`.
    pub nc: usize,
}

impl Blocking {
    /// The blocking of the tile `M` for `caches`: a `w` block of half the L2 (the other half for the `a`
    /// micro-panels passing through and the output), `a` packed 32 MiB at a time.
    pub fn for_caches<M: Micro>(caches: Caches) -> Self {
        let panel = M::NR * M::KC * 4;
        let nc = (caches.l2 / 2 / panel).max(1) * M::NR;
        Self {
            a_bytes: 32 << 20,
            nc,
        }
    }

    /// Rows of `a` per packed block for depth `k`: a multiple of `MR`.
    fn mc<M: Micro>(self, k: usize) -> usize {
        (self.a_bytes / (M::MR * k.max(1) * 4)).max(1) * M::MR
    }
}

thread_local! {
    /// The calling thread's packed rows of `a`, kept between products (at most [`Blocking::a_bytes`]).
    static APACK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A worker's packed `w` block.
    static WPACK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `c = a · wᵀ` (`dims` = (m, k, n), all row-major) with the tile `M` and `blocking`, on rayon's threads:
/// per block of rows, `a` packed over all depths by all threads, then column blocks as tasks, each packing its
/// `w` block one depth block at a time.
pub(super) fn sgemm_nt_blis<M: Micro>(
    a: &[f32],
    w: &[f32],
    dims: (usize, usize, usize),
    c: &mut [f32],
    blocking: Blocking,
) {
    let (m, k, n) = dims;
    assert!(a.len() >= m * k && w.len() >= n * k && c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    let out = SharedOut(c.as_mut_ptr());
    let col_blocks = column_blocks::<M>(n, blocking.nc, rayon::current_num_threads());
    let mc = blocking.mc::<M>(k);
    // Taken out of the thread's cell while the threads run: a product started on this thread meanwhile (rayon
    // runs other tasks while it waits) finds it empty and allocates its own.
    let mut apack = APACK.take();
    for ic in (0..m).step_by(mc) {
        row_block::<M>(
            a,
            w,
            dims,
            (ic, m.min(ic + mc)),
            &mut apack,
            &col_blocks,
            &out,
        );
    }
    APACK.set(apack);
}

/// The rows (first, end) of a product: `a`'s rows packed into `apack` over all depths by all threads, then the
/// column blocks `col_blocks` as tasks.
fn row_block<M: Micro>(
    a: &[f32],
    w: &[f32],
    dims: (usize, usize, usize),
    rows: (usize, usize),
    apack: &mut Vec<f32>,
    col_blocks: &[(usize, usize)],
    out: &SharedOut,
) {
    let k = dims.1;
    let len = (rows.1 - rows.0).div_ceil(M::MR) * M::MR * k;
    // Every value is written by the packing below (padding rows as zeros), so the buffer is only grown.
    if apack.len() < len {
        apack.resize(len, 0.0);
    }
    let micro_rows = len / k;
    apack[..len]
        .par_chunks_mut(micro_rows * M::KC)
        .enumerate()
        .for_each(|(d, blk)| {
            let (pc, kc) = (d * M::KC, M::KC.min(k - d * M::KC));
            blk.par_chunks_mut(M::MR * kc)
                .enumerate()
                .for_each(|(t, dst)| {
                    let i0 = rows.0 + t * M::MR;
                    let ab = |i: usize| &a[i * k..(i + 1) * k];
                    pack_rows::<M>(ab, (i0, rows.1.min(i0 + M::MR)), (pc, kc), dst)
                })
        });
    let block = RowBlock {
        w,
        dims,
        rows,
        packed_a: &apack[..len],
    };
    // SAFETY: the CPU runs M (checked by the callers); the column blocks are disjoint.
    col_blocks
        .par_iter()
        .for_each(|&cols| unsafe { block.columns::<M>(cols, out) });
}

/// The output's columns cut into blocks of at most `nc` (whole `NR` panels but the last), at least four per
/// thread where there are panels enough (so that a thread slowed by others' work leaves its blocks to the
/// rest), of nearly equal width.
fn column_blocks<M: Micro>(n: usize, nc: usize, threads: usize) -> Vec<(usize, usize)> {
    let panels = n.div_ceil(M::NR);
    let count = panels.div_ceil(nc / M::NR).max(threads).min(panels);
    let per = panels.div_ceil(count);
    (0..panels)
        .step_by(per)
        .map(|p| (p * M::NR, n.min((p + per) * M::NR)))
        .collect()
}

/// One block of rows of a product: `w` and the product's `dims`, the rows (first, end) and the rows packed for
/// them (for each depth block in order, its `MR`-row micro-panels).
struct RowBlock<'a> {
    w: &'a [f32],
    dims: (usize, usize, usize),
    rows: (usize, usize),
    packed_a: &'a [f32],
}

impl RowBlock<'_> {
    /// For each depth block in order, pack the columns `cols` (first, end) of `w` into this thread's L2 block and
    /// multiply every packed row micro-panel by them, into `out` (written for the first depth block, added to
    /// after).
    ///
    /// # Safety
    /// The CPU runs `M`; `out` is the product's output and no other task writes these columns.
    unsafe fn columns<M: Micro>(&self, (j0, j1): (usize, usize), out: &SharedOut) {
        let ((m, k, n), (ic, _)) = (self.dims, self.rows);
        let panels = (j1 - j0).div_ceil(M::NR);
        let micro = (self.rows.1 - ic).div_ceil(M::MR);
        WPACK.with(|cell| {
            let mut bp = cell.borrow_mut();
            for pc in (0..k).step_by(M::KC) {
                let kc = M::KC.min(k - pc);
                bp.resize(panels * M::NR * kc, 0.0);
                for (p, dst) in bp.chunks_mut(M::NR * kc).enumerate() {
                    let first = j0 + p * M::NR;
                    let wr = |j: usize| &self.w[j * k..(j + 1) * k];
                    pack_panel::<M>(wr, (first, j1.min(first + M::NR)), (pc, kc), dst);
                }
                let packed_a = &self.packed_a[pc * micro * M::MR..][..micro * M::MR * kc];
                for (t, ablk) in packed_a.chunks(M::MR * kc).enumerate() {
                    let i0 = ic + t * M::MR;
                    for (p, b) in bp.chunks(M::NR * kc).enumerate() {
                        let jj = j0 + p * M::NR;
                        let tile = (M::MR.min(m - i0), M::NR.min(j1 - jj), pc == 0);
                        // The tile lies inside c: i0 < m, jj < n.
                        run_tile::<M>(tile, kc, ablk, b, out.at(i0 * n + jj), n);
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::check::{self, matches_reference, rows_stand_alone, skip_without_avx512};
    use super::super::micro::Avx512;
    use super::*;

    /// Blocks far smaller than the caches': rows of `a` in blocks of two micro-panels at the depth of the
    /// products below, `w` blocks of two panels, so that every product crosses row, column and depth blocks.
    fn small_blocks(a: &[f32], w: &[f32], dims: (usize, usize, usize), c: &mut [f32]) {
        let blocking = Blocking {
            a_bytes: 2 * Avx512::MR * 4 * dims.1.max(1),
            nc: 2 * Avx512::NR,
        };
        sgemm_nt_blis::<Avx512>(a, w, dims, c, blocking);
    }

    #[test]
    fn small_blocks_match_a_float64_reference() {
        if skip_without_avx512() {
            return;
        }
        let (mr, nr, kc) = (Avx512::MR, Avx512::NR, Avx512::KC);
        let shapes = [
            (1, 1, 1),
            (5, 7, 15),
            (mr, 16, nr),
            (3 * mr + 1, kc + 1, 5 * nr + 3),
            (2 * mr - 1, 2 * kc + 17, 9 * nr),
            (4, 0, 9),
            (0, 5, 3),
            (3, 5, 0),
        ];
        matches_reference(small_blocks, &shapes);
    }

    /// Rows alone across row blocks and in the middle of micro-panels, against the whole product with small
    /// blocks, with the caches' blocks, and on one thread.
    #[test]
    fn a_rows_bits_depend_neither_on_the_blocks_nor_on_the_other_rows() {
        if skip_without_avx512() {
            return;
        }
        let dims @ (m, k, n) = (5 * Avx512::MR + 3, Avx512::KC + 40, 7 * Avx512::NR + 5);
        rows_stand_alone(small_blocks, dims, &[3..4, 20..47, 60..m]);
        let (a, w) = (check::values(m * k, 11), check::values(n * k, 12));
        let cached = |a: &[f32], w: &[f32], d, c: &mut [f32]| {
            let blocking = Blocking::for_caches::<Avx512>(Caches::this_cpu());
            sgemm_nt_blis::<Avx512>(a, w, d, c, blocking)
        };
        assert_eq!(
            check::product(cached, &a, &w, dims),
            check::product(small_blocks, &a, &w, dims)
        );
    }

    #[test]
    fn column_blocks_cover_the_columns_in_whole_panels_with_a_block_per_thread() {
        let nr = Avx512::NR;
        for (n, nc, threads) in [(1280, 1024, 2), (9728, 1024, 2), (30, 64, 4), (896, 64, 3)] {
            let blocks = column_blocks::<Avx512>(n, nc, threads);
            assert_eq!(blocks.first().map(|b| b.0), Some(0));
            assert_eq!(blocks.last().map(|b| b.1), Some(n));
            assert!(blocks
                .windows(2)
                .all(|p| p[0].1 == p[1].0 && p[0].1 % nr == 0));
            assert!(blocks.iter().all(|b| b.1 - b.0 <= nc.max(nr)));
            assert!(
                blocks.len() >= threads.min(n.div_ceil(nr)),
                "{n} {nc} {threads}: {blocks:?}"
            );
        }
        assert_eq!(
            column_blocks::<Avx512>(1280, 1024, 2),
            vec![(0, 640), (640, 1280)]
        );
    }

    #[test]
    fn cache_sizes_are_read_from_sysfs_and_the_blocks_follow_them() {
        let dir = std::env::temp_dir().join(format!("caches-{}", std::process::id()));
        for (index, level, kind, size) in [
            ("index0", "1", "Data", "48K"),
            ("index1", "1", "Instruction", "32K"),
            ("index2", "2", "Unified", "2048K"),
            ("index3", "3", "Unified", "260M"),
        ] {
            let d = dir.join(index);
            std::fs::create_dir_all(&d).unwrap();
            for (name, value) in [("level", level), ("type", kind), ("size", size)] {
                std::fs::write(d.join(name), format!("{value}\n")).unwrap();
            }
        }
        let caches = Caches::from_sysfs(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        let caches = caches.unwrap();
        assert_eq!(
            caches,
            Caches {
                l1d: 48 << 10,
                l2: 2 << 20
            }
        );
        assert_eq!(Caches::from_sysfs("/nonexistent/cache"), None);
        assert_eq!(
            (parse_size("512"), parse_size("1M"), parse_size("x")),
            (Some(512), Some(1 << 20), None)
        );
        // Half of a 2 MiB L2 in panels of 32 columns × 384 depths (48 KiB): 21 panels.
        assert_eq!(Blocking::for_caches::<Avx512>(caches).nc, 21 * 32);
        let tiny = Blocking::for_caches::<Avx512>(Caches {
            l1d: 1 << 10,
            l2: 1 << 10,
        });
        assert_eq!(tiny.nc, Avx512::NR);
    }
}
