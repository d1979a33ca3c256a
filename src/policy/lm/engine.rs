//! The fast path's decoder on the CPU over plain buffers: the prompts packed end to end, the
//! weights read in place from their tensors (no copies, so an optimizer step on the
//! variables behind them is seen by the next call), and a handful of buffers per call
//! instead of a fresh tensor for every operation. The projections call the same `gemm`
//! candle's matmul uses, writing into the buffers (the output projection and the MLP's
//! down projection add into the residual stream in the same call, so there is no separate
//! add and no zero-filled output); RMS norm, rotary embedding, SwiGLU and attention are the
//! slice-level kernels of [`super::kernels`]. Same maths, step for step, as the other paths
//! (tested against them to 1e-5).

use candle_core::{CpuStorage, Storage, Tensor};
use rayon::prelude::*;
use std::ops::Deref;

use super::kernels::{self, RopeTables, Segments};

/// A tensor's f32 data on the CPU, held for reading (`G`: candle's storage read guard).
pub(super) struct Locked<G> {
    guard: G,
    range: (usize, usize),
}

/// `t`'s storage held for reading, if it is a contiguous f32 tensor on the CPU.
pub(super) fn lock(t: &Tensor) -> Option<Locked<impl Deref<Target = Storage> + '_>> {
    let (guard, layout) = t.storage_and_layout();
    let range = layout.contiguous_offsets()?;
    matches!(&*guard, Storage::Cpu(CpuStorage::F32(_))).then_some(Locked { guard, range })
}

impl<G: Deref<Target = Storage>> Locked<G> {
    /// The data.
    pub(super) fn data(&self) -> &[f32] {
        match &*self.guard {
            Storage::Cpu(CpuStorage::F32(v)) => &v[self.range.0..self.range.1],
            _ => &[],
        }
    }
}

/// One layer's weights (`(out, in)` matrices, Hugging Face layout).
pub(super) struct LayerData<'a> {
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
pub(super) struct LoraData<'a> {
    pub rank: usize,
    pub scale: f32,
    pub modules: Vec<[Option<(&'a [f32], &'a [f32])>; 7]>,
}

/// Runs of consecutive rows with the adapter they read: `(adapter index, rows)`.
type Runs = Vec<(Option<usize>, usize)>;

