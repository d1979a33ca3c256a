//! Which forward pass runs where: the dispatch of [`Decoder`]'s entry points (logits, final
//! hidden states, each prompt's last hidden state) between the packed CPU engine
//! (`cpu::infer`), the training path (`cpu::train`), the fused kernels and candle's own
//! operations ([`Pass`]), over the model of `model.rs`.
//!
//! Over 600 lines: every entry point's checks and dispatch in one place (the kept-keys pass
//! and its continuation among them), so that each path's fallback is visible beside it.

use candle_core::Tensor;
use candle_nn::Module;

use super::LmError;
use super::cpu::infer as engine;
use super::cpu::infer::Packed;
use super::cpu::kernels;
use super::cpu::train as tape;
pub use super::cpu::train::Band;
use super::lora::Adapter;
use super::model::{Decoder, Lora, Pass, Runs, causal_bias, padded, proj};

impl Decoder {
    /// Logits `(b, t, vocab)` for token ids `(b, t)` (u32). `bias` is an additive attention
    /// bias broadcastable to `(b, 1, t, t)` (0 or −∞; causal when `None`).
    pub fn forward(
        &self,
        ids: &Tensor,
        bias: Option<&Tensor>,
        path: Pass,
    ) -> Result<Tensor, LmError> {
        self.forward_with(ids, bias, path, Lora::Base)
    }

    /// [`Decoder::forward`] with LoRA adapters over the base weights (per prompt: the rows
    /// of `ids`).
    pub fn forward_with(
        &self,
        ids: &Tensor,
        bias: Option<&Tensor>,
        path: Pass,
        lora: Lora<'_>,
    ) -> Result<Tensor, LmError> {
        let hidden = self.hidden_with(ids, bias, path, lora)?;
        Ok(self.head.forward(&hidden)?)
    }

    /// The final hidden state at each prompt's last token, `(prompts, hidden)`, each row what
    /// that prompt gives alone. On the CPU both the fast and the training path pack the
    /// prompts without padding (the training path falls back to right-padding them with
    /// `pad` when it cannot read the weights in place; causal attention, so padding never
    /// reaches a real token), and compute the last layer for the last tokens only.
    pub fn last_hidden<P: AsRef<[u32]>>(
        &self,
        prompts: &[P],
        pad: u32,
        path: Pass,
        lora: Lora<'_>,
    ) -> Result<Tensor, LmError> {
        let device = self.embed.device();
        if let Lora::Each(each) = lora
            && each.len() != prompts.len()
        {
            return Err(LmError::Candle(candle_core::Error::Msg(format!(
                "{} adapters for {} prompts",
                each.len(),
                prompts.len()
            ))));
        }
        let path = match path {
            Pass::Train if !device.is_cpu() => Pass::Composed,
            p => p,
        };
        // An empty prompt reads one padding token.
        let prompts: Vec<&[u32]> = prompts
            .iter()
            .map(|p| match p.as_ref() {
                [] => std::slice::from_ref(&pad),
                p => p,
            })
            .collect();
        let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(1).max(1);
        if longest > self.cfg.max_position_embeddings {
            return Err(LmError::TooLong {
                tokens: longest,
                max: self.cfg.max_position_embeddings,
            });
        }
        match path {
            Pass::Fast if device.is_cpu() => match self.engine(&prompts, false, lora)? {
                Some(h) => Ok(h),
                None => self.last_hidden_packed(&prompts, lora),
            },
            Pass::Train => match self.tape(&prompts, lora, tape::Outs::Last)? {
                Some(h) => Ok(h),
                None => self.last_hidden_train(&prompts, pad, longest, lora),
            },
            _ => {
                let (ids, last) = padded(&prompts, pad, longest, device)?;
                let hidden = self.hidden_rows(&ids, None, path, lora)?;
                Ok(hidden.index_select(&last, 0)?)
            }
        }
    }

