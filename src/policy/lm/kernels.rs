//! Fused CPU kernels: with hand-written backward passes for the training path, and the
//! fast path's attention.
//!
//! candle's fused `rms_norm`, `softmax_last_dim` and `rope` record no backward pass, and the
//! differentiable compositions (`rms_norm_slow`, `softmax` after a mask, `rope_slow`, `silu`
//! then a product) run five to ten element-wise operations each way, each with its own
//! buffer: on `tiny` those took most of a training step, more than the matrix products. Each
//! operation here reads its inputs once and writes its output once, forward and backward:
//!
//! | op | forward | backward |
//! |---|---|---|
//! | [`rms_norm`] | `y = x / sqrt(mean(x²) + eps) · w` | `dx = r (w·dy − x̂ mean(x̂ · w·dy))`, `dw = Σ dy · x̂` |
//! | [`causal_softmax`] | `p = softmax_{j ≤ i}(s · scale)`, 0 above the diagonal | `ds = scale · p (dp − Σ p·dp)` |
//! | [`prefix_softmax`] | the same for one query per sequence over its first `len` keys | the same |
//! | [`rope`], [`rope_at`] | rotate-half rotary embedding, positions along `t` or given | the inverse rotation |
//! | [`swiglu`] | `silu(g) · u` | `dg = dy · u · σ(g)(1 + g(1 − σ(g)))`, `du = dy · silu(g)` |
//! | [`span_attention`] | each query row over a span of packed key rows (inference) | none |
//!
//! Work is split over rows with rayon; every output element is computed by one thread in a
//! fixed order, and the one cross-row sum (`dw`) adds fixed blocks of rows in order, so the
//! results are the same bits on any thread count. Inner loops run under `pulp`'s run-time
//! dispatch, so they compile for AVX-512 or AVX2 where the CPU has them, with [`exp`] in
//! place of libm's. The kernels take f32 tensors on the CPU; the model uses candle's
//! operations elsewhere.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Storage, Tensor, bail};
use rayon::prelude::*;
use std::sync::Arc;

/// `e^x` without a libm call, so that loops over it vectorise: `2^n · e^f` with
/// `n = round(x log₂e)`, `f = x − n ln 2` (Cody-Waite: `ln 2` in two parts, so `f` is exact
/// enough for large `x`) and `e^f` (`|f| ≤ ½ ln 2`) from its degree-7 Taylor polynomial.
/// Relative error below 4e-7 on `[-87, 88]` (tested); `x` is clamped to that range, so
/// `e^-∞` gives about 1e-38, not 0 (the kernels never exponentiate masked scores).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 = LN2_HI + LN2_LO, LN2_HI with few enough bits that n · LN2_HI is exact.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 · 2²³ rounds to the nearest integer in any SIMD width.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let f = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.0 / 5040.0;
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * f + c;
    }
    // 2^n from n's bits in `t` (its low mantissa bits hold n once ROUND's are taken away):
    // integer operations that vectorise, where `n as i32` (a saturating conversion) does
    // not.
    let n_bits = t.to_bits().wrapping_sub(ROUND.to_bits());
    p * f32::from_bits(n_bits.wrapping_add(127) << 23)
}

/// Runs `f` compiled for the widest vector instructions this CPU has (AVX-512, AVX2+FMA,
/// or none), chosen at run time, so the kernels' loops vectorise beyond the SSE2 baseline.
#[inline(always)]
pub(super) fn vectorised<R>(f: impl FnOnce() -> R) -> R {
    pulp::Arch::new().dispatch(f)
}

/// Rows per rayon task: enough work to pay for the task, small enough to split `tiny`'s rows
/// over two threads.
const MIN_ROWS: usize = 32;

fn slice<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    let data = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => bail!("{op}: expected a contiguous f32 tensor"),
    }
}

/// Runs `f` on the f32 data of `t` (made contiguous first), which must be on the CPU.
fn with_data<R>(t: &Tensor, op: &str, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
    let t = t.contiguous()?;
    let (s, l) = t.storage_and_layout();
    match &*s {
        Storage::Cpu(c) => f(slice(c, l, op)?),
        _ => bail!("{op}: the fused kernels run on the CPU"),
    }
}

/// [`with_data`] on three tensors at once.
fn with_data3<R>(
    (a, b, c): (&Tensor, &Tensor, &Tensor),
    op: &str,
    f: impl FnOnce(&[f32], &[f32], &[f32]) -> Result<R>,
) -> Result<R> {
    with_data(a, op, |a| {
        with_data(b, op, |b| with_data(c, op, |c| f(a, b, c)))
    })
}

fn last_dim(shape: &Shape, op: &str) -> Result<usize> {
    match shape.dims().last() {
        Some(&n) if n > 0 => Ok(n),
        _ => bail!("{op}: expected a tensor with a non-empty last dimension, got {shape:?}"),
    }
}

// ---------------------------------------------------------------- RMS norm

/// RMS norm over the last dimension with a learned scale `w` (`(hidden,)`), with a backward
/// pass for both `x` and `w`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    x.contiguous()?.apply_op2(&w.contiguous()?, RmsNorm { eps })
}

struct RmsNorm {
    eps: f32,
}

/// `1 / sqrt(mean(row²) + eps)`. The squares are summed in 16 lanes, then across them (a
/// single running sum would not vectorise).
#[inline(always)]
fn inv_rms(row: &[f32], eps: f32) -> f32 {
    let mut lanes = [0f32; 16];
    let blocks = row.chunks_exact(16);
    let rest = blocks.remainder();
    for block in blocks {
        for (s, &v) in lanes.iter_mut().zip(block) {
            *s += v * v;
        }
    }
    let ss = lanes.iter().sum::<f32>() + rest.iter().map(|v| v * v).sum::<f32>();
    1.0 / (ss / row.len() as f32 + eps).sqrt()
}

