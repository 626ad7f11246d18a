//! Per-sequence KV cache: per layer one K and one V buffer of shape (kv_heads, capacity, head_dim), the number
//! of valid positions, the next M-RoPE position and the cached token ids.
//!
//! `Clone` is cheap (tensors are reference-counted) and copy-on-write: a clone shares the buffers until one of
//! the copies appends, which then first copies its valid prefix into fresh buffers. So a prefix cache can be
//! handed to many sequences safely.

use std::sync::Arc;

use candle_core::{Result, Tensor};

/// KV state of one sequence.
#[derive(Debug, Clone)]
pub struct SeqCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    len: usize,
    next_pos: i64,
    tokens: Vec<u32>,
    owner: Arc<()>,
}

impl SeqCache {
    /// Wrap per-layer K/V buffers (kv_heads, capacity ≥ len, head_dim) holding `tokens` (len = tokens.len()).
    pub(crate) fn from_parts(
        k: Vec<Tensor>,
        v: Vec<Tensor>,
        tokens: Vec<u32>,
        next_pos: i64,
    ) -> Self {
        Self {
            k,
            v,
            len: tokens.len(),
            next_pos,
            tokens,
            owner: Arc::new(()),
        }
    }

    /// Number of cached positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Allocated positions per layer.
    pub fn capacity(&self) -> usize {
        self.k.first().map(|t| t.dim(1).unwrap_or(0)).unwrap_or(0)
    }

    /// M-RoPE position (all three axes) of the next token.
    pub fn next_position(&self) -> i64 {
        self.next_pos
    }

    /// Token ids held by the cache (prompt, then generated tokens fed back by `decode`).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Valid K and V of `layer`, (kv_heads, len, head_dim) views.
    pub(crate) fn kv(&self, layer: usize) -> Result<(Tensor, Tensor)> {
        Ok((
            self.k[layer].narrow(1, 0, self.len)?,
            self.v[layer].narrow(1, 0, self.len)?,
        ))
    }

    /// Make sure `additional` more positions fit without reallocation and that the buffers are not shared
    /// with a clone (copying the valid prefix when needed).
    pub fn reserve(&mut self, additional: usize) -> Result<()> {
        let need = self.len + additional;
        let unique = Arc::get_mut(&mut self.owner).is_some();
        if unique && need <= self.capacity() {
            return Ok(());
        }
        let cap = if need <= self.capacity() {
            self.capacity()
        } else {
            need.max(self.len + self.len / 4 + 16)
        };
        for buf in self.k.iter_mut().chain(self.v.iter_mut()) {
            let (h, _, d) = buf.dims3()?;
            let fresh = Tensor::zeros((h, cap, d), buf.dtype(), buf.device())?;
            if self.len > 0 {
                fresh.slice_set(&buf.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
            }
            *buf = fresh;
        }
        self.owner = Arc::new(());
        Ok(())
    }

    /// The buffers of `layer` for decode attention, which writes the new position at `len` itself. Requires a
    /// prior `reserve(1)` in this step (so the buffers are unique and have room).
    pub(crate) fn decode_kv(&self, layer: usize) -> crate::ops::DecodeKv<'_> {
        crate::ops::DecodeKv {
            k: &self.k[layer],
            v: &self.v[layer],
            len: self.len,
        }
    }

    /// Finish a decode step for `token`: one more valid position, next M-RoPE position advances.
    pub(crate) fn commit(&mut self, token: u32) {
        self.len += 1;
        self.next_pos += 1;
        self.tokens.push(token);
    }
}
