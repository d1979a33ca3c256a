//! The training path's decoder on the CPU: the forward pass of `infer.rs` over prompts
//! packed end to end (no padding; the last layer for each prompt's last token only),
//! keeping what the backward pass needs, and that backward pass written out by hand over
//! the same kind of buffers. Every product is one `gemm` into a buffer, weight gradients
//! included, instead of candle's autograd building a tensor per operation and a zero-filled
//! gradient per input.
//!
//! The batch runs in two parts of about equal rows, side by side, each on one thread of its
//! own (see [`super::parts`]); the parts' weight gradients are added at the end. On two cores
//! that beat threading each operation (measured on `benches/update.rs`, `tiny`: 13% less
//! per step): no wake-ups between operations, and one-thread products of half the rows run
//! faster than two-thread products of all of them. Attention is products per prompt and
//! head too, and keeps its probabilities for the backward pass.
//!
//! [`attach`] wires it into candle's autograd: the hidden states pass through one identity
//! operation per weight (or adapter matrix) that tracks a gradient. When `backward` reaches
//! the outermost of them it runs [`backward::backward`] once with the hidden states' gradient, and each
//! operation hands its weight the gradient computed for it. So a loss built from the hidden
//! states with candle's operations (heads, log-probs, value) gets every gradient from one
//! `backward` call, as on candle's own paths (tested against them to 1e-4).

use candle_core::{CpuStorage, CustomOp2, Layout as TensorLayout, Result, Shape, Tensor, bail};
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use super::infer::{
    LoraData, MIN_SHARED, ModelData, ModelIx, Packed, Project, Runs, add_bias, embed_rows, gather,
    runs,
};
use super::kernels::{self, RopeTables, simd};
use super::parts::each_part;
use super::pool::{buffer, copy, recycle, zeros};
use crate::policy::gemm::{Mat, MatMut, Threads, gemm, gemm_long, matmul_wt};

/// Where each prompt's rows lie once packed end to end, and the keys each query row sees.
/// Where every prompt of the part begins with the same tokens (under the same adapter; at
/// least [`MIN_SHARED`] of them, and each prompt keeps one of its own), those come first, once
/// ([`Rows::pre`] rows, as a prompt of their own), and each prompt's rows are the rest, its
/// queries seeing the shared rows and its own: their forward pass is computed once for the
/// part, and in the backward pass every prompt's gradient into them is added there.
struct Rows {
    /// The shared beginning's rows (0: none), the first rows of the part.
    pre: usize,
    /// Each prompt's first own row and own length.
    spans: Vec<(usize, usize)>,
    /// Each row's position in its prompt.
    pos: Vec<u32>,
    /// Each row's and each last row's first seen row past its prompt's header (0: causal;
    /// see [`Band`]).
    lo: Vec<u32>,
    last_lo: Vec<u32>,
    /// Each prompt's header where it is read through a band ([`Outs::Banded`]).
    bands: Vec<Option<usize>>,
    /// The rows the last layer computes and the hidden states come from, and their
    /// positions, prompt `p`'s from `out_first[p]` to `out_first[p + 1]`: its row at the
    /// inner position asked for
    /// (if any), then its last.
    last: Vec<usize>,
    last_pos: Vec<u32>,
    out_first: Vec<usize>,
    /// The adapter runs over every row and over the last rows.
    token_runs: Runs,
    last_runs: Runs,
}

/// The rows whose final hidden states a training pass gives, per prompt.
#[derive(Clone, Copy)]
pub(in crate::policy::lm) enum Outs<'a> {
    /// Its last.
    Last,
    /// An earlier position of each prompt, then its last.
    Inner(&'a [usize]),
    /// These positions of each prompt (at least one, each below its length), in order.
    At(&'a [&'a [usize]]),
    /// [`Outs::At`] over prompts read through a sliding window, each its [`Band`].
    Banded(&'a [&'a [usize]], &'a [Band<'a>]),
}