    /// [`Decoder::last_hidden`] on the fast path on the CPU, keeping every layer's keys and
    /// values for [`Decoder::extend_last_hidden`]: `None` where that path cannot run (another
    /// device, weights it cannot read in place, a misshapen adapter), where the caller takes
    /// [`Decoder::last_hidden`].
    pub fn last_hidden_kept(
        &self,
        prompts: &[Vec<u32>],
        lora: Lora<'_>,
    ) -> Result<Option<(Tensor, engine::KvCache)>, LmError> {
        let each_fits = !matches!(lora, Lora::Each(each) if each.len() != prompts.len());
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        if !self.embed.device().is_cpu()
            || !each_fits
            || prompts.iter().any(Vec::is_empty)
            || longest > self.cfg.max_position_embeddings
        {
            return Ok(None);
        }
        let prompts: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
        let Some(packed) = self.packed(&prompts, lora)? else {
            return Ok(None);
        };
        let mut kept = None;
        let Some(out) = packed.read(|model, adapters, _| {
            let lora = (adapters, &packed.per_prompt[..]);
            engine::packed_hidden_keep(model, &self.rope, &prompts, false, lora, Some(&mut kept))
        }) else {
            return Ok(None);
        };
        let Some(kept) = kept else {
            return Ok(None);
        };
        let h = Tensor::from_vec(
            out,
            (prompts.len(), self.cfg.hidden_size),
            self.embed.device(),
        )?;
        Ok(Some((h, kept)))
    }

    /// The final hidden state at the last token of each prompt of `cache` continued by
    /// `ext[i]`, `(prompts, hidden)`: what [`Decoder::last_hidden`] gives for the continued
    /// prompts, computing only the new tokens (the cached keys and values stand for the
    /// rest). `lora` must give each prompt the adapter its cached pass read. `None` where the
    /// fast path cannot run it (an empty continuation, one past the rotary tables, adapters
    /// other than the cached pass's); an error for a token outside the vocabulary.
    pub fn extend_last_hidden(
        &self,
        cache: &engine::KvCache,
        ext: &[&[u32]],
        lora: Lora<'_>,
    ) -> Result<Option<Tensor>, LmError> {
        if !self.continues(cache.lens().iter().copied(), ext, lora) {
            return Ok(None);
        }
        let Some(packed) = self.packed(ext, lora)? else {
            return Ok(None);
        };
        if packed.per_prompt != cache.per_prompt() {
            return Ok(None);
        }
        let Some(out) = packed.read(|model, adapters, _| {
            engine::extend_hidden(model, &self.rope, cache, ext, adapters)
        }) else {
            return Ok(None);
        };
        Ok(Some(Tensor::from_vec(
            out,
            (ext.len(), self.cfg.hidden_size),
            self.embed.device(),
        )?))
    }

    /// Whether prompts of lengths `lens` can be continued by `ext` on the fast path: one
    /// continuation per prompt, none empty, an adapter per prompt where `lora` gives each
    /// its own, and every continued prompt within the model's positions and rotary tables.
    fn continues(
        &self,
        lens: impl ExactSizeIterator<Item = usize>,
        ext: &[&[u32]],
        lora: Lora<'_>,
    ) -> bool {
        let max = self.cfg.max_position_embeddings.min(self.rope.positions());
        lens.len() == ext.len()
            && !matches!(lora, Lora::Each(each) if each.len() != ext.len())
            && ext.iter().all(|e| !e.is_empty())
            && lens.zip(ext).all(|(n, e)| n + e.len() <= max)
    }

