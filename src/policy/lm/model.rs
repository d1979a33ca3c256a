//! A Qwen2 decoder in the shape of candle-transformers' `qwen2.rs`: [`Decoder`] (its
//! `Model`) holds the embedding, the [`DecoderLayer`]s (each an [`Attention`] and an
//! [`Mlp`] with their two RMS norms), the final norm, the output layer (or the tied
//! embedding) and the value head; `Decoder::new(cfg, weights)` reads the Hugging Face names
//! through a checked, prefixed view of the tensors (`Vb`, after candle's `VarBuilder`).
//! The modules here compute the reference maths, step for step as `qwen2.rs` (pre-norm
//! layers, rotate-half rotary embeddings, grouped-query attention repeated as Hugging Face
//! does, scale after the score matmul, SiLU-gated MLP, final norm), on three passes
//! ([`Pass`]):
//!
//! - [`Pass::Fast`] for inference, recording no backward pass: on the CPU the packed engine
//!   of `cpu/infer.rs` (see `forward.rs`), with candle's operations and our
//!   [`kernels::span_attention`] as the fallback for weights it cannot read in place;
//!   elsewhere candle's `rms_norm`, `rope` and `softmax_last_dim`;
//! - [`Pass::Train`] for training: on the CPU each prompt's last hidden state comes from the
//!   packed decoder of `cpu/train/`, which keeps its activations and has a hand-written
//!   backward pass tied into candle's autograd; the full forward runs the fused kernels of
//!   `cpu/kernels/` (RMS norm, causal softmax, rotary embedding, SwiGLU), each with a
//!   hand-written backward pass. Either way every weight receives a gradient. Elsewhere
//!   [`Pass::Composed`];
//! - [`Pass::Composed`]: the same maths from candle's differentiable operations
//!   (`rms_norm_slow`, `softmax` after an additive mask, `rope_slow`, `silu`), the reference
//!   the fused kernels are tested against.
//!
//! The three agree to float rounding (tested). Which pass runs where, and the packing of
//! prompts, is `forward.rs`'s.
//!
//! Over 600 lines: the modules, the checked tensor view and the LoRA runs every pass shares;
//! the dispatch between passes is `forward.rs`.

use candle_core::{D, DType, Device, Tensor};
use candle_nn::{Linear, Module};
use std::collections::BTreeMap;
use std::path::Path;

use super::LmError;
use super::config::LmConfig;
use super::cpu::kernels::{self, RopeTables};
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

/// Self-attention of one layer, as candle-transformers' `qwen2::Attention`: biased q/k/v
/// projections, an unbiased output projection, grouped-query heads.
pub struct Attention {
    pub(super) q_proj: Linear,
    pub(super) k_proj: Linear,
    pub(super) v_proj: Linear,
    pub(super) o_proj: Linear,
    pub(super) num_heads: usize,
    pub(super) num_kv_heads: usize,
    pub(super) head_dim: usize,
    /// Module names, for adapters: q, k, v, o.
    pub(super) names: [String; 4],
}

/// The SiLU-gated MLP of one layer, as `qwen2::MLP`.
pub struct Mlp {
    pub(super) gate_proj: Linear,
    pub(super) up_proj: Linear,
    pub(super) down_proj: Linear,
    /// Module names, for adapters: gate, up, down.
    pub(super) names: [String; 3],
}

/// One pre-norm layer, as `qwen2::DecoderLayer`.
pub struct DecoderLayer {
    pub(super) self_attn: Attention,
    pub(super) mlp: Mlp,
    pub(super) input_layernorm: Tensor,
    pub(super) post_attention_layernorm: Tensor,
}

/// The named tensors of a model, read with their expected shapes checked, and a prefix (as
/// candle's `VarBuilder`: `vb.pp("self_attn").linear(true)`), so that a missing or misshapen
/// tensor is an error that names it and the file.
#[derive(Clone, Copy)]
struct Vb<'a> {
    weights: &'a Weights,
    shapes: &'a BTreeMap<String, Vec<usize>>,
    file: &'a Path,
    prefix: &'a str,
}

impl<'a> Vb<'a> {
    /// The tensor `name` under the prefix, as f32.
    fn get(&self, name: &str) -> Result<Tensor, LmError> {
        let name = self.name(name);
        let expected = self.shapes.get(&name).cloned().unwrap_or_default();
        let t = self
            .weights
            .get(&name)
            .ok_or_else(|| LmError::MissingTensor {
                path: self.file.to_path_buf(),
                name: name.clone(),
                shape: expected.clone(),
            })?;
        if t.dims() != expected.as_slice() {
            return Err(LmError::TensorShape {
                path: self.file.to_path_buf(),
                name,
                found: t.dims().to_vec(),
                expected,
            });
        }
        Ok(t.to_dtype(DType::F32)?)
    }