/// The runs of `per_prompt` (each prompt's adapter index) with prompt `i` taking `rows(i)`
/// rows.
fn runs(per_prompt: &[Option<usize>], rows: impl Fn(usize) -> usize) -> Runs {
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
fn lora_delta(
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
            matmul_wt(&mut ax, &x[start * inp..], wa, (n, inp, l.rank), false);
            matmul_wt_scaled(
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

/// The model's sizes and weights.
pub(super) struct ModelData<'a> {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    pub eps: f32,
    pub embed: &'a [f32],
    pub layers: Vec<LayerData<'a>>,
    pub norm: &'a [f32],
}

/// `dst (m × n) = [dst +] a (m × k) · wᵀ` with `w` an `(n, k)` weight, all row-major.
fn matmul_wt(dst: &mut [f32], a: &[f32], w: &[f32], mkn: (usize, usize, usize), add: bool) {
    matmul_wt_scaled(dst, a, w, mkn, add, 1.0);
}

/// `dst (m × n) = [dst +] scale · a (m × k) · wᵀ` with `w` an `(n, k)` weight, all row-major.
#[allow(unsafe_code)]
fn matmul_wt_scaled(
    dst: &mut [f32],
    a: &[f32],
    w: &[f32],
    (m, k, n): (usize, usize, usize),
    add: bool,
    scale: f32,
) {
    assert!(
        dst.len() >= m * n && a.len() >= m * k && w.len() >= n * k,
        "matmul: {} x {} by {} x {} into {}",
        m,
        k,
        n,
        k,
        dst.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    let threads = candle_core::utils::get_num_threads();
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the assertion above keeps every element gemm touches inside the slices:
    // `a` is read as m rows of k (row stride k, column stride 1), `w` as the k × n matrix
    // wᵀ (element (i, j) at j·k + i), and `dst` read (when `add`) and written as m rows of
    // n. `dst` is borrowed mutably, so it aliases neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            add,
            a.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            if add { 1.0 } else { 0.0 },
            scale,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// The fewest leading tokens worth sharing between prompts.
const MIN_SHARED: usize = 4;

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
fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias.filter(|b| !b.is_empty()) {
        x.par_chunks_mut(b.len()).with_min_len(64).for_each(|row| {
            for (v, &c) in row.iter_mut().zip(b) {
                *v += c;
            }
        });
    }
}

/// Copies rows `rows` (each `width` wide) of `x` into a new buffer, in that order.
fn gather(x: &[f32], rows: &[usize], width: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows.len() * width);
    for &r in rows {
        out.extend_from_slice(&x[r * width..(r + 1) * width]);
    }
    out
}

/// The final normed hidden states of packed prompts: at every token (`every_row`,
/// `(tokens, hidden)`) or at each prompt's last token only (`(prompts, hidden)`; the last
/// layer then computes those rows alone, their keys and values still covering every
/// token). Prompts must be non-empty, their ids below the vocabulary size and their
/// lengths within the rotary tables (the caller checks).
pub(super) fn packed_hidden(
    m: &ModelData<'_>,
    rope: &RopeTables,
    prompts: &[&[u32]],
    every_row: bool,
    (adapters, per_prompt): (&[LoraData<'_>], &[Option<usize>]),
) -> Vec<f32> {
    let lora = !adapters.is_empty() && per_prompt.iter().any(Option::is_some);
    let adapter_of = |i: usize| per_prompt.get(i).copied().flatten();
    // A prompt that begins like another one (with the same adapter) reads that prompt's
    // rows for those tokens and computes only the rest; not when every row is wanted.
    let shared = if every_row {
        vec![(0, 0); prompts.len()]
    } else {
        share_prefixes(prompts, adapter_of)
    };
    let own = |i: usize| prompts[i].len() - shared[i].1;
    let token_runs = runs(per_prompt, own);
    let last_runs = runs(per_prompt, |_| 1);
    // A projection of `x` (rows of `inp`) by module `j` of layer `i` into `y`, plus the
    // adapters' updates.
    let project = |y: &mut [f32],
                   x: &[f32],
                   w: &[f32],
                   (rows, inp, out): (usize, usize, usize),
                   add: bool,
                   (i, j, runs): (usize, usize, &Runs)| {
        matmul_wt(y, x, w, (rows, inp, out), add);
        if lora {
            lora_delta(y, x, (inp, out), adapters, runs, i, j);
        }
    };
    let (h, nh, nkv, hd) = (m.hidden, m.heads, m.kv_heads, m.head_dim);
    let (qw, kvw, iw) = (nh * hd, nkv * hd, m.intermediate);
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
    for (row, &id) in x.chunks_exact_mut(h).zip(
        prompts
            .iter()
            .zip(&shared)
            .flat_map(|(p, &(_, n_shared))| p[n_shared..].iter()),
    ) {
        let id = id as usize;
        row.copy_from_slice(&m.embed[id * h..(id + 1) * h]);
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let mut n = vec![0f32; total * h];
    let mut q = vec![0f32; total * qw];
    let mut k = vec![0f32; total * kvw];
    let mut v = vec![0f32; total * kvw];
    let mut g = vec![0f32; total * iw];
    let mut u = vec![0f32; total * iw];
    let layers = m.layers.len();
    for (i, l) in m.layers.iter().enumerate() {
        kernels::rms_rows(&mut n, &x, l.ln1, m.eps);
        let tr = &token_runs;
        project(&mut k, &n, l.k, (total, h, kvw), false, (i, 1, tr));
        add_bias(&mut k, l.k_bias);
        kernels::rotate(&mut k, rope, kvw, |r| pos[r] as usize, 1.0);
        project(&mut v, &n, l.v, (total, h, kvw), false, (i, 2, tr));
        add_bias(&mut v, l.v_bias);
        let (spans, q_pos, runs): (&[Segments], &[u32], &Runs) = if i + 1 == layers && !every_row {
            // The last layer for each prompt's last token only.
            x = gather(&x, &last_rows, h);
            n = gather(&n, &last_rows, h);
            (&spans_last, &last_pos, &last_runs)
        } else {
            (&spans_all, &pos, tr)
        };
        let rows = spans.len();
        let q = &mut q[..rows * qw];
        project(q, &n, l.q, (rows, h, qw), false, (i, 0, runs));
        add_bias(q, l.q_bias);
        kernels::rotate(q, rope, qw, |r| q_pos[r] as usize, 1.0);
        let att = kernels::attend(q, &k, &v, spans, (nh, nkv, hd), scale);
        project(&mut x, &att, l.o, (rows, qw, h), true, (i, 3, runs));
        let n = &mut n[..rows * h];
        kernels::rms_rows(n, &x, l.ln2, m.eps);
        let (g, u) = (&mut g[..rows * iw], &mut u[..rows * iw]);
        project(g, n, l.gate, (rows, h, iw), false, (i, 4, runs));
        project(u, n, l.up, (rows, h, iw), false, (i, 5, runs));
        kernels::swiglu_rows(g, u);
        project(&mut x, g, l.down, (rows, iw, h), true, (i, 6, runs));
    }
    let mut out = vec![0f32; x.len()];
    kernels::rms_rows(&mut out, &x, m.norm, m.eps);
    out
}