/// [`rms_norm`]'s forward over plain rows: each row of `x` (`w.len()` wide) normed and
/// scaled into the same row of `y`.
pub fn rms_rows(y: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
    let h = w.len().max(1);
    y.par_chunks_mut(h)
        .zip(x.par_chunks(h))
        .with_min_len(MIN_ROWS)
        .for_each(|(yr, xr)| {
            vectorised(|| {
                let r = inv_rms(xr, eps);
                for ((o, &v), &g) in yr.iter_mut().zip(xr).zip(w) {
                    *o = v * r * g;
                }
            })
        });
}

/// [`rms_norm`]'s backward over plain rows: the gradient of `x` written into `dx` (added to
/// it when `add`), and that of `w` added to `dw` when given, from `x`, `w` and the
/// gradient `dy` of the output. `dw` sums one partial per block of rows, in block order, so
/// it does not depend on the thread count.
pub fn rms_rows_backward(
    dx: &mut [f32],
    dw: Option<&mut [f32]>,
    (x, w, dy): (&[f32], &[f32], &[f32]),
    eps: f32,
    add: bool,
) {
    let h = w.len().max(1);
    let block = MIN_ROWS * h;
    let partial: Vec<Vec<f32>> = dx
        .par_chunks_mut(block)
        .zip(x.par_chunks(block).zip(dy.par_chunks(block)))
        .map(|(dxb, (xb, dyb))| {
            vectorised(|| {
                let mut dw = vec![0f32; h];
                for ((dxr, xr), dyr) in dxb.chunks_mut(h).zip(xb.chunks(h)).zip(dyb.chunks(h)) {
                    let r = inv_rms(xr, eps);
                    // mean(x̂ · w · dy)
                    let mut dot = 0f32;
                    for ((&v, &g), &d) in xr.iter().zip(w).zip(dyr) {
                        dot += v * r * g * d;
                    }
                    let c = dot / h as f32;
                    for (((o, &v), &g), (&d, acc)) in dxr
                        .iter_mut()
                        .zip(xr)
                        .zip(w)
                        .zip(dyr.iter().zip(dw.iter_mut()))
                    {
                        let xh = v * r;
                        let grad = r * (g * d - xh * c);
                        *o = if add { *o + grad } else { grad };
                        *acc += d * xh;
                    }
                }
                dw
            })
        })
        .collect();
    if let Some(dw) = dw {
        for p in partial {
            for (a, b) in dw.iter_mut().zip(p) {
                *a += b;
            }
        }
    }
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "fused-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = slice(s1, l1, self.name())?;
        let w = slice(s2, l2, self.name())?;
        let h = last_dim(l1.shape(), self.name())?;
        if w.len() != h {
            bail!("{}: scale of {} for rows of {h}", self.name(), w.len());
        }
        let mut y = vec![0f32; x.len()];
        rms_rows(&mut y, x, w, self.eps);
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let h = x.dim(candle_core::D::Minus1)?;
        let rows = x.elem_count() / h;
        let (dx, dw) = with_data3((x, w, dy), self.name(), |x, w, dy| {
            let mut dx = vec![0f32; x.len()];
            let mut dw = vec![0f32; h];
            rms_rows_backward(&mut dx, Some(&mut dw), (x, w, dy), self.eps, false);
            Ok((dx, dw))
        })?;
        debug_assert_eq!(dx.len(), rows * h);
        Ok((
            Some(Tensor::from_vec(dx, x.shape(), x.device())?),
            Some(Tensor::from_vec(dw, w.shape(), w.device())?),
        ))
    }
}

// ---------------------------------------------------------------- causal softmax

/// Softmax of `s · scale` over the last dimension of `(..., t, t)` score blocks, keeping
/// only `j ≤ i` in row `i` (causal attention): the rest is exactly 0.
pub fn causal_softmax(s: &Tensor, scale: f32) -> Result<Tensor> {
    s.contiguous()?.apply_op1(CausalSoftmax {
        scale,
        visible: Visible::Causal,
    })
}

/// Softmax of `s · scale` over the last dimension of `(b, heads, 1, t)` scores, keeping the
/// first `lens[i]` keys of sequence `i` (the query at each sequence's last token, over
/// right-padded keys): the rest is exactly 0.
pub fn prefix_softmax(s: &Tensor, scale: f32, lens: &[u32]) -> Result<Tensor> {
    let (b, heads, one, t) = s.dims4()?;
    if b != lens.len() || one != 1 || lens.iter().any(|&n| n == 0 || n as usize > t) {
        bail!(
            "prefix softmax: {:?} scores for lengths {lens:?}",
            s.shape()
        );
    }
    s.contiguous()?.apply_op1(CausalSoftmax {
        scale,
        visible: Visible::Prefix {
            lens: lens.into(),
            rows_per_seq: heads,
        },
    })
}

/// Which keys a score row sees.
#[derive(Clone)]
enum Visible {
    /// Row `i` of each `t × t` block sees keys `0..=i`.
    Causal,
    /// Row `r` sees the first `lens[r / rows_per_seq]` keys.
    Prefix {
        lens: Arc<[u32]>,
        rows_per_seq: usize,
    },
}

struct CausalSoftmax {
    scale: f32,
    visible: Visible,
}

impl CausalSoftmax {
    /// The row length, checked against the kind of mask.
    fn row_len(&self, shape: &Shape) -> Result<usize> {
        match (shape.dims(), &self.visible) {
            ([.., a, b], Visible::Causal) if a == b && *b > 0 => Ok(*b),
            ([.., b], Visible::Prefix { .. }) if *b > 0 => Ok(*b),
            _ => bail!("{}: scores of shape {shape:?}", self.name()),
        }
    }