    /// `name` under the prefix.
    fn name(&self, name: &str) -> String {
        match self.prefix {
            "" => name.to_string(),
            p => format!("{p}.{name}"),
        }
    }

    /// The linear layer at the prefix (`weight`, and `bias` if `bias`).
    fn linear(&self, bias: bool) -> Result<Linear, LmError> {
        let w = self.get("weight")?;
        let b = if bias { Some(self.get("bias")?) } else { None };
        Ok(Linear::new(w, b))
    }
}

impl Attention {
    fn new(cfg: &LmConfig, weights: Vb<'_>, prefix: &str) -> Result<Self, LmError> {
        let at = |m: &str| format!("{prefix}.{m}");
        let names = ["q_proj", "k_proj", "v_proj", "o_proj"].map(at);
        let lin = |i: usize, bias: bool| {
            Vb {
                prefix: &names[i],
                ..weights
            }
            .linear(bias)
        };
        Ok(Self {
            q_proj: lin(0, true)?,
            k_proj: lin(1, true)?,
            v_proj: lin(2, true)?,
            o_proj: lin(3, false)?,
            num_heads: cfg.num_attention_heads,
            num_kv_heads: cfg.kv_heads(),
            head_dim: cfg.head_dim(),
            names,
        })
    }

    /// (query heads, key/value heads, head dimension).
    pub(super) fn heads(&self) -> (usize, usize, usize) {
        (self.num_heads, self.num_kv_heads, self.head_dim)
    }

    /// Causal attention on the fast path (CPU): rotary embeddings in the `(b, t, heads, dim)`
    /// layout the projections produce, then [`kernels::span_attention`] over the rows, each
    /// seeing its sequence up to itself (no score matrix, no transposes, no repeated
    /// key/value heads).
    pub(super) fn attention_fused(
        &self,
        x: &Tensor,
        (b, t): (usize, usize),
        cos: &Tensor,
        sin: &Tensor,
        runs: &Runs<'_>,
    ) -> Result<Tensor, LmError> {
        let (nh, nkv, hd) = self.heads();
        let q = proj(&self.q_proj, &self.names[0], x, runs)?.reshape((b, t, nh, hd))?;
        let k = proj(&self.k_proj, &self.names[1], x, runs)?.reshape((b, t, nkv, hd))?;
        let v = proj(&self.v_proj, &self.names[2], x, runs)?.reshape((b * t, nkv, hd))?;
        let q = candle_nn::rotary_emb::rope_thd(&q, cos, sin)?.reshape((b * t, nh, hd))?;
        let k = candle_nn::rotary_emb::rope_thd(&k, cos, sin)?.reshape((b * t, nkv, hd))?;
        let spans: Vec<(u32, u32)> = (0..b * t)
            .map(|r| ((r - r % t) as u32, (r % t + 1) as u32))
            .collect();
        let scale = 1.0 / (hd as f32).sqrt();
        let out = kernels::span_attention(&q, &k, &v, &spans, scale)?;
        proj(
            &self.o_proj,
            &self.names[3],
            &out.reshape((b * t, nh * hd))?,
            runs,
        )
    }

    /// Causal attention on the training path (CPU): rotary embeddings in the projections'
    /// `(b, t, heads, dim)` layout, the score and value products as batched matmuls, and
    /// the scale, causal mask and softmax as one kernel, each with its own backward.
    pub(super) fn attention_train(
        &self,
        x: &Tensor,
        (b, t): (usize, usize),
        rope: &RopeTables,
        runs: &Runs<'_>,
    ) -> Result<Tensor, LmError> {
        let (nh, nkv, hd) = self.heads();
        let q = proj(&self.q_proj, &self.names[0], x, runs)?.reshape((b, t, nh, hd))?;
        let k = proj(&self.k_proj, &self.names[1], x, runs)?.reshape((b, t, nkv, hd))?;
        let v = proj(&self.v_proj, &self.names[2], x, runs)?.reshape((b, t, nkv, hd))?;
        let q = kernels::rope(&q, rope)?.transpose(1, 2)?.contiguous()?;
        let k = kernels::rope(&k, rope)?.transpose(1, 2)?;
        let v = v.transpose(1, 2)?;
        let rep = nh / nkv;
        let k = repeat_kv(k, rep)?.contiguous()?;
        let v = repeat_kv(v, rep)?.contiguous()?;
        let scale = 1.0 / (hd as f32).sqrt();
        let p = kernels::causal_softmax(&q.matmul(&k.transpose(2, 3)?)?, scale)?;
        let out = p.matmul(&v)?.transpose(1, 2)?.reshape((b * t, nh * hd))?;
        proj(&self.o_proj, &self.names[3], &out, runs)
    }

