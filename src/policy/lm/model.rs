//! A Qwen2-style decoder whose weights carry the Hugging Face names, with two forward
//! paths over the same tensors:
//!
//! - [`Pass::Fast`] for inference, recording no backward pass: on the CPU the packed
//!   decoder of `engine.rs` (plain buffers, `gemm` into them, the slice-level kernels of
//!   [`super::kernels`], LoRA per run of rows), with candle's operations and our
//!   [`kernels::span_attention`] as the fallback for weights it cannot read in place;
//!   elsewhere candle's `rms_norm`, `rope` and `softmax_last_dim`;
//! - [`Pass::Train`] for training: on the CPU, [`Decoder::last_hidden`] (what the trainer
//!   calls) runs the packed decoder of `tape.rs`, which keeps its activations and has a
//!   hand-written backward pass over plain buffers, tied into candle's autograd; the full
//!   forward runs the fused kernels of [`super::kernels`] (RMS norm, causal softmax, rotary
//!   embedding, SwiGLU), each with a hand-written backward pass. Either way every weight
//!   receives a gradient. Elsewhere [`Pass::Composed`];
//! - [`Pass::Composed`]: the same maths from candle's differentiable operations
//!   (`rms_norm_slow`, `softmax` after an additive mask, `rope_slow`, `silu`), the reference
//!   the fused kernels are tested against.
//!
//! Both follow candle-transformers' `qwen2` step for step (pre-norm layers, rotate-half
//! rotary embeddings, grouped-query attention repeated as Hugging Face does, scale after the
//! score matmul, SiLU-gated MLP, final norm, output layer or tied embedding), so the three
//! agree to float rounding (tested).

use candle_core::{D, DType, Device, Tensor};
use candle_nn::{Linear, Module};
use std::collections::BTreeMap;
use std::path::Path;

use super::LmError;
use super::config::LmConfig;
use super::cpu::infer as engine;
use super::cpu::infer::Packed;
use super::cpu::kernels::{self, RopeTables};
use super::cpu::train as tape;
use super::lora::Adapter;

/// Which forward pass to run (named `Pass`, not `Path`, so that `std::path::Path` keeps its
/// name here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Fused kernels, no backward.
    Fast,
    /// Differentiable: fused kernels with their own backward on the CPU.
    Train,
    /// Differentiable: compositions of candle's primitive operations.
    Composed,
}

/// Named weight tensors, Hugging Face layout.
pub type Weights = BTreeMap<String, Tensor>;

struct Layer {
    /// Module names, for adapters: q, k, v, o, gate, up, down.
    names: [String; 7],
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    gate: Linear,
    up: Linear,
    down: Linear,
    ln1: Tensor,
    ln2: Tensor,
}

/// The decoder.
pub struct Decoder {
    cfg: LmConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    head: Linear,
    value: Option<Linear>,
    cos: Tensor,
    sin: Tensor,
    /// The same tables for the fused rotary kernel.
    rope: RopeTables,
}

/// Every tensor a model of `cfg` has, with its shape, in name order.
pub fn weight_shapes(cfg: &LmConfig) -> Vec<(String, Vec<usize>)> {
    let (h, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let kv = cfg.kv_heads() * cfg.head_dim();
    let mut out = vec![("model.embed_tokens.weight".to_string(), vec![v, h])];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        out.extend([
            (format!("{p}.self_attn.q_proj.weight"), vec![h, h]),
            (format!("{p}.self_attn.q_proj.bias"), vec![h]),
            (format!("{p}.self_attn.k_proj.weight"), vec![kv, h]),
            (format!("{p}.self_attn.k_proj.bias"), vec![kv]),
            (format!("{p}.self_attn.v_proj.weight"), vec![kv, h]),
            (format!("{p}.self_attn.v_proj.bias"), vec![kv]),
            (format!("{p}.self_attn.o_proj.weight"), vec![h, h]),
            (format!("{p}.mlp.gate_proj.weight"), vec![i, h]),
            (format!("{p}.mlp.up_proj.weight"), vec![i, h]),
            (format!("{p}.mlp.down_proj.weight"), vec![h, i]),
            (format!("{p}.input_layernorm.weight"), vec![h]),
            (format!("{p}.post_attention_layernorm.weight"), vec![h]),
        ]);
    }
    out.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings {
        out.push(("lm_head.weight".to_string(), vec![v, h]));
    }
    if cfg.value_head {
        out.push(("value_head.weight".to_string(), vec![1, h]));
        out.push(("value_head.bias".to_string(), vec![1]));
    }
    out.sort();
    out
}

