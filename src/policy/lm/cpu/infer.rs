//! The fast path's decoder on the CPU over plain buffers: the prompts packed end to end, the
//! weights read in place from their tensors (no copies, so an optimizer step on the
//! variables behind them is seen by the next call), and a handful of buffers per call
//! instead of a fresh tensor for every operation. The projections call the same `gemm`
//! candle's matmul uses, writing into the buffers (the output projection and the MLP's
//! down projection add into the residual stream in the same call, so there is no separate
//! add and no zero-filled output); RMS norm, rotary embedding, SwiGLU and attention are the
//! slice-level kernels of [`super::kernels`]. Same maths, step for step, as the other paths
//! (tested against them to 1e-5).
//!
//! Each layer's rows are computed in two halves side by side, a thread each, where that
//! changes no result (`cut`, tested to the bit against the whole batch): on two cores that
//! beat threading each operation (decisions/s of `emergence run` on the corridor maze with
//! `--policy lm`, 4 arenas: 1.4x).
//!
//! Over 800 lines: besides the packed forward, the weights' layout that the training path
//! reads too (`Layout`, `Packed`, `Project`) and the continuation of kept prompts
//! (`KvCache`, `extend_hidden`: a talking agent's word after its action), which shares the
//! forward's layer tail (`attend_and_mlp`) and its span layout.

use candle_core::{CpuStorage, Storage, Tensor};
use rayon::prelude::*;
use std::ops::Deref;

use super::kernels::{self, RopeTables, Segments};
use super::parts::each_part;
use crate::policy::gemm::{matmul_wt, transpose};

/// A tensor's f32 data on the CPU, held for reading (`G`: candle's storage read guard).
pub(crate) struct Locked<G> {
    guard: G,
    range: (usize, usize),
}

/// `t`'s storage held for reading, if it is a contiguous f32 tensor on the CPU.
pub(crate) fn lock(t: &Tensor) -> Option<Locked<impl Deref<Target = Storage> + '_>> {
    let (guard, layout) = t.storage_and_layout();
    let range = layout.contiguous_offsets()?;
    matches!(&*guard, Storage::Cpu(CpuStorage::F32(_))).then_some(Locked { guard, range })
}

impl<G: Deref<Target = Storage>> Locked<G> {
    /// The data.
    pub(crate) fn data(&self) -> &[f32] {
        match &*self.guard {
            Storage::Cpu(CpuStorage::F32(v)) => &v[self.range.0..self.range.1],
            _ => &[],
        }
    }
}

/// One layer's weights (`(out, in)` matrices, Hugging Face layout).
pub(in crate::policy::lm) struct LayerData<'a> {
    pub q: &'a [f32],
    pub q_bias: Option<&'a [f32]>,
    pub k: &'a [f32],
    pub k_bias: Option<&'a [f32]>,
    pub v: &'a [f32],
    pub v_bias: Option<&'a [f32]>,
    pub o: &'a [f32],
    pub gate: &'a [f32],
    pub up: &'a [f32],
    pub down: &'a [f32],
    pub ln1: &'a [f32],
    pub ln2: &'a [f32],
}

/// A LoRA adapter's matrices: per layer, per projection (q, k, v, o, gate, up, down),
/// `A` `(r, in)` and `B` `(out, r)` when adapted; the update is `scale · B (A x)`.
pub(in crate::policy::lm) struct LoraData<'a> {
    pub rank: usize,
    pub scale: f32,
    pub modules: Vec<[Option<(&'a [f32], &'a [f32])>; 7]>,
}

/// Runs of consecutive rows with the adapter they read: `(adapter index, rows)`.
pub(in crate::policy::lm) type Runs = Vec<(Option<usize>, usize)>;

/// The runs of `per_prompt` (each prompt's adapter index) with prompt `i` taking `rows(i)`
/// rows.
pub(in crate::policy::lm) fn runs(
    per_prompt: &[Option<usize>],
    rows: impl Fn(usize) -> usize,
) -> Runs {
    let mut out: Runs = Vec::new();
    for (i, &a) in per_prompt.iter().enumerate() {
        match out.last_mut() {
            Some((b, n)) if *b == a => *n += rows(i),
            _ => out.push((a, rows(i))),
        }
    }
    out
}

/// Adds the adapters' updates of projection `module` of layer `layer` to `y` (rows of
/// `out`), the input rows `x` being `inp` wide.
#[allow(clippy::too_many_arguments)]
pub(in crate::policy::lm) fn lora_delta(
    y: &mut [f32],
    x: &[f32],
    (inp, out): (usize, usize),
    adapters: &[LoraData<'_>],
    runs: &Runs,
    layer: usize,
    module: usize,
) {
    let mut start = 0;
    for &(a, n) in runs {
        if let Some(l) = a.and_then(|a| adapters.get(a))
            && let Some((wa, wb)) = l.modules.get(layer).and_then(|m| m[module])
        {
            let mut ax = vec![0f32; n * l.rank];
            matmul_wt(&mut ax, &x[start * inp..], wa, (n, inp, l.rank), false, 1.0);
            matmul_wt(
                &mut y[start * out..(start + n) * out],
                &ax,
                wb,
                (n, l.rank, out),
                true,
                l.scale,
            );
        }
        start += n;
    }
}

/// A model's sizes and its norms' epsilon.
#[derive(Clone, Copy)]
pub(in crate::policy::lm) struct Sizes {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub eps: f32,
}

impl Sizes {
    /// (hidden, heads, key/value heads, head width, intermediate).
    pub(in crate::policy::lm) fn dims(&self) -> (usize, usize, usize, usize, usize) {
        let s = self;
        (s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate)
    }
}

/// A forward pass's projections: the base weight's product, plus the adapters' updates
/// when any prompt reads an adapter.
pub(in crate::policy::lm) struct Project<'a, 'b> {
    adapters: &'b [LoraData<'a>],
    lora: bool,
}

impl<'a, 'b> Project<'a, 'b> {
    /// The projections with `adapters`, prompt `i` reading `per_prompt[i]`.
    pub(in crate::policy::lm) fn new(
        adapters: &'b [LoraData<'a>],
        per_prompt: &[Option<usize>],
    ) -> Self {
        let lora = !adapters.is_empty() && per_prompt.iter().any(Option::is_some);
        Self { adapters, lora }
    }

    /// `y [+]= x wᵀ` over `rows` rows of `inp` into `out` (`w` an `(out, inp)` weight,
    /// module `j` of layer `i`), plus the adapters' updates over `runs`.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::policy::lm) fn run(
        &self,
        y: &mut [f32],
        x: &[f32],
        w: &[f32],
        (rows, inp, out): (usize, usize, usize),
        add: bool,
        (i, j, runs): (usize, usize, &Runs),
    ) {
        matmul_wt(y, x, w, (rows, inp, out), add, 1.0);
        if self.lora {
            lora_delta(y, x, (inp, out), self.adapters, runs, i, j);
        }
    }
}

