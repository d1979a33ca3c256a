//! Rotate-half rotary embeddings, positions along `t` or given, and the inverse rotation.

use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor, bail};
use rayon::prelude::*;
use std::sync::Arc;

use super::{MIN_ROWS, slice, vectorised};

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

pub(super) struct Rope {
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
