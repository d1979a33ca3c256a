//! MAPPO's centralised critic (Yu et al., 2022): a value network that reads the family's
//! true global state from the valued agent's side ([`crate::core::GlobalView`]: the whole
//! map's cells and every agent's position and status) plus a one-hot of that agent's slot,
//! used only during training. Two tanh layers in candle over variables of its own, with its
//! own AdamW; the cells enter through the same column sums as the `mlp`'s
//! ([`crate::policy::mlp::first_layer`]); weights from a seeded stream; saved in checkpoints
//! with its moments and its sizes (`critic.sizes`: cells, header fields).

use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

use super::loss::{clip_grad_norm, value_loss};
use super::optim::{AdamParams, AdamW};
use crate::core::{CODES, Encoded};
use crate::policy::mlp::first_layer;

/// Hidden width.
const HIDDEN: usize = 128;

/// The centralised value network.
pub struct Critic {
    vars: Vec<(String, Var)>,
    opt: AdamW,
    cells: usize,
    dense: usize,
    device: Device,
}

/// The layer names and shapes of a critic over `inputs` features.
fn shapes(inputs: usize) -> [(&'static str, Vec<usize>); 6] {
    [
        ("l1.weight", vec![HIDDEN, inputs]),
        ("l1.bias", vec![HIDDEN]),
        ("l2.weight", vec![HIDDEN, HIDDEN]),
        ("l2.bias", vec![HIDDEN]),
        ("out.weight", vec![1, HIDDEN]),
        ("out.bias", vec![1]),
    ]
}

impl Critic {
    /// A fresh critic over rows of `cells` cells and `dense` header fields, weights from
    /// `seed`.
    pub fn new(
        cells: usize,
        dense: usize,
        seed: u64,
        lr: f64,
        device: &Device,
    ) -> candle_core::Result<Self> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x6372_6974_6963);
        let vars = shapes(cells * CODES + dense)
            .into_iter()
            .map(|(name, shape)| {
                let n: usize = shape.iter().product();
                let data: Vec<f32> = if name.ends_with("bias") {
                    vec![0.0; n]
                } else {
                    // Uniform(±gain·sqrt(3/fan_in)); a small gain on the output layer.
                    let gain = if name.starts_with("out") { 0.1 } else { 1.0 };
                    let bound = gain * (3.0 / shape[1] as f32).sqrt();
                    (0..n).map(|_| rng.random_range(-bound..=bound)).collect()
                };
                Ok((
                    name.to_string(),
                    Var::from_tensor(&Tensor::from_vec(data, shape, device)?)?,
                ))
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let opt = AdamW::new(
            vars.clone(),
            AdamParams {
                lr,
                ..Default::default()
            },
        )?;
        Ok(Self {
            vars,
            opt,
            cells,
            dense,
            device: device.clone(),
        })
    }

    /// Whether `row` has the sizes this critic reads.
    pub fn fits(&self, row: &Encoded) -> bool {
        row.cells.len() == self.cells && row.dense.len() == self.dense
    }

    /// Cells and header fields per row.
    pub fn sizes(&self) -> (usize, usize) {
        (self.cells, self.dense)
    }

    /// Sets the learning rate.
    pub fn set_lr(&mut self, lr: f64) {
        self.opt.params.lr = lr;
    }

    fn forward(&self, rows: &[&Encoded]) -> candle_core::Result<Tensor> {
        if let Some(bad) = rows.iter().find(|r| !self.fits(r)) {
            candle_core::bail!(
                "the critic reads {} cells and {} header fields; a state has {} and {}",
                self.cells,
                self.dense,
                bad.cells.len(),
                bad.dense.len()
            );
        }
        let w = |i: usize| self.vars[i].1.as_tensor();
        let h = first_layer(w(0), rows, self.cells, self.dense)?
            .broadcast_add(w(1))?
            .tanh()?;
        let h = h.matmul(&w(2).t()?)?.broadcast_add(w(3))?.tanh()?;
        h.matmul(&w(4).t()?)?.broadcast_add(w(5))?.squeeze(1)
    }

    /// Values of `rows` (no gradient).
    pub fn values(&self, rows: &[&Encoded]) -> candle_core::Result<Vec<f32>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        self.forward(rows)?.detach().to_vec1()
    }

    /// One gradient step of the clipped value loss, in units of `scale`; returns the loss, or
    /// `None` when the loss or gradient was not finite (the weights are kept).
    pub fn step(
        &mut self,
        rows: &[&Encoded],
        old: &[f32],
        targets: &[f32],
        clip: Option<f64>,
        scale: f32,
        max_grad_norm: f32,
    ) -> candle_core::Result<Option<f32>> {
        let m = rows.len();
        let k = 1.0 / f64::from(scale);
        let v = (self.forward(rows)? * k)?;
        let old = (Tensor::from_vec(old.to_vec(), m, &self.device)? * k)?;
        let target = (Tensor::from_vec(targets.to_vec(), m, &self.device)? * k)?;
        let loss = value_loss(&v, &old, &target, clip)?;
        let l = loss.to_scalar::<f32>()?;
        if !l.is_finite() {
            return Ok(None);
        }
        let mut grads = loss.backward()?;
        let vars: Vec<Var> = self.vars.iter().map(|(_, v)| v.clone()).collect();
        if !clip_grad_norm(&mut grads, &vars, max_grad_norm)?.is_finite() {
            return Ok(None);
        }
        if self.opt.step(&grads)?.is_some() {
            return Ok(None);
        }
        Ok(Some(l))
    }

    /// Weights (`critic.NAME`) and optimizer moments (`critic.exp_avg.NAME`, ...) by name, and
    /// the optimizer's step count, for a checkpoint.
    pub fn state(&self) -> candle_core::Result<(Vec<(String, Tensor)>, u64)> {
        let mut out: Vec<(String, Tensor)> = self
            .vars
            .iter()
            .map(|(n, v)| (format!("critic.{n}"), v.as_tensor().detach()))
            .collect();
        out.push((
            "critic.sizes".into(),
            Tensor::new(&[self.cells as u32, self.dense as u32], &self.device)?,
        ));
        out.extend(
            self.opt
                .state()?
                .into_iter()
                .map(|(n, t)| (format!("critic.{n}"), t)),
        );
        Ok((out, self.opt.steps()))
    }

    /// A critic restored from [`Critic::state`]'s tensors; the error names the missing or
    /// misshapen tensor.
    pub fn restore(
        tensors: &HashMap<String, Tensor>,
        steps: u64,
        lr: f64,
        device: &Device,
    ) -> Result<Self, String> {
        let sizes: Vec<u32> = tensors
            .get("critic.sizes")
            .ok_or(
                "tensor critic.sizes is missing (a checkpoint of an older version, whose \
                 critic read concatenated observations: MAPPO cannot continue it)",
            )?
            .to_dtype(DType::U32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .map_err(|e| format!("tensor critic.sizes: {e}"))?;
        let [cells, dense] = sizes[..] else {
            return Err(format!(
                "tensor critic.sizes holds {} numbers; expected 2 (cells, header fields)",
                sizes.len()
            ));
        };
        let mut critic =
            Self::new(cells as usize, dense as usize, 0, lr, device).map_err(|e| e.to_string())?;
        for (name, var) in &critic.vars {
            let key = format!("critic.{name}");
            let t = tensors
                .get(&key)
                .ok_or_else(|| format!("tensor {key} is missing"))?;
            if t.dims() != var.dims() {
                return Err(format!(
                    "tensor {key} has shape {:?}, expected {:?}",
                    t.dims(),
                    var.dims()
                ));
            }
            crate::policy::sampling::check_finite(&key, t)?;
            var.set(t).map_err(|e| format!("tensor {key}: {e}"))?;
        }
        let moments: HashMap<String, Tensor> = tensors
            .iter()
            .filter(|(k, _)| k.as_str() != "critic.sizes")
            .filter_map(|(k, t)| {
                k.strip_prefix("critic.")
                    .map(|k| (k.to_string(), t.clone()))
            })
            .collect();
        critic.opt.load_state(&moments, steps)?;
        Ok(critic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_a_target_and_round_trips() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let mut c = Critic::new(2, 3, 7, 1e-2, &dev)?;
        let rows = [
            Encoded {
                cells: vec![1, 4],
                dense: vec![1.0, 0.0, 0.0],
            },
            Encoded {
                cells: vec![1, 5],
                dense: vec![0.0, 1.0, 0.0],
            },
        ];
        let refs: Vec<&Encoded> = rows.iter().collect();
        let targets = [2.0f32, -1.0];
        let before = c.values(&refs)?;
        let err = |v: &[f32]| {
            v.iter()
                .zip(&targets)
                .map(|(a, b)| (a - b).abs())
                .sum::<f32>()
        };
        for _ in 0..200 {
            let old = c.values(&refs)?;
            c.step(&refs, &old, &targets, None, 1.0, 1.0)?;
        }
        let after = c.values(&refs)?;
        assert!(err(&after) < 0.1 * err(&before), "{before:?} -> {after:?}");
        let (state, steps) = c.state()?;
        let map: HashMap<String, Tensor> = state.into_iter().collect();
        let back = Critic::restore(&map, steps, 1e-2, &dev).map_err(candle_core::Error::msg)?;
        assert_eq!(back.values(&refs)?, after);
        let mut missing = map.clone();
        missing.remove("critic.exp_avg.l2.bias");
        let e = Critic::restore(&missing, steps, 1e-2, &dev)
            .err()
            .unwrap_or_default();
        assert!(e.contains("exp_avg.l2.bias"), "{e}");
        Ok(())
    }
}