/// The model's sizes and weights.
pub(in crate::policy::lm) struct ModelData<'a> {
    pub sizes: Sizes,
    pub embed: &'a [f32],
    pub layers: Vec<LayerData<'a>>,
    pub norm: &'a [f32],
}

/// The tensors the packed decoders read, in [`Layout::read`]'s order, their layout, and
/// each prompt's adapter among the layout's adapters.
pub(in crate::policy::lm) struct Packed {
    pub tensors: Vec<Tensor>,
    pub layout: Layout,
    pub per_prompt: Vec<Option<usize>>,
}

impl Packed {
    /// `f` over the model and adapters read in place from the tensors (each locked for
    /// reading meanwhile), with each tensor's index; `None` when a tensor is not a
    /// contiguous f32 tensor on the CPU.
    pub(in crate::policy::lm) fn read<R>(
        &self,
        f: impl FnOnce(&ModelData<'_>, &[LoraData<'_>], &ModelIx) -> R,
    ) -> Option<R> {
        let locks = self.tensors.iter().map(lock).collect::<Option<Vec<_>>>()?;
        let data: Vec<&[f32]> = locks.iter().map(|l| l.data()).collect();
        let (model, adapters, ix) = self.layout.read(&data);
        Some(f(&model, &adapters, &ix))
    }
}

/// What a model's tensors hold apart from their data: its sizes, the biases of each layer,
/// and each adapter's rank, scale and adapted modules. [`Layout::read`] takes the data in
/// the order the caller collected the tensors.
pub(in crate::policy::lm) struct Layout {
    pub sizes: Sizes,
    /// Per layer: whether q, k and v have a bias.
    pub biases: Vec<[bool; 3]>,
    pub adapters: Vec<AdapterLayout>,
}

/// An adapter's rank, scale (`alpha / r`) and, per layer, the projections it adapts (q, k,
/// v, o, gate, up, down).
pub(in crate::policy::lm) struct AdapterLayout {
    pub rank: usize,
    pub scale: f32,
    pub modules: Vec<[bool; 7]>,
}

/// A layer's tensors' indices in the order read: the projections (q, k, v, o, gate, up,
/// down), the two norms, the biases of q, k and v.
pub(in crate::policy::lm) struct LayerIx {
    pub modules: [usize; 7],
    pub ln1: usize,
    pub ln2: usize,
    pub biases: [Option<usize>; 3],
}

/// Every tensor's index in the order read, for their gradients.
pub(in crate::policy::lm) struct ModelIx {
    pub embed: usize,
    pub norm: usize,
    pub layers: Vec<LayerIx>,
    /// Per adapter, per layer, per projection: the indices of `A` and `B`.
    pub adapters: Vec<Vec<[Option<(usize, usize)>; 7]>>,
}

impl Layout {
    /// The model and its adapters over `data`, which holds, in this order: the embedding,
    /// the final norm; per layer q, k, v, o, gate, up, down, ln1, ln2 and the biases it has
    /// (q, k, v); per adapter, per layer, each adapted projection's `A` then `B`. With each
    /// tensor's index in `data`.
    pub(in crate::policy::lm) fn read<'a>(
        &self,
        data: &[&'a [f32]],
    ) -> (ModelData<'a>, Vec<LoraData<'a>>, ModelIx) {
        let mut at = 0;
        let mut next = || {
            at += 1;
            (at - 1, data.get(at - 1).copied().unwrap_or(&[]))
        };
        let ((embed_ix, embed), (norm_ix, norm)) = (next(), next());
        let mut layers = Vec::with_capacity(self.biases.len());
        let mut layer_ix = Vec::with_capacity(self.biases.len());
        for has in &self.biases {
            let w = [(); 9].map(|()| next());
            let b = has.map(|has| has.then(&mut next));
            layers.push(LayerData {
                q: w[0].1,
                k: w[1].1,
                v: w[2].1,
                o: w[3].1,
                gate: w[4].1,
                up: w[5].1,
                down: w[6].1,
                ln1: w[7].1,
                ln2: w[8].1,
                q_bias: b[0].map(|b| b.1),
                k_bias: b[1].map(|b| b.1),
                v_bias: b[2].map(|b| b.1),
            });
            layer_ix.push(LayerIx {
                modules: [0, 1, 2, 3, 4, 5, 6].map(|j| w[j].0),
                ln1: w[7].0,
                ln2: w[8].0,
                biases: b.map(|b| b.map(|b| b.0)),
            });
        }
        let mut adapters = Vec::with_capacity(self.adapters.len());
        let mut adapter_ix = Vec::with_capacity(self.adapters.len());
        for a in &self.adapters {
            let (modules, ix): (Vec<_>, Vec<_>) = a
                .modules
                .iter()
                .map(|adapted| {
                    let pairs = adapted.map(|adapted| adapted.then(|| (next(), next())));
                    (
                        pairs.map(|p| p.map(|((_, wa), (_, wb))| (wa, wb))),
                        pairs.map(|p| p.map(|((ia, _), (ib, _))| (ia, ib))),
                    )
                })
                .unzip();
            adapters.push(LoraData {
                rank: a.rank,
                scale: a.scale,
                modules,
            });
            adapter_ix.push(ix);
        }
        let model = ModelData {
            sizes: self.sizes,
            embed,
            layers,
            norm,
        };
        let ix = ModelIx {
            embed: embed_ix,
            norm: norm_ix,
            layers: layer_ix,
            adapters: adapter_ix,
        };
        (model, adapters, ix)
    }
}

/// The fewest leading tokens worth sharing between prompts.
pub(in crate::policy::lm) const MIN_SHARED: usize = 4;

/// For each prompt, `(leader, n)`: its first `n` tokens are those of prompt `leader` (which
/// shares none itself), read from there; `n` is 0 when it shares none, and at most its
/// length − 1 (its last token is always its own row). Prompts share only with prompts of
/// the same adapter (`adapter_of`), whose keys and values are the same. Found by sorting the
/// prompts, so that each run of prompts with a common beginning follows its first one.
fn share_prefixes(
    prompts: &[&[u32]],
    adapter_of: impl Fn(usize) -> Option<usize>,
) -> Vec<(usize, usize)> {
    let mut order: Vec<usize> = (0..prompts.len()).collect();
    order.sort_by(|&a, &b| (adapter_of(a), prompts[a]).cmp(&(adapter_of(b), prompts[b])));
    let mut out = vec![(0, 0); prompts.len()];
    let mut leader: Option<usize> = None;
    for &i in &order {
        if let Some(l) = leader.filter(|&l| adapter_of(l) == adapter_of(i)) {
            let common = prompts[l]
                .iter()
                .zip(prompts[i])
                .take_while(|(a, b)| a == b)
                .count()
                .min(prompts[i].len() - 1);
            if common >= MIN_SHARED {
                out[i] = (l, common);
                continue;
            }
        }
        leader = Some(i);
    }
    out
}

