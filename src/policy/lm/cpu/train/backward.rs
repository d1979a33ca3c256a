//! The training path's backward pass, written out by hand over the forward's saved buffers,
//! and [`attach`], which ties it into candle's autograd.

use super::*;

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
pub(in crate::policy::lm) struct Grads(Vec<Option<Vec<f32>>>);

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
    let total = rows.pos.len();
    let tasks = attention_tasks(rows, last);
    let q_rows = if last { rows.last.len() } else { total };
    // Every element is written: each query head's block of dq, and the first query head of
    // each key/value head writes its block of dk and dv, the others add to it. The shared
    // beginning's rows (see `Rows`): written by its own task, or zero in the last layer
    // (which has none); every prompt's gradient into them is added after, in prompt order.
    if rows.bands.iter().any(Option::is_some) {
        return banded_attention_backward(d_att, (q, k, v, p), rows, last, (nh, nkv, hd), scale);
    }
    let pre = rows.pre;
    let mut dq = buffer(q_rows * qw);
    let mut dk = buffer(total * kvw);
    let mut dv = buffer(total * kvw);
    let (dk_pre, dk_rest) = dk.split_at_mut(if last { pre * kvw } else { 0 });
    let (dv_pre, dv_rest) = dv.split_at_mut(if last { pre * kvw } else { 0 });
    dk_pre.fill(0.0);
    dv_pre.fill(0.0);
    let dqs = split_runs(&mut dq, tasks.iter().map(|t| t.nq * qw));
    let dks = split_runs(dk_rest, tasks.iter().map(|t| t.len * kvw));
    let dvs = split_runs(dv_rest, tasks.iter().map(|t| t.len * kvw));
    let mut ps = Vec::with_capacity(tasks.len());
    let mut rest = p;
    for t in &tasks {
        let (a, b) = rest.split_at(nh * t.nq * t.keys());
        ps.push(a);
        rest = b;
    }
    let shared: Vec<Option<(Vec<f32>, Vec<f32>)>> = dqs
        .into_par_iter()
        .zip(dks)
        .zip(dvs)
        .zip(ps)
        .zip(tasks.par_iter())
        .map(|((((dq, dk_own), dv_own), p), t)| {
            let len = t.keys();
            let (kt, vt) = (task_keys(k, t, kvw), task_keys(v, t, kvw));
            // The keys' gradients: into the prompt's own rows directly, or (with a shared
            // beginning) into one buffer of all its keys, split below.
            let mut both = (t.pre > 0).then(|| (buffer(len * kvw), buffer(len * kvw)));
            let (dk, dv): (&mut [f32], &mut [f32]) = match &mut both {
                Some((a, b)) => (a, b),
                None => (dk_own, dv_own),
            };
            task_backward(
                t,
                d_att,
                (q, &kt, &vt, p),
                (dq, dk, dv),
                (nh, nkv, hd),
                scale,
            );
            both.map(|(mut dk, mut dv)| {
                let cut = t.pre * kvw;
                dk_own.copy_from_slice(&dk[cut..]);
                dv_own.copy_from_slice(&dv[cut..]);
                dk.truncate(cut);
                dv.truncate(cut);
                (dk, dv)
            })
        })
        .collect();
    for (a, b) in shared.into_iter().flatten() {
        for (y, x) in dk[..pre * kvw].iter_mut().zip(&a) {
            *y += x;
        }
        for (y, x) in dv[..pre * kvw].iter_mut().zip(&b) {
            *y += x;
        }
        recycle(a);
        recycle(b);
    }
    (dq, dk, dv)
}

/// One task's attention backward ([`attention_backward`]'s products) into its query rows'
/// gradient `dq` and gradients over its own key list, `(dk, dv)` (`(keys, kv width)`).
#[allow(clippy::too_many_arguments)]
fn task_backward(
    t: &Task,
    d_att: &[f32],
    (q, kt, vt, p): (&[f32], &[f32], &[f32], &[f32]),
    (dq, dk, dv): (&mut [f32], &mut [f32], &mut [f32]),
    (nh, nkv, hd): (usize, usize, usize),
    scale: f32,
) {
    let (qw, kvw) = (nh * hd, nkv * hd);
    let rep = nh / nkv.max(1);
    let (q0, nq, len) = (t.q0, t.nq, t.keys());
    let mut ds = vec![0f32; nq * len];
    for (head, p) in p.chunks_exact(nq * len).enumerate() {
        let kvh = head / rep.max(1);
        let qh = Mat::strided(&q[q0 * qw + head * hd..], nq, hd, qw);
        let kh = Mat::strided(&kt[kvh * hd..], len, hd, kvw);
        let vh = Mat::strided(&vt[kvh * hd..], len, hd, kvw);
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
                let dot = simd::dot(pr, dr);
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
}

/// [`attention_backward`] where some prompts are read through a band ([`Band`]; no shared
/// beginning then): a banded prompt's tasks share keys, so each task's key gradients go to a
/// buffer of its own, added into the rows' after, in task order (the same sums on any thread
/// count).
fn banded_attention_backward(
    d_att: &[f32],
    (q, k, v, p): (&[f32], &[f32], &[f32], &[f32]),
    rows: &Rows,
    last: bool,
    (nh, nkv, hd): (usize, usize, usize),
    scale: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (qw, kvw) = (nh * hd, nkv * hd);
    let total = rows.pos.len();
    let tasks = attention_tasks(rows, last);
    let q_rows = if last { rows.last.len() } else { total };
    let mut dq = buffer(q_rows * qw);
    let dqs = split_runs(&mut dq, tasks.iter().map(|t| t.nq * qw));
    let mut ps = Vec::with_capacity(tasks.len());
    let mut rest = p;
    for t in &tasks {
        let (a, b) = rest.split_at(nh * t.nq * t.keys());
        ps.push(a);
        rest = b;
    }
    let each: Vec<(Vec<f32>, Vec<f32>)> = dqs
        .into_par_iter()
        .zip(ps)
        .zip(tasks.par_iter())
        .map(|((dq, p), t)| {
            let (kt, vt) = (task_keys(k, t, kvw), task_keys(v, t, kvw));
            let (mut dk, mut dv) = (buffer(t.keys() * kvw), buffer(t.keys() * kvw));
            task_backward(
                t,
                d_att,
                (q, &kt, &vt, p),
                (dq, &mut dk, &mut dv),
                (nh, nkv, hd),
                scale,
            );
            (dk, dv)
        })
        .collect();
    let (mut dk, mut dv) = (zeros(total * kvw), zeros(total * kvw));
    for (t, (a, b)) in tasks.iter().zip(each) {
        let runs = [(t.a0, 0, t.pre), (t.k0, t.pre, t.len)];
        for (row, at, n) in runs {
            let (to, from) = (row * kvw..(row + n) * kvw, at * kvw..(at + n) * kvw);
            for (y, x) in dk[to.clone()].iter_mut().zip(&a[from.clone()]) {
                *y += x;
            }
            for (y, x) in dv[to].iter_mut().zip(&b[from]) {
                *y += x;
            }
        }
        recycle(a);
        recycle(b);
    }
    (dq, dk, dv)
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
pub(in crate::policy::lm) fn backward(
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
pub(in crate::policy::lm) fn attach(
    h: Tensor,
    packed: Packed,
    saved: Saved,
    rope: RopeTables,
) -> Result<Tensor> {
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
