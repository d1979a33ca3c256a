//! The `mlp`'s training step without tensors: the forward pass, the loss and the backward
//! pass of a whole minibatch over plain `f32` buffers that live across minibatches, each
//! product one [`gemm`] call, the one-hot cells read as weight columns (a sum, not a product
//! with their zeros). It computes what the candle path of `train/trainer/step.rs` computes
//! ([`super::MlpNet::heads`], the masked log-softmax, the PPO or REINFORCE loss, the clipped
//! value loss, the entropy bonus) and returns each variable's gradient; the trainer clips
//! them and takes the optimizer's step.
//!
//! The maths, for a minibatch of `m` decisions (`H` = 64):
//!
//! ```text
//! h1 = tanh(W1[:, cells] one_hot + W1[:, dense] x + b1)     (the cells: a sum of columns)
//! h2 = tanh(W2 h1 + b2)
//! z  = Wpi h2 + bpi,  v = wv h2 + bv,  w = Wsay h2 + bsay
//! log π(a) = z_a − logsumexp_{legal} z           (illegal actions: probability 0)
//! log π(decision) = log π(a) [+ log softmax(w)_said]
//! policy:  REINFORCE −mean(log π · A);  PPO −mean(min(r A, clip(r, 1 ± ε) A)), r = e^{log π − log π_old}
//! value:   c_v · ½ mean(max((v̂ − R̂)², (v̂_old + clip(v̂ − v̂_old, ±ε) − R̂)²)), hats: / value scale
//! loss = policy + value − c_e · mean(H(π) [+ H(word)])
//! ```
//!
//! and its gradient by hand: `∂/∂z_j = g_j − π_j Σ_k g_k` through the log-softmax, with
//! `g = δ_a ∂L/∂log π + (c_e/m) π_j (1 + log π_j)` (the entropy's part, legal actions only);
//! `(1 − h²)` through each tanh. Where the candle path's `minimum`, `maximum` and `clamp`
//! split a gradient in half at an exact tie, so do these formulas, except at the clip range's
//! very edges (`r = 1 ± ε` exactly, a set of measure zero): there candle gives three quarters
//! of the unclipped gradient and this gives all of it.
//!
//! A minibatch is cut into parts of at most 256 rows (decisions: 128), computed side by side
//! on rayon's threads, each product within a part on the thread that runs it
//! ([`Threads::One`]: at these sizes splitting one product over threads cost more than it
//! gave, 3.3 against 2.9 ms a minibatch on two threads); the parts' gradients are summed in
//! part order. The cut depends on the minibatch's size alone, so the numbers are the same on
//! any thread count. The cells' columns' gradient is one pass over the whole minibatch, its
//! cells split among the threads (each column summed in row order by one thread). Each
//! cell's columns are measured from its most common code ([`Fused::set_base`]), so that a cell
//! at that code costs nothing in either pass (80% of hide-and-seek's cells). The cells' sums
//! and that scatter are written with `pulp`'s vector types ([`CellSums`], [`CellGrads`]), the
//! rest of the element-wise loops left to the compiler under `pulp`'s run-time dispatch
//! (AVX-512, AVX2+FMA or none). The trainer then takes AdamW's step on these buffers
//! ([`crate::train::optim::AdamW::step_host`]).
//!
//! The `gru` (a network with memory) takes this path too: its core replaces `h2`'s tanh
//! layer ([`gru`]: the recurrence over whole sequences, each part cut where a sequence
//! starts), the rest as above.
//!
//! Not here (the trainer keeps the candle path for it, [`Fused::supports`]): a KL term to a
//! frozen reference (`--kl-coef` > 0). Data-parallel (MPI) steps take this path too, each rank
//! on its share of the minibatch ([`Fused::step_share`]).
//!
//! Over 600 lines: one hand-written forward and backward, whose every stage (the shapes, the
//! per-thread parts of the minibatch, the SIMD cell sums and their gradients, the heads) reads
//! and writes the same buffers in one order, which the maths above states once; split, each
//! file would hold half a derivative. `train/fused_tests.rs` checks it against candle's
//! autograd and finite differences.

mod gru;

pub use gru::Mem;

use super::net::MlpNet;
use crate::core::{CODES, Encoded};
use crate::policy::gemm::{Mat, MatMut, Threads, gemm, transpose};
use crate::policy::lm::cpu::kernels::simd::{exp, vectorised};

/// Hidden width (both layers), as [`MlpNet`]'s.
const H: usize = 64;

/// One decision of a minibatch, as the loss reads it.
pub struct Row<'a> {
    /// Its observation's features.
    pub encoded: &'a Encoded,
    /// Which actions were legal.
    pub legal: &'a [bool],
    /// The action taken.
    pub action: u8,
    /// Families with talk: the word said (a choice of the word head, 0 silence), if it is
    /// part of the decision.
    pub said: Option<u8>,
    /// Its advantage.
    pub adv: f32,
    /// The acting policy's log-probability of the decision.
    pub old_logprob: f32,
    /// The value the acting policy estimated.
    pub old_value: f32,
    /// The value target (the return the value head learns).
    pub target: f32,
    /// A network with memory: the state the decision was made from (empty otherwise).
    pub memory: &'a [f32],
    /// A network with memory: whether a training sequence starts here (the rows of a
    /// sequence follow each other; the first row of a minibatch starts one).
    pub start: bool,
}

/// The loss's terms and their settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossSpec {
    /// PPO's clip ε, or `None`: REINFORCE.
    pub ppo_clip: Option<f32>,
    /// The value head's loss, or `None` (MAPPO's critic is apart; MAGRPO has none): then
    /// the value head gets no gradient at all.
    pub value: Option<ValueSpec>,
    /// The entropy bonus's weight.
    pub entropy_coef: f32,
}

/// The value loss's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValueSpec {
    /// Its weight in the loss.
    pub coef: f32,
    /// The clip ε around the acting policy's value (in scaled units), or `None`.
    pub clip: Option<f32>,
    /// Values and targets are divided by this before the loss.
    pub scale: f32,
}

/// What a step reports besides the gradients.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepStats {
    /// The whole loss.
    pub loss: f32,
    /// The policy term.
    pub policy_loss: f32,
    /// The value term before its weight (0 without one).
    pub value_loss: f32,
    /// Mean entropy of the decisions' distributions.
    pub entropy: f32,
    /// PPO: share of ratios outside `1 ± ε`.
    pub clip_frac: f32,
    /// Mean `(r − 1) − ln r` (the ratio to the acting policy).
    pub approx_kl: f32,
}