    /// How many keys row `row` sees.
    #[inline(always)]
    fn seen(&self, row: usize, t: usize) -> usize {
        match &self.visible {
            Visible::Causal => row % t + 1,
            Visible::Prefix { lens, rows_per_seq } => lens[row / rows_per_seq] as usize,
        }
    }
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "fused-causal-softmax"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(s, l, self.name())?;
        let t = self.row_len(l.shape())?;
        let mut y = vec![0f32; x.len()];
        y.par_chunks_mut(t)
            .zip(x.par_chunks(t))
            .enumerate()
            .with_min_len(MIN_ROWS)
            .for_each(|(row, (yr, xr))| {
                vectorised(|| {
                    let n = self.seen(row, t);
                    let max = xr[..n]
                        .iter()
                        .fold(f32::NEG_INFINITY, |m, &v| m.max(v * self.scale));
                    for (o, &v) in yr[..n].iter_mut().zip(&xr[..n]) {
                        *o = exp(v * self.scale - max);
                    }
                    let sum: f32 = yr[..n].iter().sum();
                    let inv = 1.0 / sum;
                    for o in &mut yr[..n] {
                        *o *= inv;
                    }
                })
            });
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(&self, _s: &Tensor, p: &Tensor, dp: &Tensor) -> Result<Option<Tensor>> {
        let t = self.row_len(p.shape())?;
        let ds = with_data(p, self.name(), |p| {
            with_data(dp, self.name(), |dp| {
                let mut ds = vec![0f32; p.len()];
                ds.par_chunks_mut(t)
                    .zip(p.par_chunks(t).zip(dp.par_chunks(t)))
                    .enumerate()
                    .with_min_len(MIN_ROWS)
                    .for_each(|(row, (dr, (pr, gr)))| {
                        vectorised(|| {
                            let n = self.seen(row, t);
                            let dot: f32 = pr[..n].iter().zip(&gr[..n]).map(|(a, b)| a * b).sum();
                            for ((o, &pv), &gv) in dr[..n].iter_mut().zip(&pr[..n]).zip(&gr[..n]) {
                                *o = self.scale * pv * (gv - dot);
                            }
                        })
                    });
                Ok(ds)
            })
        })?;
        Ok(Some(Tensor::from_vec(ds, p.shape(), p.device())?))
    }
}

// ---------------------------------------------------------------- rotary embedding

/// Rotary tables shared by every [`rope`] call of a model: `cos` and `sin` of shape
/// `(positions, dim / 2)`, row-major.
#[derive(Debug, Clone)]
pub struct RopeTables {
    cos: Arc<[f32]>,
    sin: Arc<[f32]>,
    half: usize,
}

impl RopeTables {
    /// The tables from `(positions, dim / 2)` tensors.
    pub fn new(cos: &Tensor, sin: &Tensor) -> Result<Self> {
        let (_, half) = cos.dims2()?;
        Ok(Self {
            cos: cos.flatten_all()?.to_vec1::<f32>()?.into(),
            sin: sin.flatten_all()?.to_vec1::<f32>()?.into(),
            half,
        })
    }
}

/// Rotate-half rotary embedding of `x` in `(b, t, heads, dim)` layout, position `p` along
/// `t`: `y₁ = x₁ cos − x₂ sin`, `y₂ = x₂ cos + x₁ sin` (halves of `dim`).
pub fn rope(x: &Tensor, tables: &RopeTables) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Rope {
        tables: tables.clone(),
        inverse: false,
        positions: None,
    })
}

/// [`rope`] for rows `(n, heads, dim)` at the given positions, one per row (packed
/// sequences, or each sequence's last token).
pub fn rope_at(x: &Tensor, tables: &RopeTables, positions: &[u32]) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Rope {
        tables: tables.clone(),
        inverse: false,
        positions: Some(positions.into()),
    })
}

/// Rotates, in place, rows of `width` (heads of `2 · tables.half`), row `r` at position
/// `at(r)` (which must be in the tables), by −θ when `sign` is −1. One task per row: its
/// heads share the position's angles.
pub fn rotate(
    x: &mut [f32],
    tables: &RopeTables,
    width: usize,
    at: impl Fn(usize) -> usize + Sync,
    sign: f32,
) {
    let half = tables.half;
    let dim = 2 * half;
    if width == 0 || dim == 0 {
        return;
    }
    x.par_chunks_mut(width)
        .enumerate()
        .with_min_len(MIN_ROWS)
        .for_each(|(r, xr)| {
            vectorised(|| {
                let p = at(r);
                let cos = &tables.cos[p * half..(p + 1) * half];
                let sin = &tables.sin[p * half..(p + 1) * half];
                for xh in xr.chunks_mut(dim) {
                    let (x1, x2) = xh.split_at_mut(half);
                    for i in 0..half {
                        let (c, s) = (cos[i], sign * sin[i]);
                        let (a, b) = (x1[i], x2[i]);
                        x1[i] = a * c - b * s;
                        x2[i] = b * c + a * s;
                    }
                }
            })
        });
}

impl RopeTables {
    /// The number of positions the tables cover.
    pub fn positions(&self) -> usize {
        self.cos.len() / self.half.max(1)
    }
}

struct Rope {
    tables: RopeTables,
    /// Rotate by −θ (the backward pass).
    inverse: bool,
    /// Each row's position, for `(n, heads, dim)`; `None`: the position along `t` of
    /// `(b, t, heads, dim)`.
    positions: Option<Arc<[u32]>>,
}