    /// The final hidden state after each agent's kept tokens continued by `ext[i]` (its
    /// new tokens, non-empty), `(agents, hidden)`, the new tokens' keys and values appended
    /// to `rows[i]` (an empty one starts at position 0): what [`Decoder::last_hidden`] gives
    /// for the whole context, computing only the new tokens. Each agent must read the same
    /// adapter from step to step. `None` where the fast path cannot run it (another device,
    /// a context past the rotary tables), where the caller reads the whole contexts and
    /// clears the rows; the rows are then left as they were.
    pub fn continue_rows(
        &self,
        rows: &mut [engine::RowKv],
        ext: &[&[u32]],
        lora: Lora<'_>,
    ) -> Result<Option<Tensor>, LmError> {
        if ext.is_empty()
            || !self.embed.device().is_cpu()
            || !self.continues(rows.iter().map(engine::RowKv::next_position), ext, lora)
        {
            return Ok(None);
        }
        let Some(packed) = self.packed(ext, lora)? else {
            return Ok(None);
        };
        let per_prompt = packed.per_prompt.clone();
        let Some(out) = packed.read(|model, adapters, _| {
            let cached = engine::Cached::Rows(rows, per_prompt);
            engine::extend_cached(model, &self.rope, cached, ext, adapters)
        }) else {
            return Ok(None);
        };
        Ok(Some(Tensor::from_vec(
            out,
            (ext.len(), self.cfg.hidden_size),
            self.embed.device(),
        )?))
    }

    /// The final hidden states of each prompt at the positions `at[i]` (each below its
    /// length, at least one), `(Σ positions, hidden)` in order: one causal pass over a
    /// sequence reads every decision in it (an agent's turns with memory: each decision's
    /// context is a beginning of the sequence, and causal attention gives each position the
    /// state that beginning alone gives). On the training path on the CPU the last layer
    /// computes those rows alone; elsewhere every row is computed (prompts right-padded) and
    /// those rows taken.
    pub fn hidden_at(
        &self,
        prompts: &[Vec<u32>],
        at: &[Vec<usize>],
        pad: u32,
        path: Pass,
        lora: Lora<'_>,
    ) -> Result<Tensor, LmError> {
        self.hidden_at_in(prompts, at, None, pad, path, lora)
    }