impl StepStats {
    /// The fields as numbers, in declaration order (to sum them over data-parallel ranks).
    pub fn to_array(self) -> [f32; 6] {
        [
            self.loss,
            self.policy_loss,
            self.value_loss,
            self.entropy,
            self.clip_frac,
            self.approx_kl,
        ]
    }

    /// [`StepStats::to_array`]'s inverse.
    pub fn from_array(
        [loss, policy_loss, value_loss, entropy, clip_frac, approx_kl]: [f32; 6],
    ) -> Self {
        Self {
            loss,
            policy_loss,
            value_loss,
            entropy,
            clip_frac,
            approx_kl,
        }
    }
}

/// The network's sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    cells: usize,
    dense: usize,
    actions: usize,
    /// Word-head choices (`words + 1`), or 0 without talk.
    choices: usize,
    /// A GRU core instead of the second tanh layer.
    memory: bool,
}

impl Shape {
    fn of(net: &MlpNet) -> Self {
        Self {
            cells: net.cells,
            dense: net.dense,
            actions: net.actions,
            choices: if net.words > 0 { net.words + 1 } else { 0 },
            memory: net.memory,
        }
    }

    /// The index of the first head's variable (`pi.weight`) in [`MlpNet::vars`]: after the
    /// first layer and the core (the tanh layer's two variables or the GRU's four).
    fn head(self) -> usize {
        if self.memory { 6 } else { 4 }
    }

    /// The first layer's input width (one-hot cells, then header fields).
    fn inputs(self) -> usize {
        self.cells * CODES + self.dense
    }

    /// The one-hot cells' columns of the first layer.
    fn cols(self) -> usize {
        self.cells * CODES
    }

    /// Each variable's size, in [`MlpNet::vars`]' order.
    fn sizes(self) -> Vec<usize> {
        let mut sizes = vec![H * self.inputs(), H];
        if self.memory {
            sizes.extend([3 * H * H, 3 * H, 3 * H * H, 3 * H]);
        } else {
            sizes.extend([H * H, H]);
        }
        sizes.extend([self.actions * H, self.actions, H, 1]);
        if self.choices > 0 {
            sizes.extend([self.choices * H, self.choices]);
        }
        sizes
    }
}

/// Rows a part of a training minibatch holds at most: a minibatch is cut into
/// `ceil(m / STEP_ROWS)` parts of equal size (give or take a row), each computed on its own
/// (on rayon's threads when there are several) and their gradients summed in part order.
/// The cut depends on the minibatch alone, never on the thread count, so a step's numbers
/// are the same on any number of threads (tested).
const STEP_ROWS: usize = 256;
/// The same for a decision's forward pass.
const INFER_ROWS: usize = 128;
/// Rows [`Fused::set_base`] counts the codes of.
const BASE_ROWS: usize = 64;

/// The parts' row ranges: `ceil(m / most)` runs of `ceil(m / parts)` rows.
fn part_size(m: usize, most: usize) -> usize {
    let parts = m.div_ceil(most).max(1);
    m.div_ceil(parts).max(1)
}

/// The network's parameters and gradients as flat buffers in [`MlpNet::vars`]' order and
/// layouts (`l1.weight (H, inputs)` row-major, ...), and each part's activations, all kept
/// for the next minibatch.
pub struct Fused {
    shape: Shape,
    /// Parameters, one buffer per variable.
    params: Vec<Vec<f32>>,
    /// Gradients, the same shapes (the sum of the parts').
    grads: Vec<Vec<f32>>,
    /// The cells' columns of `l1.weight`, transposed: `(cells · 16, H)`, a column per row.
    w1t: Vec<f32>,
    /// Their gradient, the same layout.
    g1t: Vec<f32>,
    /// Each cell's base code ([`Fused::set_base`]): its most common code in the rows at hand.
    base: Vec<u8>,
    /// `w1t` less each cell's base column (zero columns at the base codes).
    dt: Vec<f32>,
    /// The sum of the base columns, `H`.
    bsum: Vec<f32>,
    /// The sum of every row's gradient into `h1`, `H`.
    gsum: Vec<f32>,
    /// A network with memory: `W_hh` transposed, `(H, 3H)` (a row's `W_hh h⁻` as vector
    /// updates).
    whh_t: Vec<f32>,
    /// The parts of the last minibatch, and where each starts (the last entry: the end).
    parts: Vec<Part>,
    cuts: Vec<usize>,
    /// Whether the last step gave the value head a gradient.
    value_grads: bool,
    /// Whether `w1t`, `whh_t`, `dt` and `bsum` hold the tables of `params` with code 0 as
    /// every cell's base, as [`Fused::infer_from`] left them (a training step's base is its
    /// batch's).
    inference_tables: bool,
}

/// One part of a minibatch: its activations, their gradients and its share of every
/// variable's gradient.
#[derive(Default)]
struct Part {
    x: Vec<f32>,
    /// The one-hot cells' part of the first layer (their columns summed), `m × H`.
    cs: Vec<f32>,
    /// Each row's cells away from their base code, as columns of the table (`k · 16 +
    /// code`), in cell order: row `r`'s are `away[starts[r]..starts[r + 1]]`.
    away: Vec<u32>,
    starts: Vec<u32>,
    h1: Vec<f32>,
    h2: Vec<f32>,
    /// A network with memory: the core's buffers.
    gru: gru::Bufs,
    z: Vec<f32>,
    v: Vec<f32>,
    w: Vec<f32>,
    dz: Vec<f32>,
    dv: Vec<f32>,
    dw: Vec<f32>,
    dh2: Vec<f32>,
    dh1: Vec<f32>,
    /// Gradients in [`MlpNet::vars`]' shapes, except `l1.weight`'s slot: the header fields'
    /// columns alone, `(H, dense)`.
    grads: Vec<Vec<f32>>,
    /// The loss's sums over the part's rows.
    sums: Sums,
}

/// A part's sums of the loss's terms (divided by the minibatch's size at the end).
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    policy: f32,
    value: f32,
    entropy: f32,
    kl: f32,
    clipped: usize,
}

/// What a part reads: the sizes and the weights.
#[derive(Clone, Copy)]
struct Weights<'a> {
    shape: Shape,
    params: &'a [Vec<f32>],
    base: &'a [u8],
    dt: &'a [f32],
    bsum: &'a [f32],
    whh_t: &'a [f32],
}

/// Index of each variable in [`MlpNet::vars`].
const L1W: usize = 0;
const L1B: usize = 1;
const L2W: usize = 2;
const L2B: usize = 3;
/// The GRU core's (a network with memory), in place of `L2W` and `L2B`.
const IHW: usize = 2;
const IHB: usize = 3;
const HHW: usize = 4;
const HHB: usize = 5;
/// The heads', counted from [`Shape::head`].
const PIW: usize = 0;
const PIB: usize = 1;
const VW: usize = 2;
const VB: usize = 3;
const SAYW: usize = 4;
const SAYB: usize = 5;