/// Fresh weights for `cfg` drawn from a seeded stream (candle's own CPU generator cannot be
/// seeded): normal(0, 0.02) matrices, unit norms, zero biases.
pub fn init_weights(cfg: &LmConfig, seed: u64, device: &Device) -> Result<Weights, LmError> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut out = Weights::new();
    for (name, shape) in weight_shapes(cfg) {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = if name.ends_with("norm.weight") {
            vec![1.0; n]
        } else if name.ends_with(".bias") {
            vec![0.0; n]
        } else {
            (0..n)
                .map(|_| {
                    // Box-Muller.
                    let u1: f32 = rng.random::<f32>().max(f32::MIN_POSITIVE);
                    let u2: f32 = rng.random::<f32>();
                    0.02 * (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
                })
                .collect()
        };
        out.insert(name, Tensor::from_vec(data, shape, device)?);
    }
    Ok(out)
}

impl Decoder {
    /// Builds the decoder of `cfg` over `weights` (read from `file`, named in errors).
    /// Tensors are used as they are: pass variables' tensors to train them.
    pub fn new(cfg: &LmConfig, weights: &Weights, file: &Path) -> Result<Self, LmError> {
        let shapes: BTreeMap<String, Vec<usize>> = weight_shapes(cfg).into_iter().collect();
        let get = |name: &str| -> Result<Tensor, LmError> {
            let expected = shapes.get(name).cloned().unwrap_or_default();
            let t = weights.get(name).ok_or_else(|| LmError::MissingTensor {
                path: file.to_path_buf(),
                name: name.to_string(),
                shape: expected.clone(),
            })?;
            if t.dims() != expected.as_slice() {
                return Err(LmError::TensorShape {
                    path: file.to_path_buf(),
                    name: name.to_string(),
                    found: t.dims().to_vec(),
                    expected,
                });
            }
            Ok(t.to_dtype(DType::F32)?)
        };
        let lin = |p: &str, bias: bool| -> Result<Linear, LmError> {
            let w = get(&format!("{p}.weight"))?;
            let b = if bias {
                Some(get(&format!("{p}.bias"))?)
            } else {
                None
            };
            Ok(Linear::new(w, b))
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            layers.push(Layer {
                names: [
                    "self_attn.q_proj",
                    "self_attn.k_proj",
                    "self_attn.v_proj",
                    "self_attn.o_proj",
                    "mlp.gate_proj",
                    "mlp.up_proj",
                    "mlp.down_proj",
                ]
                .map(|m| format!("{p}.{m}")),
                q: lin(&format!("{p}.self_attn.q_proj"), true)?,
                k: lin(&format!("{p}.self_attn.k_proj"), true)?,
                v: lin(&format!("{p}.self_attn.v_proj"), true)?,
                o: lin(&format!("{p}.self_attn.o_proj"), false)?,
                gate: lin(&format!("{p}.mlp.gate_proj"), false)?,
                up: lin(&format!("{p}.mlp.up_proj"), false)?,
                down: lin(&format!("{p}.mlp.down_proj"), false)?,
                ln1: get(&format!("{p}.input_layernorm.weight"))?,
                ln2: get(&format!("{p}.post_attention_layernorm.weight"))?,
            });
        }
        let embed = get("model.embed_tokens.weight")?;
        let head = if cfg.tie_word_embeddings {
            Linear::new(embed.clone(), None)
        } else {
            lin("lm_head", false)?
        };
        let (cos, sin) = rotary_tables(cfg, embed.device())?;
        let rope = RopeTables::new(&cos, &sin)?;
        let value = if cfg.value_head {
            Some(lin("value_head", true)?)
        } else {
            None
        };
        Ok(Self {
            value,
            cfg: cfg.clone(),
            embed,
            layers,
            norm: get("model.norm.weight")?,
            head,
            cos,
            sin,
            rope,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LmConfig {
        &self.cfg
    }

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

    /// The output layer applied to hidden states `(..., hidden)`.
    pub fn head(&self, hidden: &Tensor) -> Result<Tensor, LmError> {
        Ok(self.head.forward(hidden)?)
    }

    /// The value head applied to hidden states `(..., hidden)`: `(..., 1)`, if the model
    /// has one.
    pub fn value(&self, hidden: &Tensor) -> Result<Option<Tensor>, LmError> {
        Ok(self.value.as_ref().map(|v| v.forward(hidden)).transpose()?)
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
            Pass::Train => match self.tape(&prompts, lora)? {
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

    /// The fast path's final hidden states from [`engine::packed_hidden`] over non-empty
    /// prompts (every token's when `every_row`, else each prompt's last token's), with
    /// `lora`'s adapters; `None` when a weight is not a contiguous f32 tensor on the CPU or
    /// an adapter's matrix is misshapen (the caller then takes candle's operations).
    fn engine(
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
    /// autograd so that `backward` on anything computed from them runs [`tape::backward`]
    /// and gives every weight and adapter matrix that tracks a gradient its own; `None`
    /// where [`Decoder::engine`] would be (the caller then takes candle's operations).
    fn tape(&self, prompts: &[&[u32]], lora: Lora<'_>) -> Result<Option<Tensor>, LmError> {
        let Some(packed) = self.packed(prompts, lora)? else {
            return Ok(None);
        };
        let Some((out, saved)) = packed.read(|model, adapters, _| {
            let lora = (adapters, &packed.per_prompt[..]);
            tape::forward(model, &self.rope, prompts, lora)
        }) else {
            return Ok(None);
        };
        let h = Tensor::from_vec(
            out,
            (prompts.len(), self.cfg.hidden_size),
            self.embed.device(),
        )?;
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
                    l.q.weight(),
                    l.k.weight(),
                    l.v.weight(),
                    l.o.weight(),
                    l.gate.weight(),
                    l.up.weight(),
                    l.down.weight(),
                    &l.ln1,
                    &l.ln2,
                ]
                .map(Tensor::clone),
            );
            let b = [l.q.bias(), l.k.bias(), l.v.bias()];
            tensors.extend(b.into_iter().flatten().cloned());
            biases.push(b.map(|b| b.is_some()));
            if l.o.bias().is_some()
                || l.gate.bias().is_some()
                || l.up.bias().is_some()
                || l.down.bias().is_some()
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
                for ((name, &(inp, out)), adapted) in l.names.iter().zip(&sizes).zip(&mut adapted) {
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
            let n = self.rms(&x, &l.ln1, Pass::Fast)?;
            let k = proj(&l.k, &l.names[1], &n, &tokens)?.reshape((total, nkv, hd))?;
            let k = kernels::rope_at(&k, &self.rope, &pos)?;
            let v = proj(&l.v, &l.names[2], &n, &tokens)?.reshape((total, nkv, hd))?;
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
            let q = proj(&l.q, &l.names[0], &n, runs)?.reshape((rows, nh, hd))?;
            let q = kernels::rope_at(&q, &self.rope, q_pos)?;
            let out = kernels::span_attention(&q, &k, &v, spans, scale)?;
            let a = proj(&l.o, &l.names[3], &out.reshape((rows, nh * hd))?, runs)?;
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
            let n = self.rms(&x, &l.ln1, Pass::Train)?;
            let a = self.attention_train(l, &n, (b, t), &tokens)?;
            x = self.mlp(l, &(x + a)?, Pass::Train, &tokens)?;
        }
        for l in last {
            let n = self.rms(&x, &l.ln1, Pass::Train)?;
            let (k, v) = self.keys_values_train(l, &n, (b, t), &tokens)?;
            let n = n.index_select(&last_idx, 0)?;
            let q = proj(&l.q, &l.names[0], &n, &lasts)?.reshape((b, nh, hd))?;
            let q = kernels::rope_at(&q, &self.rope, &last_pos)?.reshape((b, nh, 1, hd))?;
            let scale = 1.0 / (hd as f32).sqrt();
            let p = kernels::prefix_softmax(&q.matmul(&k.transpose(2, 3)?)?, scale, &lens)?;
            let out = p.matmul(&v)?.reshape((b, nh * hd))?;
            let a = proj(&l.o, &l.names[3], &out, &lasts)?;
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
            let n = self.rms(&x, &layer.ln1, path)?;
            let a = self.attention(layer, &n, (b, t), bias, causal, &cos, &sin, path, runs)?;
            x = self.mlp(layer, &(x + a)?, path, runs)?;
        }
        self.rms(&x, &self.norm, path)
    }

    /// The second half of a layer: `x + down(silu(gate(n)) · up(n))` with `n` the normed `x`.
    fn mlp(
        &self,
        layer: &Layer,
        x: &Tensor,
        path: Pass,
        runs: &Runs<'_>,
    ) -> Result<Tensor, LmError> {
        let n = self.rms(x, &layer.ln2, path)?;
        let g = proj(&layer.gate, &layer.names[4], &n, runs)?;
        let u = proj(&layer.up, &layer.names[5], &n, runs)?;
        let a = match path {
            Pass::Composed => (g.silu()? * u)?,
            _ if !g.device().is_cpu() => (g.silu()? * u)?,
            _ => kernels::swiglu(&g, &u)?,
        };
        let m = proj(&layer.down, &layer.names[6], &a, runs)?;
        Ok((x + m)?)
    }

    /// (query heads, key/value heads, head dimension).
    fn heads(&self) -> (usize, usize, usize) {
        (
            self.cfg.num_attention_heads,
            self.cfg.kv_heads(),
            self.cfg.head_dim(),
        )
    }

    fn rms(&self, x: &Tensor, w: &Tensor, path: Pass) -> Result<Tensor, LmError> {
        let eps = self.cfg.rms_norm_eps as f32;
        Ok(match path {
            Pass::Fast => candle_nn::ops::rms_norm(&x.contiguous()?, w, eps)?,
            Pass::Train => kernels::rms_norm(x, w, eps)?,
            Pass::Composed => candle_nn::ops::rms_norm_slow(x, w, eps)?,
        })
    }

    /// Causal attention on the fast path (CPU): rotary embeddings in the `(b, t, heads, dim)`
    /// layout the projections produce, then [`kernels::span_attention`] over the rows, each
    /// seeing its sequence up to itself (no score matrix, no transposes, no repeated
    /// key/value heads).
    fn attention_fused(
        &self,
        l: &Layer,
        x: &Tensor,
        (b, t): (usize, usize),
        cos: &Tensor,
        sin: &Tensor,
        runs: &Runs<'_>,
    ) -> Result<Tensor, LmError> {
        let (nh, nkv, hd) = self.heads();
        let q = proj(&l.q, &l.names[0], x, runs)?.reshape((b, t, nh, hd))?;
        let k = proj(&l.k, &l.names[1], x, runs)?.reshape((b, t, nkv, hd))?;
        let v = proj(&l.v, &l.names[2], x, runs)?.reshape((b * t, nkv, hd))?;
        let q = candle_nn::rotary_emb::rope_thd(&q, cos, sin)?.reshape((b * t, nh, hd))?;
        let k = candle_nn::rotary_emb::rope_thd(&k, cos, sin)?.reshape((b * t, nkv, hd))?;
        let spans: Vec<(u32, u32)> = (0..b * t)
            .map(|r| ((r - r % t) as u32, (r % t + 1) as u32))
            .collect();
        let scale = 1.0 / (hd as f32).sqrt();
        let out = kernels::span_attention(&q, &k, &v, &spans, scale)?;
        proj(&l.o, &l.names[3], &out.reshape((b * t, nh * hd))?, runs)
    }

    /// Causal attention on the training path (CPU): rotary embeddings in the projections'
    /// `(b, t, heads, dim)` layout, the score and value products as batched matmuls, and
    /// the scale, causal mask and softmax as one kernel, each with its own backward.
    fn attention_train(
        &self,
        l: &Layer,
        x: &Tensor,
        (b, t): (usize, usize),
        runs: &Runs<'_>,
    ) -> Result<Tensor, LmError> {
        let (nh, nkv, hd) = self.heads();
        let q = proj(&l.q, &l.names[0], x, runs)?.reshape((b, t, nh, hd))?;
        let k = proj(&l.k, &l.names[1], x, runs)?.reshape((b, t, nkv, hd))?;
        let v = proj(&l.v, &l.names[2], x, runs)?.reshape((b, t, nkv, hd))?;
        let q = kernels::rope(&q, &self.rope)?
            .transpose(1, 2)?
            .contiguous()?;
        let k = kernels::rope(&k, &self.rope)?.transpose(1, 2)?;
        let v = v.transpose(1, 2)?;
        let rep = nh / nkv;
        let k = candle_transformers::utils::repeat_kv(k, rep)?.contiguous()?;
        let v = candle_transformers::utils::repeat_kv(v, rep)?.contiguous()?;
        let scale = 1.0 / (hd as f32).sqrt();
        let p = kernels::causal_softmax(&q.matmul(&k.transpose(2, 3)?)?, scale)?;
        let out = p.matmul(&v)?.transpose(1, 2)?.reshape((b * t, nh * hd))?;
        proj(&l.o, &l.names[3], &out, runs)
    }

    /// Keys (rotated) and values on the training path, `(b, heads, t, dim)` each, the
    /// key/value heads repeated to the query heads.
    fn keys_values_train(
        &self,
        l: &Layer,
        x: &Tensor,
        (b, t): (usize, usize),
        runs: &Runs<'_>,
    ) -> Result<(Tensor, Tensor), LmError> {
        let (nh, nkv, hd) = self.heads();
        let k = proj(&l.k, &l.names[1], x, runs)?.reshape((b, t, nkv, hd))?;
        let v = proj(&l.v, &l.names[2], x, runs)?.reshape((b, t, nkv, hd))?;
        let k = kernels::rope(&k, &self.rope)?.transpose(1, 2)?;
        let v = v.transpose(1, 2)?;
        let rep = nh / nkv;
        Ok((
            candle_transformers::utils::repeat_kv(k, rep)?.contiguous()?,
            candle_transformers::utils::repeat_kv(v, rep)?.contiguous()?,
        ))
    }

    fn attention(
        &self,
        l: &Layer,
        x: &Tensor,
        (b, t): (usize, usize),
        bias: Option<&Tensor>,
        causal: bool,
        cos: &Tensor,
        sin: &Tensor,
        path: Pass,
        runs: &Runs<'_>,
    ) -> Result<Tensor, LmError> {
        let (nh, nkv, hd) = self.heads();
        if path == Pass::Fast && causal && x.device().is_cpu() {
            return self.attention_fused(l, x, (b, t), cos, sin, runs);
        }
        if path == Pass::Train {
            return self.attention_train(l, x, (b, t), runs);
        }
        let heads = |y: Tensor, n: usize| y.reshape((b, t, n, hd))?.transpose(1, 2);
        let q = heads(proj(&l.q, &l.names[0], x, runs)?, nh)?;
        let k = heads(proj(&l.k, &l.names[1], x, runs)?, nkv)?;
        let v = heads(proj(&l.v, &l.names[2], x, runs)?, nkv)?;
        let (q, k) = match path {
            Pass::Fast => (
                candle_nn::rotary_emb::rope(&q.contiguous()?, cos, sin)?,
                candle_nn::rotary_emb::rope(&k.contiguous()?, cos, sin)?,
            ),
            Pass::Train | Pass::Composed => (
                candle_nn::rotary_emb::rope_slow(&q.contiguous()?, cos, sin)?,
                candle_nn::rotary_emb::rope_slow(&k.contiguous()?, cos, sin)?,
            ),
        };
        let rep = nh / nkv;
        let k = candle_transformers::utils::repeat_kv(k, rep)?.contiguous()?;
        let v = candle_transformers::utils::repeat_kv(v, rep)?.contiguous()?;
        let scale = 1f64 / (hd as f64).sqrt();
        let w = (q.matmul(&k.transpose(2, 3)?)? * scale)?;
        let w = match bias {
            Some(bias) => w.broadcast_add(bias)?,
            None => w,
        };
        let w = match path {
            Pass::Fast => candle_nn::ops::softmax_last_dim(&w)?,
            Pass::Train | Pass::Composed => candle_nn::ops::softmax(&w, D::Minus1)?,
        };
        let out = w.matmul(&v)?.transpose(1, 2)?.reshape((b * t, nh * hd))?;
        proj(&l.o, &l.names[3], &out, runs)
    }
}

/// A projection of rows `(n, in)`, plus the adapters' low-rank updates where they adapt
/// `name`: one 2-d matmul of the base weight over every row (candle's `Linear` would
/// broadcast its weight over a 3-d input as a batch of small matmuls, and on the training
/// path its backward would then materialise one weight gradient per batch row before summing
/// them), and one small pair per run of rows that share an adapter.
fn proj(lin: &Linear, name: &str, x: &Tensor, runs: &Runs<'_>) -> Result<Tensor, LmError> {
    let y = lin.forward(x)?;
    Ok(match runs.delta(name, x, lin.weight().dim(0)?)? {
        Some(d) => (y + d)?,
        None => y,
    })
}

/// The LoRA adapters a forward pass reads.
#[derive(Debug, Clone, Copy, Default)]
pub enum Lora<'a> {
    /// The base model alone.
    #[default]
    Base,
    /// One adapter for every prompt.
    All(&'a Adapter),
    /// An adapter (or none) per prompt, all in the same forward pass: the base projections
    /// run once over every row, and each adapter's low-rank update over its prompts' rows.
    /// Prompts that share an adapter are best kept next to each other (one update per
    /// run of prompts).
    Each(&'a [Option<&'a Adapter>]),
}

impl<'a> From<Option<&'a Adapter>> for Lora<'a> {
    fn from(a: Option<&'a Adapter>) -> Self {
        a.map_or(Lora::Base, Lora::All)
    }
}

/// Runs of consecutive rows that read the same adapter (or none), as `(adapter, rows)`.
struct Runs<'a>(Vec<(Option<&'a Adapter>, usize)>);

