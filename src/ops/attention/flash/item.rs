//! One work item of the flash attention: a block of up to 32 queries of one head of one segment, against the
//! segment's keys block by block.

use half::bf16;

use super::{
    dots, softmax_block, tiles, Heads, Products, Tile, CHUNK, KEY_BLOCK, QUERY_BLOCK, TILE,
};
use crate::ops::gemm::bf16::amx as gemm_amx;

/// The output's first value, shared by the work items (each writes only its own rows of its own head).
pub(super) struct OutPtr(pub(super) *mut bf16);

// SAFETY: the items write disjoint parts of the output, which outlives them.
unsafe impl Sync for OutPtr {}

thread_local! {
    /// Each thread's buffers, kept across items and calls (allocating and faulting them in per batch of items
    /// cost as much as the short segments' products).
    pub(super) static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// A work item's buffers, reused across the items of a thread.
#[derive(Default)]
pub(super) struct Scratch {
    /// Scores of two blocks: 32 queries × [`KEY_BLOCK`] keys each.
    scores: Vec<f32>,
    /// The block's weights in bf16, rows of [`KEY_BLOCK`] (zero past its keys to a whole chunk).
    weights: Vec<bf16>,
    /// The f32 output accumulators: 32 queries × the value tiles' 16 dimensions each.
    acc: Vec<f32>,
    /// The queries, each row padded with zeros to whole chunks.
    queries: Vec<bf16>,
}

/// One block of up to 32 queries of one head of one segment.
pub(super) struct Item<'a> {
    pub(super) q: &'a [bf16],
    pub(super) head: usize,
    /// First row and count.
    pub(super) rows: (usize, usize),
    /// The first query's position among the segment's keys (its cached prefix first).
    pub(super) position: usize,
    /// The segment's keys.
    pub(super) keys: usize,
    /// Whether each query sees only the keys up to its own position.
    pub(super) causal: bool,
    /// The KV head's packed keys and values.
    pub(super) packed: &'a (Vec<Tile>, Vec<Tile>),
    /// What multiplies them.
    pub(super) products: Products,
}