/// `v` resized to `n` (contents unspecified; callers write before they read).
fn sized(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    v.resize(n, 0.0);
    &mut v[..n]
}

impl Fused {
    /// Buffers for `net`'s shapes (its weights are read at each [`Fused::step`]).
    pub fn new(net: &MlpNet) -> Self {
        let shape = Shape::of(net);
        let table = shape.cols() * H;
        Self {
            shape,
            params: shape.sizes().iter().map(|&n| vec![0.0; n]).collect(),
            grads: shape.sizes().iter().map(|&n| vec![0.0; n]).collect(),
            w1t: vec![0.0; table],
            g1t: vec![0.0; table],
            base: vec![0; shape.cells],
            dt: vec![0.0; table],
            bsum: vec![0.0; H],
            gsum: vec![0.0; H],
            whh_t: vec![0.0; if shape.memory { 3 * H * H } else { 0 }],
            parts: Vec::new(),
            cuts: vec![0],
            value_grads: false,
            inference_tables: false,
        }
    }

    /// Whether this path computes the trainer's loss for these settings (not with a KL term
    /// to a reference).
    pub fn supports(kl_coef: f64) -> bool {
        kl_coef == 0.0
    }

    /// Whether this was made for `net`'s shapes.
    pub fn fits(&self, net: &MlpNet) -> bool {
        self.shape == Shape::of(net)
    }

    /// Each variable's gradient from the last [`Fused::step`], in [`MlpNet::vars`]' order,
    /// and whether it has one (the value head has none without a value loss, as on the
    /// candle path, where it would not be in the loss's graph).
    pub fn grads(&self) -> impl Iterator<Item = Option<&[f32]>> {
        self.grads.iter().enumerate().map(move |(i, g)| {
            let head = self.shape.head();
            let none = (i == head + VW || i == head + VB) && !self.value_grads;
            (!none).then_some(g.as_slice())
        })
    }

    /// Reads `net`'s current weights into the flat buffers and makes the transposed tables;
    /// with `unless_same`, neither where every weight is bit for bit the one loaded last
    /// (checked, not assumed: whoever wrote the variables since need not say so). Returns
    /// whether anything was loaded.
    fn load(&mut self, net: &MlpNet, unless_same: bool) -> Result<bool, String> {
        if unless_same && self.same_weights(net) {
            return Ok(false);
        }
        for ((name, var), buf) in net.vars().iter().zip(&mut self.params) {
            let t = var.as_tensor();
            let locked = crate::policy::lm::lock(t)
                .ok_or_else(|| format!("mlp: {name} is not a contiguous f32 tensor on the CPU"))?;
            let data = locked.data();
            if data.len() != buf.len() {
                return Err(format!(
                    "mlp: {name} has {} values, the fused step expected {}",
                    data.len(),
                    buf.len()
                ));
            }
            buf.copy_from_slice(data);
        }
        // The cells' columns of l1.weight as rows of w1t.
        if self.shape.memory {
            transpose(&mut self.whh_t, 3 * H, &self.params[HHW], H, (3 * H, H));
        }
        let (inputs, cols) = (self.shape.inputs(), self.shape.cols());
        transpose(&mut self.w1t, H, &self.params[L1W], inputs, (H, cols));
        Ok(true)
    }

    /// Whether every variable of `net` holds, bit for bit, what [`Fused::params`] holds (a
    /// variable that cannot be read counts as changed). Compared in blocks of 64 values
    /// without an early exit inside a block, so that the comparison vectorises; a changed
    /// network differs in its first block almost always.
    fn same_weights(&self, net: &MlpNet) -> bool {
        net.vars().iter().zip(&self.params).all(|((_, var), buf)| {
            let Some(locked) = crate::policy::lm::lock(var.as_tensor()) else {
                return false;
            };
            let data = locked.data();
            data.len() == buf.len()
                && data.chunks(64).zip(buf.chunks(64)).all(|(a, b)| {
                    a.iter()
                        .zip(b)
                        .fold(true, |same, (x, y)| same & (x.to_bits() == y.to_bits()))
                })
        })
    }