impl CustomOp1 for Rope {
    fn name(&self) -> &'static str {
        "fused-rope"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(s, l, self.name())?;
        let (t, heads, dim) = match (l.shape().dims(), &self.positions) {
            ([_, t, heads, dim], None) => (*t, *heads, *dim),
            ([n, heads, dim], Some(p)) if p.len() == *n => (1, *heads, *dim),
            _ => bail!(
                "{}: expected (b, t, heads, dim), or (n, heads, dim) with n positions; got {:?}",
                self.name(),
                l.shape()
            ),
        };
        let half = self.tables.half;
        let max = self.tables.cos.len() / half.max(1);
        let furthest = match &self.positions {
            Some(p) => p.iter().map(|&p| p as usize + 1).max().unwrap_or(0),
            None => t,
        };
        if dim != 2 * half || furthest > max {
            bail!(
                "{}: head dim {dim} and {furthest} positions for tables of {max} positions x {half}",
                self.name(),
            );
        }
        let sign = if self.inverse { -1.0 } else { 1.0 };
        let mut y = x.to_vec();
        let at = |bt: usize| match &self.positions {
            Some(p) => p[bt] as usize,
            None => bt % t,
        };
        rotate(&mut y, &self.tables, heads * dim, at, sign);
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(&self, _x: &Tensor, _y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        let back = Rope {
            tables: self.tables.clone(),
            inverse: !self.inverse,
            positions: self.positions.clone(),
        };
        Ok(Some(dy.contiguous()?.apply_op1_no_bwd(&back)?))
    }
}

// ---------------------------------------------------------------- attention (inference)

/// Attention for inference over packed rows, no backward: query row `r` of `q`
/// (`(rows, heads, dim)`) attends to the key/value rows `spans[r].0 .. spans[r].0 +
/// spans[r].1` of `k` and `v` (`(rows_k, kv_heads, dim)`, query head `h` reading key/value
/// head `h / (heads / kv_heads)`). Causal attention over packed prompts gives each row the
/// span from its prompt's first token to itself; a prompt's last token alone sees its whole
/// prompt. Scores, softmax (with [`exp`]) and the weighted sum stay in registers and a
/// `span`-long buffer, one thread per block of query rows.
pub fn span_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    spans: &[(u32, u32)],
    scale: f32,
) -> Result<Tensor> {
    const OP: &str = "span-attention";
    let (rows, heads, dim) = q.dims3()?;
    let (rows_k, kv_heads, dim_k) = k.dims3()?;
    if v.dims() != k.dims() || dim_k != dim || kv_heads == 0 || heads % kv_heads != 0 {
        bail!(
            "{OP}: q {:?}, k {:?}, v {:?}",
            q.shape(),
            k.shape(),
            v.shape()
        );
    }
    if spans.len() != rows
        || spans
            .iter()
            .any(|&(o, n)| n == 0 || (o + n) as usize > rows_k)
    {
        bail!(
            "{OP}: {} spans for {rows} rows over {rows_k} keys",
            spans.len()
        );
    }
    let segments: Vec<Segments> = spans.iter().map(|&own| [(0, 0), own]).collect();
    let out = with_data3((q, k, v), OP, |q, k, v| {
        Ok(attend(q, k, v, &segments, (heads, kv_heads, dim), scale))
    })?;
    Tensor::from_vec(out, (rows, heads, dim), q.device())
}

/// The key rows a query row attends to: two runs `(first, len)`, a shared prefix (possibly
/// empty) and the row's own prompt up to itself, in that order.
pub type Segments = [(u32, u32); 2];

/// [`span_attention`] over plain rows, each query row attending to the key rows of its
/// [`Segments`] (a prompt whose first tokens are another prompt's reads that prompt's rows
/// for them): `q` `(segments.len(), heads, dim)`, `k` and `v` `(rows_k, kv_heads, dim)`,
/// every segment within the key rows, at least one key per row, and `heads` a multiple of
/// `kv_heads` (the caller checks); returns `(segments.len(), heads, dim)`.
pub fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    segments: &[Segments],
    sizes: (usize, usize, usize),
    scale: f32,
) -> Vec<f32> {
    let mut out = vec![0f32; segments.len() * sizes.0 * sizes.2];
    attend_into(&mut out, q, k, v, segments, sizes, scale);
    out
}

/// [`attend`] into `out` (`(segments.len(), heads, dim)`; every element is written).
pub fn attend_into(
    out: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    segments: &[Segments],
    (heads, kv_heads, dim): (usize, usize, usize),
    scale: f32,
) {
    let rows = segments.len();
    let rows_k = k.len() / (kv_heads * dim).max(1);
    let group = heads / kv_heads.max(1);
    // Keys transposed to `(kv_heads, dim, stride)`: a query's scores are then `dim`
    // multiply-adds over contiguous runs of keys, no sums across lanes. Each run is padded
    // with zeros to whole blocks of `KEYS`, so the score loop has no remainder.
    let stride = rows_k + KEYS;
    let mut kt = vec![0f32; kv_heads * dim * stride];
    kt.par_chunks_mut(stride).enumerate().for_each(|(hd, col)| {
        let (kvh, d) = (hd / dim, hd % dim);
        for (r, c) in col[..rows_k].iter_mut().enumerate() {
            *c = k[(r * kv_heads + kvh) * dim + d];
        }
    });
    let k = &kt[..];
    let width = heads * dim;
    let out = &mut out[..rows * width];
    // Runs of up to GROUP consecutive rows of one prompt (the same shared prefix, the same
    // first own row, one more key each) are computed together where a grouped kernel is
    // compiled (head sizes 32 and 64): each key and value row is loaded once for all of them.
    let most = if matches!(dim, 32 | 64) { GROUP } else { 1 };
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut r = 0;
    while r < rows {
        let [pre, (first, len)] = segments[r];
        let mut n = 1;
        while n < most && r + n < rows && segments[r + n] == [pre, (first, len + n as u32)] {
            n += 1;
        }
        groups.push((r, n));
        r += n;
    }
    let mut parts: Vec<&mut [f32]> = Vec::with_capacity(groups.len());
    let mut rest = &mut out[..];
    for &(_, n) in &groups {
        let (part, tail) = rest.split_at_mut(n * width);
        parts.push(part);
        rest = tail;
    }
    parts
        .into_par_iter()
        .zip(groups.par_iter())
        .with_min_len(2)
        .for_each(|(out, &(r, n))| {
            let row = AttendRow {
                out,
                q: &q[r * width..(r + n) * width],
                k,
                v,
                segs: segments[r].map(|(f, n)| (f as usize, n as usize)),
                stride,
                heads,
                group,
                kv_heads,
                dim,
                scale,
            };
            let arch = pulp::Arch::new();
            match (dim, n) {
                (32, 1) => arch.dispatch(Attend::<32>(row)),
                (64, 1) => arch.dispatch(Attend::<64>(row)),
                (128, _) => arch.dispatch(Attend::<128>(row)),
                (32, _) => arch.dispatch(AttendGroup::<32>(row, n)),
                (64, _) => arch.dispatch(AttendGroup::<64>(row, n)),
                _ => arch.dispatch(row),
            }
        });
}

