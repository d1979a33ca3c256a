//! SwiGLU: `silu(g) · u`, forward and backward.

use candle_core::{CpuStorage, CustomOp2, Layout, Result, Shape, Tensor, bail};
use rayon::prelude::*;

use super::{exp, slice, vectorised, with_data3};

/// `silu(g) · u`, the gated MLP's activation, with a backward pass for both inputs.
pub fn swiglu(g: &Tensor, u: &Tensor) -> Result<Tensor> {
    g.contiguous()?.apply_op2(&u.contiguous()?, SwiGlu)
}

pub(super) struct SwiGlu;

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
pub(crate) const MIN_ELEMS: usize = 4096;

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