    /// [`Decoder::hidden_at`] over prompts each read through a sliding window
    /// (`bands[i]`, see [`Band`]): an agent's turns with memory, where the oldest turns
    /// leave the keys and values as new ones come while every token keeps its position.
    /// One pass gives each position the state the step-by-step cached pass gave it.
    pub fn hidden_banded(
        &self,
        prompts: &[Vec<u32>],
        at: &[Vec<usize>],
        bands: &[Band<'_>],
        pad: u32,
        path: Pass,
        lora: Lora<'_>,
    ) -> Result<Tensor, LmError> {
        let msg = |m: String| LmError::Candle(candle_core::Error::Msg(m));
        if bands.len() != prompts.len() {
            return Err(msg(format!(
                "bands for {} prompts, {} prompts",
                bands.len(),
                prompts.len()
            )));
        }
        for (i, (p, b)) in prompts.iter().zip(bands).enumerate() {
            let bad = b.lo.len() != p.len()
                || b.lo
                    .iter()
                    .enumerate()
                    .any(|(r, &lo)| r >= b.header && lo as usize > r);
            if bad {
                return Err(msg(format!(
                    "prompt {i}'s band is not one window start per token, each at most the token"
                )));
            }
        }
        self.hidden_at_in(prompts, at, Some(bands), pad, path, lora)
    }

    fn hidden_at_in(
        &self,
        prompts: &[Vec<u32>],
        at: &[Vec<usize>],
        bands: Option<&[Band<'_>]>,
        pad: u32,
        path: Pass,
        lora: Lora<'_>,
    ) -> Result<Tensor, LmError> {
        let msg = |m: String| LmError::Candle(candle_core::Error::Msg(m));
        if at.len() != prompts.len() {
            return Err(msg(format!(
                "positions for {} prompts, {} prompts",
                at.len(),
                prompts.len()
            )));
        }
        for (i, (p, a)) in prompts.iter().zip(at).enumerate() {
            if a.is_empty() || a.iter().any(|&k| k >= p.len()) {
                return Err(msg(format!(
                    "prompt {i} has {} tokens: positions {a:?} are not within it",
                    p.len()
                )));
            }
        }
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(1);
        if path == Pass::Train
            && self.embed.device().is_cpu()
            && longest <= self.cfg.max_position_embeddings
            && !matches!(lora, Lora::Each(e) if e.len() != prompts.len())
        {
            let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
            let outs: Vec<&[usize]> = at.iter().map(Vec::as_slice).collect();
            let outs = match bands {
                Some(b) => tape::Outs::Banded(&outs, b),
                None => tape::Outs::At(&outs),
            };
            if let Some(h) = self.tape(&refs, lora, outs)? {
                return Ok(h);
            }
        }
        let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
        let (ids, _) = padded(&refs, pad, longest, self.embed.device())?;
        let bias = match bands {
            Some(b) => Some(band_bias(b, longest, self.embed.device())?),
            None => None,
        };
        let h = self.hidden_rows(&ids, bias.as_ref(), path, lora)?;
        let d = self.cfg.hidden_size;
        let h = h.reshape((prompts.len() * longest, d))?;
        let rows: Vec<u32> = at
            .iter()
            .enumerate()
            .flat_map(|(i, a)| a.iter().map(move |&k| (i * longest + k) as u32))
            .collect();
        let n = rows.len();
        Ok(h.index_select(&Tensor::from_vec(rows, n, self.embed.device())?, 0)?)
    }

    /// The final hidden states at each prompt's last token and at an earlier position of it
    /// (`inner[i]` of prompt `i`): `(last, inner)`, each `(prompts, hidden)`. On the training
    /// path on the CPU one pass gives both (the last layer computes the two rows of each
    /// prompt); elsewhere two (the prompts cut after their inner position for the second).
    /// A language agent's word is scored after its prompt, its action and `say`: the
    /// action's state is the same prompt's at an inner position.
    pub fn last_and_inner_hidden(
        &self,
        prompts: &[Vec<u32>],
        inner: &[usize],
        pad: u32,
        path: Pass,
        lora: Lora<'_>,
    ) -> Result<(Tensor, Tensor), LmError> {
        if inner.len() != prompts.len() {
            return Err(LmError::Candle(candle_core::Error::Msg(format!(
                "{} inner positions for {} prompts",
                inner.len(),
                prompts.len()
            ))));
        }
        if let Some((i, (p, &at))) = prompts
            .iter()
            .zip(inner)
            .enumerate()
            .find(|(_, (p, at))| **at >= p.len())
        {
            return Err(LmError::Candle(candle_core::Error::Msg(format!(
                "prompt {i} has {} tokens, its inner position {at} is past them",
                p.len()
            ))));
        }
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(1);
        if path == Pass::Train
            && self.embed.device().is_cpu()
            && longest <= self.cfg.max_position_embeddings
            && !matches!(lora, Lora::Each(e) if e.len() != prompts.len())
        {
            let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
            if let Some(h) = self.tape(&refs, lora, tape::Outs::Inner(inner))? {
                let (n, d) = (prompts.len(), self.cfg.hidden_size);
                let h = h.reshape((n, 2, d))?;
                let row = |k: usize| h.narrow(1, k, 1).and_then(|t| t.squeeze(1));
                return Ok((row(1)?, row(0)?));
            }
        }
        let cut: Vec<&[u32]> = prompts
            .iter()
            .zip(inner)
            .map(|(p, &at)| &p[..=at])
            .collect();
        Ok((
            self.last_hidden(prompts, pad, path, lora)?,
            self.last_hidden(&cut, pad, path, lora)?,
        ))
    }

    /// The fast path's final hidden states from [`engine::packed_hidden`] over non-empty
    /// prompts (every token's when `every_row`, else each prompt's last token's), with
    /// `lora`'s adapters; `None` when a weight is not a contiguous f32 tensor on the CPU or
    /// an adapter's matrix is misshapen (the caller then takes candle's operations).
    pub(super) fn engine(
        &self,
        prompts: &[&[u32]],
        every_row: bool,
        lora: Lora<'_>,
    ) -> Result<Option<Tensor>, LmError> {
        let Some(packed) = self.packed(prompts, lora)? else {
            return Ok(None);
        };
        let Some(out) = packed.read(|model, adapters, _| {
            let lora = (adapters, &packed.per_prompt[..]);
            engine::packed_hidden(model, &self.rope, prompts, every_row, lora)
        }) else {
            return Ok(None);
        };
        let rows = out.len() / self.cfg.hidden_size.max(1);
        Ok(Some(Tensor::from_vec(
            out,
            (rows, self.cfg.hidden_size),
            self.embed.device(),
        )?))
    }

    /// The training path's final hidden states at each prompt's last token from
    /// [`tape::forward`] over non-empty prompts, with `lora`'s adapters, wired into candle's
    /// autograd so that `backward` on anything computed from them runs the hand-written
    /// backward (`cpu::train::backward`)
    /// and gives every weight and adapter matrix that tracks a gradient its own; `None`
    /// where [`Decoder::engine`] would be (the caller then takes candle's operations).
    fn tape(
        &self,
        prompts: &[&[u32]],
        lora: Lora<'_>,
        outs: tape::Outs<'_>,
    ) -> Result<Option<Tensor>, LmError> {
        let Some(packed) = self.packed(prompts, lora)? else {
            return Ok(None);
        };
        let Some((out, saved)) = packed.read(|model, adapters, _| {
            let lora = (adapters, &packed.per_prompt[..]);
            tape::forward(model, &self.rope, prompts, lora, outs)
        }) else {
            return Ok(None);
        };
        let rows = out.len() / self.cfg.hidden_size.max(1);
        let h = Tensor::from_vec(out, (rows, self.cfg.hidden_size), self.embed.device())?;
        Ok(Some(tape::attach(h, packed, saved, self.rope.clone())?))
    }

    /// The tensors the packed decoders read, in [`engine::Layout::read`]'s order, with their
    /// layout and each prompt's adapter among them; an error for a token outside the
    /// vocabulary, `None` for prompts the rotary tables do not cover, biases the packed
    /// decoders lack (o, gate) or a misshapen adapter.
    fn packed(&self, prompts: &[&[u32]], lora: Lora<'_>) -> Result<Option<Packed>, LmError> {
        let vocab = self.cfg.vocab_size;
        if let Some(bad) = prompts
            .iter()
            .flat_map(|p| p.iter())
            .find(|&&id| id as usize >= vocab)
        {
            return Err(LmError::Candle(candle_core::Error::Msg(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            ))));
        }
        if prompts
            .iter()
            .any(|p| p.is_empty() || p.len() > self.rope.positions())
        {
            return Ok(None);
        }
        let mut tensors: Vec<Tensor> = vec![self.embed.clone(), self.norm.clone()];
        let mut biases = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            tensors.extend(
                [
                    l.self_attn.q_proj.weight(),
                    l.self_attn.k_proj.weight(),
                    l.self_attn.v_proj.weight(),
                    l.self_attn.o_proj.weight(),
                    l.mlp.gate_proj.weight(),
                    l.mlp.up_proj.weight(),
                    l.mlp.down_proj.weight(),
                    &l.input_layernorm,
                    &l.post_attention_layernorm,
                ]
                .map(Tensor::clone),
            );
            let b = [
                l.self_attn.q_proj.bias(),
                l.self_attn.k_proj.bias(),
                l.self_attn.v_proj.bias(),
            ];
            tensors.extend(b.into_iter().flatten().cloned());
            biases.push(b.map(|b| b.is_some()));
            if l.self_attn.o_proj.bias().is_some()
                || l.mlp.gate_proj.bias().is_some()
                || l.mlp.up_proj.bias().is_some()
                || l.mlp.down_proj.bias().is_some()
            {
                return Ok(None);
            }
        }
        // The distinct adapters, each prompt's index among them, and their matrices.
        let mut distinct: Vec<&Adapter> = Vec::new();
        let per_prompt: Vec<Option<usize>> = (0..prompts.len())
            .map(|i| {
                let a = match lora {
                    Lora::Base => None,
                    Lora::All(a) => Some(a),
                    Lora::Each(each) => each.get(i).copied().flatten(),
                }?;
                Some(match distinct.iter().position(|&d| std::ptr::eq(d, a)) {
                    Some(k) => k,
                    None => {
                        distinct.push(a);
                        distinct.len() - 1
                    }
                })
            })
            .collect();
        let (h, inter) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        let kvw = self.cfg.kv_heads() * self.cfg.head_dim();
        let sizes = [
            (h, h),
            (h, kvw),
            (h, kvw),
            (h, h),
            (h, inter),
            (h, inter),
            (inter, h),
        ];
        let mut adapters = Vec::with_capacity(distinct.len());
        for a in &distinct {
            let r = a.config.r;
            let mut modules = Vec::with_capacity(self.layers.len());
            for l in &self.layers {
                let mut adapted = [false; 7];
                for ((name, &(inp, out)), adapted) in l.names().zip(&sizes).zip(&mut adapted) {
                    if let Some((wa, wb)) = a.weights.get(name) {
                        if wa.dims() != [r, inp] || wb.dims() != [out, r] {
                            return Ok(None);
                        }
                        tensors.extend([wa.clone(), wb.clone()]);
                        *adapted = true;
                    }
                }
                modules.push(adapted);
            }
            adapters.push(engine::AdapterLayout {
                rank: r,
                scale: a.config.lora_alpha / r.max(1) as f32,
                modules,
            });
        }
        let (nh, nkv, hd) = self.heads();
        let layout = engine::Layout {
            sizes: engine::Sizes {
                hidden: h,
                heads: nh,
                kv_heads: nkv,
                head_dim: hd,
                intermediate: inter,
                eps: self.cfg.rms_norm_eps as f32,
            },
            biases,
            adapters,
        };
        Ok(Some(Packed {
            tensors,
            layout,
            per_prompt,
        }))
    }

