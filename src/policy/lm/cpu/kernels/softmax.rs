//! The causal and prefix softmax of attention scores, forward and backward.

use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor, bail};
use rayon::prelude::*;
use std::sync::Arc;

use super::{MIN_ROWS, exp, simd, slice, vectorised, with_data};

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
pub(super) enum Visible {
    /// Row `i` of each `t × t` block sees keys `0..=i`.
    Causal,
    /// Row `r` sees the first `lens[r / rows_per_seq]` keys.
    Prefix {
        lens: Arc<[u32]>,
        rows_per_seq: usize,
    },
}

pub(super) struct CausalSoftmax {
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
                    for (o, &v) in yr[..n].iter_mut().zip(&xr[..n]) {
                        *o = v * self.scale;
                    }
                    let max = simd::max(&yr[..n]);
                    for o in &mut yr[..n] {
                        *o = exp(*o - max);
                    }
                    let sum = simd::sum(&yr[..n]);
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
                            let dot = simd::dot(&pr[..n], &gr[..n]);
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