/// Keys per block of [`span_attention`]'s score loop (one AVX-512 register).
const KEYS: usize = 16;

/// Query rows computed together by [`AttendGroup`].
const GROUP: usize = 4;

/// One query row of [`span_attention`], every head. A `pulp` operation rather than a
/// closure, so that it is compiled inside the dispatcher's AVX-512/AVX2 function.
struct AttendRow<'a> {
    out: &'a mut [f32],
    q: &'a [f32],
    /// Keys transposed, `(kv_heads, dim, stride)`, zero past the last key row.
    k: &'a [f32],
    v: &'a [f32],
    /// The key rows read, as `(first, len)` runs.
    segs: [(usize, usize); 2],
    stride: usize,
    heads: usize,
    group: usize,
    kv_heads: usize,
    dim: usize,
    scale: f32,
}

/// Any head size.
impl pulp::WithSimd for AttendRow<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let (stride, dim, scale) = (self.stride, self.dim, self.scale);
        let (group, kv_heads, segs) = (self.group, self.kv_heads, self.segs);
        let Self { out, q, k, v, .. } = self;
        let total: usize = segs.iter().map(|s| s.1).sum();
        let mut p = vec![0f32; total];
        for h in 0..self.heads {
            let kvh = h / group;
            let qh = &q[h * dim..(h + 1) * dim];
            p.fill(0.0);
            let mut off = 0;
            for &(first, len) in &segs {
                let ps = &mut p[off..off + len];
                for (d, &qd) in qh.iter().enumerate() {
                    let at = (kvh * dim + d) * stride + first;
                    let qd = qd * scale;
                    for (pj, &kj) in ps.iter_mut().zip(&k[at..at + len]) {
                        *pj += qd * kj;
                    }
                }
                off += len;
            }
            let max = p.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            for pj in p.iter_mut() {
                *pj = exp(*pj - max);
            }
            let inv = 1.0 / p.iter().sum::<f32>();
            let oh = &mut out[h * dim..(h + 1) * dim];
            oh.fill(0.0);
            let rows = segs.iter().flat_map(|&(first, len)| first..first + len);
            for (r, &pj) in rows.zip(&p) {
                let at = (r * kv_heads + kvh) * dim;
                let w = pj * inv;
                for (o, &x) in oh.iter_mut().zip(&v[at..at + dim]) {
                    *o += w * x;
                }
            }
        }
    }
}

/// Softmax in place of the scores `p` (whole blocks of [`KEYS`]) but its `pads` (left at
/// zero), returning `1 / Σ e^(s - max)`. The maximum and the sum are taken lane by lane over
/// the blocks, then across the lanes, so both vectorise (a running scalar maximum or sum
/// does not).
#[inline(always)]
fn softmax_blocks(p: &mut [f32], pads: &[std::ops::Range<usize>]) -> f32 {
    for r in pads {
        p[r.clone()].fill(f32::NEG_INFINITY);
    }
    let mut lanes = [f32::NEG_INFINITY; KEYS];
    for block in p.chunks_exact(KEYS) {
        for (m, &x) in lanes.iter_mut().zip(block) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = lanes.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    for x in p.iter_mut() {
        *x = exp(*x - max);
    }
    for r in pads {
        p[r.clone()].fill(0.0);
    }
    let mut sums = [0f32; KEYS];
    for block in p.chunks_exact(KEYS) {
        for (s, &x) in sums.iter_mut().zip(block) {
            *s += x;
        }
    }
    1.0 / sums.iter().sum::<f32>()
}

/// [`AttendRow`] for a head size known at compile time: scores a block of [`KEYS`] keys at a
/// time with four independent sums over the head dimension, and the weighted sum of values
/// in two register-held accumulators (even and odd keys), so neither loop waits on one
/// chain of multiply-adds.
struct Attend<'a, const D: usize>(AttendRow<'a>);