impl Item<'_> {
    /// # Safety
    /// [`super::covers`] holds; no other item writes these rows of this head.
    pub(super) unsafe fn run(&self, h: Heads, scale: f32, s: &mut Scratch, out: &OutPtr) {
        let (chunks, dim_tiles) = (h.chunks(), h.dim_tiles());
        let (qstride, astride) = (chunks * CHUNK, dim_tiles * TILE);
        s.scores.resize(2 * QUERY_BLOCK * KEY_BLOCK, 0.0);
        s.weights.resize(QUERY_BLOCK * KEY_BLOCK, bf16::ZERO);
        // The accumulators need no zeros: the first key block's products start from zero tiles.
        s.acc.resize(QUERY_BLOCK * astride, 0.0);
        // Rows past the block's queries keep what they hold: their sums are never read.
        s.queries.resize(QUERY_BLOCK * qstride, bf16::ZERO);
        let (first, nq) = self.rows;
        for r in 0..nq {
            let src = &self.q[((first + r) * h.heads + self.head) * h.d..][..h.d];
            // SAFETY: the CPU has AVX-512F and BW (covers()).
            unsafe { super::rows::padded(src, &mut s.queries[r * qstride..][..qstride]) };
        }
        let two = nq > TILE;
        let (mut max, mut sum) = ([f32::NEG_INFINITY; QUERY_BLOCK], [0f32; QUERY_BLOCK]);
        let tiles = self.products == Products::Tiles;
        if tiles {
            // SAFETY: covers() holds, so the CPU has AMX and the process its tile state.
            unsafe { gemm_amx::configure_tiles() };
        }
        // Keys any of the block's queries sees; a block's length is torch's (up to 512 of all the keys), the
        // keys past a query's position masked with -inf inside it.
        let seen = match self.causal {
            true => self.keys.min(self.position + nq),
            false => self.keys,
        };
        // SAFETY: as above.
        unsafe { self.key_blocks(h, scale, s, (seen, two), (&mut max, &mut sum)) };
        if tiles {
            // SAFETY: as above.
            unsafe { gemm_amx::release_tiles() };
        }
        for (r, sum) in sum.iter().enumerate().take(nq) {
            let inv = 1.0 / sum;
            // SAFETY: row first + r of this head lies in the output; this item alone writes it.
            let o = unsafe {
                std::slice::from_raw_parts_mut(
                    out.0.add(((first + r) * h.heads + self.head) * h.d),
                    h.d,
                )
            };
            // SAFETY: the CPU has AVX-512F, BW, VL, DQ and BF16 (covers()).
            unsafe { super::rows::scaled(&s.acc[r * astride..][..h.d], inv, o) };
        }
    }

    /// The online softmax over the keys the queries see (`seen`), block by block: the scores of a block, its
    /// softmax row by row, `weights · v` into the accumulators; `max` and `sum` the rows' running maximum and
    /// sum. The next block's scores are issued between the rows of a block's softmax, so that on AMX the tiles
    /// and the vector units run side by side (by dot products they run in turn). (Issuing the previous block's
    /// weighted sums there as well was slower.)
    ///
    /// # Safety
    /// As [`Self::run`], with the tiles configured (for tiles) and the scratch buffers sized and the queries
    /// copied by it.
    unsafe fn key_blocks(
        &self,
        h: Heads,
        scale: f32,
        s: &mut Scratch,
        (seen, two): (usize, bool),
        (max, sum): (&mut [f32; QUERY_BLOCK], &mut [f32; QUERY_BLOCK]),
    ) {
        let (chunks, dim_tiles) = (h.chunks(), h.dim_tiles());
        let (keys, values) = self.packed;
        let nq = self.rows.1;
        let scores = ScoreBlocks {
            products: self.products,
            queries: (s.queries.as_ptr(), chunks * CHUNK),
            keys,
            chunks,
            d: h.d,
            two,
            seen,
        };
        let sums = ValueSums {
            products: self.products,
            values,
            dim_tiles,
            acc: (s.acc.as_mut_ptr(), dim_tiles * TILE),
            two,
        };
        // Two buffers of scores: the block's, and the next one's on the tiles. (The buffers are reached through
        // pointers taken once from the vectors, which are not touched otherwise while these are in use.)
        let base = s.scores.as_mut_ptr();
        // SAFETY: the scores hold two blocks.
        let bufs = [base, unsafe { base.add(QUERY_BLOCK * KEY_BLOCK) }];
        // SAFETY: the queries hold 32 rows of their stride, each buffer 32 rows of KEY_BLOCK.
        unsafe { scores.issue(0, bufs[0], 0..scores.pairs(0)) };
        for (b, k0) in (0..seen).step_by(KEY_BLOCK).enumerate() {
            let (kn, vis) = (KEY_BLOCK.min(self.keys - k0), KEY_BLOCK.min(seen - k0));
            let next = (k0 + KEY_BLOCK < seen).then_some(k0 + KEY_BLOCK);
            let (units, mut issued) = (next.map_or(0, |k| scores.pairs(k)), 0);
            for r in 0..nq {
                // SAFETY: row r of buffer b % 2 holds KEY_BLOCK scores; the tiles write the other buffer.
                let row =
                    unsafe { std::slice::from_raw_parts_mut(bufs[b % 2].add(r * KEY_BLOCK), kn) };
                let sees = match self.causal {
                    true => (self.position + r + 1).saturating_sub(k0).min(vis),
                    false => vis,
                };
                row[sees..].fill(f32::NEG_INFINITY);
                let w = &mut s.weights[r * KEY_BLOCK..][..kn.next_multiple_of(CHUNK)];
                // SAFETY: the CPU has AVX-512F, BW, VL, DQ and BF16 (covers()).
                let rescale = unsafe { softmax_block(row, w, scale, (&mut max[r], &mut sum[r])) };
                // On the tiles the next block's scores are spread over the rows; by dot products they run at
                // once, as whole register blocks of three key tiles (spread, they ran as blocks of two).
                let due = match self.products {
                    Products::Tiles => (r + 1) * units / nq,
                    Products::Dots => units,
                };
                if let Some(k) = next.filter(|_| due > issued) {
                    // SAFETY: as for the first block.
                    unsafe { scores.issue(k, bufs[(b + 1) % 2], issued..due) };
                    issued = due;
                }
                if k0 > 0 {
                    let (acc, stride) = sums.acc;
                    // SAFETY: the accumulators hold 32 rows of their stride; the tiles are not writing them now.
                    let row =
                        unsafe { std::slice::from_raw_parts_mut(acc.add(r * stride), stride) };
                    row.iter_mut().for_each(|x| *x *= rescale);
                }
            }
            // SAFETY: the block's weights are whole.
            unsafe { sums.issue((k0, vis), s.weights.as_ptr()) };
        }
    }
}