/// A prompt read through a sliding window (a language model with memory, whose oldest turns
/// leave its keys and values while later tokens keep their positions): its first `header`
/// rows are seen by every later row; past them, row `i` sees rows `lo[i]..=i` only (so key
/// `j` is seen by query `i` where `j <= i` and `j < header` or `j >= lo[i]`). `lo` holds a
/// value per row of the prompt; `lo[i] <= header` reads causally.
#[derive(Clone, Copy, Debug)]
pub struct Band<'a> {
    /// The rows every later row sees.
    pub header: usize,
    /// Each row's first seen row past the header.
    pub lo: &'a [u32],
}

impl<'a> Outs<'a> {
    /// Prompts `r` of these.
    fn part(self, r: std::ops::Range<usize>) -> Outs<'a> {
        match self {
            Outs::Last => Outs::Last,
            Outs::Inner(a) => Outs::Inner(&a[r]),
            Outs::At(a) => Outs::At(&a[r]),
            Outs::Banded(a, b) => Outs::Banded(&a[r.clone()], &b[r]),
        }
    }

    /// Each prompt's band, if read through one.
    fn band(self, i: usize) -> Option<Band<'a>> {
        match self {
            Outs::Banded(_, b) => Some(b[i]),
            _ => None,
        }
    }

    /// How many rows prompt `i` gives.
    fn count(self, i: usize) -> usize {
        match self {
            Outs::Last => 1,
            Outs::Inner(_) => 2,
            Outs::At(a) | Outs::Banded(a, _) => a[i].len(),
        }
    }
}

/// Prompt tokens whose forward pass the training path computed once for a whole part (the
/// shared beginnings' rows times the part's prompts less one), since the process started.
static SHARED_ROWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many prompt tokens the training path has not computed again because the prompts of
/// a part began alike (their common beginning computed once), since the process started.
pub fn tape_shared_tokens() -> u64 {
    SHARED_ROWS.load(std::sync::atomic::Ordering::Relaxed)
}