impl<const D: usize> pulp::WithSimd for Attend<'_, D> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let AttendRow {
            out,
            q,
            k,
            v,
            segs,
            stride,
            heads,
            group,
            kv_heads,
            scale,
            ..
        } = self.0;
        // Each segment's scores in whole blocks: [segment 0 | segment 1].
        let blocks = segs.map(|(_, len)| len.div_ceil(KEYS));
        let offs = [0, blocks[0] * KEYS];
        let pads = [
            segs[0].1..offs[1],
            offs[1] + segs[1].1..(blocks[0] + blocks[1]) * KEYS,
        ];
        let mut p = vec![0f32; (blocks[0] + blocks[1]) * KEYS];
        // Fixed-size views, so that the loops unroll and the sums stay in registers.
        let block = |s: &[f32], at: usize| -> [f32; KEYS] {
            let mut b = [0f32; KEYS];
            b.copy_from_slice(&s[at..at + KEYS]);
            b
        };
        for h in 0..heads {
            let kvh = h / group;
            let mut qh = [0f32; D];
            qh.copy_from_slice(&q[h * D..(h + 1) * D]);
            let kh = &k[kvh * D * stride..(kvh + 1) * D * stride];
            for (s, &(first, _)) in segs.iter().enumerate() {
                let ps = &mut p[offs[s]..offs[s] + blocks[s] * KEYS];
                for (b, pb) in ps.chunks_exact_mut(KEYS).enumerate() {
                    let at = first + b * KEYS;
                    let mut acc = [[0f32; KEYS]; 4];
                    for d in (0..D).step_by(4) {
                        for (u, a) in acc.iter_mut().enumerate() {
                            let qd = qh[d + u];
                            let row = block(kh, (d + u) * stride + at);
                            for l in 0..KEYS {
                                a[l] = qd.mul_add(row[l], a[l]);
                            }
                        }
                    }
                    for (l, x) in pb.iter_mut().enumerate() {
                        *x = ((acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l])) * scale;
                    }
                }
            }
            let inv = softmax_blocks(&mut p, &pads);
            let mut even = [0f32; D];
            let mut odd = [0f32; D];
            let vrow = |r: usize| -> [f32; D] {
                let at = (r * kv_heads + kvh) * D;
                let mut x = [0f32; D];
                x.copy_from_slice(&v[at..at + D]);
                x
            };
            for (s, &(first, len)) in segs.iter().enumerate() {
                let ps = &p[offs[s]..offs[s] + len];
                let mut j = 0;
                while j + 1 < len {
                    let (w0, w1) = (ps[j], ps[j + 1]);
                    let (x0, x1) = (vrow(first + j), vrow(first + j + 1));
                    for i in 0..D {
                        even[i] = w0.mul_add(x0[i], even[i]);
                        odd[i] = w1.mul_add(x1[i], odd[i]);
                    }
                    j += 2;
                }
                if j < len {
                    let (w, x) = (ps[j], vrow(first + j));
                    for i in 0..D {
                        even[i] = w.mul_add(x[i], even[i]);
                    }
                }
            }
            for ((o, &e), &d) in out[h * D..(h + 1) * D].iter_mut().zip(&even).zip(&odd) {
                *o = (e + d) * inv;
            }
        }
    }
}

/// [`Attend`] for `n` (at most [`GROUP`]) consecutive query rows of one prompt: row `i`
/// reads the segments of the first row with `i` more own keys. Scores and weighted sums run
/// over the last row's keys for all rows at once (each key block and value row loaded once,
/// one independent sum per row); a row's keys past its own are masked in its softmax.
struct AttendGroup<'a, const D: usize>(AttendRow<'a>, usize);

impl<const D: usize> pulp::WithSimd for AttendGroup<'_, D> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let AttendGroup(row, n) = self;
        let (k, v, stride, scale) = (row.k, row.v, row.stride, row.scale);
        let (heads, group, kv_heads) = (row.heads, row.group, row.kv_heads);
        let (out, q, segs) = (row.out, row.q, row.segs);
        let n = n.min(GROUP);
        let lens: [usize; GROUP] = std::array::from_fn(|i| segs[1].1 + i.min(n - 1));
        // The last row's segments, each in whole blocks: [segment 0 | segment 1].
        let segs = [segs[0], (segs[1].0, lens[n - 1])];
        let blocks = segs.map(|(_, len)| len.div_ceil(KEYS));
        let offs = [0, blocks[0] * KEYS];
        let width = (blocks[0] + blocks[1]) * KEYS;
        let mut p = vec![0f32; GROUP * width];
        let block = |s: &[f32], at: usize| -> [f32; KEYS] {
            let mut b = [0f32; KEYS];
            b.copy_from_slice(&s[at..at + KEYS]);
            b
        };
        for h in 0..heads {
            let kvh = h / group;
            let mut qs = [[0f32; D]; GROUP];
            for (i, qi) in qs.iter_mut().enumerate().take(n) {
                qi.copy_from_slice(&q[(i * heads + h) * D..(i * heads + h + 1) * D]);
            }
            let kh = &k[kvh * D * stride..(kvh + 1) * D * stride];
            for (s, &(first, _)) in segs.iter().enumerate() {
                for b in 0..blocks[s] {
                    let at = first + b * KEYS;
                    let mut acc = [[0f32; KEYS]; GROUP];
                    for d in 0..D {
                        let row = block(kh, d * stride + at);
                        for (a, qi) in acc.iter_mut().zip(&qs) {
                            let qd = qi[d];
                            for l in 0..KEYS {
                                a[l] = qd.mul_add(row[l], a[l]);
                            }
                        }
                    }
                    for (i, a) in acc.iter().enumerate().take(n) {
                        let at = i * width + offs[s] + b * KEYS;
                        for (x, &y) in p[at..at + KEYS].iter_mut().zip(a) {
                            *x = y * scale;
                        }
                    }
                }
            }
            let mut inv = [0f32; GROUP];
            for (i, w) in inv.iter_mut().enumerate().take(n) {
                let pads = [segs[0].1..offs[1], offs[1] + lens[i]..width];
                *w = softmax_blocks(&mut p[i * width..(i + 1) * width], &pads);
            }
            let mut acc = [[0f32; D]; GROUP];
            for (s, &(first, len)) in segs.iter().enumerate() {
                for j in 0..len {
                    let at = ((first + j) * kv_heads + kvh) * D;
                    let mut x = [0f32; D];
                    x.copy_from_slice(&v[at..at + D]);
                    for (i, a) in acc.iter_mut().enumerate() {
                        let w = p[i * width + offs[s] + j];
                        for t in 0..D {
                            a[t] = w.mul_add(x[t], a[t]);
                        }
                    }
                }
            }
            for (i, a) in acc.iter().enumerate().take(n) {
                let o = &mut out[(i * heads + h) * D..(i * heads + h + 1) * D];
                for (o, &x) in o.iter_mut().zip(a) {
                    *o = x * inv[i];
                }
            }
        }
    }
}

