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
//!
//! One file per operation; `simd` holds what they share.

mod attention;
mod rms_norm;
mod rope;
pub(crate) mod simd;
mod softmax;
mod swiglu;
#[cfg(test)]
mod tests;

pub(crate) use attention::KEYS;
pub use attention::{OwnKv, Segments, attend, attend_into, attend_own_into, span_attention};
pub use rms_norm::{rms_norm, rms_rows, rms_rows_backward};
pub use rope::{RopeTables, rope, rope_at, rotate};
pub(crate) use simd::vectorised;
pub use simd::{exp, instructions};
pub use softmax::{causal_softmax, prefix_softmax};
pub(crate) use swiglu::MIN_ELEMS;
pub use swiglu::{swiglu, swiglu_backward_rows, swiglu_rows};

use candle_core::{CpuStorage, Layout, Result, Shape, Storage, Tensor, bail};

/// Rows per rayon task: enough work to pay for the task, small enough to split `tiny`'s rows
/// over two threads.
pub(super) const MIN_ROWS: usize = 32;

pub(super) fn slice<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    let data = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => bail!("{op}: expected a contiguous f32 tensor"),
    }
}

/// Runs `f` on the f32 data of `t` (made contiguous first), which must be on the CPU.
pub(super) fn with_data<R>(t: &Tensor, op: &str, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
    let t = t.contiguous()?;
    let (s, l) = t.storage_and_layout();
    match &*s {
        Storage::Cpu(c) => f(slice(c, l, op)?),
        _ => bail!("{op}: the fused kernels run on the CPU"),
    }
}

/// [`with_data`] on three tensors at once.
pub(super) fn with_data3<R>(
    (a, b, c): (&Tensor, &Tensor, &Tensor),
    op: &str,
    f: impl FnOnce(&[f32], &[f32], &[f32]) -> Result<R>,
) -> Result<R> {
    with_data(a, op, |a| {
        with_data(b, op, |b| with_data(c, op, |c| f(a, b, c)))
    })
}

pub(super) fn last_dim(shape: &Shape, op: &str) -> Result<usize> {
    match shape.dims().last() {
        Some(&n) if n > 0 => Ok(n),
        _ => bail!("{op}: expected a tensor with a non-empty last dimension, got {shape:?}"),
    }
}