    /// Keys (rotated) and values on the training path, `(b, heads, t, dim)` each, the
    /// key/value heads repeated to the query heads.
    pub(super) fn keys_values_train(
        &self,
        x: &Tensor,
        (b, t): (usize, usize),
        rope: &RopeTables,
        runs: &Runs<'_>,
    ) -> Result<(Tensor, Tensor), LmError> {
        let (nh, nkv, hd) = self.heads();
        let k = proj(&self.k_proj, &self.names[1], x, runs)?.reshape((b, t, nkv, hd))?;
        let v = proj(&self.v_proj, &self.names[2], x, runs)?.reshape((b, t, nkv, hd))?;
        let k = kernels::rope(&k, rope)?.transpose(1, 2)?;
        let v = v.transpose(1, 2)?;
        let rep = nh / nkv;
        Ok((
            repeat_kv(k, rep)?.contiguous()?,
            repeat_kv(v, rep)?.contiguous()?,
        ))
    }

    /// Causal (or `bias`-masked) self-attention of rows `x` `(b · t, hidden)` on `path`.
    pub(super) fn forward(
        &self,
        x: &Tensor,
        (b, t): (usize, usize),
        bias: Option<&Tensor>,
        causal: bool,
        cos: &Tensor,
        sin: &Tensor,
        rope: &RopeTables,
        path: Pass,
        runs: &Runs<'_>,
    ) -> Result<Tensor, LmError> {
        let (nh, nkv, hd) = self.heads();
        if path == Pass::Fast && causal && x.device().is_cpu() {
            return self.attention_fused(x, (b, t), cos, sin, runs);
        }
        if path == Pass::Train {
            return self.attention_train(x, (b, t), rope, runs);
        }
        let heads = |y: Tensor, n: usize| y.reshape((b, t, n, hd))?.transpose(1, 2);
        let q = heads(proj(&self.q_proj, &self.names[0], x, runs)?, nh)?;
        let k = heads(proj(&self.k_proj, &self.names[1], x, runs)?, nkv)?;
        let v = heads(proj(&self.v_proj, &self.names[2], x, runs)?, nkv)?;
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
        let k = repeat_kv(k, rep)?.contiguous()?;
        let v = repeat_kv(v, rep)?.contiguous()?;
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
        proj(&self.o_proj, &self.names[3], &out, runs)
    }
}

impl Mlp {
    fn new(weights: Vb<'_>, prefix: &str) -> Result<Self, LmError> {
        let at = |m: &str| format!("{prefix}.{m}");
        let names = ["gate_proj", "up_proj", "down_proj"].map(at);
        let lin = |i: usize| {
            Vb {
                prefix: &names[i],
                ..weights
            }
            .linear(false)
        };
        Ok(Self {
            gate_proj: lin(0)?,
            up_proj: lin(1)?,
            down_proj: lin(2)?,
            names,
        })
    }
}

impl DecoderLayer {
    fn new(cfg: &LmConfig, weights: Vb<'_>, layer: usize) -> Result<Self, LmError> {
        let p = format!("model.layers.{layer}");
        Ok(Self {
            self_attn: Attention::new(cfg, weights, &format!("{p}.self_attn"))?,
            mlp: Mlp::new(weights, &format!("{p}.mlp"))?,
            input_layernorm: weights.get(&format!("{p}.input_layernorm.weight"))?,
            post_attention_layernorm: weights
                .get(&format!("{p}.post_attention_layernorm.weight"))?,
        })
    }

    /// The adapters' module names of the layer: q, k, v, o, gate, up, down.
    pub(super) fn names(&self) -> impl Iterator<Item = &String> {
        self.self_attn.names.iter().chain(&self.mlp.names)
    }
}

