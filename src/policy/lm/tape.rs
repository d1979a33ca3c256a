//! The training path's decoder on the CPU: the forward pass of `engine.rs` over prompts
//! packed end to end (no padding; the last layer for each prompt's last token only),
//! keeping what the backward pass needs, and that backward pass written out by hand over
//! the same kind of buffers. Every product is one `gemm` into a buffer, weight gradients
//! included, instead of candle's autograd building a tensor per operation and a zero-filled
//! gradient per input.
//!
//! The batch runs in two parts of about equal rows, side by side, each on one thread of its
//! own (see [`each_part`]); the parts' weight gradients are added at the end. On two cores
//! that beat threading each operation (measured on `benches/update.rs`, `tiny`: 13% less
//! per step): no wake-ups between operations, and one-thread products of half the rows run
//! faster than two-thread products of all of them. Attention is products per prompt and
//! head too, and keeps its probabilities for the backward pass.
//!
//! [`attach`] wires it into candle's autograd: the hidden states pass through one identity
//! operation per weight (or adapter matrix) that tracks a gradient. When `backward` reaches
//! the outermost of them it runs [`backward`] once with the hidden states' gradient, and each
//! operation hands its weight the gradient computed for it. So a loss built from the hidden
//! states with candle's operations (heads, log-probs, value) gets every gradient from one
//! `backward` call, as on candle's own paths (tested against them to 1e-4).

use candle_core::{CpuStorage, CustomOp2, Layout as TensorLayout, Result, Shape, Tensor, bail};
use rayon::prelude::*;
use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use super::engine::{
    LoraData, ModelData, ModelIx, Packed, Project, Runs, add_bias, embed_rows, gather, runs,
};
use super::kernels::{self, RopeTables};
use super::mat::{Mat, MatMut, Threads, gemm, gemm_long, matmul_wt};

/// Buffers recycled between training steps. A step allocates the same buffers each time:
/// fresh ones cost a zero fill or the kernel's clearing of new pages (measured with `perf`
/// on `benches/update.rs`: 15% of a `tiny` step), recycled ones neither. With the two parts
/// of a batch side by side, which buffer a request gets depends on timing, so the pool can
/// hold a few more than one step's peak, never more than both parts' peaks together.
static POOL: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());

/// The most buffers [`POOL`] keeps, and the most elements in all (4 GiB; `small` needs about
/// 1.5 GiB at 64 prompts of 64 tokens). What a step hands back is what it took, so the
/// pool stays at a step's peak of live buffers; these bounds only guard against a bug.
const POOL_MAX: usize = 256;
const POOL_MAX_FLOATS: usize = 1 << 30;

/// Frees the buffers the training path keeps between steps (for other work, such as the
/// rollouts between updates, to reuse).
pub fn release_buffers() {
    if let Ok(mut pool) = POOL.lock() {
        pool.clear();
    }
}

/// A buffer of `n` elements with unspecified contents (a recycled buffer's old values), for
/// outputs that are written in full. Debug builds fill it with NaN, so that a result that
/// read an element it did not write shows in the tests.
fn buffer(n: usize) -> Vec<f32> {
    let found = POOL.lock().ok().and_then(|mut pool| {
        let fits = |v: &Vec<f32>| v.capacity() >= n && v.capacity() <= 2 * n.max(1024);
        let best = (0..pool.len())
            .filter(|&i| fits(&pool[i]))
            .min_by_key(|&i| pool[i].capacity())?;
        Some(pool.swap_remove(best))
    });
    let mut v = found.unwrap_or_default();
    v.resize(n, 0.0);
    if cfg!(debug_assertions) {
        v.fill(f32::NAN);
    }
    v
}

/// A buffer of `n` zeros.
fn zeros(n: usize) -> Vec<f32> {
    let mut v = buffer(n);
    v.fill(0.0);
    v
}

/// A pooled buffer holding a copy of `v`.
fn copy(v: &[f32]) -> Vec<f32> {
    let mut out = buffer(v.len());
    out.copy_from_slice(v);
    out
}

/// Gives `v`, which must come from [`buffer`] (or [`zeros`], [`copy`]), back to the pool: a
/// buffer from elsewhere would add to the pool on every step.
fn recycle(v: Vec<f32>) {
    if let Ok(mut pool) = POOL.lock()
        && pool.len() < POOL_MAX
        && pool.iter().map(Vec::capacity).sum::<usize>() + v.capacity() <= POOL_MAX_FLOATS
    {
        pool.push(v);
    }
}

/// Where each prompt's rows lie once packed end to end, and the keys each query row sees.
struct Rows {
    /// Each prompt's first row and length.
    spans: Vec<(usize, usize)>,
    /// Each row's position in its prompt.
    pos: Vec<u32>,
    /// Each prompt's last row and its position.
    last: Vec<usize>,
    last_pos: Vec<u32>,
    /// The adapter runs over every row and over the last rows.
    token_runs: Runs,
    last_runs: Runs,
}