    /// [`Decoder::last_hidden`] on the fast path (CPU): the prompts packed end to end with
    /// no padding, each attending to itself only ([`kernels::span_attention`]), and
    /// the last layer computed for each prompt's last token alone (its keys and values still
    /// cover every token).
    fn last_hidden_packed(&self, prompts: &[&[u32]], lora: Lora<'_>) -> Result<Tensor, LmError> {
        let device = self.embed.device();
        let b = prompts.len();
        let tokens = Runs::new(lora, b, |i| prompts[i].len());
        let lasts = Runs::new(lora, b, |_| 1);
        let lens: Vec<u32> = prompts.iter().map(|p| p.len() as u32).collect();
        let total: usize = prompts.iter().map(|p| p.len()).sum();
        let ids: Vec<u32> = prompts.iter().flat_map(|p| p.iter().copied()).collect();
        let pos: Vec<u32> = lens.iter().flat_map(|&n| 0..n).collect();
        let last_pos: Vec<u32> = lens.iter().map(|&n| n - 1).collect();
        let firsts: Vec<u32> = lens
            .iter()
            .scan(0u32, |start, &n| {
                *start += n;
                Some(*start - n)
            })
            .collect();
        // Every token sees its prompt up to itself; in the last layer only each prompt's
        // last token is computed, and it sees its whole prompt.
        let spans_all: Vec<(u32, u32)> = firsts
            .iter()
            .zip(&lens)
            .flat_map(|(&f, &n)| (1..=n).map(move |i| (f, i)))
            .collect();
        let spans_last: Vec<(u32, u32)> =
            firsts.iter().copied().zip(lens.iter().copied()).collect();
        let last_rows: Vec<u32> = spans_last.iter().map(|&(f, n)| f + n - 1).collect();
        let last_idx = Tensor::from_vec(last_rows, b, device)?;
        let (nh, nkv, hd) = self.heads();
        let scale = 1.0 / (hd as f32).sqrt();
        let mut x = self
            .embed
            .index_select(&Tensor::from_vec(ids, total, device)?, 0)?;
        for (i, l) in self.layers.iter().enumerate() {
            let n = self.rms(&x, &l.input_layernorm, Pass::Fast)?;
            let k = proj(&l.self_attn.k_proj, &l.self_attn.names[1], &n, &tokens)?
                .reshape((total, nkv, hd))?;
            let k = kernels::rope_at(&k, &self.rope, &pos)?;
            let v = proj(&l.self_attn.v_proj, &l.self_attn.names[2], &n, &tokens)?
                .reshape((total, nkv, hd))?;
            let last = i + 1 == self.layers.len();
            let (n, q_pos, spans, runs) = if last {
                x = x.index_select(&last_idx, 0)?;
                (
                    n.index_select(&last_idx, 0)?,
                    &last_pos[..],
                    &spans_last,
                    &lasts,
                )
            } else {
                (n, &pos[..], &spans_all, &tokens)
            };
            let rows = n.dim(0)?;
            let q = proj(&l.self_attn.q_proj, &l.self_attn.names[0], &n, runs)?
                .reshape((rows, nh, hd))?;
            let q = kernels::rope_at(&q, &self.rope, q_pos)?;
            let out = kernels::span_attention(&q, &k, &v, spans, scale)?;
            let a = proj(
                &l.self_attn.o_proj,
                &l.self_attn.names[3],
                &out.reshape((rows, nh * hd))?,
                runs,
            )?;
            x = self.mlp(l, &(x + a)?, Pass::Fast, runs)?;
        }
        self.rms(&x, &self.norm, Pass::Fast)
    }