/// Adds `bias` to every row of `x`.
pub(in crate::policy::lm) fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias.filter(|b| !b.is_empty()) {
        x.par_chunks_mut(b.len()).with_min_len(64).for_each(|row| {
            for (v, &c) in row.iter_mut().zip(b) {
                *v += c;
            }
        });
    }
}

/// Row `i` of `x` (rows as wide as the embedding's) becomes token `ids[i]`'s embedding.
pub(in crate::policy::lm) fn embed_rows(x: &mut [f32], embed: &[f32], ids: &[u32]) {
    let h = x.len() / ids.len().max(1);
    for (row, &id) in x.chunks_exact_mut(h.max(1)).zip(ids) {
        let id = id as usize;
        row.copy_from_slice(&embed[id * h..(id + 1) * h]);
    }
}

/// Copies rows `rows` (each `width` wide) of `x` into a new buffer, in that order.
pub(in crate::policy::lm) fn gather(x: &[f32], rows: &[usize], width: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows.len() * width);
    for &r in rows {
        out.extend_from_slice(&x[r * width..(r + 1) * width]);
    }
    out
}

thread_local! {
    /// Prompt tokens whose rows [`packed_hidden`] read from another prompt's on this thread
    /// (computed once for both), for the policy's statistics ([`take_shared_tokens`]).
    static SHARED_TOKENS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The prompt tokens read from another prompt's rows on this thread since the last call.
pub(in crate::policy::lm) fn take_shared_tokens() -> u64 {
    SHARED_TOKENS.with(|c| c.replace(0))
}

/// The final normed hidden states of packed prompts: at every token (`every_row`,
/// `(tokens, hidden)`) or at each prompt's last token only (`(prompts, hidden)`; the last
/// layer then computes those rows alone, their keys and values still covering every
/// token). Prompts must be non-empty, their ids below the vocabulary size and their
/// lengths within the rotary tables (the caller checks).
pub(in crate::policy::lm) fn packed_hidden(
    m: &ModelData<'_>,
    rope: &RopeTables,
    prompts: &[&[u32]],
    every_row: bool,
    lora: (&[LoraData<'_>], &[Option<usize>]),
) -> Vec<f32> {
    packed_hidden_keep(m, rope, prompts, every_row, lora, None)
}

/// The keys and values a fast pass computed ([`crate::policy::lm::Decoder::last_hidden_kept`]),
/// every layer's, with how its prompts were packed: what
/// [`crate::policy::lm::Decoder::extend_last_hidden`] continues the prompts from.
pub struct KvCache {
    /// Per layer: the rotated keys and the values of every computed row, `(rows, kv width)`.
    layers: Vec<(Vec<f32>, Vec<f32>)>,
    /// Per prompt: its first own row, its own rows, `(leader, tokens read from the
    /// leader)` as [`share_prefixes`] gives them, and its length.
    firsts: Vec<usize>,
    own: Vec<usize>,
    shared: Vec<(usize, usize)>,
    lens: Vec<usize>,
    /// Each prompt's adapter index.
    per_prompt: Vec<Option<usize>>,
}

impl KvCache {
    /// The prompts' lengths.
    pub(in crate::policy::lm) fn lens(&self) -> &[usize] {
        &self.lens
    }

    /// Each prompt's adapter index.
    pub(in crate::policy::lm) fn per_prompt(&self) -> &[Option<usize>] {
        &self.per_prompt
    }
}

/// [`packed_hidden`], keeping every layer's keys and values in `keep` when given (each
/// prompt's last rows only, not `every_row`).
pub(in crate::policy::lm) fn packed_hidden_keep(
    m: &ModelData<'_>,
    rope: &RopeTables,
    prompts: &[&[u32]],
    every_row: bool,
    (adapters, per_prompt): (&[LoraData<'_>], &[Option<usize>]),
    mut keep: Option<&mut Option<KvCache>>,
) -> Vec<f32> {
    let projections = Project::new(adapters, per_prompt);
    let adapter_of = |i: usize| per_prompt.get(i).copied().flatten();
    // A prompt that begins like another one (with the same adapter) reads that prompt's
    // rows for those tokens and computes only the rest; not when every row is wanted.
    let shared = if every_row {
        vec![(0, 0); prompts.len()]
    } else {
        share_prefixes(prompts, adapter_of)
    };
    let own = |i: usize| prompts[i].len() - shared[i].1;
    SHARED_TOKENS.with(|c| c.set(c.get() + shared.iter().map(|&(_, n)| n as u64).sum::<u64>()));
    let token_runs = runs(per_prompt, own);
    let last_runs = runs(per_prompt, |_| 1);
    let (h, nh, nkv, hd, iw) = m.sizes.dims();
    let (qw, kvw) = (nh * hd, nkv * hd);
    let total: usize = (0..prompts.len()).map(own).sum();
    let firsts: Vec<u32> = (0..prompts.len())
        .scan(0u32, |at, i| {
            *at += own(i) as u32;
            Some(*at - own(i) as u32)
        })
        .collect();
    let mut pos = Vec::with_capacity(total);
    let mut spans_all: Vec<Segments> = Vec::with_capacity(total);
    let mut spans_last: Vec<Segments> = Vec::with_capacity(prompts.len());
    let mut last_rows = Vec::with_capacity(prompts.len());
    for (i, &first) in firsts.iter().enumerate() {
        let (leader, n_shared) = shared[i];
        let pre = if n_shared > 0 {
            (firsts[leader], n_shared as u32)
        } else {
            (0, 0)
        };
        let n = own(i) as u32;
        pos.extend((0..n).map(|k| n_shared as u32 + k));
        spans_all.extend((1..=n).map(|k| [pre, (first, k)]));
        spans_last.push([pre, (first, n)]);
        last_rows.push((first + n - 1) as usize);
    }
    let last_pos: Vec<u32> = prompts.iter().map(|p| p.len() as u32 - 1).collect();
    let mut x = vec![0f32; total * h];
    let own_ids: Vec<u32> = prompts
        .iter()
        .zip(&shared)
        .flat_map(|(p, &(_, n_shared))| p[n_shared..].iter().copied())
        .collect();
    embed_rows(&mut x, m.embed, &own_ids);
    let mut n = vec![0f32; total * h];
    let mut q = vec![0f32; total * qw];
    let mut k = vec![0f32; total * kvw];
    let mut v = vec![0f32; total * kvw];
    let mut g = vec![0f32; total * iw];
    let mut u = vec![0f32; total * iw];
    // Where each layer's rows, and the last layer's, are cut in two halves side by side.
    let least = min_cut_rows(&m.sizes, projections.lora);
    let ends: Vec<usize> = last_rows.iter().map(|&r| r + 1).collect();
    let cut_all = cut(&ends, &token_runs, least);
    let ends_last: Vec<usize> = (1..=prompts.len()).collect();
    let cut_last = cut(&ends_last, &last_runs, least);
    let layers = m.layers.len();
    for (i, l) in m.layers.iter().enumerate() {
        let tr = &token_runs;
        keys_and_values_cut(
            m,
            (&projections, i, l, rope),
            (&x, &mut n),
            (&mut k, &mut v),
            (&pos, tr),
            cut_all,
        );
        if let Some(kept) = keep.as_mut() {
            kept.get_or_insert_with(|| KvCache {
                layers: Vec::with_capacity(layers),
                firsts: firsts.iter().map(|&f| f as usize).collect(),
                own: (0..prompts.len()).map(own).collect(),
                shared: shared.clone(),
                lens: prompts.iter().map(|p| p.len()).collect(),
                per_prompt: per_prompt.to_vec(),
            })
            .layers
            .push((k.clone(), v.clone()));
        }
        let (spans, q_pos, runs, at_cut): (&[Segments], &[u32], &Runs, _) =
            if i + 1 == layers && !every_row {
                // The last layer for each prompt's last token only.
                x = gather(&x, &last_rows, h);
                n = gather(&n, &last_rows, h);
                (&spans_last, &last_pos, &last_runs, cut_last)
            } else {
                (&spans_all, &pos, tr, cut_all)
            };
        let bufs = (&mut x[..], &mut n[..], &mut q[..], &mut g[..], &mut u[..]);
        let at = (&projections, i, l, rope);
        attend_and_mlp_cut(
            m,
            at,
            bufs,
            Keys::Packed(&k, &v),
            (spans, q_pos, runs),
            at_cut,
        );
    }
    let mut out = vec![0f32; x.len()];
    kernels::rms_rows(&mut out, &x, m.norm, m.sizes.eps);
    out
}

/// The final normed hidden state at the last token of each prompt of `cache` continued by
/// `ext[i]` (non-empty), `(prompts, hidden)`: the same as [`packed_hidden`] over the
/// continued prompts, computing only the new tokens' rows. Each prompt's keys and values are
/// laid out again, its own rows followed by its new ones, so that every query still reads
/// two segments (the shared beginning, from its leader's rows, and its own). The new tokens
/// read the adapters the cached prompts did; their ids must be in the vocabulary and the
/// continued prompts within the rotary tables (the caller checks).
pub(in crate::policy::lm) fn extend_hidden(
    m: &ModelData<'_>,
    rope: &RopeTables,
    cache: &KvCache,
    ext: &[&[u32]],
    adapters: &[LoraData<'_>],
) -> Vec<f32> {
    extend_cached(m, rope, Cached::Batch(cache), ext, adapters)
}

/// One agent's keys and values kept from step to step (an agent with memory: its context
/// so far), every layer's rotated keys and values; empty at the start. The keys are kept
/// transposed (`LayerKv`), as the attention kernel reads them, so a step transposes only
/// its new tokens' keys and copies nothing else. Tokens can leave it ([`RowKv::evict`])
/// while the others keep their positions: the next token's position is one past the last
/// token ever added since it was cleared.
#[derive(Debug, Clone, Default)]
pub struct RowKv {
    layers: Vec<LayerKv>,
    len: usize,
    next: usize,
}

/// One layer of a [`RowKv`]: keys transposed, `kt` `(kv width, cap)` (token `r`'s width
/// column `c` at `c · cap + r`, zero from the last token to `cap`, with `cap` at least the
/// tokens rounded up to whole blocks of the kernel's keys), and values `v` `(tokens, kv
/// width)` row-major.
#[derive(Debug, Clone, Default)]
struct LayerKv {
    kt: Vec<f32>,
    cap: usize,
    v: Vec<f32>,
}

impl LayerKv {
    /// Appends the keys `k` and values `v` of `n` new tokens (row-major, `width` wide) after
    /// the `len` it holds, growing `cap` (to twice the tokens, whole blocks) when they do
    /// not fit.
    fn push(&mut self, len: usize, (k, v): (&[f32], &[f32]), width: usize) {
        let n = k.len() / width.max(1);
        let need = (len + n).next_multiple_of(kernels::KEYS);
        if need > self.cap {
            let cap = (2 * (len + n)).next_multiple_of(kernels::KEYS);
            let mut kt = vec![0f32; width * cap];
            for c in 0..width {
                kt[c * cap..c * cap + len].copy_from_slice(&self.kt[c * self.cap..][..len]);
            }
            self.kt = kt;
            self.cap = cap;
        }
        transpose(&mut self.kt[len..], self.cap, k, width, (n, width));
        self.v.extend_from_slice(v);
    }

    /// Removes tokens `from..from + n` of the `len` it holds (`width` wide).
    fn evict(&mut self, len: usize, (from, n): (usize, usize), width: usize) {
        for c in 0..width {
            let col = &mut self.kt[c * self.cap..c * self.cap + len];
            col.copy_within(from + n..len, from);
            col[len - n..].fill(0.0);
        }
        self.v.drain(from * width..(from + n) * width);
    }

    /// What [`kernels::attend_own_into`] reads.
    fn own(&self) -> kernels::OwnKv<'_> {
        kernels::OwnKv {
            kt: &self.kt,
            stride: self.cap,
            v: &self.v,
        }
    }
}

impl RowKv {
    /// The tokens its keys and values cover.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it covers no token.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The position the next token takes.
    pub fn next_position(&self) -> usize {
        self.next
    }

    /// Forgets every token (the next continuation starts at position 0).
    pub fn clear(&mut self) {
        self.layers.clear();
        self.len = 0;
        self.next = 0;
    }

    /// Removes the keys and values of its tokens `from..from + n` (within it); the others
    /// keep their positions, and the next token's stays where it was.
    pub fn evict(&mut self, from: usize, n: usize) {
        let n = n.min(self.len.saturating_sub(from));
        if n == 0 {
            return;
        }
        for layer in &mut self.layers {
            let width = layer.v.len() / self.len.max(1);
            layer.evict(self.len, (from, n), width);
        }
        self.len -= n;
    }
}

/// What [`extend_cached`] continues: a pass's kept batch, read only, or each agent's own
/// keys and values, to which the new tokens' are appended.
pub(in crate::policy::lm) enum Cached<'c> {
    Batch(&'c KvCache),
    Rows(&'c mut [RowKv], Vec<Option<usize>>),
}

impl Cached<'_> {
    fn per_prompt(&self) -> &[Option<usize>] {
        match self {
            Cached::Batch(c) => &c.per_prompt,
            Cached::Rows(_, per_prompt) => per_prompt,
        }
    }
    fn own(&self, i: usize) -> usize {
        match self {
            Cached::Batch(c) => c.own[i],
            Cached::Rows(rows, _) => rows[i].len,
        }
    }
    /// The position of prompt `i`'s next token.
    fn len(&self, i: usize) -> usize {
        match self {
            Cached::Batch(c) => c.lens[i],
            Cached::Rows(rows, _) => rows[i].next,
        }
    }
    fn shared(&self, i: usize) -> (usize, usize) {
        match self {
            Cached::Batch(c) => c.shared[i],
            Cached::Rows(..) => (0, 0),
        }
    }
}

/// [`extend_hidden`] over a kept batch or over agents' own keys and values ([`RowKv`]:
/// each continued in place, so that the next step continues from there).
pub(in crate::policy::lm) fn extend_cached(
    m: &ModelData<'_>,
    rope: &RopeTables,
    mut cache: Cached<'_>,
    ext: &[&[u32]],
    adapters: &[LoraData<'_>],
) -> Vec<f32> {
    let per_prompt = cache.per_prompt().to_vec();
    let per_prompt = &per_prompt[..];
    let projections = Project::new(adapters, per_prompt);
    let (h, nh, nkv, hd, iw) = m.sizes.dims();
    let (qw, kvw) = (nh * hd, nkv * hd);
    let b = ext.len();
    let total: usize = ext.iter().map(|e| e.len()).sum();
    // Where each prompt's rows go in the new layout: its own cached rows, then its new ones.
    let own: Vec<usize> = (0..b).map(|i| cache.own(i)).collect();
    let lens: Vec<usize> = (0..b).map(|i| cache.len(i)).collect();
    let starts: Vec<usize> = (0..b)
        .scan(0, |at, i| {
            *at += own[i] + ext[i].len();
            Some(*at - own[i] - ext[i].len())
        })
        .collect();
    let rows_kv = starts
        .last()
        .map_or(0, |&s| s + own[b - 1] + ext[b - 1].len());
    // Agents' own keys and values are read where they are kept: each row's segments index
    // its own prompt's rows (from 0), and no packed copy is made.
    let own_kv = matches!(cache, Cached::Rows(..));
    let (starts, rows_kv) = if own_kv {
        (vec![0; b], 0)
    } else {
        (starts, rows_kv)
    };
    let mut pos = Vec::with_capacity(total);
    let mut spans_all: Vec<Segments> = Vec::with_capacity(total);
    let mut spans_last: Vec<Segments> = Vec::with_capacity(b);
    let mut last_rows = Vec::with_capacity(b);
    let mut new_rows = Vec::with_capacity(total);
    let mut at = 0;
    for (i, e) in ext.iter().enumerate() {
        let (leader, n_shared) = cache.shared(i);
        let pre = if n_shared > 0 {
            (starts[leader] as u32, n_shared as u32)
        } else {
            (0, 0)
        };
        let own = own[i];
        for k in 0..e.len() {
            pos.push((lens[i] + k) as u32);
            spans_all.push([pre, (starts[i] as u32, (own + k + 1) as u32)]);
            new_rows.push(starts[i] + own + k);
        }
        spans_last.push([pre, (starts[i] as u32, (own + e.len()) as u32)]);
        at += e.len();
        last_rows.push(at - 1);
    }
    let last_pos: Vec<u32> = (0..b)
        .map(|i| (lens[i] + ext[i].len() - 1) as u32)
        .collect();
    let token_runs = runs(per_prompt, |i| ext[i].len());
    let last_runs = runs(per_prompt, |_| 1);
    let ids: Vec<u32> = ext.iter().flat_map(|e| e.iter().copied()).collect();
    let mut x = vec![0f32; total * h];
    embed_rows(&mut x, m.embed, &ids);
    let mut n = vec![0f32; total * h];
    let mut q = vec![0f32; total * qw];
    let mut k = vec![0f32; total * kvw];
    let mut v = vec![0f32; total * kvw];
    let mut kk = vec![0f32; rows_kv * kvw];
    let mut vv = vec![0f32; rows_kv * kvw];
    // Each query row's prompt, the source of its keys where they are the agents' own.
    let from_all: Vec<u32> = (0..b as u32)
        .flat_map(|i| std::iter::repeat_n(i, ext[i as usize].len()))
        .collect();
    let from_last: Vec<u32> = (0..b as u32).collect();
    let mut g = vec![0f32; total * iw];
    let mut u = vec![0f32; total * iw];
    let least = min_cut_rows(&m.sizes, projections.lora);
    let ends: Vec<usize> = last_rows.iter().map(|&r| r + 1).collect();
    let cut_all = cut(&ends, &token_runs, least);
    let ends_last: Vec<usize> = (1..=b).collect();
    let cut_last = cut(&ends_last, &last_runs, least);
    let layers = m.layers.len();
    for (i, l) in m.layers.iter().enumerate() {
        let tr = &token_runs;
        keys_and_values_cut(
            m,
            (&projections, i, l, rope),
            (&x, &mut n),
            (&mut k, &mut v),
            (&pos, tr),
            cut_all,
        );
        // The cached rows and the new ones, prompt by prompt.
        match &mut cache {
            Cached::Batch(cache) => {
                let (ck, cv) = &cache.layers[i];
                for ((&first, &own), &start) in cache.firsts.iter().zip(&cache.own).zip(&starts) {
                    let (from, len) = (first * kvw, own * kvw);
                    let to = start * kvw;
                    kk[to..to + len].copy_from_slice(&ck[from..from + len]);
                    vv[to..to + len].copy_from_slice(&cv[from..from + len]);
                }
            }
            Cached::Rows(rows, _) => {
                // Each agent's new keys and values appended to its own (read in place by
                // the attention below, and continued from at the next step).
                let mut r0 = 0;
                for (row, e) in rows.iter_mut().zip(ext) {
                    if row.layers.len() < layers {
                        row.layers.resize_with(layers, Default::default);
                    }
                    let new = r0 * kvw..(r0 + e.len()) * kvw;
                    row.layers[i].push(row.len, (&k[new.clone()], &v[new]), kvw);
                    r0 += e.len();
                }
            }
        }
        if matches!(cache, Cached::Batch(_)) {
            for (r, &row) in new_rows.iter().enumerate() {
                kk[row * kvw..(row + 1) * kvw].copy_from_slice(&k[r * kvw..(r + 1) * kvw]);
                vv[row * kvw..(row + 1) * kvw].copy_from_slice(&v[r * kvw..(r + 1) * kvw]);
            }
        }
        let last = i + 1 == layers;
        let (spans, q_pos, runs, at_cut): (&[Segments], &[u32], &Runs, _) = if last {
            x = gather(&x, &last_rows, h);
            n = gather(&n, &last_rows, h);
            (&spans_last, &last_pos, &last_runs, cut_last)
        } else {
            (&spans_all, &pos, tr, cut_all)
        };
        let bufs = (&mut x[..], &mut n[..], &mut q[..], &mut g[..], &mut u[..]);
        let at = (&projections, i, l, rope);
        let own: Vec<kernels::OwnKv<'_>> = match &cache {
            Cached::Rows(rows, _) => rows.iter().map(|r| r.layers[i].own()).collect(),
            Cached::Batch(_) => Vec::new(),
        };
        let keys = if own_kv {
            Keys::Own(&own, if last { &from_last } else { &from_all })
        } else {
            Keys::Packed(&kk, &vv)
        };
        attend_and_mlp_cut(m, at, bufs, keys, (spans, q_pos, runs), at_cut);
    }
    if let Cached::Rows(rows, _) = &mut cache {
        for (row, e) in rows.iter_mut().zip(ext) {
            row.len += e.len();
            row.next += e.len();
        }
    }
    let mut out = vec![0f32; x.len()];
    kernels::rms_rows(&mut out, &x, m.norm, m.sizes.eps);
    out
}

/// The fewest rows a layer is cut into halves for (below, the halves' hand-over costs more
/// than the second thread gives).
const MIN_CUT_ROWS: usize = 8;

/// The fewest rows each half of a cut layer must have for the cut to leave every product's
/// arithmetic as it was, or `None` where no cut can (adapters in use, or the shapes below).
/// `gemm` (0.19) takes one of three ways to an output, by the product's shape: rows x
/// outputs at most 256, a kernel that sums each output across vector lanes; one row (or one
/// output), a matrix-vector kernel; else its blocked kernel, which sums each output along
/// the inner dimension in blocks that depend on that dimension alone, except where both the
/// rows and the outputs are at most 64 (blocks of 512 then). So a half computes the rows
/// the whole batch did, bit for bit, where it takes the blocked kernel as the whole does:
/// at least `256 / narrowest output + 1` rows (and 2), and every inner dimension at most
/// 512 or every output wider than 64. Adapters' runs would add their own shapes (`A` has
/// `rank` outputs): with adapters the rows stay whole. The row-wise kernels (norms, rotary
/// embedding, SwiGLU, attention, its groups of rows never across a prompt's end) compute
/// each row alone.
fn min_cut_rows(s: &Sizes, lora: bool) -> Option<usize> {
    let (h, nh, nkv, hd, iw) = s.dims();
    let (qw, kvw) = (nh * hd, nkv * hd);
    let narrowest = h.min(qw).min(kvw).min(iw);
    let blocks_alike = h.max(qw).max(iw) <= 512 || narrowest > 64;
    (!lora && narrowest > 0 && blocks_alike).then(|| (256 / narrowest + 1).max(2))
}

/// The row at which a layer's rows are cut into two halves computed side by side, a thread
/// each ([`each_part`]), prompt `i`'s rows ending at row `ends[i]`: the end of a prompt
/// nearest half the rows. None where no cut is exact ([`min_cut_rows`] is `None`), where
/// either half, or a piece of a run, would have fewer rows than it gives, or below
/// [`MIN_CUT_ROWS`]. It depends on the rows alone, never on the thread count, and the
/// results do not depend on it.
fn cut(ends: &[usize], runs: &Runs, min_rows: Option<usize>) -> Option<usize> {
    let total = *ends.last()?;
    #[cfg(test)]
    if tests::UNCUT.with(std::cell::Cell::get) {
        return None;
    }
    let least = min_rows?;
    if total < MIN_CUT_ROWS {
        return None;
    }
    let mid = ends
        .iter()
        .copied()
        .min_by_key(|&e| (2 * e).abs_diff(total))?;
    if mid < least || total - mid < least {
        return None;
    }
    let mut start = 0;
    for &(_, n) in runs {
        if start < mid && mid < start + n && (mid - start < least || start + n - mid < least) {
            return None;
        }
        start += n;
    }
    #[cfg(test)]
    tests::CUTS.with(|c| c.set(c.get() + 1));
    Some(mid)
}

/// `runs` cut at row `mid`: the runs of the rows before it and of those from it.
fn split_runs(runs: &Runs, mid: usize) -> [Runs; 2] {
    let (mut before, mut after): (Runs, Runs) = (Vec::new(), Vec::new());
    let mut start = 0;
    for &(a, n) in runs {
        let end = start + n;
        if end <= mid {
            before.push((a, n));
        } else if start >= mid {
            after.push((a, n));
        } else {
            before.push((a, mid - start));
            after.push((a, end - mid));
        }
        start = end;
    }
    [before, after]
}

/// [`keys_and_values`] over every row of `x`, in two halves side by side where `cut` says.
#[allow(clippy::type_complexity)]
fn keys_and_values_cut(
    m: &ModelData<'_>,
    at: (&Project<'_, '_>, usize, &LayerData<'_>, &RopeTables),
    (x, n): (&[f32], &mut [f32]),
    (k, v): (&mut [f32], &mut [f32]),
    (pos, runs): (&[u32], &Runs),
    cut: Option<usize>,
) {
    let Some(mid) = cut else {
        return keys_and_values(m, at, (x, n), (k, v), (pos, runs));
    };
    let (h, _, nkv, hd, _) = m.sizes.dims();
    let kvw = nkv * hd;
    let (xa, xb) = x.split_at(mid * h);
    let (na, nb) = n.split_at_mut(mid * h);
    let (ka, kb) = k.split_at_mut(mid * kvw);
    let (va, vb) = v.split_at_mut(mid * kvw);
    let [ra, rb] = split_runs(runs, mid);
    let halves = vec![
        (xa, na, ka, va, &pos[..mid], ra),
        (xb, nb, kb, vb, &pos[mid..], rb),
    ];
    each_part(halves, |_, (x, n, k, v, pos, runs)| {
        keys_and_values(m, at, (x, n), (k, v), (pos, &runs));
    });
}

/// Where a layer's attention reads its keys and values: packed rows `(k, v)` (`(rows, kv
/// width)`, transposed by the kernel), or each prompt's own ([`RowKv`]) with each query
/// row's prompt.
#[derive(Clone, Copy)]
enum Keys<'a> {
    Packed(&'a [f32], &'a [f32]),
    Own(&'a [kernels::OwnKv<'a>], &'a [u32]),
}

impl<'a> Keys<'a> {
    /// The keys of query rows `..mid` and `mid..`.
    fn split(self, mid: usize) -> [Keys<'a>; 2] {
        match self {
            Keys::Packed(..) => [self, self],
            Keys::Own(own, from) => [Keys::Own(own, &from[..mid]), Keys::Own(own, &from[mid..])],
        }
    }
}

/// [`attend_and_mlp`] over the rows of `spans`, in two halves side by side where `cut` says
/// (each half's query rows read every key).
#[allow(clippy::type_complexity)]
fn attend_and_mlp_cut(
    m: &ModelData<'_>,
    at: (&Project<'_, '_>, usize, &LayerData<'_>, &RopeTables),
    (x, n, q, g, u): (&mut [f32], &mut [f32], &mut [f32], &mut [f32], &mut [f32]),
    keys: Keys<'_>,
    (spans, q_pos, runs): (&[Segments], &[u32], &Runs),
    cut: Option<usize>,
) {
    let Some(mid) = cut else {
        return attend_and_mlp(m, at, (x, n, q, g, u), keys, (spans, q_pos, runs));
    };
    let (h, nh, _, hd, iw) = m.sizes.dims();
    let qw = nh * hd;
    let (xa, xb) = x.split_at_mut(mid * h);
    let (na, nb) = n.split_at_mut(mid * h);
    let (qa, qb) = q.split_at_mut(mid * qw);
    let (ga, gb) = g.split_at_mut(mid * iw);
    let (ua, ub) = u.split_at_mut(mid * iw);
    let [ra, rb] = split_runs(runs, mid);
    let [ka, kb] = keys.split(mid);
    let halves = vec![
        ((xa, na, qa, ga, ua), (&spans[..mid], &q_pos[..mid], ra), ka),
        ((xb, nb, qb, gb, ub), (&spans[mid..], &q_pos[mid..], rb), kb),
    ];
    each_part(halves, |_, (bufs, (spans, q_pos, runs), keys)| {
        attend_and_mlp(m, at, bufs, keys, (spans, q_pos, &runs));
    });
}

/// The rest of layer `i` (`l`) once its keys and values are in `k` and `v`: the queries of
/// the rows of `spans` (their normed inputs in `n`, positions `q_pos`, adapters over
/// `runs`), attention over each row's segments, the output projection and the MLP, both
/// added into the residual rows `x`. The buffers `n`, `q`, `g` and `u` are scratch, at least
/// as long as the rows need.
#[allow(clippy::type_complexity)]
fn attend_and_mlp(
    m: &ModelData<'_>,
    (projections, i, l, rope): (&Project<'_, '_>, usize, &LayerData<'_>, &RopeTables),
    (x, n, q, g, u): (&mut [f32], &mut [f32], &mut [f32], &mut [f32], &mut [f32]),
    keys: Keys<'_>,
    (spans, q_pos, runs): (&[Segments], &[u32], &Runs),
) {
    let (h, nh, nkv, hd, iw) = m.sizes.dims();
    let qw = nh * hd;
    let rows = spans.len();
    let scale = 1.0 / (hd as f32).sqrt();
    let q = &mut q[..rows * qw];
    projections.run(q, &n[..rows * h], l.q, (rows, h, qw), false, (i, 0, runs));
    add_bias(q, l.q_bias);
    kernels::rotate(q, rope, qw, |r| q_pos[r] as usize, 1.0);
    // The attention's output goes where the normed rows were (read by the query projection
    // above, written again below): no buffer to allocate and fill per layer. It fits, as
    // `hd` is `h / nh` (`LmConfig::head_dim`), so `qw` is at most `h`.
    let att = &mut n[..rows * qw];
    match keys {
        Keys::Packed(k, v) => kernels::attend_into(att, q, k, v, spans, (nh, nkv, hd), scale),
        Keys::Own(own, from) => {
            kernels::attend_own_into(att, q, (own, from), spans, (nh, nkv, hd), scale);
        }
    }
    let x = &mut x[..rows * h];
    projections.run(x, att, l.o, (rows, qw, h), true, (i, 3, runs));
    let n = &mut n[..rows * h];
    kernels::rms_rows(n, x, l.ln2, m.sizes.eps);
    let (g, u) = (&mut g[..rows * iw], &mut u[..rows * iw]);
    projections.run(g, n, l.gate, (rows, h, iw), false, (i, 4, runs));
    projections.run(u, n, l.up, (rows, h, iw), false, (i, 5, runs));
    kernels::swiglu_rows(g, u);
    projections.run(x, g, l.down, (rows, iw, h), true, (i, 6, runs));
}

/// The start of layer `i` (`l`) over every row of `x`: the normed rows into `n`, and their
/// keys (rotated to positions `pos`) and values into `k` and `v`, adapters over `runs`.
#[allow(clippy::type_complexity)]
fn keys_and_values(
    m: &ModelData<'_>,
    (projections, i, l, rope): (&Project<'_, '_>, usize, &LayerData<'_>, &RopeTables),
    (x, n): (&[f32], &mut [f32]),
    (k, v): (&mut [f32], &mut [f32]),
    (pos, runs): (&[u32], &Runs),
) {
    let (h, _, nkv, hd, _) = m.sizes.dims();
    let (rows, kvw) = (x.len() / h.max(1), nkv * hd);
    kernels::rms_rows(n, x, l.ln1, m.sizes.eps);
    projections.run(k, n, l.k, (rows, h, kvw), false, (i, 1, runs));
    add_bias(k, l.k_bias);
    kernels::rotate(k, rope, kvw, |r| pos[r] as usize, 1.0);
    projections.run(v, n, l.v, (rows, h, kvw), false, (i, 2, runs));
    add_bias(v, l.v_bias);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::lm::model::init_weights;
    use crate::policy::lm::{Decoder, LmConfig, Lora, Preset};
    use candle_core::Device;
    use std::cell::Cell;

    thread_local! {
        /// Set: [`cut`] never cuts (the whole batch's rows in every operation).
        pub(super) static UNCUT: Cell<bool> = const { Cell::new(false) };
        /// The cuts [`cut`] made on this thread.
        pub(super) static CUTS: Cell<usize> = const { Cell::new(0) };
    }

    /// A layer's rows are cut at the end of the prompt nearest half of them, never leaving a
    /// half (or a piece of a run) fewer rows than `min_cut_rows` gives, never below
    /// `MIN_CUT_ROWS` rows, never where no cut is exact; the runs are cut with them.
    #[test]
    fn a_layer_is_cut_at_the_prompt_end_nearest_half_its_rows() {
        let plain: Runs = vec![(None, 20)];
        assert_eq!(cut(&[5, 12, 20], &plain, Some(2)), Some(12));
        assert_eq!(cut(&[3, 20], &plain, Some(2)), Some(3));
        assert_eq!(cut(&[3, 20], &plain, Some(4)), None);
        assert_eq!(cut(&[19, 20], &plain, Some(2)), None);
        assert_eq!(cut(&[1, 20], &plain, Some(2)), None);
        assert_eq!(cut(&[2, 4], &[(None, 4)].to_vec(), Some(2)), None);
        assert_eq!(cut(&[5, 12, 20], &plain, None), None);
        let one_left: Runs = vec![(Some(0), 11), (Some(1), 9)];
        assert_eq!(cut(&[5, 12, 20], &one_left, Some(2)), None);
        let at_a_run_end: Runs = vec![(Some(0), 12), (Some(1), 8)];
        assert_eq!(cut(&[5, 12, 20], &at_a_run_end, Some(2)), Some(12));
        let runs: Runs = vec![(Some(0), 10), (None, 10)];
        assert_eq!(
            split_runs(&runs, 12),
            [vec![(Some(0), 10), (None, 2)], vec![(None, 8)]]
        );
        assert_eq!(
            split_runs(&runs, 10),
            [vec![(Some(0), 10)], vec![(None, 10)]]
        );
        // `tiny` (narrowest output 128): halves of 3 rows at least; `small` (512 wide, inner
        // 2048, outputs over 64): 2; never with adapters, nor with a narrow output of a wide
        // inner dimension (`small` with one key/value head: 64).
        let sizes = |c: &LmConfig, kv: usize| Sizes {
            hidden: c.hidden_size,
            heads: c.num_attention_heads,
            kv_heads: kv,
            head_dim: c.head_dim(),
            intermediate: c.intermediate_size,
            eps: 1e-6,
        };
        let tiny = LmConfig::preset(Preset::Tiny, 64);
        assert_eq!(min_cut_rows(&sizes(&tiny, 4), false), Some(3));
        assert_eq!(min_cut_rows(&sizes(&tiny, 4), true), None);
        let small = LmConfig::preset(Preset::Small, 64);
        assert_eq!(min_cut_rows(&sizes(&small, 8), false), Some(2));
        assert_eq!(min_cut_rows(&sizes(&small, 1), false), None);
    }

    /// What `min_cut_rows` rests on: the rows of a product cut as it allows are, bit for
    /// bit, the whole product's rows, for the shapes the models have (inner 128 to 2048,
    /// outputs 32 to 512, the whole 300 rows).
    #[test]
    fn an_agents_kept_keys_stay_the_transpose_of_its_tokens_through_growth_and_eviction() {
        // Tokens 0, 1, 2, ... of width 3, key (t, c) = 10 t + c and value its negation,
        // pushed 7 and 30 at a time (the second grows the buffer), then tokens 2..12 evicted.
        let width = 3;
        let row = |t: usize| -> Vec<f32> { (0..width).map(|c| (10 * t + c) as f32).collect() };
        let mut layer = LayerKv::default();
        let mut kept: Vec<usize> = Vec::new();
        for range in [0..7, 7..37] {
            let k: Vec<f32> = range.clone().flat_map(row).collect();
            let v: Vec<f32> = k.iter().map(|x| -x).collect();
            layer.push(kept.len(), (&k, &v), width);
            kept.extend(range);
        }
        layer.evict(kept.len(), (2, 10), width);
        kept.drain(2..12);
        let own = layer.own();
        assert!(own.stride >= kept.len().next_multiple_of(kernels::KEYS));
        for c in 0..width {
            for (r, &t) in kept.iter().enumerate() {
                assert_eq!(
                    own.kt[c * own.stride + r],
                    (10 * t + c) as f32,
                    "key {t}, {c}"
                );
                assert_eq!(
                    own.v[r * width + c],
                    -((10 * t + c) as f32),
                    "value {t}, {c}"
                );
            }
            // Zeros past the last token, where the kernel reads whole blocks.
            assert!(
                own.kt[c * own.stride + kept.len()..(c + 1) * own.stride]
                    .iter()
                    .all(|&x| x == 0.0)
            );
        }
        assert_eq!(own.v.len(), kept.len() * width);
    }

    #[test]
    fn a_cut_product_gives_the_whole_products_rows() {
        let value = |i: usize| ((i * 7919 % 1009) as f32 - 504.0) / 97.0;
        for (inp, out) in [(128, 128), (128, 512), (512, 128), (2048, 512), (512, 32)] {
            let rows = 300;
            let x: Vec<f32> = (0..rows * inp).map(value).collect();
            let w: Vec<f32> = (0..out * inp).map(|i| value(i + 17)).collect();
            let mut whole = vec![0f32; rows * out];
            matmul_wt(&mut whole, &x, &w, (rows, inp, out), false, 1.0);
            let least = (256 / out + 1).max(2);
            for (start, n) in [(0, least), (5, least + 3), (40, 260)] {
                let mut part = vec![0f32; n * out];
                matmul_wt(&mut part, &x[start * inp..], &w, (n, inp, out), false, 1.0);
                let rows_of_whole = &whole[start * out..(start + n) * out];
                assert!(
                    part.iter()
                        .zip(rows_of_whole)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{n} rows of {inp} -> {out}"
                );
            }
        }
    }

    /// The fast path's hidden states, and a kept batch's continuation, are the same bits
    /// with each layer's rows in two halves side by side as with the whole batch in every
    /// operation, on one thread and on two: cutting changes the speed, never a result.
    #[test]
    fn the_halves_give_the_bits_of_the_whole_batch() {
        let cfg = LmConfig::preset(Preset::Tiny, 64);
        let init = init_weights(&cfg, 5, &Device::Cpu).expect("init");
        let dec = Decoder::new(&cfg, &init, std::path::Path::new("halves")).expect("decoder");
        // Eight prompts that begin alike (the rows of that beginning computed once) and
        // then differ, of 15 to 29 tokens; each continued by two tokens.
        let prompts: Vec<Vec<u32>> = (0..8u32)
            .map(|i| {
                let own = (0..3 + 2 * i).map(|j| (i * 13 + j * 5 + 1) % 64);
                (0..12u32).map(|j| j * 7 % 64).chain(own).collect()
            })
            .collect();
        let ext: Vec<Vec<u32>> = (0..8u32).map(|i| vec![i, (i * 3 + 1) % 64]).collect();
        let ext: Vec<&[u32]> = ext.iter().map(Vec::as_slice).collect();
        let run = |threads: usize, halves: bool| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
            pool.expect("pool").install(|| {
                UNCUT.with(|c| c.set(!halves));
                CUTS.with(|c| c.set(0));
                let kept = dec.last_hidden_kept(&prompts, Lora::Base).expect("forward");
                let (h, cache) = kept.expect("the fast path");
                let e = dec.extend_last_hidden(&cache, &ext, Lora::Base);
                let e = e.expect("extend").expect("the continuation");
                let mut bits = Vec::new();
                for t in [h, e] {
                    let v = t
                        .flatten_all()
                        .and_then(|t| t.to_vec1::<f32>())
                        .expect("data");
                    bits.extend(v.iter().map(|x| x.to_bits()));
                }
                (bits, CUTS.with(Cell::get))
            })
        };
        let (whole, none) = run(1, false);
        assert_eq!(none, 0);
        for threads in [1, 2] {
            let (halves, cuts) = run(threads, true);
            // Every pass cuts its layers' rows and its last layer's.
            assert_eq!(cuts, 4, "{threads} threads");
            assert!(
                halves == whole,
                "{threads} threads: the halves changed the result"
            );
        }
        assert!(run(2, false).0 == whole);
    }
}