    /// Each cell's base code: its most common code among the first [`BASE_ROWS`] of `rows`
    /// (the lowest of equals; code 0 for no rows), and the tables measured from it. A cell at its base code then
    /// costs nothing in the forward pass and in the gradient: its column is part of
    /// [`Fused::bsum`], and the base column's gradient is the whole gradient's sum less the
    /// other codes' (on hide-and-seek's views 80% of the cells are at their base code).
    fn set_base<'r>(&mut self, rows: impl Iterator<Item = &'r Encoded>) {
        let cells = self.shape.cells;
        let mut hist = vec![0u32; cells * CODES];
        for r in rows.take(BASE_ROWS) {
            for (h, &c) in hist.chunks_exact_mut(CODES).zip(&r.cells) {
                h[usize::from(c & 0x0f)] += 1;
            }
        }
        for (b, h) in self.base.iter_mut().zip(hist.chunks_exact(CODES)) {
            let top = h.iter().copied().max().unwrap_or(0);
            *b = h.iter().position(|&x| x == top).unwrap_or(0) as u8;
        }
        self.bsum.fill(0.0);
        let (w1t, dt, bsum) = (&self.w1t, &mut self.dt, &mut self.bsum);
        vectorised(
            #[inline(always)]
            || {
                for ((w, d), &b) in w1t
                    .chunks_exact(CODES * H)
                    .zip(dt.chunks_exact_mut(CODES * H))
                    .zip(&self.base)
                {
                    let bc = &w[usize::from(b) * H..usize::from(b) * H + H];
                    for (y, &x) in bsum.iter_mut().zip(bc) {
                        *y += x;
                    }
                    for (dc, wc) in d.chunks_exact_mut(H).zip(w.chunks_exact(H)) {
                        for ((y, &x), &x0) in dc.iter_mut().zip(wc).zip(bc) {
                            *y = x - x0;
                        }
                    }
                }
            },
        );
    }

    /// Cuts `rows` into parts of at most `most` rows ([`part_size`]; the parts are made as
    /// needed and kept) and runs `f` on each part with its rows and the loaded weights, on
    /// rayon's threads when there are several. Returns the number of parts.
    fn over_parts<R: Sync>(
        &mut self,
        rows: &[R],
        most: usize,
        f: impl Fn(&mut Part, Weights<'_>, &[R], std::ops::Range<usize>) + Sync,
    ) -> usize {
        let size = part_size(rows.len(), most);
        let cuts: Vec<usize> = (0..rows.len())
            .step_by(size)
            .chain(std::iter::once(rows.len()))
            .collect();
        self.over_cuts(rows, cuts, f)
    }

    /// Runs `f` on the parts that start at each of `cuts` (the last entry: the end), as
    /// [`Fused::over_parts`]; `f` also gets the part's range of rows.
    fn over_cuts<R: Sync>(
        &mut self,
        rows: &[R],
        cuts: Vec<usize>,
        f: impl Fn(&mut Part, Weights<'_>, &[R], std::ops::Range<usize>) + Sync,
    ) -> usize {
        use rayon::prelude::*;
        let n = cuts.len().saturating_sub(1);
        if self.parts.len() < n {
            self.parts.resize_with(n, Part::default);
        }
        self.cuts = cuts;
        let wts = Weights {
            shape: self.shape,
            params: &self.params,
            base: &self.base,
            dt: &self.dt,
            bsum: &self.bsum,
            whh_t: &self.whh_t,
        };
        let cuts = &self.cuts;
        let parts = &mut self.parts[..n];
        if n == 1 {
            f(&mut parts[0], wts, rows, 0..rows.len());
        } else {
            parts.par_iter_mut().enumerate().for_each(|(k, p)| {
                let range = cuts[k]..cuts[k + 1];
                f(p, wts, &rows[range.clone()], range)
            });
        }
        n
    }

    /// The forward pass alone, for deciding: `rows`' action logits, values and (with talk)
    /// word logits under `net`'s current weights, read with [`Fused::logits`],
    /// [`Fused::value`] and [`Fused::words`]. The same numbers as [`Fused::step`]'s forward.
    /// A network with memory: [`Fused::infer_from`].
    pub fn infer(&mut self, net: &MlpNet, rows: &[&Encoded]) -> Result<(), String> {
        self.infer_from(net, rows, &[])
    }

    /// [`Fused::infer`] for a network with memory: row `i` decided from state `states[i]`
    /// (`H` values); its next state is read with [`Fused::state`]. `states` is empty for a
    /// network without memory.
    pub fn infer_from(
        &mut self,
        net: &MlpNet,
        rows: &[&Encoded],
        states: &[&[f32]],
    ) -> Result<(), String> {
        if !self.fits(net) {
            return Err("mlp: the fused forward was made for another network's shapes".into());
        }
        let sh = self.shape;
        if let Some(r) = rows
            .iter()
            .find(|r| r.cells.len() != sh.cells || r.dense.len() != sh.dense)
        {
            return Err(format!(
                "mlp: an observation of {} cells and {} header fields for a network of {} and {}",
                r.cells.len(),
                r.dense.len(),
                sh.cells,
                sh.dense
            ));
        }
        let loaded = self.load(net, self.inference_tables)?;
        // Code 0 as every cell's base (the commonest on grid views), not the batch's: a
        // decision's numbers must not depend on which other rows share its batch (a
        // data-parallel rank decides for its own arenas only).
        let mem: Vec<Mem<'_>> = if sh.memory {
            if states.len() != rows.len() || states.iter().any(|h| h.len() != H) {
                return Err(format!(
                    "mlp: {} rows and {} states of {H} values expected for a network with memory",
                    rows.len(),
                    states.len()
                ));
            }
            states
                .iter()
                .map(|&state| Mem { state, start: true })
                .collect()
        } else {
            Vec::new()
        };
        if loaded {
            self.set_base(std::iter::empty());
            self.inference_tables = true;
        }
        self.over_parts(rows, INFER_ROWS, |part, wts, rows, range| {
            part.forward(wts, rows, mem.get(range).unwrap_or(&[]))
        });
        Ok(())
    }

    /// The part and row within it of row `i` of the last pass.
    fn at(&self, i: usize) -> (&Part, usize) {
        let k = self.cuts.partition_point(|&c| c <= i) - 1;
        (&self.parts[k], i - self.cuts[k])
    }

    /// A network with memory: row `i`'s state after the last forward pass (`H` values).
    pub fn state(&self, i: usize) -> &[f32] {
        let (p, r) = self.at(i);
        &p.h2[r * H..(r + 1) * H]
    }

    /// Row `i`'s action logits from the last forward pass.
    pub fn logits(&self, i: usize) -> &[f32] {
        let a = self.shape.actions;
        let (p, r) = self.at(i);
        &p.z[r * a..(r + 1) * a]
    }

    /// Row `i`'s value from the last forward pass.
    pub fn value(&self, i: usize) -> f32 {
        let (p, r) = self.at(i);
        p.v[r]
    }

    /// Whether the network has a talk head.
    pub fn talks(&self) -> bool {
        self.shape.choices > 0
    }

    /// Row `i`'s word logits (silence first) from the last forward pass; `None` without talk.
    pub fn words(&self, i: usize) -> Option<&[f32]> {
        let c = self.shape.choices;
        let (p, r) = self.at(i);
        (c > 0).then(|| &p.w[r * c..(r + 1) * c])
    }

    /// One minibatch: the loss of `rows` under `net`'s current weights and every variable's
    /// gradient (read them with [`Fused::grads`]). An error for rows that do not fit.
    pub fn step(
        &mut self,
        net: &MlpNet,
        rows: &[Row<'_>],
        spec: LossSpec,
    ) -> Result<StepStats, String> {
        self.step_share(net, rows, spec, rows.len())
    }

    /// [`Fused::step`] on a share of a minibatch of `total` decisions (a data-parallel
    /// rank's): every term of the loss, its statistics and gradients divided by `total`, so
    /// that the shares' sums are the whole minibatch's.
    pub fn step_share(
        &mut self,
        net: &MlpNet,
        rows: &[Row<'_>],
        spec: LossSpec,
        total: usize,
    ) -> Result<StepStats, String> {
        if !self.fits(net) {
            return Err("mlp: the fused step was made for another network's shapes".into());
        }
        let sh = self.shape;
        if let Some(r) = rows.iter().find(|r| {
            r.encoded.cells.len() != sh.cells
                || r.encoded.dense.len() != sh.dense
                || usize::from(r.action) >= sh.actions
        }) {
            return Err(format!(
                "mlp: a decision of {} cells, {} header fields and action {} for a network of \
                 {}, {} and {} actions",
                r.encoded.cells.len(),
                r.encoded.dense.len(),
                r.action,
                sh.cells,
                sh.dense,
                sh.actions
            ));
        }
        if sh.memory
            && let Some(r) = rows.iter().find(|r| r.memory.len() != H)
        {
            return Err(format!(
                "mlp: a decision with a state of {} values for a network with memory (of {H})",
                r.memory.len()
            ));
        }
        self.load(net, false)?;
        self.inference_tables = false;
        self.set_base(rows.iter().map(|r| r.encoded));
        let inv = 1.0 / total.max(1) as f32;
        let f = |part: &mut Part, wts: Weights<'_>, rows: &[Row<'_>], _| {
            touch(rows.iter().map(|r| r.encoded));
            let encoded: Vec<&Encoded> = rows.iter().map(|r| r.encoded).collect();
            let mem: Vec<Mem<'_>> = if wts.shape.memory {
                rows.iter()
                    .map(|r| Mem {
                        state: r.memory,
                        start: r.start,
                    })
                    .collect()
            } else {
                Vec::new()
            };
            part.forward(wts, &encoded, &mem);
            part.sums = part.loss_gradient(wts.shape, rows, spec, inv);
            part.backward(wts, &encoded, &mem);
        };
        let n = if sh.memory {
            // Whole sequences in each part (the recurrence runs within a part): parts of
            // up to STEP_ROWS rows, cut where a sequence starts (by the minibatch alone).
            let starts: Vec<usize> = (0..rows.len())
                .filter(|&i| i == 0 || rows[i].start)
                .collect();
            let mut cuts = vec![0];
            for (k, &at) in starts.iter().enumerate().skip(1) {
                let end = starts.get(k + 1).copied().unwrap_or(rows.len());
                if end - cuts[cuts.len() - 1] > STEP_ROWS {
                    cuts.push(at);
                }
            }
            cuts.push(rows.len());
            cuts.dedup();
            self.over_cuts(rows, cuts, f)
        } else {
            self.over_parts(rows, STEP_ROWS, f)
        };
        self.cell_grads(n);
        self.reduce(n);
        self.value_grads = spec.value.is_some();
        let mut s = Sums::default();
        for p in &self.parts[..n] {
            s.policy += p.sums.policy;
            s.value += p.sums.value;
            s.entropy += p.sums.entropy;
            s.kl += p.sums.kl;
            s.clipped += p.sums.clipped;
        }
        let mut st = StepStats {
            policy_loss: s.policy * inv,
            value_loss: s.value * inv,
            entropy: s.entropy * inv,
            approx_kl: s.kl * inv,
            clip_frac: s.clipped as f32 * inv,
            loss: 0.0,
        };
        st.loss = st.policy_loss + spec.value.map_or(0.0, |v| v.coef * st.value_loss)
            - spec.entropy_coef * st.entropy;
        Ok(st)
    }

    /// The cells' columns' gradient ([`Fused::g1t`]): each row's gradient into `h1` added
    /// into the columns it read away from their base code, in row order, and each base
    /// column's gradient as the whole sum less its cell's other columns. The cells are split
    /// among rayon's threads (each column is one thread's, so the sums do not depend on the
    /// split).
    fn cell_grads(&mut self, n: usize) {
        use rayon::prelude::*;
        let cells = self.shape.cells;
        let parts = &self.parts[..n];
        // The sum of all rows' gradients (in row order): the base columns' gradient is it,
        // less the other codes' columns.
        let gsum = &mut self.gsum;
        gsum.fill(0.0);
        for p in parts {
            for g in p.dh1.chunks_exact(H) {
                for (y, &x) in gsum.iter_mut().zip(g) {
                    *y += x;
                }
            }
        }
        let (gsum, base) = (&self.gsum, &self.base);
        let per_task = cells.div_ceil(rayon::current_num_threads().max(1)).max(1);
        self.g1t
            .par_chunks_mut(per_task * CODES * H)
            .enumerate()
            .for_each(|(t, table)| {
                table.fill(0.0);
                for p in parts {
                    pulp::Arch::new().dispatch(CellGrads {
                        table: &mut *table,
                        first: (t * per_task * CODES) as u32,
                        away: &p.away,
                        starts: &p.starts,
                        grads: &p.dh1,
                    });
                }
                for (k, cell) in table.chunks_exact_mut(CODES * H).enumerate() {
                    let b = usize::from(base[t * per_task + k]);
                    let mut rest = [0f32; H];
                    for (c, col) in cell.chunks_exact(H).enumerate() {
                        if c != b {
                            for (y, &x) in rest.iter_mut().zip(col) {
                                *y += x;
                            }
                        }
                    }
                    for ((y, &s), r) in cell[b * H..b * H + H].iter_mut().zip(gsum).zip(rest) {
                        *y = s - r;
                    }
                }
            });
    }

    /// The parts' gradients summed (in part order) into [`Fused::grads`], the cells' columns
    /// written into `l1.weight`'s layout.
    fn reduce(&mut self, n: usize) {
        let parts = &self.parts[..n];
        if parts.is_empty() {
            for g in &mut self.grads {
                g.fill(0.0);
            }
            return;
        }
        let sum = |out: &mut [f32], each: &dyn Fn(&Part) -> &[f32]| {
            out.copy_from_slice(each(&parts[0]));
            for p in &parts[1..] {
                for (y, &x) in out.iter_mut().zip(each(p)) {
                    *y += x;
                }
            }
        };
        vectorised(
            #[inline(always)]
            || {
                for (i, g) in self.grads.iter_mut().enumerate().skip(1) {
                    sum(g, &|p: &Part| p.grads[i].as_slice());
                }
            },
        );
        let (inputs, cols, d) = (self.shape.inputs(), self.shape.cols(), self.shape.dense);
        let g1 = &mut self.grads[L1W];
        transpose(g1, inputs, &self.g1t, H, (cols, H));
        for j in 0..H {
            let out = &mut g1[j * inputs + cols..(j + 1) * inputs];
            out.copy_from_slice(&parts[0].grads[L1W][j * d..(j + 1) * d]);
            for p in &parts[1..] {
                for (y, &x) in out.iter_mut().zip(&p.grads[L1W][j * d..(j + 1) * d]) {
                    *y += x;
                }
            }
        }
    }
}