impl Rows {
    fn new(prompts: &[&[u32]], per_prompt: &[Option<usize>]) -> Self {
        let mut spans = Vec::with_capacity(prompts.len());
        let mut pos = Vec::new();
        let (mut last, mut last_pos) = (Vec::new(), Vec::new());
        let mut first = 0;
        for p in prompts {
            let n = p.len();
            spans.push((first, n));
            pos.extend(0..n as u32);
            last.push(first + n - 1);
            last_pos.push(n as u32 - 1);
            first += n;
        }
        Self {
            token_runs: runs(per_prompt, |i| prompts[i].len()),
            last_runs: runs(per_prompt, |_| 1),
            spans,
            pos,
            last,
            last_pos,
        }
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
) -> (Vec<f32>, Part) {
    let rows = Rows::new(prompts, per_prompt);
    let projections = Project::new(adapters, per_prompt);
    let project = |y: &mut [f32], x: &[f32], w, dims, add, at| {
        projections.run(y, x, w, dims, add, at);
    };
    let (h, nh, nkv, hd, iw) = m.sizes.dims();
    let (qw, kvw) = (nh * hd, nkv * hd);
    let total = rows.pos.len();
    let ids: Vec<u32> = prompts.iter().flat_map(|p| p.iter().copied()).collect();
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

/// [`swiglu_keep`]'s backward from the kept sigmoid and the activation's gradient `d`:
/// `dg = d · u · σ (1 + g (1 − σ))` into `dg`, `du = d · g · σ` into `du`.
fn swiglu_back(
    (dg, du): (&mut [f32], &mut [f32]),
    (g, u, sig, d): (&[f32], &[f32], &[f32], &[f32]),
) {
    dg.par_chunks_mut(kernels::MIN_ELEMS)
        .zip(du.par_chunks_mut(kernels::MIN_ELEMS))
        .zip(
            g.par_chunks(kernels::MIN_ELEMS)
                .zip(u.par_chunks(kernels::MIN_ELEMS))
                .zip(
                    sig.par_chunks(kernels::MIN_ELEMS)
                        .zip(d.par_chunks(kernels::MIN_ELEMS)),
                ),
        )
        .for_each(|((dg, du), ((g, u), (s, d)))| {
            kernels::vectorised(|| {
                for i in 0..dg.len() {
                    dg[i] = d[i] * u[i] * s[i] * (1.0 + g[i] * (1.0 - s[i]));
                    du[i] = d[i] * g[i] * s[i];
                }
            })
        });
}

/// A gradient buffer per tensor, in [`engine::Layout::read`]'s order; `None` for the
/// tensors that need none (not computed).
pub(super) struct Grads(Vec<Option<Vec<f32>>>);

impl Grads {
    fn at(&mut self, i: usize) -> Option<&mut [f32]> {
        self.0.get_mut(i).and_then(|g| g.as_deref_mut())
    }
}

/// `dw (out × inp) += dyᵀ x` over `n` rows: a projection's weight gradient.
fn weight_grad(
    dw: Option<&mut [f32]>,
    dy: &[f32],
    x: &[f32],
    (n, out, inp): (usize, usize, usize),
) {
    if let Some(dw) = dw {
        gemm_long(dw, Mat::new(dy, n, out).t(), Mat::new(x, n, inp), true, 1.0);
    }
}

/// `dx (n × inp) [+]= dy w` with `w` an `(out, inp)` weight: a projection's input gradient.
fn input_grad(
    dx: &mut [f32],
    dy: &[f32],
    w: &[f32],
    (n, out, inp): (usize, usize, usize),
    add: bool,
) {
    gemm(
        MatMut::new(dx, n, inp),
        Mat::new(dy, n, out),
        Mat::new(w, out, inp),
        add,
        1.0,
        Threads::Pool,
    );
}

/// Adds each column's sum over the rows of `d` to `db` (a bias gradient), rows in order.
fn add_column_sums(db: Option<&mut [f32]>, d: &[f32]) {
    if let Some(db) = db {
        for row in d.chunks_exact(db.len().max(1)) {
            for (a, &b) in db.iter_mut().zip(row) {
                *a += b;
            }
        }
    }
}

/// Adds row `i` of `src` to row `rows[i]` of `dst` (rows of `h`).
fn scatter_add(dst: &mut [f32], src: &[f32], rows: &[usize], h: usize) {
    for (s, &r) in src.chunks_exact(h).zip(rows) {
        for (a, &b) in dst[r * h..(r + 1) * h].iter_mut().zip(s) {
            *a += b;
        }
    }
}

/// The adapters' part of a projection's backward pass (module `module` of layer `layer`,
/// rows `x` of `inp` in, `dy` of `out`): with `z = A x` and `y += s · B z`, adds
/// `s · dyᵀ z` to `dB`, `(s · dy B)ᵀ x` to `dA` (where they need gradients) and
/// `(s · dy B) A` to `dx`, run by run.
#[allow(clippy::too_many_arguments)]
fn lora_backward(
    dx: &mut [f32],
    x: &[f32],
    dy: &[f32],
    (inp, out): (usize, usize),
    (adapters, ix, runs): (&[LoraData<'_>], &ModelIx, &Runs),
    (layer, module): (usize, usize),
    grads: &mut Grads,
) {
    let mut start = 0;
    for &(a, n) in runs {
        if let Some(a) = a
            && let Some(l) = adapters.get(a)
            && let Some((wa, wb)) = l.modules.get(layer).and_then(|m| m[module])
            && let Some((ia, ib)) = ix
                .adapters
                .get(a)
                .and_then(|m| m.get(layer))
                .and_then(|m| m[module])
        {
            let r = l.rank;
            let xr = &x[start * inp..(start + n) * inp];
            let dyr = &dy[start * out..(start + n) * out];
            let mut z = vec![0f32; n * r];
            matmul_wt(&mut z, xr, wa, (n, inp, r), false, 1.0);
            if let Some(db) = grads.at(ib) {
                let dyt = Mat::new(dyr, n, out).t();
                gemm_long(db, dyt, Mat::new(&z, n, r), true, l.scale);
            }
            // dz = s · dy B
            let mut dz = vec![0f32; n * r];
            let (dym, b) = (Mat::new(dyr, n, out), Mat::new(wb, out, r));
            gemm(
                MatMut::new(&mut dz, n, r),
                dym,
                b,
                false,
                l.scale,
                Threads::Pool,
            );
            if let Some(da) = grads.at(ia) {
                let (dzt, xm) = (Mat::new(&dz, n, r).t(), Mat::new(xr, n, inp));
                gemm_long(da, dzt, xm, true, 1.0);
            }
            let dxr = MatMut::new(&mut dx[start * inp..(start + n) * inp], n, inp);
            let (dzm, am) = (Mat::new(&dz, n, r), Mat::new(wa, r, inp));
            gemm(dxr, dzm, am, true, 1.0, Threads::Pool);
        }
        start += n;
    }
}

/// Attention's work per prompt: its first query row and query count, its first key row and
/// key count (`last`: the query rows are each prompt's last token alone).
fn attention_tasks(rows: &Rows, last: bool) -> Vec<(usize, usize, usize, usize)> {
    rows.spans
        .iter()
        .enumerate()
        .map(|(p, &(first, len))| {
            if last {
                (p, 1, first, len)
            } else {
                (first, len, first, len)
            }
        })
        .collect()
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

/// Softmax over each row of the scores `p` (`nq × len`; query `i` sits at position
/// `len − nq + i` and sees keys up to it), zero where a query cannot see.
fn causal_softmax(p: &mut [f32], nq: usize, len: usize) {
    kernels::vectorised(|| {
        for (i, row) in p.chunks_exact_mut(len).enumerate() {
            let (seen, hidden) = row.split_at_mut(len - nq + i + 1);
            let max = seen.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            for s in seen.iter_mut() {
                *s = kernels::exp(*s - max);
            }
            let inv = 1.0 / seen.iter().sum::<f32>();
            for s in seen.iter_mut() {
                *s *= inv;
            }
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
    let mut p = buffer(tasks.iter().map(|t| nh * t.1 * t.3).sum());
    let ps = split_runs(&mut p, tasks.iter().map(|t| nh * t.1 * t.3));
    let outs = split_runs(att, tasks.iter().map(|t| t.1 * qw));
    ps.into_par_iter().zip(outs).zip(tasks.par_iter()).for_each(
        |((p, out), &(q0, nq, k0, len))| {
            for (head, p) in p.chunks_exact_mut(nq * len).enumerate() {
                let kvh = head / rep.max(1);
                let qh = Mat::strided(&q[q0 * qw + head * hd..], nq, hd, qw);
                let kh = Mat::strided(&k[k0 * kvw + kvh * hd..], len, hd, kvw);
                let vh = Mat::strided(&v[k0 * kvw + kvh * hd..], len, hd, kvw);
                gemm(
                    MatMut::new(p, nq, len),
                    qh,
                    kh.t(),
                    false,
                    scale,
                    Threads::One,
                );
                causal_softmax(p, nq, len);
                let oh = MatMut::strided(&mut out[head * hd..], nq, hd, qw);
                gemm(oh, Mat::new(p, nq, len), vh, false, 1.0, Threads::One);
            }
        },
    );
    p
}

/// Causal attention's backward pass over packed prompts, per prompt (one task each) and
/// query head, from the probabilities `P` that [`attention_forward`] returned:
/// `dV = Pᵀ dO`, `dP = dO Vᵀ`, `dS = P ∘ (dP − rowsum(P ∘ dP))`,
/// `dQ = scale · dS K`, `dK = scale · dSᵀ Q` (query heads that share a key/value head add
/// into it). Returns `(dq, dk, dv)` in the layouts of `q`, `k` and `v`.
fn attention_backward(
    d_att: &[f32],
    (q, k, v, p): (&[f32], &[f32], &[f32], &[f32]),
    rows: &Rows,
    last: bool,
    (nh, nkv, hd): (usize, usize, usize),
    scale: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (qw, kvw) = (nh * hd, nkv * hd);
    let rep = nh / nkv.max(1);
    let total = rows.pos.len();
    let tasks = attention_tasks(rows, last);
    let q_rows = if last { rows.spans.len() } else { total };
    // Every element is written: each query head's block of dq, and the first query head of
    // each key/value head writes its block of dk and dv, the others add to it.
    let mut dq = buffer(q_rows * qw);
    let mut dk = buffer(total * kvw);
    let mut dv = buffer(total * kvw);
    let dqs = split_runs(&mut dq, tasks.iter().map(|t| t.1 * qw));
    let dks = split_runs(&mut dk, tasks.iter().map(|t| t.3 * kvw));
    let dvs = split_runs(&mut dv, tasks.iter().map(|t| t.3 * kvw));
    let mut ps = Vec::with_capacity(tasks.len());
    let mut rest = p;
    for t in &tasks {
        let (a, b) = rest.split_at(nh * t.1 * t.3);
        ps.push(a);
        rest = b;
    }
    dqs.into_par_iter()
        .zip(dks)
        .zip(dvs)
        .zip(ps)
        .zip(tasks.par_iter())
        .for_each(|((((dq, dk), dv), p), &(q0, nq, k0, len))| {
            let mut ds = vec![0f32; nq * len];
            for (head, p) in p.chunks_exact(nq * len).enumerate() {
                let kvh = head / rep.max(1);
                let qh = Mat::strided(&q[q0 * qw + head * hd..], nq, hd, qw);
                let kh = Mat::strided(&k[k0 * kvw + kvh * hd..], len, hd, kvw);
                let vh = Mat::strided(&v[k0 * kvw + kvh * hd..], len, hd, kvw);
                let doh = Mat::strided(&d_att[q0 * qw + head * hd..], nq, hd, qw);
                gemm(
                    MatMut::new(&mut ds, nq, len),
                    doh,
                    vh.t(),
                    false,
                    1.0,
                    Threads::One,
                );
                kernels::vectorised(|| {
                    for (pr, dr) in p.chunks_exact(len).zip(ds.chunks_exact_mut(len)) {
                        let dot: f32 = pr.iter().zip(dr.iter()).map(|(a, b)| a * b).sum();
                        for (d, &pp) in dr.iter_mut().zip(pr) {
                            *d = pp * (*d - dot);
                        }
                    }
                });
                let (pm, dsm) = (Mat::new(p, nq, len), Mat::new(&ds, nq, len));
                let dqh = MatMut::strided(&mut dq[head * hd..], nq, hd, qw);
                gemm(dqh, dsm, kh, false, scale, Threads::One);
                let add = head % rep.max(1) != 0;
                let dkh = MatMut::strided(&mut dk[kvh * hd..], len, hd, kvw);
                gemm(dkh, dsm.t(), qh, add, scale, Threads::One);
                let dvh = MatMut::strided(&mut dv[kvh * hd..], len, hd, kvw);
                gemm(dvh, pm.t(), doh, add, 1.0, Threads::One);
            }
        });
    (dq, dk, dv)
}

/// What the forward pass keeps for the backward pass: each part's prompts and keepings.
pub(super) struct Saved {
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

/// Two pools of one thread each, for the two parts of a batch.
fn part_pools() -> Option<&'static [rayon::ThreadPool; 2]> {
    static POOLS: std::sync::OnceLock<Option<[rayon::ThreadPool; 2]>> = std::sync::OnceLock::new();
    POOLS
        .get_or_init(|| {
            let one = || rayon::ThreadPoolBuilder::new().num_threads(1).build().ok();
            Some([one()?, one()?])
        })
        .as_ref()
}

/// `f` over each part's input, side by side on a thread each where rayon has more than one
/// thread (a pool each, so that neither part's operations interleave with the other's),
/// else one after the other. Either way each part runs on one thread, so its result does
/// not depend on which.
fn each_part<T: Send, R: Send>(inputs: Vec<T>, f: impl Fn(usize, T) -> R + Sync) -> Vec<R> {
    let pools = part_pools();
    if inputs.len() == 2
        && let Some([a, b]) = pools
        && rayon::current_num_threads() > 1
    {
        let mut it = inputs.into_iter();
        let (x, y) = (it.next(), it.next());
        let (x, y) = rayon::join(
            || x.map(|x| a.install(|| f(0, x))),
            || y.map(|y| b.install(|| f(1, y))),
        );
        return x.into_iter().chain(y).collect();
    }
    inputs
        .into_iter()
        .enumerate()
        .map(|(i, x)| match pools {
            Some([a, _]) => a.install(|| f(i, x)),
            None => f(i, x),
        })
        .collect()
}

/// The final normed hidden states at each prompt's last token, `(prompts, hidden)`, and what
/// [`backward`] needs. Prompts must be non-empty, their ids below the vocabulary size and
/// their lengths within the rotary tables, and the model must have a layer (the caller
/// checks). The batch runs in two parts (see [`parts`]), one thread each.
pub(super) fn forward(
    m: &ModelData<'_>,
    rope: &RopeTables,
    prompts: &[&[u32]],
    (adapters, per_prompt): (&[LoraData<'_>], &[Option<usize>]),
) -> (Vec<f32>, Saved) {
    let ranges = parts(prompts);
    let done = each_part(ranges.clone(), |_, r| {
        forward_part(m, rope, &prompts[r.clone()], (adapters, &per_prompt[r]))
    });
    let mut out = Vec::with_capacity(prompts.len() * m.sizes.hidden);
    let mut parts = Vec::with_capacity(done.len());
    for (r, (o, part)) in ranges.into_iter().zip(done) {
        out.extend_from_slice(&o);
        parts.push((r, part));
    }
    (out, Saved { parts })
}

thread_local! {
    static BACKWARD_PASSES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many backward passes of this training path the calling thread has run (the trainer
/// calls `backward` on its own thread): a test that a training step went through the tape
/// and not through a fallback.
pub fn backward_passes() -> u64 {
    BACKWARD_PASSES.with(std::cell::Cell::get)
}

/// The backward pass of [`forward`]: from `dh`, the gradient of its output, adds every
/// tensor's gradient into `grads` (those that have a buffer there; the input gradients are
/// computed throughout, as the adapters of every layer may need them). Each part adds into
/// its own buffers, and the second part's are then added to the first's.
pub(super) fn backward(
    m: &ModelData<'_>,
    (adapters, ix): (&[LoraData<'_>], &ModelIx),
    rope: &RopeTables,
    saved: &Saved,
    dh: &[f32],
    grads: &mut Grads,
) {
    BACKWARD_PASSES.with(|c| c.set(c.get() + 1));
    let h = m.sizes.hidden;
    let mut own = vec![std::mem::take(&mut grads.0)];
    for _ in 1..saved.parts.len() {
        let like = own[0].iter().map(|g| g.as_ref().map(|g| zeros(g.len())));
        own.push(like.collect());
    }
    let done = each_part(own, |i, g| {
        let (r, part) = &saved.parts[i];
        let mut g = Grads(g);
        let dh = &dh[r.start * h..r.end * h];
        backward_part(m, (adapters, ix), rope, part, dh, &mut g);
        g.0
    });
    let mut done = done.into_iter();
    grads.0 = done.next().unwrap_or_default();
    for other in done {
        for (a, b) in grads.0.iter_mut().zip(other) {
            if let (Some(a), Some(b)) = (a, b) {
                for (x, y) in a.iter_mut().zip(&b) {
                    *x += y;
                }
                recycle(b);
            }
        }
    }
}

/// [`backward`] over one part of the batch.
fn backward_part(
    m: &ModelData<'_>,
    (adapters, ix): (&[LoraData<'_>], &ModelIx),
    rope: &RopeTables,
    saved: &Part,
    dh: &[f32],
    grads: &mut Grads,
) {
    let rows = &saved.rows;
    let (h, nh, nkv, hd, iw) = m.sizes.dims();
    let (qw, kvw) = (nh * hd, nkv * hd);
    let total = rows.pos.len();
    let scale = 1.0 / (hd as f32).sqrt();
    let layers = m.layers.len();
    let mut dx = buffer(dh.len());
    let norm = grads.at(ix.norm);
    kernels::rms_rows_backward(
        &mut dx,
        norm,
        (&saved.last_x, m.norm, dh),
        m.sizes.eps,
        false,
    );
    for (i, (l, s)) in m.layers.iter().zip(&saved.layers).enumerate().rev() {
        let li = &ix.layers[i];
        let last = i + 1 == layers;
        let (q_pos, runs) = if last {
            (&rows.last_pos, &rows.last_runs)
        } else {
            (&rows.pos, &rows.token_runs)
        };
        let lo = (adapters, ix, runs);
        let nr = q_pos.len();
        // The MLP: x + down(silu(gate(n2)) · up(n2)).
        let mut act = buffer(nr * iw);
        gated(&mut act, (&s.g, &s.u, &s.sig));
        let mut d_act = buffer(nr * iw);
        input_grad(&mut d_act, &dx, l.down, (nr, h, iw), false);
        weight_grad(grads.at(li.modules[6]), &dx, &act, (nr, h, iw));
        lora_backward(&mut d_act, &act, &dx, (iw, h), lo, (i, 6), grads);
        // `act` becomes the gate projection's gradient.
        let mut du = buffer(nr * iw);
        swiglu_back((&mut act, &mut du), (&s.g, &s.u, &s.sig, &d_act));
        recycle(d_act);
        let (dg, du) = (act, du);
        let mut dn2 = buffer(nr * h);
        input_grad(&mut dn2, &dg, l.gate, (nr, iw, h), false);
        input_grad(&mut dn2, &du, l.up, (nr, iw, h), true);
        weight_grad(grads.at(li.modules[4]), &dg, &s.n2, (nr, iw, h));
        weight_grad(grads.at(li.modules[5]), &du, &s.n2, (nr, iw, h));
        lora_backward(&mut dn2, &s.n2, &dg, (h, iw), lo, (i, 4), grads);
        lora_backward(&mut dn2, &s.n2, &du, (h, iw), lo, (i, 5), grads);
        recycle(dg);
        recycle(du);
        let mut dmid = dx;
        let ln2 = grads.at(li.ln2);
        kernels::rms_rows_backward(&mut dmid, ln2, (&s.mid, l.ln2, &dn2), m.sizes.eps, true);
        recycle(dn2);
        // Attention: mid = x + o(attend(rope(q(n1)), rope(k(n1)), v(n1))).
        let mut d_att = buffer(nr * qw);
        input_grad(&mut d_att, &dmid, l.o, (nr, h, qw), false);
        weight_grad(grads.at(li.modules[3]), &dmid, &s.att, (nr, h, qw));
        lora_backward(&mut d_att, &s.att, &dmid, (qw, h), lo, (i, 3), grads);
        let qkv = (&s.q[..], &s.k[..], &s.v[..], &s.p[..]);
        let (mut dq, mut dk, dv) =
            attention_backward(&d_att, qkv, rows, last, (nh, nkv, hd), scale);
        recycle(d_att);
        kernels::rotate(&mut dq, rope, qw, |r| q_pos[r] as usize, -1.0);
        kernels::rotate(&mut dk, rope, kvw, |r| rows.pos[r] as usize, -1.0);
        for (b, d) in li.biases.iter().zip([&dq, &dk, &dv]) {
            add_column_sums(b.and_then(|b| grads.at(b)), d);
        }
        let nq = if last {
            Cow::Owned(gather(&s.n1, &rows.last, h))
        } else {
            Cow::Borrowed(&s.n1[..])
        };
        weight_grad(grads.at(li.modules[0]), &dq, &nq, (nr, qw, h));
        weight_grad(grads.at(li.modules[1]), &dk, &s.n1, (total, kvw, h));
        weight_grad(grads.at(li.modules[2]), &dv, &s.n1, (total, kvw, h));
        let lt = (adapters, ix, &rows.token_runs);
        let mut dn1 = buffer(total * h);
        input_grad(&mut dn1, &dk, l.k, (total, kvw, h), false);
        input_grad(&mut dn1, &dv, l.v, (total, kvw, h), true);
        lora_backward(&mut dn1, &s.n1, &dk, (h, kvw), lt, (i, 1), grads);
        lora_backward(&mut dn1, &s.n1, &dv, (h, kvw), lt, (i, 2), grads);
        let mut dx_in = if last {
            let mut dnq = buffer(nr * h);
            input_grad(&mut dnq, &dq, l.q, (nr, qw, h), false);
            lora_backward(&mut dnq, &nq, &dq, (h, qw), lo, (i, 0), grads);
            scatter_add(&mut dn1, &dnq, &rows.last, h);
            recycle(dnq);
            let mut dx_in = zeros(total * h);
            scatter_add(&mut dx_in, &dmid, &rows.last, h);
            recycle(dmid);
            dx_in
        } else {
            input_grad(&mut dn1, &dq, l.q, (total, qw, h), true);
            lora_backward(&mut dn1, &s.n1, &dq, (h, qw), lo, (i, 0), grads);
            dmid
        };
        let ln1 = grads.at(li.ln1);
        kernels::rms_rows_backward(&mut dx_in, ln1, (&s.x, l.ln1, &dn1), m.sizes.eps, true);
        for v in [dn1, dq, dk, dv] {
            recycle(v);
        }
        dx = dx_in;
    }
    if let Some(de) = grads.at(ix.embed) {
        for (row, &id) in dx.chunks_exact(h).zip(&saved.ids) {
            let id = id as usize;
            for (a, &b) in de[id * h..(id + 1) * h].iter_mut().zip(row) {
                *a += b;
            }
        }
    }
    recycle(dx);
}

/// A forward pass kept for its backward pass.
struct Tape {
    packed: Packed,
    saved: Saved,
    rope: RopeTables,
    /// The gradients of the latest backward pass, taken by each tensor's [`Attach`].
    grads: Mutex<Vec<Option<Tensor>>>,
}

impl Tape {
    /// Runs [`backward`] from the hidden states' gradient `dh`: one gradient per tensor of
    /// `packed` that tracks one.
    fn backward(&self, dh: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let dh = dh.flatten_all()?.to_vec1::<f32>()?;
        let tensors = &self.packed.tensors;
        let mut grads = Grads(
            tensors
                .iter()
                .map(|t| t.track_op().then(|| vec![0f32; t.elem_count()]))
                .collect(),
        );
        let ran = self.packed.read(|model, adapters, ix| {
            backward(
                model,
                (adapters, ix),
                &self.rope,
                &self.saved,
                &dh,
                &mut grads,
            );
        });
        if ran.is_none() {
            bail!("decoder-tape: a weight is no longer a contiguous f32 tensor on the CPU");
        }
        grads
            .0
            .into_iter()
            .zip(tensors)
            .map(|(g, t)| {
                g.map(|g| Tensor::from_vec(g, t.shape(), t.device()))
                    .transpose()
            })
            .collect()
    }
}

/// The hidden states `h` (from [`forward`], whose keepings are `saved`), passed through one
/// identity operation per tensor of `packed` that tracks a gradient, so that candle's
/// `backward` gives each its gradient (see the module's documentation). `h` itself when no
/// tensor tracks one.
pub(super) fn attach(h: Tensor, packed: Packed, saved: Saved, rope: RopeTables) -> Result<Tensor> {
    let order: Vec<usize> = (0..packed.tensors.len())
        .filter(|&i| packed.tensors[i].track_op())
        .collect();
    let tape = Arc::new(Tape {
        packed,
        saved,
        rope,
        grads: Mutex::new(Vec::new()),
    });
    let mut h = h;
    for (n, &index) in order.iter().enumerate() {
        let w = tape.packed.tensors[index].clone();
        let op = Attach {
            tape: Arc::clone(&tape),
            index,
            innermost: n == 0,
            outermost: n + 1 == order.len(),
        };
        h = h.apply_op2(&w, op)?;
    }
    Ok(h)
}

/// The identity on the hidden states, handing tensor `index` of the tape its gradient in
/// the backward pass; the outermost runs the tape's backward pass first (candle's backward
/// reaches it before the others, which lie beneath it).
struct Attach {
    tape: Arc<Tape>,
    index: usize,
    innermost: bool,
    outermost: bool,
}

impl CustomOp2 for Attach {
    fn name(&self) -> &'static str {
        "decoder-tape"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &TensorLayout,
        _s2: &CpuStorage,
        _l2: &TensorLayout,
    ) -> Result<(CpuStorage, Shape)> {
        let Some((a, b)) = l1.contiguous_offsets() else {
            bail!("{}: expected contiguous hidden states", self.name());
        };
        let h = s1.as_slice::<f32>()?;
        Ok((CpuStorage::F32(h[a..b].to_vec()), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _h: &Tensor,
        _w: &Tensor,
        _res: &Tensor,
        dres: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let mut grads = self.tape.grads.lock().map_err(|_| {
            candle_core::Error::Msg("decoder-tape: a backward pass panicked".into())
        })?;
        if self.outermost {
            *grads = self.tape.backward(dres)?;
        }
        let g = grads.get_mut(self.index).and_then(Option::take);
        Ok(((!self.innermost).then(|| dres.clone()), g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::lm::model::{Path, init_weights};
    use crate::policy::lm::{Decoder, LmConfig, Lora, Preset, Weights};
    use candle_core::{Device, Var};

    /// Held by the tests that use the pool, which is global: another test's steps would
    /// change what it holds.
    static TAPE_TESTS: Mutex<()> = Mutex::new(());

    /// The elements the pool holds.
    fn pooled() -> usize {
        POOL.lock().map_or(0, |p| p.iter().map(Vec::capacity).sum())
    }

    /// A batch splits into two runs of prompts with about half the rows each (the first
    /// run ends at the prompt that reaches half), and a single prompt stays whole.
    #[test]
    fn a_batch_splits_at_the_prompt_that_reaches_half_its_rows() {
        let split = |lens: &[usize]| {
            let prompts: Vec<Vec<u32>> = lens.iter().map(|&n| vec![0; n]).collect();
            let refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
            parts(&refs)
        };
        assert_eq!(split(&[5, 5]), vec![0..1, 1..2]);
        assert_eq!(split(&[4, 4, 4, 4]), vec![0..2, 2..4]);
        assert_eq!(split(&[10, 1, 1]), vec![0..1, 1..3]);
        assert_eq!(split(&[1, 1, 10]), vec![0..2, 2..3]);
        assert_eq!(split(&[3, 4, 2]), vec![0..2, 2..3]);
        assert_eq!(split(&[7]), vec![0..1]);
        assert_eq!(split(&[]), vec![0..0]);
    }

    /// A training step's hidden states and every gradient are the same bits whether rayon
    /// has one thread (the parts one after the other) or two (side by side).
    #[test]
    fn a_training_step_gives_the_same_bits_on_one_and_two_threads() {
        let mut cfg = LmConfig::preset(Preset::Tiny, 64);
        cfg.num_hidden_layers = 2;
        let init = init_weights(&cfg, 3, &Device::Cpu).expect("init");
        let prompts: Vec<Vec<u32>> = (0..5u32)
            .map(|i| (0..9 + 4 * i).map(|j| (i * 5 + j * 11) % 64).collect())
            .collect();
        let step = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
            pool.expect("pool").install(|| {
                let vars: Vec<Var> = init
                    .values()
                    .map(|t| Var::from_tensor(t).expect("var"))
                    .collect();
                let views = vars.iter().map(|v| v.as_tensor().clone());
                let weights: Weights = init.keys().cloned().zip(views).collect();
                let dec = Decoder::new(&cfg, &weights, std::path::Path::new("bits"));
                let dec = dec.expect("decoder");
                let h = dec.last_hidden(&prompts, 0, Path::Train, Lora::Base);
                let h = h.expect("forward");
                let loss = h.sqr().and_then(|x| x.sum_all()).expect("loss");
                let grads = loss.backward().expect("backward");
                let hv = h.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("h");
                let mut bits: Vec<u32> = hv.iter().map(|x| x.to_bits()).collect();
                // Every weight the hidden states read (not the output and value heads).
                let mut with = 0;
                for g in vars.iter().filter_map(|v| grads.get(v.as_tensor())) {
                    let g = g.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("g");
                    bits.extend(g.iter().map(|x| x.to_bits()));
                    with += 1;
                }
                assert!(with >= 2 + 2 * 12, "{with} tensors had a gradient");
                bits
            })
        };
        let _alone = TAPE_TESTS.lock();
        assert_eq!(step(1), step(2));
    }

    /// A training step (forward and backward) hands back to the pool what it took from
    /// it, so the pool, and the process with it, does not grow from step to step (it did,
    /// by one attention output per layer, when that came from outside the pool).
    #[test]
    fn training_steps_do_not_grow_the_pool() {
        let mut cfg = LmConfig::preset(Preset::Tiny, 64);
        cfg.num_hidden_layers = 2;
        let init = init_weights(&cfg, 1, &Device::Cpu).expect("init");
        let vars: Vec<Var> = init
            .values()
            .map(|t| Var::from_tensor(t).expect("var"))
            .collect();
        let views = vars.iter().map(|v| v.as_tensor().clone());
        let weights: Weights = init.keys().cloned().zip(views).collect();
        let dec = Decoder::new(&cfg, &weights, std::path::Path::new("mem")).expect("decoder");
        let prompts: Vec<Vec<u32>> = (0..6u32)
            .map(|i| (0..20 + i).map(|j| (i * 7 + j * 3) % 64).collect())
            .collect();
        let _alone = TAPE_TESTS.lock();
        // On one thread, so that which buffer each request gets does not depend on timing.
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build();
        let one = one.expect("pool");
        let mut sizes = Vec::new();
        release_buffers();
        for _ in 0..4 {
            let h = one.install(|| dec.last_hidden(&prompts, 0, Path::Train, Lora::Base));
            let h = h.expect("forward");
            let loss = h.sqr().and_then(|x| x.sum_all());
            let grads = one.install(|| loss.and_then(|l| l.backward()));
            let grads = grads.expect("backward");
            assert!(grads.get(vars[0].as_tensor()).is_some());
            drop((h, grads));
            sizes.push(pooled());
        }
        assert!(sizes[0] > 0, "the tape took nothing from the pool");
        assert_eq!(sizes[1], sizes[3], "the pool grew: {sizes:?}");
    }
}