// ---------------------------------------------------------------- SwiGLU

/// `silu(g) · u`, the gated MLP's activation, with a backward pass for both inputs.
pub fn swiglu(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    g.contiguous()?.apply_op2(&u.contiguous()?, SwiGlu)
}

struct SwiGlu;

/// [`swiglu`]'s forward in place: `g ← silu(g) · u`.
pub fn swiglu_rows(g: &mut [f32], u: &[f32]) {
    g.par_chunks_mut(MIN_ELEMS)
        .zip(u.par_chunks(MIN_ELEMS))
        .for_each(|(gc, uc)| {
            vectorised(|| {
                for (a, &b) in gc.iter_mut().zip(uc) {
                    *a = *a / (1.0 + exp(-*a)) * b;
                }
            })
        });
}

/// [`swiglu`]'s backward over plain rows: the gradients of `g` and `u` written into `dg`
/// and `du` from `g`, `u` and the gradient `dy` of the output (`dg` may be `dy`'s buffer
/// reused: pass a copy then).
pub fn swiglu_backward_rows(dg: &mut [f32], du: &mut [f32], (g, u, dy): (&[f32], &[f32], &[f32])) {
    dg.par_chunks_mut(MIN_ELEMS)
        .zip(du.par_chunks_mut(MIN_ELEMS))
        .zip(
            g.par_chunks(MIN_ELEMS)
                .zip(u.par_chunks(MIN_ELEMS).zip(dy.par_chunks(MIN_ELEMS))),
        )
        .for_each(|((dgc, duc), (gc, (uc, dyc)))| {
            vectorised(|| {
                for i in 0..gc.len() {
                    let a = gc[i];
                    let s = 1.0 / (1.0 + exp(-a));
                    dgc[i] = dyc[i] * uc[i] * s * (1.0 + a * (1.0 - s));
                    duc[i] = dyc[i] * a * s;
                }
            })
        });
}

/// Elements per rayon task.
pub(super) const MIN_ELEMS: usize = 4096;