impl Part {
    /// The forward pass of `rows` into `h1`, `h2`, `z`, `v` and (with talk) `w`; a network
    /// with memory reads where each row's state comes from in `mem`.
    fn forward(&mut self, wts: Weights<'_>, rows: &[&Encoded], mem: &[Mem<'_>]) {
        let sh = wts.shape;
        let (m, d, a, c) = (rows.len(), sh.dense, sh.actions, sh.choices);
        let (inputs, cols) = (sh.inputs(), sh.cols());
        let params = wts.params;
        let x = sized(&mut self.x, m * d);
        for (xr, r) in x.chunks_exact_mut(d.max(1)).zip(rows) {
            xr.copy_from_slice(&r.dense);
        }
        let h1 = sized(&mut self.h1, m * H);
        // The header fields' product, then each cell's column added: as the candle path.
        gemm(
            MatMut::new(h1, m, H),
            Mat::new(&self.x, m, d),
            Mat::strided(&params[L1W][cols..], H, d, inputs).t(),
            false,
            1.0,
            Threads::One,
        );
        // The cells away from their base code: written for every cell, kept where it differs
        // (no branch to mispredict).
        let cells = sh.cells;
        self.away.resize(m * cells, 0);
        self.starts.clear();
        let mut at = 0usize;
        for r in rows {
            self.starts.push(at as u32);
            for (k, (&c, &b)) in r.cells.iter().zip(wts.base).enumerate() {
                let c = c & 0x0f;
                self.away[at] = (k * CODES + usize::from(c)) as u32;
                at += usize::from(c != b);
            }
        }
        self.starts.push(at as u32);
        let cs = sized(&mut self.cs, m * H);
        pulp::Arch::new().dispatch(CellSums {
            out: cs,
            away: &self.away,
            starts: &self.starts,
            table: wts.dt,
            base: wts.bsum,
        });
        let (b1, cs) = (&params[L1B], &self.cs);
        vectorised(
            #[inline(always)]
            || {
                for (hr, cr) in h1.chunks_exact_mut(H).zip(cs.chunks_exact(H)) {
                    for ((y, &c), b) in hr.iter_mut().zip(cr).zip(b1) {
                        *y = tanh((*y + c) + b);
                    }
                }
            },
        );
        let h2 = sized(&mut self.h2, m * H);
        if sh.memory {
            let gi = sized(&mut self.gru.gi, m * 3 * H);
            dense_layer(gi, &self.h1, &params[IHW], &params[IHB], (m, H, 3 * H));
            gru::forward(&mut self.gru, h2, wts.whh_t, &params[HHB], mem);
        } else {
            dense_layer(h2, &self.h1, &params[L2W], &params[L2B], (m, H, H));
            vectorised(
                #[inline(always)]
                || {
                    for y in h2.iter_mut() {
                        *y = tanh(*y);
                    }
                },
            );
        }
        let o = sh.head();
        let z = sized(&mut self.z, m * a);
        dense_layer(z, &self.h2, &params[o + PIW], &params[o + PIB], (m, H, a));
        let v = sized(&mut self.v, m);
        dense_layer(v, &self.h2, &params[o + VW], &params[o + VB], (m, H, 1));
        if c > 0 {
            let w = sized(&mut self.w, m * c);
            dense_layer(w, &self.h2, &params[o + SAYW], &params[o + SAYB], (m, H, c));
        }
    }

    /// The loss's sums over this part's rows and its gradient in the forward pass's outputs
    /// (`dz`, `dv`, `dw`), each term divided by the whole minibatch's size (`inv` = 1/m).
    fn loss_gradient(&mut self, sh: Shape, rows: &[Row<'_>], spec: LossSpec, inv: f32) -> Sums {
        let (m, a, c) = (rows.len(), sh.actions, sh.choices);
        let dz = sized(&mut self.dz, m * a);
        let dv = sized(&mut self.dv, m);
        let dw = sized(&mut self.dw, m * c);
        dw.fill(0.0);
        let mut s = Sums::default();
        // Log-probabilities and probabilities of the actions, then of the words.
        let (mut lp, mut p) = (vec![0f32; a], vec![0f32; a]);
        let (mut wl, mut wp) = (vec![0f32; c], vec![0f32; c]);
        for (i, r) in rows.iter().enumerate() {
            let z = &self.z[i * a..(i + 1) * a];
            let legal = |j: usize| r.legal.get(j).copied().unwrap_or(false);
            // No legal action at all: the candle path's bias moves every logit alike, so the
            // distribution is over all of them, and the entropy counts none.
            let any = (0..a).any(legal);
            let counts = |j: usize| !any || legal(j);
            log_softmax(z, counts, &mut lp, &mut p);
            let mut logp = lp[usize::from(r.action)];
            let mut ent: f32 = (0..a).filter(|&j| legal(j)).map(|j| -p[j] * lp[j]).sum();
            // The word, when it is part of the decision.
            let said = r.said.map(usize::from).filter(|&k| k < c);
            if let Some(k) = said {
                log_softmax(&self.w[i * c..(i + 1) * c], |_| true, &mut wl, &mut wp);
                logp += wl[k];
                ent += wp.iter().zip(&wl).map(|(p, l)| -p * l).sum::<f32>();
            }
            s.entropy += ent;
            // ∂L/∂log π(decision).
            let log_ratio = logp - r.old_logprob;
            let ratio = log_ratio.exp();
            s.kl += (ratio - 1.0) - log_ratio;
            let g_logp = match spec.ppo_clip {
                None => {
                    s.policy -= logp * r.adv;
                    -r.adv * inv
                }
                Some(eps) => {
                    let unclipped = ratio * r.adv;
                    let clip = ratio.clamp(1.0 - eps, 1.0 + eps) * r.adv;
                    if (ratio - 1.0).abs() > eps {
                        s.clipped += 1;
                    }
                    s.policy -= unclipped.min(clip);
                    // The gradient flows through the unclipped term where it is the smaller
                    // (or equal: inside the range both terms are the same value).
                    if unclipped <= clip {
                        -r.adv * ratio * inv
                    } else {
                        0.0
                    }
                }
            };
            // Through the masked log-softmax, with the entropy bonus's part.
            let ce = spec.entropy_coef * inv;
            let dzr = &mut dz[i * a..(i + 1) * a];
            let mut sum = 0f32;
            for j in 0..a {
                let mut g = if j == usize::from(r.action) {
                    g_logp
                } else {
                    0.0
                };
                if legal(j) {
                    g += ce * p[j] * (1.0 + lp[j]);
                }
                dzr[j] = g;
                sum += g;
            }
            for j in 0..a {
                dzr[j] -= p[j] * sum;
            }
            if let Some(k) = said {
                let dwr = &mut dw[i * c..(i + 1) * c];
                let mut sum = 0f32;
                for (j, g) in dwr.iter_mut().enumerate() {
                    *g = if j == k { g_logp } else { 0.0 } + ce * wp[j] * (1.0 + wl[j]);
                    sum += *g;
                }
                for (g, &p) in dwr.iter_mut().zip(&wp) {
                    *g -= p * sum;
                }
            }
            // The value head.
            dv[i] = 0.0;
            if let Some(vs) = spec.value {
                let k = 1.0 / vs.scale;
                let (v, old, t) = (self.v[i] * k, r.old_value * k, r.target * k);
                let plain = (v - t) * (v - t);
                let (worst, g) = match vs.clip {
                    None => (plain, v - t),
                    Some(e) => {
                        let inside = (v - old).abs() < e;
                        let vc = old + (v - old).clamp(-e, e);
                        let clip = (vc - t) * (vc - t);
                        let g_clip = if inside { vc - t } else { 0.0 };
                        if plain > clip {
                            (plain, v - t)
                        } else if clip > plain {
                            (clip, g_clip)
                        } else {
                            (plain, 0.5 * (v - t) + 0.5 * g_clip)
                        }
                    }
                };
                s.value += 0.5 * worst;
                dv[i] = vs.coef * inv * g * k;
            }
        }
        s
    }

    /// The backward pass from `dz`, `dv`, `dw` into this part's gradients.
    fn backward(&mut self, wts: Weights<'_>, rows: &[&Encoded], mem: &[Mem<'_>]) {
        let sh = wts.shape;
        let params = wts.params;
        let (m, d, a, c) = (rows.len(), sh.dense, sh.actions, sh.choices);
        if self.grads.is_empty() {
            self.grads = sh.sizes().iter().map(|&n| vec![0.0; n]).collect();
            self.grads[L1W] = vec![0.0; H * d];
        }
        // The heads: weight gradients, and the gradient into h2.
        let o = sh.head();
        let dh2 = sized(&mut self.dh2, m * H);
        head_backward(
            dh2,
            &mut self.grads,
            (o + PIW, o + PIB),
            &self.dz,
            &self.h2,
            &params[o + PIW],
            (m, a),
            false,
        );
        head_backward(
            dh2,
            &mut self.grads,
            (o + VW, o + VB),
            &self.dv,
            &self.h2,
            &params[o + VW],
            (m, 1),
            true,
        );
        if c > 0 {
            head_backward(
                dh2,
                &mut self.grads,
                (o + SAYW, o + SAYB),
                &self.dw,
                &self.h2,
                &params[o + SAYW],
                (m, c),
                true,
            );
        }
        let dh1 = sized(&mut self.dh1, m * H);
        if sh.memory {
            // The core: through time, then its weights over all the rows at once.
            gru::backward(&mut self.gru, &self.dh2, &params[HHW], mem);
            let g = &self.gru;
            weight_grad(&mut self.grads[IHW], &g.dgi, &self.h1, (m, 3 * H, H));
            bias_grad(&mut self.grads[IHB], &g.dgi, 3 * H);
            weight_grad(&mut self.grads[HHW], &g.dgh, &g.hprev, (m, 3 * H, H));
            bias_grad(&mut self.grads[HHB], &g.dgh, 3 * H);
            gemm(
                MatMut::new(dh1, m, H),
                Mat::new(&g.dgi, m, 3 * H),
                Mat::new(&params[IHW], 3 * H, H),
                false,
                1.0,
                Threads::One,
            );
        } else {
            through_tanh(dh2, &self.h2);
            // Layer 2.
            weight_grad(&mut self.grads[L2W], &self.dh2, &self.h1, (m, H, H));
            bias_grad(&mut self.grads[L2B], &self.dh2, H);
            gemm(
                MatMut::new(dh1, m, H),
                Mat::new(&self.dh2, m, H),
                Mat::new(&params[L2W], H, H),
                false,
                1.0,
                Threads::One,
            );
        }
        through_tanh(dh1, &self.h1);
        // Layer 1: the header fields' columns by a product (the cells' columns: in
        // `Fused::cell_grads`, over the whole minibatch).
        bias_grad(&mut self.grads[L1B], &self.dh1, H);
        weight_grad(&mut self.grads[L1W], &self.dh1, &self.x, (m, H, d));
    }
}