    /// [`Decoder::last_hidden`] on the training path (CPU): right-padded prompts, the last
    /// layer's queries at each prompt's last token only, attending to that prompt's tokens.
    fn last_hidden_train(
        &self,
        prompts: &[&[u32]],
        pad: u32,
        t: usize,
        lora: Lora<'_>,
    ) -> Result<Tensor, LmError> {
        let device = self.embed.device();
        let b = prompts.len();
        let tokens = Runs::new(lora, b, |_| t);
        let lasts = Runs::new(lora, b, |_| 1);
        let (ids, last_idx) = padded(prompts, pad, t, device)?;
        let lens: Vec<u32> = prompts.iter().map(|p| p.len() as u32).collect();
        let last_pos: Vec<u32> = lens.iter().map(|&n| n - 1).collect();
        let (nh, _, hd) = self.heads();
        let mut x = self.embed.index_select(&ids.flatten_all()?, 0)?;
        let (body, last) = self.layers.split_at(self.layers.len() - 1);
        for l in body {
            let n = self.rms(&x, &l.input_layernorm, Pass::Train)?;
            let a = l
                .self_attn
                .attention_train(&n, (b, t), &self.rope, &tokens)?;
            x = self.mlp(l, &(x + a)?, Pass::Train, &tokens)?;
        }
        for l in last {
            let n = self.rms(&x, &l.input_layernorm, Pass::Train)?;
            let (k, v) = l
                .self_attn
                .keys_values_train(&n, (b, t), &self.rope, &tokens)?;
            let n = n.index_select(&last_idx, 0)?;
            let q = proj(&l.self_attn.q_proj, &l.self_attn.names[0], &n, &lasts)?
                .reshape((b, nh, hd))?;
            let q = kernels::rope_at(&q, &self.rope, &last_pos)?.reshape((b, nh, 1, hd))?;
            let scale = 1.0 / (hd as f32).sqrt();
            let p = kernels::prefix_softmax(&q.matmul(&k.transpose(2, 3)?)?, scale, &lens)?;
            let out = p.matmul(&v)?.reshape((b, nh * hd))?;
            let a = proj(&l.self_attn.o_proj, &l.self_attn.names[3], &out, &lasts)?;
            x = self.mlp(
                l,
                &(x.index_select(&last_idx, 0)? + a)?,
                Pass::Train,
                &lasts,
            )?;
        }
        self.rms(&x, &self.norm, Pass::Train)
    }

