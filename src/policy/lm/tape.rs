//! The training path's decoder on the CPU: the forward pass of `engine.rs` over prompts
//! packed end to end (no padding; the last layer for each prompt's last token only),
//! keeping what the backward pass needs, and that backward pass written out by hand over
//! the same kind of buffers. Every product is one `gemm` into a buffer, weight gradients
//! included, instead of candle's autograd building a tensor per operation and a zero-filled
//! gradient per input.
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
use super::kernels::{self, RopeTables, Segments};
use super::mat::{Mat, MatMut, Threads, gemm, gemm_long, matmul_wt};

/// Buffers recycled between training steps. A step allocates the same buffers each time:
/// fresh ones cost a zero fill or the kernel's clearing of new pages (measured with `perf`
/// on `benches/update.rs`: 15% of a `tiny` step), recycled ones neither.
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
    /// Each row's keys: its prompt up to itself.
    segs: Vec<Segments>,
    /// Each prompt's last row, its position, and its keys (the whole prompt).
    last: Vec<usize>,
    last_pos: Vec<u32>,
    last_segs: Vec<Segments>,
    /// The adapter runs over every row and over the last rows.
    token_runs: Runs,
    last_runs: Runs,
}

impl Rows {
    fn new(prompts: &[&[u32]], per_prompt: &[Option<usize>]) -> Self {
        let mut spans = Vec::with_capacity(prompts.len());
        let (mut pos, mut segs) = (Vec::new(), Vec::new());
        let (mut last, mut last_pos, mut last_segs) = (Vec::new(), Vec::new(), Vec::new());
        let mut first = 0;
        for p in prompts {
            let n = p.len();
            spans.push((first, n));
            pos.extend(0..n as u32);
            segs.extend((1..=n).map(|k| [(0, 0), (first as u32, k as u32)]));
            last.push(first + n - 1);
            last_pos.push(n as u32 - 1);
            last_segs.push([(0, 0), (first as u32, n as u32)]);
            first += n;
        }
        Self {
            token_runs: runs(per_prompt, |i| prompts[i].len()),
            last_runs: runs(per_prompt, |_| 1),
            spans,
            pos,
            segs,
            last,
            last_pos,
            last_segs,
        }
    }
}

/// What one layer's backward pass reads: its input rows `x` (every row), their norm `n1`,
/// the rotated queries (the layer's query rows), rotated keys and values (every row), the
/// attention output, the residual after attention `mid`, its norm `n2`, the MLP's gate and
/// up projections and the gate's sigmoid (query rows).
struct LayerSaved {
    x: Vec<f32>,
    n1: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
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
            &mut s.x, &mut s.n1, &mut s.q, &mut s.k, &mut s.v, &mut s.att, &mut s.mid, &mut s.n2,
            &mut s.g, &mut s.u, &mut s.sig,
        ] {
            recycle(std::mem::take(v));
        }
    }
}

/// What the forward pass keeps for the backward pass.
pub(super) struct Saved {
    rows: Rows,
    /// The packed token ids.
    ids: Vec<u32>,
    layers: Vec<LayerSaved>,
    /// The last rows' residual stream before the final norm.
    last_x: Vec<f32>,
}