/// `out_r = base + Σ table[col]` over row `r`'s columns away from their base code
/// (`table`: [`Fused::dt`], a column of `H` per cell and code): the one-hot cells' part of the
/// first layer. Written with `pulp`'s vector types so that the sums stay in registers across
/// the cells (the autovectorised loop kept them in memory: a store and a load per addition).
struct CellSums<'a> {
    out: &'a mut [f32],
    away: &'a [u32],
    starts: &'a [u32],
    table: &'a [f32],
    base: &'a [f32],
}

impl pulp::WithSimd for CellSums<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        // Vectors per column (H = 64: 4 of AVX-512, 8 of AVX2, 64 scalars), summed 8 at a
        // time.
        let n = H / (std::mem::size_of::<S::f32s>() / 4);
        let (table, _) = S::as_simd_f32s(self.table);
        let (base, _) = S::as_simd_f32s(self.base);
        for (out, w) in self.out.chunks_exact_mut(H).zip(self.starts.windows(2)) {
            let (out, _) = S::as_mut_simd_f32s(out);
            let away = &self.away[w[0] as usize..w[1] as usize];
            for c0 in (0..n).step_by(8) {
                let w = (n - c0).min(8);
                let mut acc = [simd.splat_f32s(0.0); 8];
                acc[..w].copy_from_slice(&base[c0..c0 + w]);
                for &col in away {
                    let col = col as usize * n + c0;
                    for (a, &x) in acc[..w].iter_mut().zip(&table[col..col + w]) {
                        *a = simd.add_f32s(*a, x);
                    }
                }
                out[c0..c0 + w].copy_from_slice(&acc[..w]);
            }
        }
    }
}

