//! AdamW (Loshchilov & Hutter, 2019) with its state in the open: the moments and the step
//! count are saved in checkpoints and loaded on `--resume`, so a resumed run continues with
//! exactly the optimizer it stopped with. (candle-nn's `AdamW` keeps them private.) The
//! update is the same as PyTorch's and candle's:
//! `m ← β₁m + (1−β₁)g`, `v ← β₂v + (1−β₂)g²`, `θ ← θ(1−lr·λ) − lr·m̂/(√v̂ + ε)` with
//! `m̂ = m/(1−β₁ᵗ)`, `v̂ = v/(1−β₂ᵗ)`.

use candle_core::backprop::GradStore;
use candle_core::{Result, Tensor, Var};
use std::collections::HashMap;

/// AdamW settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamParams {
    /// Learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Denominator guard.
    pub eps: f64,
    /// Decoupled weight decay λ.
    pub weight_decay: f64,
}

impl Default for AdamParams {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

struct Slot {
    name: String,
    var: Var,
    m: Tensor,
    v: Tensor,
}

/// The optimizer over named variables.
pub struct AdamW {
    /// Settings (the learning rate changes with the schedule).
    pub params: AdamParams,
    step: u64,
    slots: Vec<Slot>,
}

impl AdamW {
    /// Fresh moments (zeros) for every variable.
    pub fn new(vars: Vec<(String, Var)>, params: AdamParams) -> Result<Self> {
        let slots = vars
            .into_iter()
            .map(|(name, var)| {
                let m = var.as_tensor().zeros_like()?;
                let v = m.clone();
                Ok(Slot { name, var, m, v })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            params,
            step: 0,
            slots,
        })
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// One step on the gradients in `grads` (variables without one keep their value and
    /// moments).
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.step += 1;
        let p = self.params;
        let t = i32::try_from(self.step).unwrap_or(i32::MAX);
        let scale_m = 1.0 / (1.0 - p.beta1.powi(t));
        let scale_v = 1.0 / (1.0 - p.beta2.powi(t));
        for s in &mut self.slots {
            let Some(g) = grads.get(s.var.as_tensor()) else {
                continue;
            };
            let m = ((&s.m * p.beta1)? + (g * (1.0 - p.beta1))?)?;
            let v = ((&s.v * p.beta2)? + (g.sqr()? * (1.0 - p.beta2))?)?;
            let denom = ((&v * scale_v)?.sqrt()? + p.eps)?;
            let update = ((&m * scale_m)? / denom)?;
            let theta = ((s.var.as_tensor() * (1.0 - p.lr * p.weight_decay))? - (update * p.lr)?)?;
            s.var.set(&theta)?;
            s.m = m;
            s.v = v;
        }
        Ok(())
    }

    /// The moments as named tensors (`exp_avg.NAME`, `exp_avg_sq.NAME`, PyTorch's names).
    pub fn state(&self) -> Vec<(String, Tensor)> {
        self.slots
            .iter()
            .flat_map(|s| {
                [
                    (format!("exp_avg.{}", s.name), s.m.clone()),
                    (format!("exp_avg_sq.{}", s.name), s.v.clone()),
                ]
            })
            .collect()
    }

    /// Restores moments and step count saved by [`AdamW::state`]; the error names the first
    /// missing or misshapen tensor.
    pub fn load_state(
        &mut self,
        tensors: &HashMap<String, Tensor>,
        step: u64,
    ) -> std::result::Result<(), String> {
        for s in &mut self.slots {
            for (key, slot) in [
                (format!("exp_avg.{}", s.name), &mut s.m),
                (format!("exp_avg_sq.{}", s.name), &mut s.v),
            ] {
                let t = tensors
                    .get(&key)
                    .ok_or_else(|| format!("tensor {key} is missing"))?;
                if t.dims() != slot.dims() {
                    return Err(format!(
                        "tensor {key} has shape {:?}, expected {:?}",
                        t.dims(),
                        slot.dims()
                    ));
                }
                *slot = t
                    .to_dtype(slot.dtype())
                    .and_then(|t| t.to_device(slot.device()))
                    .map_err(|e| format!("tensor {key}: {e}"))?;
            }
        }
        self.step = step;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Two steps on θ = 1 with gradients 0.5 then −1, worked by hand:
    /// step 1: m = 0.05, v = 0.00025, m̂ = 0.5, v̂ = 0.25, θ = 1·(1 − 0.1·0.01) − 0.1·0.5/0.5 = 0.899;
    /// step 2: m = −0.055, v = 0.00124975, m̂ = −0.055/0.19, v̂ = 0.00124975/0.001999,
    /// θ = 0.899·0.999 + 0.1·0.289474/0.790688 = 0.934711.
    #[test]
    fn two_steps_match_the_hand_computation() -> Result<()> {
        let dev = Device::Cpu;
        let var = Var::new(&[1.0f32], &dev)?;
        let mut opt = AdamW::new(
            vec![("w".into(), var.clone())],
            AdamParams {
                lr: 0.1,
                weight_decay: 0.01,
                ..Default::default()
            },
        )?;
        for (g, want) in [0.5f32, -1.0].into_iter().zip([0.899f32, 0.934_711]) {
            // loss = g·θ has gradient g.
            let loss = (var.as_tensor() * f64::from(g))?.sum_all()?;
            opt.step(&loss.backward()?)?;
            let got = var.as_tensor().to_vec1::<f32>()?[0];
            assert!((got - want).abs() < 1e-5, "θ = {got}, expected {want}");
        }
        assert_eq!(opt.steps(), 2);
        let state: HashMap<String, Tensor> = opt.state().into_iter().collect();
        let m = state["exp_avg.w"].to_vec1::<f32>()?[0];
        let v = state["exp_avg_sq.w"].to_vec1::<f32>()?[0];
        assert!((m + 0.055).abs() < 1e-6 && (v - 0.001_249_75).abs() < 1e-8);
        Ok(())
    }

    #[test]
    fn restored_state_continues_the_same_trajectory() -> Result<()> {
        let dev = Device::Cpu;
        let run = |split: bool| -> Result<Vec<f32>> {
            let var = Var::new(&[1.0f32, -2.0], &dev)?;
            let mk = |v: &Var| AdamW::new(vec![("w".into(), v.clone())], AdamParams::default());
            let mut opt = mk(&var)?;
            for k in 0..4 {
                if split && k == 2 {
                    let state: HashMap<String, Tensor> = opt.state().into_iter().collect();
                    let steps = opt.steps();
                    opt = mk(&var)?;
                    opt.load_state(&state, steps)
                        .map_err(candle_core::Error::msg)?;
                }
                let loss = (var.as_tensor().sqr()? * (k as f64 + 1.0))?.sum_all()?;
                opt.step(&loss.backward()?)?;
            }
            var.as_tensor().to_vec1::<f32>()
        };
        assert_eq!(run(false)?, run(true)?);
        Ok(())
    }

    #[test]
    fn a_missing_moment_is_named() -> Result<()> {
        let var = Var::new(&[1.0f32], &Device::Cpu)?;
        let mut opt = AdamW::new(vec![("layer.w".into(), var)], AdamParams::default())?;
        let err = opt.load_state(&HashMap::new(), 3).unwrap_err();
        assert!(err.contains("exp_avg.layer.w"), "{err}");
        Ok(())
    }
}