/// The score products of one item's key blocks: its queries against the blocks' keys.
struct ScoreBlocks<'a> {
    /// The queries (32 rows) and their row stride.
    queries: (*const bf16, usize),
    /// The KV head's packed keys.
    keys: &'a [Tile],
    chunks: usize,
    /// The head dimension.
    d: usize,
    /// Whether a second tile of queries is in use.
    two: bool,
    /// Keys any of the queries sees.
    seen: usize,
    products: Products,
}

impl ScoreBlocks<'_> {
    /// Pairs of key tiles of the block from key `k0`.
    fn pairs(&self, k0: usize) -> usize {
        KEY_BLOCK.min(self.seen - k0).div_ceil(TILE).div_ceil(2)
    }

    /// The scores of pairs `pairs` of the block from key `k0` into `buf` (rows of [`KEY_BLOCK`]).
    ///
    /// # Safety
    /// [`super::covers`] holds (for tiles: configured on this thread); the queries hold 32 rows, `buf` 32 rows
    /// of [`KEY_BLOCK`].
    unsafe fn issue(&self, k0: usize, buf: *mut f32, pairs: std::ops::Range<usize>) {
        let key_tiles = KEY_BLOCK.min(self.seen - k0).div_ceil(TILE);
        // SAFETY: the block's key tiles lie in the packed keys (they cover every key, to whole tiles).
        unsafe {
            let keys = &self.keys[k0 / TILE * self.chunks..];
            let shape = (key_tiles, self.chunks, self.two);
            match self.products {
                Products::Tiles => tiles::scores(self.queries, keys, shape, buf, pairs),
                Products::Dots => dots::scores(self.queries, keys, shape, buf, (pairs, self.d / 2)),
            }
        }
    }
}

/// The weighted sums of one item's key blocks: their weights against the blocks' values, into the accumulators.
struct ValueSums<'a> {
    /// The KV head's packed values.
    values: &'a [Tile],
    dim_tiles: usize,
    /// The f32 accumulators (32 rows) and their row stride.
    acc: (*mut f32, usize),
    /// Whether a second tile of queries is in use.
    two: bool,
    products: Products,
}

impl ValueSums<'_> {
    /// `acc += weights · v` (`acc = ` from the first block) of the block from key `k0` whose queries see `vis`
    /// of its keys, the weights in `weights` (rows of [`KEY_BLOCK`]).
    ///
    /// # Safety
    /// [`super::covers`] holds (for tiles: configured on this thread); `weights` holds 32 rows of [`KEY_BLOCK`],
    /// the accumulators 32 rows.
    unsafe fn issue(&self, (k0, vis): (usize, usize), weights: *const bf16) {
        // SAFETY: the block's value tiles lie in the packed values (they cover every key, to whole chunks).
        unsafe {
            let values = &self.values[k0 / CHUNK * self.dim_tiles..];
            let shape = (vis.div_ceil(CHUNK), self.dim_tiles, self.two, k0 == 0);
            match self.products {
                Products::Tiles => tiles::weighted_sums(weights, values, shape, self.acc),
                Products::Dots => dots::weighted_sums(weights, values, shape, self.acc, vis),
            }
        }
    }
}