impl CustomOp2 for SwiGlu {
    fn name(&self) -> &'static str {
        "fused-swiglu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = slice(s1, l1, self.name())?;
        let u = slice(s2, l2, self.name())?;
        if l1.shape() != l2.shape() {
            bail!(
                "{}: {:?} and {:?} differ",
                self.name(),
                l1.shape(),
                l2.shape()
            );
        }
        let mut y = g.to_vec();
        swiglu_rows(&mut y, u);
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        g: &Tensor,
        u: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dg, du) = with_data3((g, u, dy), self.name(), |g, u, dy| {
            let mut dg = vec![0f32; g.len()];
            let mut du = vec![0f32; g.len()];
            swiglu_backward_rows(&mut dg, &mut du, (g, u, dy));
            Ok((dg, du))
        })?;
        Ok((
            Some(Tensor::from_vec(dg, g.shape(), g.device())?),
            Some(Tensor::from_vec(du, u.shape(), u.device())?),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{D, Device, Var};

    fn random(shape: &[usize], seed: u64) -> Tensor {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.random::<f32>() * 4.0 - 2.0).collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    /// Forward outputs and the gradients of `Σ y · r` for every input, through `f`.
    fn run(
        inputs: &[Tensor],
        r: &Tensor,
        f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    ) -> (Tensor, Vec<Tensor>) {
        let vars: Vec<Var> = inputs
            .iter()
            .map(|t| Var::from_tensor(t).unwrap())
            .collect();
        let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let y = f(&ts).unwrap();
        let loss = (&y * r).unwrap().sum_all().unwrap();
        let g = loss.backward().unwrap();
        let grads = ts.iter().map(|t| g.get(t).unwrap().clone()).collect();
        (y, grads)
    }

    fn agree(
        inputs: &[Tensor],
        fused: &dyn Fn(&[Tensor]) -> Result<Tensor>,
        composed: &dyn Fn(&[Tensor]) -> Result<Tensor>,
        tol: f32,
    ) {
        let probe = fused(inputs).unwrap();
        let r = random(probe.dims(), 99);
        let (ya, ga) = run(inputs, &r, fused);
        let (yb, gb) = run(inputs, &r, composed);
        assert!(
            max_diff(&ya, &yb) < tol,
            "forward differs by {}",
            max_diff(&ya, &yb)
        );
        for (i, (a, b)) in ga.iter().zip(&gb).enumerate() {
            let d = max_diff(a, b);
            assert!(d < tol, "gradient of input {i} differs by {d}");
            let scale = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap();
            assert!(
                scale.to_scalar::<f32>().unwrap() > 0.0,
                "input {i}: zero gradient"
            );
        }
    }

    #[test]
    fn rms_norm_matches_the_composed_norm_and_its_gradients() {
        let x = random(&[3, 70, 48], 1);
        let w = random(&[48], 2);
        agree(
            &[x, w],
            &|t| rms_norm(&t[0], &t[1], 1e-6),
            &|t| candle_nn::ops::rms_norm_slow(&t[0], &t[1], 1e-6),
            1e-4,
        );
    }

    #[test]
    fn causal_softmax_matches_a_masked_softmax_and_its_gradient() {
        let t = 9;
        let s = random(&[2, 3, t, t], 3);
        let mask: Vec<f32> = (0..t * t)
            .map(|k| {
                if k % t > k / t {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let mask = Tensor::from_vec(mask, (t, t), &Device::Cpu).unwrap();
        agree(
            &[s],
            &|x| causal_softmax(&x[0], 0.35),
            &|x| candle_nn::ops::softmax(&(&x[0] * 0.35)?.broadcast_add(&mask)?, D::Minus1),
            1e-5,
        );
    }

    #[test]
    fn rope_matches_rope_slow_and_its_gradient() {
        let (b, t, h, d) = (2, 11, 3, 8);
        let x = random(&[b, t, h, d], 4);
        let cos = random(&[16, d / 2], 5);
        let sin = random(&[16, d / 2], 6);
        let tables = RopeTables::new(&cos, &sin).unwrap();
        let (c, s) = (cos.narrow(0, 0, t).unwrap(), sin.narrow(0, 0, t).unwrap());
        agree(
            &[x],
            &|x| rope(&x[0], &tables),
            &|x| {
                let bhtd = x[0].transpose(1, 2)?.contiguous()?;
                candle_nn::rotary_emb::rope_slow(&bhtd, &c, &s)?.transpose(1, 2)
            },
            1e-5,
        );
    }

    #[test]
    fn prefix_softmax_matches_a_masked_softmax_and_its_gradient() {
        let (b, h, t) = (3, 2, 7);
        let lens = [7u32, 1, 4];
        let s = random(&[b, h, 1, t], 12);
        let mask: Vec<f32> = (0..b * t)
            .map(|k| {
                if k % t >= lens[k / t] as usize {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let mask = Tensor::from_vec(mask, (b, 1, 1, t), &Device::Cpu).unwrap();
        agree(
            &[s],
            &|x| prefix_softmax(&x[0], 0.5, &lens),
            &|x| candle_nn::ops::softmax(&(&x[0] * 0.5)?.broadcast_add(&mask)?, D::Minus1),
            1e-5,
        );
    }

    #[test]
    fn rope_at_positions_matches_rope_along_t() {
        let (b, t, h, d) = (2, 5, 3, 8);
        let x = random(&[b, t, h, d], 13);
        let tables = RopeTables::new(&random(&[16, d / 2], 14), &random(&[16, d / 2], 15)).unwrap();
        let positions: Vec<u32> = (0..b * t).map(|r| (r % t) as u32).collect();
        let rows = x.reshape((b * t, h, d)).unwrap();
        agree(
            &[rows],
            &|x| rope_at(&x[0], &tables, &positions),
            &|x| rope(&x[0].reshape((b, t, h, d))?, &tables)?.reshape((b * t, h, d)),
            1e-6,
        );
    }

    #[test]
    fn span_attention_matches_candle_varlen_flash_attention() {
        // Packed prompts (spans of one key, several key blocks, odd and even lengths), 4
        // query heads over 2 key/value heads; head sizes with their own compiled kernel (32,
        // 64) and without (40).
        let lens = [5u32, 1, 37, 9, 16];
        let total: u32 = lens.iter().sum();
        for dim in [40, 32, 64] {
            let heads = 4;
            let q = random(&[total as usize, heads, dim], 16);
            let k = random(&[total as usize, 2, dim], 17);
            let v = random(&[total as usize, 2, dim], 18);
            let mut spans = Vec::new();
            let mut first = 0;
            for &n in &lens {
                spans.extend((1..=n).map(|i| (first, i)));
                first += n;
            }
            let ours = span_attention(&q, &k, &v, &spans, 0.3).unwrap();
            let l = Tensor::new(&lens[..], &Device::Cpu).unwrap();
            let theirs = candle_nn::attention::flash_attn_varlen_cpu(
                &q, &k, &v, None, &l, &l, 37, 37, 0.3, true, None, None,
            )
            .unwrap();
            let d = max_diff(&ours, &theirs);
            assert!(d < 1e-5, "dim {dim}: {d}");
        }
    }

    #[test]
    fn swiglu_matches_silu_times_up_and_its_gradients() {
        let g = random(&[5000, 3], 7);
        let u = random(&[5000, 3], 8);
        agree(
            &[g, u],
            &|t| swiglu(&t[0], &t[1]),
            &|t| t[0].silu()? * &t[1],
            1e-5,
        );
    }

    #[test]
    fn exp_is_within_4e7_of_libm() {
        let mut worst = 0f64;
        for i in -870_000..=880_000 {
            let x = i as f32 * 1e-4;
            let (a, b) = (f64::from(exp(x)), f64::from(x).exp());
            worst = worst.max(((a - b) / b).abs());
        }
        assert!(worst < 4e-7, "relative error {worst}");
        assert!(exp(f32::NEG_INFINITY) < 1e-37 && exp(f32::INFINITY).is_finite());
    }

    #[test]
    fn results_are_the_same_bits_on_one_and_two_threads() {
        let x = random(&[4, 64, 32], 9);
        let w = random(&[32], 10);
        let r = random(&[4, 64, 32], 11);
        let grads = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let (y, g) = run(&[x.clone(), w.clone()], &r, &|t| {
                    rms_norm(&t[0], &t[1], 1e-6)
                });
                let mut out = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                for t in g {
                    out.extend(t.flatten_all().unwrap().to_vec1::<f32>().unwrap());
                }
                out.into_iter().map(f32::to_bits).collect::<Vec<u32>>()
            })
        };
        assert_eq!(grads(1), grads(2));
    }
}