/// The columns `first..` (as many as `table` holds) of each row's cells away from their
/// base code: the row's gradient (`grads`, `H` a row) added into each. The row's gradient
/// stays in vector registers; each column is loaded, added to and stored.
struct CellGrads<'a> {
    table: &'a mut [f32],
    first: u32,
    away: &'a [u32],
    starts: &'a [u32],
    grads: &'a [f32],
}

impl pulp::WithSimd for CellGrads<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let n = H / (std::mem::size_of::<S::f32s>() / 4);
        let end = self.first + (self.table.len() / H) as u32;
        let (table, _) = S::as_mut_simd_f32s(self.table);
        for (g, w) in self.grads.chunks_exact(H).zip(self.starts.windows(2)) {
            let (g, _) = S::as_simd_f32s(g);
            let away = &self.away[w[0] as usize..w[1] as usize];
            // The row's columns in this table: a run of its list (in cell order).
            let lo = away.partition_point(|&c| c < self.first);
            let hi = away.partition_point(|&c| c < end);
            for c0 in (0..n).step_by(8) {
                let w = (n - c0).min(8);
                let mut gv = [simd.splat_f32s(0.0); 8];
                gv[..w].copy_from_slice(&g[c0..c0 + w]);
                for &col in &away[lo..hi] {
                    let col = (col - self.first) as usize * n + c0;
                    for (y, &x) in table[col..col + w].iter_mut().zip(&gv[..w]) {
                        *y = simd.add_f32s(*y, x);
                    }
                }
            }
        }
    }
}

