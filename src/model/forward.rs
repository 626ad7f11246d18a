//! Packed prefill and batched decode of [`VlModel`], every family.

use candle_core::Tensor;

use super::nn::Pass;
use super::rope::{mrope_tables, rope_index, RopeTokens};
use super::text::{decode_attend, prefill_attend, PackedSeq};
use super::tower::VisionOutput;
use super::{ModelError, PrefillRequest, Result, SeqCache, Trace, VlModel};
use crate::ops::Rows;
use crate::preprocess::{ModelInput, PreparedImage};

/// The packed rows of the image pads and the DeepStack features to add there, one per decoder layer from the
/// first.
type DeepStack = (Tensor, Vec<Tensor>);

/// Host-side plan of one sequence in a packed prefill.
struct SeqPlan<'a> {
    new_ids: &'a [u32],
    all_ids: &'a [u32],
    positions: Vec<[i64; 3]>,
    next_pos: i64,
    prefix: Option<&'a SeqCache>,
}

impl VlModel {
    fn rope_tokens(&self) -> RopeTokens {
        RopeTokens {
            image_token_id: self.cfg.image_token_id,
            spatial_merge_size: self.cfg.vision.spatial_merge_size,
        }
    }

    fn plan<'a>(&self, req: &PrefillRequest<'a>) -> Result<SeqPlan<'a>> {
        let ids = req.input.input_ids.as_slice();
        let p = req.prefix.map_or(0, SeqCache::len);
        if let Some(prefix) = req.prefix {
            if ids.len() <= p || ids[..p] != *prefix.tokens() {
                return Err(ModelError::Input(format!(
                    "prompt ({} tokens) does not extend the prefix cache ({p} tokens) with at least one token",
                    ids.len()
                )));
            }
            if prefix.tokens().contains(&self.cfg.image_token_id) {
                return Err(ModelError::Input("prefix caches must be text-only".into()));
            }
        }
        if ids.is_empty() {
            return Err(ModelError::Input("empty prompt".into()));
        }
        let grids: Vec<[usize; 3]> = req.input.images.iter().map(|im| im.grid_thw).collect();
        let rp = rope_index(ids, &grids, self.rope_tokens())?;
        Ok(SeqPlan {
            new_ids: &ids[p..],
            all_ids: ids,
            positions: rp.pos[p..].to_vec(),
            next_pos: rp.next,
            prefix: req.prefix,
        })
    }

    /// Run the vision tower on `images` (any sizes) → merged tokens (Σ n_tokens, hidden), per image in order.
    pub fn encode_images(
        &self,
        images: &[&PreparedImage],
        trace: Option<&mut super::VisionTrace>,
    ) -> Result<Tensor> {
        Ok(self.encode_images_all(images, trace)?.merged)
    }

    /// [`Self::encode_images`] with the DeepStack features.
    fn encode_images_all(
        &self,
        images: &[&PreparedImage],
        trace: Option<&mut super::VisionTrace>,
    ) -> Result<VisionOutput> {
        let pd = self.cfg.vision.patch_dim();
        let mut data = Vec::with_capacity(images.iter().map(|im| im.patches.len()).sum());
        for (i, im) in images.iter().enumerate() {
            if im.patches.len() != im.n_patches() * pd
                || im.grid_thw[1] % 2 != 0
                || im.grid_thw[2] % 2 != 0
            {
                return Err(ModelError::Input(format!(
                    "image #{i}: patches do not match grid {:?}",
                    im.grid_thw
                )));
            }
            data.extend_from_slice(&im.patches);
        }
        let n = data.len() / pd;
        let pixels = Tensor::from_vec(data, (n, pd), &self.device)?.to_dtype(self.dtype)?;
        let grids: Vec<[usize; 3]> = images.iter().map(|im| im.grid_thw).collect();
        Ok(self.vision.forward(&self.ops, &pixels, &grids, trace)?)
    }

    /// Prefill new sequences (see [`PrefillRequest`]); returns one cache per sequence and (B, vocab) f32
    /// logits of each sequence's last prompt position.
    pub fn prefill(&self, inputs: &[PrefillRequest<'_>]) -> Result<(Vec<SeqCache>, Tensor)> {
        self.prefill_traced(inputs, None)
    }

    /// [`Self::prefill`], optionally recording intermediate outputs into `trace`.
    pub fn prefill_traced(
        &self,
        inputs: &[PrefillRequest<'_>],
        mut trace: Option<&mut Trace>,
    ) -> Result<(Vec<SeqCache>, Tensor)> {
        if inputs.is_empty() {
            return Err(ModelError::Input("prefill of an empty batch".into()));
        }
        let plans = inputs
            .iter()
            .map(|r| self.plan(r))
            .collect::<Result<Vec<_>>>()?;
        let ops = &self.ops;
        let (x, deepstack) = ops.section("prefill.embed_and_vision", &self.device, || {
            self.embed_packed(inputs, &plans, trace.as_deref_mut())
        })?;
        let mut seqs = Vec::with_capacity(plans.len());
        let mut start = 0;
        for p in &plans {
            seqs.push(PackedSeq {
                start,
                len: p.new_ids.len(),
                prefix: p.prefix,
            });
            start += p.new_ids.len();
        }
        let positions: Vec<[i64; 3]> = plans
            .iter()
            .flat_map(|p| p.positions.iter().copied())
            .collect();
        let (cos, sin) = self.rope_tensors(&positions)?;
        let mut x = x;
        let mut kv_layers = Vec::with_capacity(self.text.layers.len());
        // Each prompt's rows are multiplied on their own, so its outputs do not depend on the batch.
        let lens: Vec<usize> = seqs.iter().map(|s| s.len).collect();
        let pass = Pass {
            ops,
            rows: Rows::Segments(&lens),
        };
        ops.section("prefill.text_layers", &self.device, || {
            for (li, layer) in self.text.layers.iter().enumerate() {
                let mut kv = Vec::with_capacity(seqs.len());
                x = layer.forward(pass, &x, (&cos, &sin), |a, qkv| {
                    prefill_attend(ops, a, qkv, (li, &seqs), &mut kv)
                })?;
                kv_layers.push(kv);
                if let Some((rows, ds)) =
                    deepstack.as_ref().and_then(|(r, d)| Some((r, d.get(li)?)))
                {
                    x = x.index_add(rows, ds, 0)?;
                }
                if let Some(t) = trace.as_deref_mut() {
                    t.text_layers.push(x.clone());
                }
            }
            Ok::<(), candle_core::Error>(())
        })?;
        if let Some(t) = trace {
            t.final_norm = Some(self.text.norm.forward(ops, &x)?);
            t.positions = plans.iter().map(|p| p.positions.clone()).collect();
        }
        let last: Vec<u32> = seqs.iter().map(|s| (s.start + s.len - 1) as u32).collect();
        let logits = self.text.logits(
            ops,
            &x.index_select(&Tensor::new(last.as_slice(), &self.device)?, 0)?,
        )?;
        let mut caches = Vec::with_capacity(plans.len());
        for (i, p) in plans.iter().enumerate() {
            let (k, v) = kv_layers.iter().map(|l| l[i].clone()).unzip();
            caches.push(SeqCache::from_parts(k, v, p.all_ids.to_vec(), p.next_pos));
        }
        Ok((caches, logits))
    }

    /// Embed all new tokens of `plans` (packed) and scatter the merged image features into the pad positions;
    /// with DeepStack features, also returns the packed rows of the image pads and the features (added there
    /// after the first decoder layers).
    fn embed_packed(
        &self,
        inputs: &[PrefillRequest<'_>],
        plans: &[SeqPlan<'_>],
        trace: Option<&mut Trace>,
    ) -> Result<(Tensor, Option<DeepStack>)> {
        let ids: Vec<u32> = plans
            .iter()
            .flat_map(|p| p.new_ids.iter().copied())
            .collect();
        let emb = self
            .text
            .embed(&Tensor::new(ids.as_slice(), &self.device)?)?;
        let images: Vec<&PreparedImage> =
            inputs.iter().flat_map(|r| r.input.images.iter()).collect();
        let mut trace = trace;
        if images.is_empty() {
            if let Some(t) = trace {
                t.inputs_embeds = Some(emb.clone());
            }
            return Ok((emb, None));
        }
        let out = self.encode_images_all(&images, trace.as_deref_mut().map(|t| &mut t.vision))?;
        let vis = out.merged;
        let n = ids.len();
        let mut k = 0u32;
        let index: Vec<u32> = (0..n)
            .map(|r| {
                if ids[r] == self.cfg.image_token_id {
                    k += 1;
                    (n as u32) + k - 1
                } else {
                    r as u32
                }
            })
            .collect();
        if k as usize != vis.dim(0)? {
            return Err(ModelError::Input(format!(
                "{k} image-pad tokens but {} image features",
                vis.dim(0)?
            )));
        }
        let all = Tensor::cat(&[&emb, &vis.to_dtype(emb.dtype())?], 0)?;
        let x = all.index_select(&Tensor::new(index.as_slice(), &self.device)?, 0)?;
        if let Some(t) = trace {
            t.vision_merged = Some(vis);
            t.inputs_embeds = Some(x.clone());
            t.deepstack = out.deepstack.clone();
        }
        let deepstack = if out.deepstack.is_empty() {
            None
        } else {
            let rows: Vec<u32> = (0..n as u32)
                .filter(|&r| ids[r as usize] == self.cfg.image_token_id)
                .collect();
            let ds = out
                .deepstack
                .iter()
                .map(|d| d.to_dtype(x.dtype()))
                .collect::<candle_core::Result<_>>()?;
            Some((Tensor::new(rows.as_slice(), &self.device)?, ds))
        };
        Ok((x, deepstack))
    }

    /// M-RoPE cos/sin half-tables for packed positions, in the activation dtype.
    fn rope_tensors(&self, positions: &[[i64; 3]]) -> Result<(Tensor, Tensor)> {
        let half = self.cfg.text.head_dim / 2;
        let (c, s) = mrope_tables(positions, &self.inv_freq, &self.rope_axes);
        let n = positions.len();
        let cos = Tensor::from_vec(c, (n, half), &self.device)?.to_dtype(self.dtype)?;
        let sin = Tensor::from_vec(s, (n, half), &self.device)?.to_dtype(self.dtype)?;
        Ok((cos, sin))
    }

    /// `f` on the compute pool where the model runs on the CPU ([`crate::ops::threads::on_compute_pool`]);
    /// elsewhere on the calling thread, which holds the device's context. Decode steps only: a prefill's tensors
    /// of tens of MB, allocated on a pool thread, come from glibc's per-thread arenas, which map and return such
    /// blocks each time (a screenshot prompt's prefill took 6.6x the page faults and ~10 % longer there).
    fn on_pool<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        if self.device.is_cpu() {
            crate::ops::threads::on_compute_pool(f)
        } else {
            f()
        }
    }

    /// One decode step: `tokens[i]` is appended to `caches[i]`; returns (B, vocab) f32 logits.
    pub fn decode(&self, tokens: &[u32], caches: &mut [&mut SeqCache]) -> Result<Tensor> {
        self.on_pool(|| self.decode_on_pool(tokens, caches))
    }

    fn decode_on_pool(&self, tokens: &[u32], caches: &mut [&mut SeqCache]) -> Result<Tensor> {
        if tokens.len() != caches.len() || tokens.is_empty() {
            return Err(ModelError::Input(format!(
                "decode: {} tokens for {} caches",
                tokens.len(),
                caches.len()
            )));
        }
        for c in caches.iter_mut() {
            c.reserve(1)?;
        }
        let positions: Vec<[i64; 3]> = caches.iter().map(|c| [c.next_position(); 3]).collect();
        let (cos, sin) = self.rope_tensors(&positions)?;
        let mut x = self.text.embed(&Tensor::new(tokens, &self.device)?)?;
        let t = &self.cfg.text;
        let group = t.num_attention_heads / t.num_key_value_heads.max(1);
        let ops = &self.ops;
        let layers: Vec<Vec<crate::ops::DecodeKv<'_>>> = (0..self.text.layers.len())
            .map(|l| caches.iter().map(|c| c.decode_kv(l)).collect())
            .collect();
        let step = ops.decode_step(
            layers,
            (&self.device, self.dtype),
            (t.head_dim, group),
            self.decode_attention,
        )?;
        // Every row is its own sequence: independent rows in the GEMMs.
        let pass = Pass {
            ops,
            rows: Rows::Independent,
        };
        ops.section("decode.text_layers", &self.device, || {
            for (li, layer) in self.text.layers.iter().enumerate() {
                x = layer.forward(pass, &x, (&cos, &sin), |a, qkv| {
                    decode_attend(a, qkv, li, &step)
                })?;
            }
            Ok::<(), candle_core::Error>(())
        })?;
        drop(step);
        for (c, &t) in caches.iter_mut().zip(tokens) {
            c.commit(t);
        }
        Ok(self.text.logits(ops, &x)?)
    }

    /// Build a reusable prefix cache from text-only token ids (e.g. the rendered system prompt).
    pub fn prefill_prefix(&self, ids: &[u32]) -> Result<SeqCache> {
        if ids.contains(&self.cfg.image_token_id) {
            return Err(ModelError::Input("prefix caches must be text-only".into()));
        }
        let input = ModelInput {
            input_ids: ids.to_vec(),
            images: Vec::new(),
        };
        let (mut caches, _) = self.prefill(&[PrefillRequest::new(&input)])?;
        Ok(caches.remove(0))
    }
}