/// The decoder.
pub struct Decoder {
    pub(super) cfg: LmConfig,
    pub(super) embed: Tensor,
    pub(super) layers: Vec<DecoderLayer>,
    pub(super) norm: Tensor,
    pub(super) head: Linear,
    pub(super) value: Option<Linear>,
    pub(super) cos: Tensor,
    pub(super) sin: Tensor,
    /// The same tables for the fused rotary kernel.
    pub(super) rope: RopeTables,
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
        let vb = Vb {
            weights,
            shapes: &shapes,
            file,
            prefix: "",
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| DecoderLayer::new(cfg, vb, l))
            .collect::<Result<Vec<_>, _>>()?;
        let embed = vb.get("model.embed_tokens.weight")?;
        let at = |prefix| Vb { prefix, ..vb };
        let head = if cfg.tie_word_embeddings {
            Linear::new(embed.clone(), None)
        } else {
            at("lm_head").linear(false)?
        };
        let (cos, sin) = rotary_tables(cfg, embed.device())?;
        let rope = RopeTables::new(&cos, &sin)?;
        let value = if cfg.value_head {
            Some(at("value_head").linear(true)?)
        } else {
            None
        };
        Ok(Self {
            value,
            cfg: cfg.clone(),
            embed,
            layers,
            norm: vb.get("model.norm.weight")?,
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

    /// The output layer applied to hidden states `(..., hidden)`.
    pub fn head(&self, hidden: &Tensor) -> Result<Tensor, LmError> {
        Ok(self.head.forward(hidden)?)
    }

    /// The value head applied to hidden states `(..., hidden)`: `(..., 1)`, if the model
    /// has one.
    pub fn value(&self, hidden: &Tensor) -> Result<Option<Tensor>, LmError> {
        Ok(self.value.as_ref().map(|v| v.forward(hidden)).transpose()?)
    }

    /// The second half of a layer: `x + down(silu(gate(n)) · up(n))` with `n` the normed `x`.
    pub(super) fn mlp(
        &self,
        layer: &DecoderLayer,
        x: &Tensor,
        path: Pass,
        runs: &Runs<'_>,
    ) -> Result<Tensor, LmError> {
        let n = self.rms(x, &layer.post_attention_layernorm, path)?;
        let g = proj(&layer.mlp.gate_proj, &layer.mlp.names[0], &n, runs)?;
        let u = proj(&layer.mlp.up_proj, &layer.mlp.names[1], &n, runs)?;
        let a = match path {
            Pass::Composed => (g.silu()? * u)?,
            _ if !g.device().is_cpu() => (g.silu()? * u)?,
            _ => kernels::swiglu(&g, &u)?,
        };
        let m = proj(&layer.mlp.down_proj, &layer.mlp.names[2], &a, runs)?;
        Ok((x + m)?)
    }

    /// (query heads, key/value heads, head dimension).
    pub(super) fn heads(&self) -> (usize, usize, usize) {
        (
            self.cfg.num_attention_heads,
            self.cfg.kv_heads(),
            self.cfg.head_dim(),
        )
    }

    pub(super) fn rms(&self, x: &Tensor, w: &Tensor, path: Pass) -> Result<Tensor, LmError> {
        let eps = self.cfg.rms_norm_eps as f32;
        Ok(match path {
            Pass::Fast => candle_nn::ops::rms_norm(&x.contiguous()?, w, eps)?,
            Pass::Train => kernels::rms_norm(x, w, eps)?,
            Pass::Composed => candle_nn::ops::rms_norm_slow(x, w, eps)?,
        })
    }
}

/// The `nkv` key/value heads of `xs` `(b, nkv, t, dim)` each repeated `rep` times in place,
/// `(b, nkv · rep, t, dim)`, as Hugging Face's `repeat_kv` (and candle-transformers'
/// `utils::repeat_kv`, the reference tests/suite/lm.rs checks against): head `h` of the
/// result is key/value head `h / rep`. Written here so that the library does not depend on
/// candle-transformers (on the build's critical path; a dev-dependency for that reference).
fn repeat_kv(xs: Tensor, rep: usize) -> candle_core::Result<Tensor> {
    if rep == 1 {
        return Ok(xs);
    }
    let (b, nkv, t, dim) = xs.dims4()?;
    // Concatenated along time then read as heads: one contiguous copy, no strided broadcast.
    Tensor::cat(&vec![&xs; rep], 2)?.reshape((b, nkv * rep, t, dim))
}

/// A projection of rows `(n, in)`, plus the adapters' low-rank updates where they adapt
/// `name`: one 2-d matmul of the base weight over every row (candle's `Linear` would
/// broadcast its weight over a 3-d input as a batch of small matmuls, and on the training
/// path its backward would then materialise one weight gradient per batch row before summing
/// them), and one small pair per run of rows that share an adapter.
pub(super) fn proj(
    lin: &Linear,
    name: &str,
    x: &Tensor,
    runs: &Runs<'_>,
) -> Result<Tensor, LmError> {
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
pub(super) struct Runs<'a>(Vec<(Option<&'a Adapter>, usize)>);

impl<'a> Runs<'a> {
    /// The runs of `lora` over `prompts` prompts, prompt `i` taking `rows(i)` rows.
    pub(super) fn new(lora: Lora<'a>, prompts: usize, rows: impl Fn(usize) -> usize) -> Self {
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
    pub(super) fn delta(
        &self,
        name: &str,
        x: &Tensor,
        out: usize,
    ) -> Result<Option<Tensor>, LmError> {
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
pub(super) fn padded(
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