/// Reads a value from every cache line of `rows`' cells and fields, all at once: a
/// minibatch's decisions lie scattered over the whole batch's memory, and independent loads
/// in a row let the processor fetch their lines side by side, where the passes would wait
/// for each row's in turn. Each part touches its own rows on its own thread (one thread
/// touching the whole minibatch first had taken 9.5 ms of a 140 ms update).
fn touch<'r>(rows: impl Iterator<Item = &'r Encoded>) {
    let mut sum = 0u32;
    for r in rows {
        for c in r.cells.iter().step_by(64) {
            sum = sum.wrapping_add(u32::from(*c));
        }
        for d in r.dense.iter().step_by(16) {
            sum = sum.wrapping_add(d.to_bits());
        }
    }
    std::hint::black_box(sum);
}

/// `tanh x` without a libm call, so that loops over it vectorise: `(e^{2|x|} − 1) /
/// (e^{2|x|} + 1)` with the kernels' [`exp`], and below |x| = 0.1 (where that difference
/// loses digits) its Taylor series to `x⁹`; the sign put back. Within 3e-7 of libm's
/// (tested); libm's `tanhf` was a third of a step's time.
#[inline(always)]
fn tanh(x: f32) -> f32 {
    // Not `min`: a NaN stays NaN (a broken weight must not read as a saturated unit).
    let a = x.abs();
    let a = if a > 9.0 { 9.0 } else { a };
    let e = exp(2.0 * a);
    let far = (e - 1.0) / (e + 1.0);
    let a2 = a * a;
    let near = a
        * (1.0
            + a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0 + a2 * (-17.0 / 315.0 + a2 * (62.0 / 2835.0)))));
    let t = if a < 0.1 { near } else { far };
    t.copysign(x)
}

/// `g ⊙= 1 − h²`: a gradient through `h = tanh(·)`.
fn through_tanh(g: &mut [f32], h: &[f32]) {
    vectorised(
        #[inline(always)]
        || {
            for (g, &h) in g.iter_mut().zip(h) {
                *g *= 1.0 - h * h;
            }
        },
    );
}

/// `out (m × n) = inp (m × k) · wᵀ + b` with `w` an `(n, k)` weight.
fn dense_layer(
    out: &mut [f32],
    inp: &[f32],
    w: &[f32],
    b: &[f32],
    (m, k, n): (usize, usize, usize),
) {
    gemm(
        MatMut::new(out, m, n),
        Mat::new(inp, m, k),
        Mat::new(w, n, k).t(),
        false,
        1.0,
        Threads::One,
    );
    for row in out.chunks_exact_mut(n) {
        for (y, &bb) in row.iter_mut().zip(b) {
            *y += bb;
        }
    }
}

/// A head `y = W h + b` (`W` `(n, H)`): its weight and bias gradients from `dy (m × n)`, and
/// `dh (m × H)` set (`add`: added to) by `dy · W`.
fn head_backward(
    dh: &mut [f32],
    grads: &mut [Vec<f32>],
    (wi, bi): (usize, usize),
    dy: &[f32],
    h: &[f32],
    w: &[f32],
    (m, n): (usize, usize),
    add: bool,
) {
    weight_grad(&mut grads[wi], dy, h, (m, n, H));
    bias_grad(&mut grads[bi], dy, n);
    gemm(
        MatMut::new(dh, m, H),
        Mat::new(dy, m, n),
        Mat::new(w, n, H),
        add,
        1.0,
        Threads::One,
    );
}

/// `g (n × k) = dyᵀ (n × m) · x (m × k)`.
fn weight_grad(g: &mut [f32], dy: &[f32], x: &[f32], (m, n, k): (usize, usize, usize)) {
    gemm(
        MatMut::new(g, n, k),
        Mat::new(dy, m, n).t(),
        Mat::new(x, m, k),
        false,
        1.0,
        Threads::One,
    );
}

/// `g (n) = Σ_rows dy (m × n)`.
fn bias_grad(g: &mut [f32], dy: &[f32], n: usize) {
    g.fill(0.0);
    for row in dy.chunks_exact(n) {
        for (y, &x) in g.iter_mut().zip(row) {
            *y += x;
        }
    }
}

/// The log-softmax `lp` and the softmax `p` of `z` over the entries `counts` admits (the
/// others: `−∞` and 0), from one exponential per entry: `p_j = e^{z_j − max} / S`,
/// `lp_j = z_j − max − ln S`. A NaN anywhere makes every entry NaN.
fn log_softmax(z: &[f32], counts: impl Fn(usize) -> bool, lp: &mut [f32], p: &mut [f32]) {
    let mx = (0..z.len())
        .filter(|&j| counts(j))
        .fold(f32::NEG_INFINITY, |m, j| m.max(z[j]));
    let mut sum = 0f32;
    for (j, (&x, p)) in z.iter().zip(p.iter_mut()).enumerate() {
        *p = if counts(j) { (x - mx).exp() } else { 0.0 };
        sum += *p;
    }
    let (ln, inv) = (sum.ln(), 1.0 / sum);
    for (j, (&x, (l, p))) in z.iter().zip(lp.iter_mut().zip(p.iter_mut())).enumerate() {
        *l = if counts(j) {
            (x - mx) - ln
        } else {
            f32::NEG_INFINITY
        };
        *p *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::tanh;

    #[test]
    fn tanh_is_within_3e7_of_libm() {
        let mut worst = (0f32, 0f32);
        for i in -200_000..=200_000 {
            let x = i as f32 * 1e-4;
            let err = (tanh(x) - x.tanh()).abs();
            if err > worst.0 {
                worst = (err, x);
            }
        }
        assert!(
            worst.0 <= 3e-7,
            "|tanh - libm| = {} at {}",
            worst.0,
            worst.1
        );
        for x in [
            0.0f32,
            -0.0,
            1e-30,
            -1e-8,
            50.0,
            -50.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ] {
            assert!(
                (tanh(x) - x.tanh()).abs() <= 3e-7,
                "{x}: {} against {}",
                tanh(x),
                x.tanh()
            );
        }
        assert!(tanh(f32::NAN).is_nan());
    }
}
