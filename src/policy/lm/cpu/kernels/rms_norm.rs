//! RMS norm: `y = x / sqrt(mean(x²) + eps) · w`, forward and backward, as slices and as a candle op.

use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor, bail};
use rayon::prelude::*;

use super::{MIN_ROWS, last_dim, slice, vectorised, with_data3};

/// RMS norm over the last dimension with a learned scale `w` (`(hidden,)`), with a backward
/// pass for both `x` and `w`.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    x.contiguous()?.apply_op2(&w.contiguous()?, RmsNorm { eps })
}

pub(super) struct RmsNorm {
    eps: f32,
}

/// `1 / sqrt(mean(row²) + eps)`. The squares are summed in 16 lanes, then across them (a
/// single running sum would not vectorise).
#[inline(always)]
pub(super) fn inv_rms(row: &[f32], eps: f32) -> f32 {
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