impl<'a> Runs<'a> {
    /// The runs of `lora` over `prompts` prompts, prompt `i` taking `rows(i)` rows.
    fn new(lora: Lora<'a>, prompts: usize, rows: impl Fn(usize) -> usize) -> Self {
        let total = || (0..prompts).map(&rows).sum();
        match lora {
            Lora::Base => Self(vec![(None, total())]),
            Lora::All(a) => Self(vec![(Some(a), total())]),
            Lora::Each(each) => {
                let same = |a: Option<&Adapter>, b: Option<&Adapter>| match (a, b) {
                    (None, None) => true,
                    (Some(a), Some(b)) => std::ptr::eq(a, b),
                    _ => false,
                };
                let mut runs: Vec<(Option<&'a Adapter>, usize)> = Vec::new();
                for (i, &a) in each.iter().enumerate().take(prompts) {
                    match runs.last_mut() {
                        Some((b, n)) if same(a, *b) => *n += rows(i),
                        _ => runs.push((a, rows(i))),
                    }
                }
                Self(runs)
            }
        }
    }

    /// The adapters' update of module `name` (output width `out`) over rows `x`, if any
    /// adapter adapts it.
    fn delta(&self, name: &str, x: &Tensor, out: usize) -> Result<Option<Tensor>, LmError> {
        if let [(a, _)] = self.0.as_slice() {
            return Ok(a.map(|a| a.delta(name, x)).transpose()?.flatten());
        }
        if !self
            .0
            .iter()
            .any(|(a, _)| a.is_some_and(|a| a.weights.contains_key(name)))
        {
            return Ok(None);
        }
        let rows: usize = self.0.iter().map(|&(_, n)| n).sum();
        if rows != x.dim(0)? {
            return Err(LmError::Candle(candle_core::Error::Msg(format!(
                "adapter runs cover {rows} rows of {}",
                x.dim(0)?
            ))));
        }
        let mut parts = Vec::with_capacity(self.0.len());
        let mut at = 0;
        for &(a, n) in &self.0 {
            let d = match a {
                Some(a) => a.delta(name, &x.narrow(0, at, n)?)?,
                None => None,
            };
            parts.push(match d {
                Some(d) => d,
                None => Tensor::zeros((n, out), x.dtype(), x.device())?,
            });
            at += n;
        }
        Ok(Some(Tensor::cat(&parts, 0)?))
    }
}

/// Prompts right-padded with `pad` to `t` tokens, `(b, t)`, and the row of each prompt's
/// last token among the `b · t` rows.
fn padded(
    prompts: &[&[u32]],
    pad: u32,
    t: usize,
    device: &Device,
) -> Result<(Tensor, Tensor), LmError> {
    let b = prompts.len();
    let mut flat = Vec::with_capacity(b * t);
    for p in prompts {
        flat.extend_from_slice(p);
        flat.extend(std::iter::repeat_n(pad, t - p.len()));
    }
    let last: Vec<u32> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| (i * t + p.len().max(1) - 1) as u32)
        .collect();
    Ok((
        Tensor::from_vec(flat, (b, t), device)?,
        Tensor::from_vec(last, b, device)?,
    ))
}

/// Rotary tables `(max_positions, head_dim / 2)`, as candle-transformers' qwen2 builds them.
fn rotary_tables(cfg: &LmConfig, device: &Device) -> Result<(Tensor, Tensor), LmError> {
    let dim = cfg.head_dim();
    let inv: Vec<f32> = (0..dim)
        .step_by(2)
        .map(|i| 1f32 / cfg.rope_theta.powf(i as f64 / dim as f64) as f32)
        .collect();
    let n = inv.len();
    let inv = Tensor::from_vec(inv, (1, n), device)?;
    let max = cfg.max_position_embeddings;
    let t = Tensor::arange(0u32, max as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((max, 1))?;
    let freqs = t.matmul(&inv)?;
    Ok((freqs.cos()?, freqs.sin()?))
}

/// The causal additive bias `(t, t)`: 0 on and below the diagonal, −∞ above.
pub fn causal_bias(t: usize, device: &Device) -> Result<Tensor, LmError> {
    let data: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Ok(Tensor::from_vec(data, (t, t), device)?)
}