/// The final normed hidden states at each prompt's last token, `(prompts, hidden)`, and what
/// [`backward`] needs. Prompts must be non-empty, their ids below the vocabulary size and
/// their lengths within the rotary tables, and the model must have a layer (the caller
/// checks).
pub(super) fn forward(
    m: &ModelData<'_>,
    rope: &RopeTables,
    prompts: &[&[u32]],
    (adapters, per_prompt): (&[LoraData<'_>], &[Option<usize>]),
) -> (Vec<f32>, Saved) {
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
        let (segs, q_pos, runs, mut xq, nq) = if i + 1 == layers {
            let (x, n) = (gather(&x, &rows.last, h), gather(&n1, &rows.last, h));
            let r = &rows;
            (&r.last_segs, &r.last_pos, &r.last_runs, x, Cow::Owned(n))
        } else {
            (&rows.segs, &rows.pos, tr, copy(&x), Cow::Borrowed(&n1[..]))
        };
        let nr = segs.len();
        let mut q = buffer(nr * qw);
        project(&mut q, &nq, l.q, (nr, h, qw), false, (i, 0, runs));
        add_bias(&mut q, l.q_bias);
        kernels::rotate(&mut q, rope, qw, |r| q_pos[r] as usize, 1.0);
        drop(nq);
        let mut att = buffer(nr * qw);
        kernels::attend_into(&mut att, &q, &k, &v, segs, (nh, nkv, hd), scale);
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
    let saved = Saved {
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

/// Causal attention's backward pass over packed prompts, per prompt (one task each) and
/// query head: the scores and softmax `P` recomputed from the saved rotated queries and
/// keys, then `dV = Pᵀ dO`, `dP = dO Vᵀ`, `dS = P ∘ (dP − rowsum(P ∘ dP))`,
/// `dQ = scale · dS K`, `dK = scale · dSᵀ Q` (query heads that share a key/value head add
/// into it). `last`: the query rows are each prompt's last token alone. Returns
/// `(dq, dk, dv)` in the layouts of `q`, `k` and `v`.
fn attention_backward(
    d_att: &[f32],
    (q, k, v): (&[f32], &[f32], &[f32]),
    rows: &Rows,
    last: bool,
    (nh, nkv, hd): (usize, usize, usize),
    scale: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (qw, kvw) = (nh * hd, nkv * hd);
    let rep = nh / nkv.max(1);
    let total = rows.pos.len();
    // Per prompt: its first query row and query count, its first key row and length.
    let tasks: Vec<(usize, usize, usize, usize)> = rows
        .spans
        .iter()
        .enumerate()
        .map(|(p, &(first, len))| {
            if last {
                (p, 1, first, len)
            } else {
                (first, len, first, len)
            }
        })
        .collect();
    let q_rows = if last { rows.spans.len() } else { total };
    // Every element is written: each query head's block of dq, and the first query head of
    // each key/value head writes its block of dk and dv, the others add to it.
    let mut dq = buffer(q_rows * qw);
    let mut dk = buffer(total * kvw);
    let mut dv = buffer(total * kvw);
    let mut parts = Vec::with_capacity(tasks.len());
    let (mut rq, mut rk, mut rv) = (&mut dq[..], &mut dk[..], &mut dv[..]);
    for &(_, nq, _, len) in &tasks {
        let (a, tq) = std::mem::take(&mut rq).split_at_mut(nq * qw);
        let (b, tk) = std::mem::take(&mut rk).split_at_mut(len * kvw);
        let (c, tv) = std::mem::take(&mut rv).split_at_mut(len * kvw);
        parts.push((a, b, c));
        (rq, rk, rv) = (tq, tk, tv);
    }
    parts
        .into_par_iter()
        .zip(tasks.par_iter())
        .for_each(|((dq, dk, dv), &(q0, nq, k0, len))| {
            let mut p = vec![0f32; nq * len];
            let mut ds = vec![0f32; nq * len];
            for head in 0..nh {
                let kvh = head / rep.max(1);
                let qh = Mat::strided(&q[q0 * qw + head * hd..], nq, hd, qw);
                let kh = Mat::strided(&k[k0 * kvw + kvh * hd..], len, hd, kvw);
                let vh = Mat::strided(&v[k0 * kvw + kvh * hd..], len, hd, kvw);
                let doh = Mat::strided(&d_att[q0 * qw + head * hd..], nq, hd, qw);
                let pm = MatMut::new(&mut p, nq, len);
                gemm(pm, qh, kh.t(), false, scale, Threads::One);
                kernels::vectorised(|| {
                    for (i, row) in p.chunks_exact_mut(len).enumerate() {
                        // Query i sits at position len − nq + i and sees keys up to it.
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
                let (pm, dsm) = (Mat::new(&p, nq, len), Mat::new(&ds, nq, len));
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

/// The backward pass of [`forward`]: from `dh`, the gradient of its output, adds every
/// tensor's gradient into `grads` (those that have a buffer there; the input gradients are
/// computed throughout, as the adapters of every layer may need them).
pub(super) fn backward(
    m: &ModelData<'_>,
    (adapters, ix): (&[LoraData<'_>], &ModelIx),
    rope: &RopeTables,
    saved: &Saved,
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
        let qkv = (&s.q[..], &s.k[..], &s.v[..]);
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

    /// The elements the pool holds.
    fn pooled() -> usize {
        POOL.lock().map_or(0, |p| p.iter().map(Vec::capacity).sum())
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
        let mut sizes = Vec::new();
        for _ in 0..3 {
            let h = dec.last_hidden(&prompts, 0, Path::Train, Lora::Base);
            let h = h.expect("forward");
            let loss = h.sqr().and_then(|x| x.sum_all());
            let grads = loss.and_then(|l| l.backward()).expect("backward");
            assert!(grads.get(vars[0].as_tensor()).is_some());
            drop((h, grads));
            sizes.push(pooled());
        }
        assert!(sizes[0] > 0, "the tape took nothing from the pool");
        assert_eq!(sizes[1], sizes[2], "the pool grew: {sizes:?}");
    }
}