    /// The final normed hidden states `(b, t, hidden)`.
    pub fn hidden(
        &self,
        ids: &Tensor,
        bias: Option<&Tensor>,
        path: Pass,
    ) -> Result<Tensor, LmError> {
        self.hidden_with(ids, bias, path, Lora::Base)
    }

    /// [`Decoder::hidden`] with LoRA adapters over the base weights (per prompt: the rows
    /// of `ids`).
    pub fn hidden_with(
        &self,
        ids: &Tensor,
        bias: Option<&Tensor>,
        path: Pass,
        lora: Lora<'_>,
    ) -> Result<Tensor, LmError> {
        let (b, t) = ids.dims2()?;
        let h = self.cfg.hidden_size;
        Ok(self
            .hidden_rows(ids, bias, path, lora)?
            .reshape((b, t, h))?)
    }

    /// The final normed hidden states as rows `(b · t, hidden)`. Activations stay 2-d
    /// between layers: on the training path every reshape of an activation would cost its
    /// size twice more in the backward pass (candle accumulates each input's gradient into
    /// a zeroed buffer).
    fn hidden_rows(
        &self,
        ids: &Tensor,
        bias: Option<&Tensor>,
        path: Pass,
        lora: Lora<'_>,
    ) -> Result<Tensor, LmError> {
        let (b, t) = ids.dims2()?;
        if let Lora::Each(each) = lora
            && each.len() != b
        {
            return Err(LmError::Candle(candle_core::Error::Msg(format!(
                "{} adapters for {b} prompts",
                each.len()
            ))));
        }
        let runs = &Runs::new(lora, b, |_| t);
        if t > self.cfg.max_position_embeddings {
            return Err(LmError::TooLong {
                tokens: t,
                max: self.cfg.max_position_embeddings,
            });
        }
        // The fused kernels run on the CPU, and the training ones attend causally only.
        let cpu = ids.device().is_cpu();
        if path == Pass::Fast && cpu && bias.is_none() && t > 0 {
            let rows = ids.to_vec2::<u32>()?;
            let prompts: Vec<&[u32]> = rows.iter().map(Vec::as_slice).collect();
            if let Some(h) = self.engine(&prompts, true, lora)? {
                return Ok(h);
            }
        }
        let path = match path {
            Pass::Train if !cpu || bias.is_some() => Pass::Composed,
            p => p,
        };
        let mut x = self.embed.index_select(&ids.flatten_all()?, 0)?;
        // Causal attention by the fused CPU kernels needs no mask tensor; otherwise the
        // causal mask is built once for all layers.
        let causal = bias.is_none();
        let built = if causal && (path == Pass::Composed || !cpu) {
            Some(causal_bias(t, x.device())?)
        } else {
            None
        };
        let bias = bias.or(built.as_ref());
        let (cos, sin) = (self.cos.narrow(0, 0, t)?, self.sin.narrow(0, 0, t)?);
        for layer in &self.layers {
            let n = self.rms(&x, &layer.input_layernorm, path)?;
            let a = layer.self_attn.forward(
                &n,
                (b, t),
                bias,
                causal,
                &cos,
                &sin,
                &self.rope,
                path,
                runs,
            )?;
            x = self.mlp(layer, &(x + a)?, path, runs)?;
        }
        self.rms(&x, &self.norm, path)
    }
}

/// The additive attention bias `(prompts, 1, t, t)` of prompts read through their bands
/// ([`Band`]; rows past a prompt's end read causally), for candle's operations.
fn band_bias(
    bands: &[Band<'_>],
    t: usize,
    device: &candle_core::Device,
) -> Result<Tensor, LmError> {
    let mut data = Vec::with_capacity(bands.len() * t * t);
    for b in bands {
        for i in 0..t {
            let lo = b.lo.get(i).map_or(0, |&l| l as usize);
            data.extend((0..t).map(|j| {
                if j <= i && (j < b.header || j >= lo) {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            }));
        }
    }
    Ok(Tensor::from_vec(data, (bands.len(), 1, t, t), device)?)
}