/// How many first tokens every prompt shares (see [`Rows`]): 0 unless there are two
/// prompts or more, all on one adapter, whose common beginning is at least [`MIN_SHARED`]
/// tokens after leaving each prompt its last.
fn shared_beginning(prompts: &[&[u32]], per_prompt: &[Option<usize>]) -> usize {
    let (Some(first), true) = (prompts.first(), prompts.len() > 1) else {
        return 0;
    };
    if per_prompt.windows(2).any(|w| w[0] != w[1]) {
        return 0;
    }
    let mut n = prompts
        .iter()
        .map(|p| p.len().saturating_sub(1))
        .min()
        .unwrap_or(0);
    for p in &prompts[1..] {
        n = n.min(
            first
                .iter()
                .zip(p.iter())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    if n >= MIN_SHARED { n } else { 0 }
}

impl Rows {
    /// `outs`: the positions of each prompt whose hidden states are wanted.
    fn new(prompts: &[&[u32]], per_prompt: &[Option<usize>], outs: Outs<'_>) -> Self {
        // Banded prompts share no beginning: their rows' windows differ.
        let pre = if matches!(outs, Outs::Banded(..)) {
            0
        } else {
            shared_beginning(prompts, per_prompt)
        };
        SHARED_ROWS.fetch_add(
            (pre * prompts.len().saturating_sub(1)) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut spans = Vec::with_capacity(prompts.len());
        let mut pos: Vec<u32> = (0..pre as u32).collect();
        let mut lo: Vec<u32> = vec![0; pre];
        let (mut last, mut last_pos, mut last_lo) = (Vec::new(), Vec::new(), Vec::new());
        let mut bands = Vec::with_capacity(prompts.len());
        let mut first = pre;
        for (i, p) in prompts.iter().enumerate() {
            let n = p.len() - pre;
            spans.push((first, n));
            pos.extend(pre as u32..p.len() as u32);
            let band = outs.band(i);
            match band {
                Some(b) => lo.extend_from_slice(&b.lo[pre..p.len()]),
                None => lo.extend(std::iter::repeat_n(0, n)),
            }
            bands.push(band.map(|b| b.header));
            // A position inside the shared beginning reads its row there.
            let mut read = |at: usize| {
                last.push(if at < pre { at } else { first + at - pre });
                last_pos.push(at as u32);
                last_lo.push(band.map_or(0, |b| b.lo[at]));
            };
            match outs {
                Outs::Last => read(p.len() - 1),
                Outs::Inner(a) => {
                    read(a[i]);
                    read(p.len() - 1);
                }
                Outs::At(a) | Outs::Banded(a, _) => a[i].iter().for_each(|&at| read(at)),
            }
            first += n;
        }
        let out_first: Vec<usize> = std::iter::once(0)
            .chain((0..prompts.len()).scan(0, |acc, i| {
                *acc += outs.count(i);
                Some(*acc)
            }))
            .collect();
        let token_runs = if pre > 0 {
            // The shared rows read the adapter every prompt of the part reads.
            let mut r = runs(per_prompt, |i| prompts[i].len() - pre);
            r[0].1 += pre;
            r
        } else {
            runs(per_prompt, |i| prompts[i].len())
        };
        Self {
            pre,
            token_runs,
            last_runs: runs(per_prompt, |i| outs.count(i)),
            spans,
            pos,
            lo,
            last_lo,
            bands,
            last,
            last_pos,
            out_first,
        }
    }

    /// The packed token ids: the shared beginning, then each prompt's own.
    fn ids(&self, prompts: &[&[u32]]) -> Vec<u32> {
        let shared = prompts.first().map_or(&[][..], |p| &p[..self.pre]);
        shared
            .iter()
            .copied()
            .chain(prompts.iter().flat_map(|p| p[self.pre..].iter().copied()))
            .collect()
    }
}

/// What one layer's backward pass reads: its input rows `x` (every row), their norm `n1`,
/// the rotated queries (the layer's query rows), rotated keys and values (every row), the
/// attention's probabilities (see [`attention_forward`]) and output, the residual after
/// attention `mid`, its norm `n2`, the MLP's gate and up projections and the gate's sigmoid
/// (query rows).
struct LayerSaved {
    x: Vec<f32>,
    n1: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    p: Vec<f32>,
    att: Vec<f32>,
    mid: Vec<f32>,
    n2: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    sig: Vec<f32>,
}

impl Drop for LayerSaved {
    fn drop(&mut self) {
        let s = self;
        for v in [
            &mut s.x, &mut s.n1, &mut s.q, &mut s.k, &mut s.v, &mut s.p, &mut s.att, &mut s.mid,
            &mut s.n2, &mut s.g, &mut s.u, &mut s.sig,
        ] {
            recycle(std::mem::take(v));
        }
    }
}

/// What the forward pass over one part of the batch keeps for the backward pass.
struct Part {
    rows: Rows,
    /// The packed token ids.
    ids: Vec<u32>,
    layers: Vec<LayerSaved>,
    /// The last rows' residual stream before the final norm.
    last_x: Vec<f32>,
}

/// [`forward`] over one part of the batch.
fn forward_part(
    m: &ModelData<'_>,
    rope: &RopeTables,
    prompts: &[&[u32]],
    (adapters, per_prompt): (&[LoraData<'_>], &[Option<usize>]),
    outs: Outs<'_>,
) -> (Vec<f32>, Part) {
    let rows = Rows::new(prompts, per_prompt, outs);
    let projections = Project::new(adapters, per_prompt);
    let project = |y: &mut [f32], x: &[f32], w, dims, add, at| {
        projections.run(y, x, w, dims, add, at);
    };
    let (h, nh, nkv, hd, iw) = m.sizes.dims();
    let (qw, kvw) = (nh * hd, nkv * hd);
    let total = rows.pos.len();
    let ids = rows.ids(prompts);
    let mut x = buffer(total * h);
    embed_rows(&mut x, m.embed, &ids);
    let scale = 1.0 / (hd as f32).sqrt();
    let layers = m.layers.len();
    let mut saved = Vec::with_capacity(layers);
    for (i, l) in m.layers.iter().enumerate() {
        let tr = &rows.token_runs;
        let mut n1 = buffer(total * h);
        kernels::rms_rows(&mut n1, &x, l.ln1, m.sizes.eps);
        let mut k = buffer(total * kvw);
        project(&mut k, &n1, l.k, (total, h, kvw), false, (i, 1, tr));
        add_bias(&mut k, l.k_bias);
        kernels::rotate(&mut k, rope, kvw, |r| rows.pos[r] as usize, 1.0);
        let mut v = buffer(total * kvw);
        project(&mut v, &n1, l.v, (total, h, kvw), false, (i, 2, tr));
        add_bias(&mut v, l.v_bias);
        // The last layer for each prompt's last token only.
        let last = i + 1 == layers;
        let (q_pos, runs, mut xq, nq) = if last {
            let (x, n) = (gather(&x, &rows.last, h), gather(&n1, &rows.last, h));
            (&rows.last_pos, &rows.last_runs, x, Cow::Owned(n))
        } else {
            (&rows.pos, tr, copy(&x), Cow::Borrowed(&n1[..]))
        };
        let nr = q_pos.len();
        let mut q = buffer(nr * qw);
        project(&mut q, &nq, l.q, (nr, h, qw), false, (i, 0, runs));
        add_bias(&mut q, l.q_bias);
        kernels::rotate(&mut q, rope, qw, |r| q_pos[r] as usize, 1.0);
        drop(nq);
        let mut att = buffer(nr * qw);
        let p = attention_forward(&mut att, (&q, &k, &v), &rows, last, (nh, nkv, hd), scale);
        project(&mut xq, &att, l.o, (nr, qw, h), true, (i, 3, runs));
        let mid = copy(&xq);
        let mut n2 = buffer(nr * h);
        kernels::rms_rows(&mut n2, &xq, l.ln2, m.sizes.eps);
        let mut g = buffer(nr * iw);
        let mut u = buffer(nr * iw);
        project(&mut g, &n2, l.gate, (nr, h, iw), false, (i, 4, runs));
        project(&mut u, &n2, l.up, (nr, h, iw), false, (i, 5, runs));
        let (mut act, mut sig) = (buffer(nr * iw), buffer(nr * iw));
        swiglu_keep(&mut act, &mut sig, (&g, &u));
        project(&mut xq, &act, l.down, (nr, iw, h), true, (i, 6, runs));
        recycle(act);
        saved.push(LayerSaved {
            x: std::mem::replace(&mut x, xq),
            n1,
            q,
            k,
            v,
            p,
            att,
            mid,
            n2,
            g,
            u,
            sig,
        });
    }
    let mut out = vec![0f32; x.len()];
    kernels::rms_rows(&mut out, &x, m.norm, m.sizes.eps);
    let saved = Part {
        rows,
        ids,
        layers: saved,
        last_x: x,
    };
    (out, saved)
}

/// SwiGLU's forward keeping the gate's sigmoid: `sig = σ(g)`, `act = g · sig · u`.
fn swiglu_keep(act: &mut [f32], sig: &mut [f32], (g, u): (&[f32], &[f32])) {
    act.par_chunks_mut(kernels::MIN_ELEMS)
        .zip(sig.par_chunks_mut(kernels::MIN_ELEMS))
        .zip(
            g.par_chunks(kernels::MIN_ELEMS)
                .zip(u.par_chunks(kernels::MIN_ELEMS)),
        )
        .for_each(|((a, s), (g, u))| {
            kernels::vectorised(|| {
                for i in 0..a.len() {
                    s[i] = 1.0 / (1.0 + kernels::exp(-g[i]));
                    a[i] = g[i] * s[i] * u[i];
                }
            })
        });
}

/// The activation again from the kept sigmoid: `act = g · σ · u`, no `exp`.
fn gated(act: &mut [f32], (g, u, sig): (&[f32], &[f32], &[f32])) {
    act.par_chunks_mut(kernels::MIN_ELEMS)
        .zip(
            g.par_chunks(kernels::MIN_ELEMS).zip(
                u.par_chunks(kernels::MIN_ELEMS)
                    .zip(sig.par_chunks(kernels::MIN_ELEMS)),
            ),
        )
        .for_each(|(a, (g, (u, s)))| {
            kernels::vectorised(|| {
                for i in 0..a.len() {
                    a[i] = g[i] * s[i] * u[i];
                }
            })
        });
}

/// Attention's work for one prompt (or the shared beginning, see [`Rows`], or a block of a
/// banded prompt's queries): its first query row and query count, then its keys: `pre` rows
/// from `a0` (the shared beginning's, or a banded prompt's header; 0: none) at positions
/// from 0, followed by `len` rows from `k0` at positions from `kpos`. Query `i` sees the
/// keys at positions up to its own, those below `header` and those from its `lo` ([`Band`]).
#[derive(Clone, Copy)]
struct Task {
    q0: usize,
    nq: usize,
    a0: usize,
    pre: usize,
    k0: usize,
    len: usize,
    kpos: usize,
    header: usize,
}

impl Task {
    /// The keys it reads.
    fn keys(&self) -> usize {
        self.pre + self.len
    }

    /// How many of its keys lie at positions below `p`.
    fn below(&self, p: usize) -> usize {
        self.pre.min(p) + p.saturating_sub(self.kpos).min(self.len)
    }

    /// The keys a query at position `at` whose window starts at `lo` sees: the first `.0`,
    /// and those from `.1` to `.2` (exclusive).
    fn seen(&self, at: u32, lo: u32) -> (usize, usize, usize) {
        let end = self.below(at as usize + 1);
        let head = self.below(self.header).min(end);
        (head, self.below(lo as usize).max(head).min(end), end)
    }
}

/// Queries of a banded prompt per attention task: each reads the header and the keys from
/// the lowest window start among its queries to the last of them.
const BAND_BLOCK: usize = 64;

/// The attention tasks (`last`: the query rows are each prompt's output rows alone): the
/// shared beginning's own (every layer but the last: its rows attend among themselves),
/// then one per prompt, or per block of [`BAND_BLOCK`] queries of a banded prompt.
fn attention_tasks(rows: &Rows, last: bool) -> Vec<Task> {
    let pre = rows.pre;
    let mut tasks = Vec::with_capacity(rows.spans.len() + 1);
    if pre > 0 && !last {
        tasks.push(Task {
            q0: 0,
            nq: pre,
            a0: 0,
            pre: 0,
            k0: 0,
            len: pre,
            kpos: 0,
            header: 0,
        });
    }
    let (q_pos, q_lo) = if last {
        (&rows.last_pos, &rows.last_lo)
    } else {
        (&rows.pos, &rows.lo)
    };
    for (p, &(first, len)) in rows.spans.iter().enumerate() {
        let (q0, nq) = if last {
            (rows.out_first[p], rows.out_first[p + 1] - rows.out_first[p])
        } else {
            (first, len)
        };
        let Some(header) = rows.bands[p] else {
            tasks.push(Task {
                q0,
                nq,
                a0: 0,
                pre,
                k0: first,
                len,
                kpos: pre,
                header: 0,
            });
            continue;
        };
        for b0 in (q0..q0 + nq).step_by(BAND_BLOCK) {
            let b1 = (b0 + BAND_BLOCK).min(q0 + nq);
            let end = q_pos[b0..b1].iter().max().map_or(0, |&a| a as usize + 1);
            let from = (b0..b1)
                .map(|r| {
                    if (q_pos[r] as usize) < header {
                        0
                    } else {
                        q_lo[r] as usize
                    }
                })
                .min()
                .unwrap_or(0);
            let (a0, pre, from) = if from <= header {
                (0, 0, 0)
            } else {
                (first, header, from)
            };
            tasks.push(Task {
                q0: b0,
                nq: b1 - b0,
                a0,
                pre,
                k0: first + from,
                len: end - from,
                kpos: from,
                header,
            });
        }
    }
    tasks
}

/// `x`'s rows of a task's keys (`width` wide) in one buffer: the first run's, then the
/// task's own; borrowed as they are when there is no first run.
fn task_keys<'a>(x: &'a [f32], t: &Task, width: usize) -> Cow<'a, [f32]> {
    let own = &x[t.k0 * width..(t.k0 + t.len) * width];
    if t.pre == 0 {
        return Cow::Borrowed(own);
    }
    let mut both = Vec::with_capacity(t.keys() * width);
    both.extend_from_slice(&x[t.a0 * width..(t.a0 + t.pre) * width]);
    both.extend_from_slice(own);
    Cow::Owned(both)
}

/// Splits `data` into consecutive pieces of the given lengths.
fn split_runs(mut data: &mut [f32], lens: impl Iterator<Item = usize>) -> Vec<&mut [f32]> {
    let mut parts = Vec::new();
    for n in lens {
        let (a, rest) = std::mem::take(&mut data).split_at_mut(n);
        parts.push(a);
        data = rest;
    }
    parts
}

/// Softmax over each row of the scores `p` (a task's keys a row; the query of row `i` at
/// position `at[i]` with its window from `lo[i]`, seeing the keys [`Task::seen`] gives), zero
/// where a query cannot see.
fn causal_softmax(p: &mut [f32], t: &Task, (at, lo): (&[u32], &[u32])) {
    let len = t.keys();
    kernels::vectorised(|| {
        for ((row, &pos), &lo) in p.chunks_exact_mut(len).zip(at).zip(lo) {
            let (head, from, end) = t.seen(pos, lo);
            let (first, rest) = row.split_at_mut(head);
            let (gap, rest) = rest.split_at_mut(from - head);
            let (band, hidden) = rest.split_at_mut(end - from);
            let max = simd::max(first).max(simd::max(band));
            let total = simd::exp_sum(first, max) + simd::exp_sum(band, max);
            let inv = 1.0 / total;
            for s in [first, band] {
                for x in s.iter_mut() {
                    *x *= inv;
                }
            }
            gap.fill(0.0);
            hidden.fill(0.0);
        }
    });
}

/// Causal attention over packed prompts by products, per prompt (one task each) and query
/// head: `P = softmax(scale · Q Kᵀ)` over the keys each query sees, then `O = P V` into
/// `att` (`(query rows, heads · hd)`, every element written). Returns every `P`, each
/// prompt's `(heads, queries, keys)` in turn, for [`attention_backward`].
fn attention_forward(
    att: &mut [f32],
    (q, k, v): (&[f32], &[f32], &[f32]),
    rows: &Rows,
    last: bool,
    (nh, nkv, hd): (usize, usize, usize),
    scale: f32,
) -> Vec<f32> {
    let (qw, kvw) = (nh * hd, nkv * hd);
    let rep = nh / nkv.max(1);
    let tasks = attention_tasks(rows, last);
    let (q_pos, q_lo) = if last {
        (&rows.last_pos, &rows.last_lo)
    } else {
        (&rows.pos, &rows.lo)
    };
    let mut p = buffer(tasks.iter().map(|t| nh * t.nq * t.keys()).sum());
    let ps = split_runs(&mut p, tasks.iter().map(|t| nh * t.nq * t.keys()));
    let outs = split_runs(att, tasks.iter().map(|t| t.nq * qw));
    ps.into_par_iter()
        .zip(outs)
        .zip(tasks.par_iter())
        .for_each(|((p, out), t)| {
            let (q0, nq, len) = (t.q0, t.nq, t.keys());
            let (kt, vt) = (task_keys(k, t, kvw), task_keys(v, t, kvw));
            for (head, p) in p.chunks_exact_mut(nq * len).enumerate() {
                let kvh = head / rep.max(1);
                let qh = Mat::strided(&q[q0 * qw + head * hd..], nq, hd, qw);
                let kh = Mat::strided(&kt[kvh * hd..], len, hd, kvw);
                let vh = Mat::strided(&vt[kvh * hd..], len, hd, kvw);
                gemm(
                    MatMut::new(p, nq, len),
                    qh,
                    kh.t(),
                    false,
                    scale,
                    Threads::One,
                );
                causal_softmax(p, t, (&q_pos[q0..q0 + nq], &q_lo[q0..q0 + nq]));
                let oh = MatMut::strided(&mut out[head * hd..], nq, hd, qw);
                gemm(oh, Mat::new(p, nq, len), vh, false, 1.0, Threads::One);
            }
        });
    p
}

/// What the forward pass keeps for the backward pass: each part's output rows and keepings.
pub(in crate::policy::lm) struct Saved {
    parts: Vec<(std::ops::Range<usize>, Part)>,
}

/// The parts a batch is computed in: its prompts in two runs of about equal rows (one when
/// there is a single prompt). The split depends on the prompts alone, never on the thread
/// count, and so neither do the results.
fn parts(prompts: &[&[u32]]) -> Vec<std::ops::Range<usize>> {
    let total: usize = prompts.iter().map(|p| p.len()).sum();
    let mut seen = 0;
    // The prompt that reaches half the rows ends the first part, unless it is the last.
    let mid = prompts
        .iter()
        .position(|p| {
            seen += p.len();
            2 * seen >= total
        })
        .map_or(0, |i| (i + 1).min(prompts.len() - 1));
    if mid == 0 {
        std::iter::once(0..prompts.len()).collect()
    } else {
        vec![0..mid, mid..prompts.len()]
    }
}

/// The final normed hidden states at each prompt's last token, `(prompts, hidden)` (with
/// [`Outs::Inner`], an earlier position of each prompt, the states there too: `(2 · prompts,
/// hidden)`, each prompt's inner row before its last; with [`Outs::At`], the rows at those
/// positions, prompt by prompt), and what [`backward`] needs. Prompts
/// must be non-empty, their ids below the vocabulary size and their lengths within the
/// rotary tables, inner positions below their lengths, and the model must have a layer
/// (the caller checks). The batch runs in two parts (see [`parts`]), one thread each.
pub(in crate::policy::lm) fn forward(
    m: &ModelData<'_>,
    rope: &RopeTables,
    prompts: &[&[u32]],
    (adapters, per_prompt): (&[LoraData<'_>], &[Option<usize>]),
    outs: Outs<'_>,
) -> (Vec<f32>, Saved) {
    let ranges = parts(prompts);
    let done = each_part(ranges.clone(), |_, r| {
        let outs = outs.part(r.clone());
        forward_part(
            m,
            rope,
            &prompts[r.clone()],
            (adapters, &per_prompt[r]),
            outs,
        )
    });
    // Each prompt's first output row.
    let first: Vec<usize> = std::iter::once(0)
        .chain((0..prompts.len()).scan(0, |acc, i| {
            *acc += outs.count(i);
            Some(*acc)
        }))
        .collect();
    let mut out = Vec::with_capacity(first[prompts.len()] * m.sizes.hidden);
    let mut parts = Vec::with_capacity(done.len());
    for (r, (o, part)) in ranges.into_iter().zip(done) {
        out.extend_from_slice(&o);
        // The part's output rows.
        parts.push((first[r.start]..first[r.end], part));
    }
    (out, Saved { parts })
}

mod backward;
#[cfg(test)]
mod tests;

pub(in crate::policy::lm) use backward::attach;
pub use backward::backward_passes;
