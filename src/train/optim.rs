//! AdamW (Loshchilov & Hutter, 2019) with its state in the open: the moments and the step
//! count are saved in checkpoints and loaded on `--resume`, so a resumed run continues with
//! exactly the optimizer it stopped with. (candle-nn's `AdamW` keeps them private.) The
//! update is the same as PyTorch's and candle's:
//! `m ← β₁m + (1−β₁)g`, `v ← β₂v + (1−β₂)g²`, `θ ← θ(1−lr·λ) − lr·m̂/(√v̂ + ε)` with
//! `m̂ = m/(1−β₁ᵗ)`, `v̂ = v/(1−β₂ᵗ)`.

use candle_core::backprop::GradStore;
use candle_core::{DType, Result, Tensor, Var, bail};
use rayon::prelude::*;

use crate::policy::lm::lock;
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
    moments: Moments,
}

/// A variable's first and second moments.
enum Moments {
    /// For an f32 variable on the CPU: plain buffers, updated in place by one fused loop
    /// (a dozen candle operations per variable, each allocating its result, took 9% of a
    /// `small` training step).
    Host(Vec<f32>, Vec<f32>),
    /// Elsewhere: tensors, updated with candle's operations.
    Device(Tensor, Tensor),
}

impl Moments {
    /// Zeros shaped like `t`.
    fn zeros(t: &Tensor) -> Result<Self> {
        Ok(if t.device().is_cpu() && t.dtype() == DType::F32 {
            Self::Host(vec![0.0; t.elem_count()], vec![0.0; t.elem_count()])
        } else {
            let m = t.zeros_like()?;
            Self::Device(m.clone(), m)
        })
    }
}

/// The optimizer over named variables.
pub struct AdamW {
    /// Settings (the learning rate changes with the schedule).
    pub params: AdamParams,
    step: u64,
    slots: Vec<Slot>,
    /// [`AdamW::step_host`]'s new weights and moments, staged until all are checked (kept
    /// across steps).
    staged: Vec<[Vec<f32>; 3]>,
}

impl AdamW {
    /// Fresh moments (zeros) for every variable.
    pub fn new(vars: Vec<(String, Var)>, params: AdamParams) -> Result<Self> {
        let slots = vars
            .into_iter()
            .map(|(name, var)| {
                let moments = Moments::zeros(var.as_tensor())?;
                Ok(Slot { name, var, moments })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            params,
            step: 0,
            slots,
            staged: Vec::new(),
        })
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// One step on the gradients in `grads` (variables without one keep their value and
    /// moments). The new weights and moments of every variable are checked before any
    /// replaces the old: if one would hold NaN or an infinity (moments restored from a
    /// damaged checkpoint, weights that overflowed), nothing changes, the step is not
    /// counted, and its name is returned (`Ok(Some(name))`).
    pub fn step(&mut self, grads: &GradStore) -> Result<Option<String>> {
        self.step_clipped(grads, None)
    }

    /// [`AdamW::step`] on the gradients scaled by a norm clip's factor `clip` as they are
    /// read (each `x · clip + 0`, the bits [`crate::train::loss::clip_grad_norm`] gives them;
    /// `None`: as they are), without a scaled copy of every gradient.
    pub fn step_clipped(&mut self, grads: &GradStore, clip: Option<f32>) -> Result<Option<String>> {
        let p = self.params;
        // x · 1 + (−0) is x, to the sign of a zero; x · by + 0 is candle's affine map.
        let affine = clip.map_or((1.0, -0.0), |by| (by, 0.0));
        let t = i32::try_from(self.step + 1).unwrap_or(i32::MAX);
        let scale_m = 1.0 / (1.0 - p.beta1.powi(t));
        let scale_v = 1.0 / (1.0 - p.beta2.powi(t));
        let k = HostAdam::new(p, (scale_m, scale_v));
        self.staged.resize_with(self.slots.len(), Default::default);
        // Devices' new moments and weights, staged until all are checked (the host's in
        // `self.staged`).
        let mut device: Vec<Option<(Tensor, Tensor, Tensor)>> = Vec::new();
        for (s, out) in self.slots.iter().zip(&mut self.staged) {
            let Some(g) = grads.get(s.var.as_tensor()) else {
                device.push(None);
                continue;
            };
            match &s.moments {
                Moments::Host(m, v) => {
                    let finite = with_host_data(s.var.as_tensor(), g, m.len(), |theta, g| {
                        stage(&k, (theta, g, affine), (m, v), out)
                    });
                    match finite {
                        Some(true) => {}
                        Some(false) => return Ok(Some(s.name.clone())),
                        None => bail!(
                            "AdamW: the gradient of {} is not an f32 tensor of its shape",
                            s.name
                        ),
                    }
                    device.push(None);
                }
                Moments::Device(sm, sv) => {
                    let clipped;
                    let g = match clip {
                        Some(by) => {
                            clipped = crate::train::loss::clip_by(g, by)?;
                            &clipped
                        }
                        None => g,
                    };
                    let m = ((sm * p.beta1)? + (g * (1.0 - p.beta1))?)?;
                    let v = ((sv * p.beta2)? + (g.sqr()? * (1.0 - p.beta2))?)?;
                    let denom = ((&v * scale_v)?.sqrt()? + p.eps)?;
                    let update = ((&m * scale_m)? / denom)?;
                    let decayed = (s.var.as_tensor() * (1.0 - p.lr * p.weight_decay))?;
                    let theta = (decayed - (update * p.lr)?)?;
                    for x in [&m, &v, &theta] {
                        if crate::policy::sampling::first_non_finite_entry(x)?.is_some() {
                            return Ok(Some(s.name.clone()));
                        }
                    }
                    device.push(Some((m, v, theta)));
                }
            }
        }
        self.step += 1;
        for ((s, out), device) in self.slots.iter_mut().zip(&mut self.staged).zip(device) {
            if grads.get(s.var.as_tensor()).is_none() {
                continue;
            }
            match (&mut s.moments, device) {
                (Moments::Host(m, v), _) => commit(&s.var, (m, v), out)?,
                (Moments::Device(sm, sv), Some((m, v, theta))) => {
                    (*sm, *sv) = (m, v);
                    s.var.set(&theta)?;
                }
                (Moments::Device(..), None) => {}
            }
        }
        Ok(None)
    }

    /// [`AdamW::step`] from gradients given as plain slices, one per variable in the order
    /// they were given to [`AdamW::new`] (`None`: no gradient), each multiplied by `scale`
    /// first (a norm clip's factor; 1 leaves them as they are): the same arithmetic, without
    /// a tensor per gradient, each weight written in place. For f32 variables on the CPU (an
    /// error otherwise). As `step`, a step that would leave NaN or an infinity changes
    /// nothing and names the variable.
    pub fn step_host(&mut self, grads: &[Option<&[f32]>], scale: f32) -> Result<Option<String>> {
        if grads.len() != self.slots.len() {
            bail!(
                "AdamW: {} gradients for {} variables",
                grads.len(),
                self.slots.len()
            );
        }
        let p = self.params;
        let t = i32::try_from(self.step + 1).unwrap_or(i32::MAX);
        let k = HostAdam::new(
            p,
            (1.0 / (1.0 - p.beta1.powi(t)), 1.0 / (1.0 - p.beta2.powi(t))),
        );
        self.staged.resize_with(self.slots.len(), Default::default);
        for ((s, g), out) in self.slots.iter().zip(grads).zip(&mut self.staged) {
            let Some(g) = g else { continue };
            let Moments::Host(m, v) = &s.moments else {
                bail!("AdamW: {} is not an f32 variable on the CPU", s.name);
            };
            let Some(theta) = lock(s.var.as_tensor()) else {
                bail!(
                    "AdamW: {} is not a contiguous f32 tensor on the CPU",
                    s.name
                );
            };
            let theta = theta.data();
            if theta.len() != g.len() || m.len() != g.len() {
                bail!(
                    "AdamW: the gradient of {} has {} values, the variable {}",
                    s.name,
                    g.len(),
                    theta.len()
                );
            }
            let finite = stage(&k, (theta, g, (scale, -0.0)), (m, v), out);
            if !finite {
                return Ok(Some(s.name.clone()));
            }
        }
        self.step += 1;
        for ((s, g), out) in self.slots.iter_mut().zip(grads).zip(&mut self.staged) {
            if let (Some(_), Moments::Host(m, v)) = (g, &mut s.moments) {
                commit(&s.var, (m, v), out)?;
            }
        }
        Ok(None)
    }

    /// The moments as named tensors (`exp_avg.NAME`, `exp_avg_sq.NAME`, PyTorch's names).
    pub fn state(&self) -> Result<Vec<(String, Tensor)>> {
        self.slots
            .iter()
            .flat_map(|s| {
                let (m, v) = match &s.moments {
                    Moments::Host(m, v) => {
                        let t = |x: &[f32]| Tensor::from_slice(x, s.var.shape(), s.var.device());
                        (t(m), t(v))
                    }
                    Moments::Device(m, v) => (Ok(m.clone()), Ok(v.clone())),
                };
                [
                    (format!("exp_avg.{}", s.name), m),
                    (format!("exp_avg_sq.{}", s.name), v),
                ]
            })
            .map(|(name, t)| Ok((name, t?)))
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
            let (shape, dtype, device) = (s.var.dims(), s.var.dtype(), s.var.device());
            let read = |key: String| -> std::result::Result<Tensor, String> {
                let t = tensors
                    .get(&key)
                    .ok_or_else(|| format!("tensor {key} is missing"))?;
                if t.dims() != shape {
                    return Err(format!(
                        "tensor {key} has shape {:?}, expected {shape:?}",
                        t.dims(),
                    ));
                }
                crate::policy::sampling::check_finite(&key, t)?;
                t.to_dtype(dtype)
                    .and_then(|t| t.to_device(device))
                    .map_err(|e| format!("tensor {key}: {e}"))
            };
            let m = read(format!("exp_avg.{}", s.name))?;
            let v = read(format!("exp_avg_sq.{}", s.name))?;
            s.moments = match s.moments {
                Moments::Host(..) => {
                    let host = |t: Tensor| t.flatten_all().and_then(|t| t.to_vec1::<f32>());
                    let key = || format!("the moments of {}", s.name);
                    Moments::Host(
                        host(m).map_err(|e| format!("{}: {e}", key()))?,
                        host(v).map_err(|e| format!("{}: {e}", key()))?,
                    )
                }
                Moments::Device(..) => Moments::Device(m, v),
            };
        }
        self.step = step;
        Ok(())
    }
}

/// AdamW's per-element update in f32, with the constants of one step: the same operations
/// in the same order as the tensor path (candle's affine maps round their f64 factors to
/// f32).
#[derive(Clone, Copy)]
struct HostAdam {
    b1: f32,
    b2: f32,
    c1: f32,
    c2: f32,
    sm: f32,
    sv: f32,
    eps: f32,
    lr: f32,
    decay: f32,
}

impl HostAdam {
    fn new(p: AdamParams, (scale_m, scale_v): (f64, f64)) -> Self {
        let c = |x: f64| x as f32;
        Self {
            b1: c(p.beta1),
            b2: c(p.beta2),
            c1: c(1.0 - p.beta1),
            c2: c(1.0 - p.beta2),
            sm: c(scale_m),
            sv: c(scale_v),
            eps: c(p.eps),
            lr: c(p.lr),
            decay: c(1.0 - p.lr * p.weight_decay),
        }
    }

    /// The new (θ, m, v) of one element.
    #[inline(always)]
    fn apply(&self, theta: f32, g: f32, m: f32, v: f32) -> (f32, f32, f32) {
        let m = m * self.b1 + g * self.c1;
        let v = v * self.b2 + (g * g) * self.c2;
        let update = (m * self.sm) / ((v * self.sv).sqrt() + self.eps);
        (theta * self.decay - update * self.lr, m, v)
    }
}

/// Writes its values over a contiguous f32 tensor on the CPU, in place.
struct Overwrite<'a>(&'a [f32]);

impl candle_core::InplaceOp1 for Overwrite<'_> {
    fn name(&self) -> &'static str {
        "adamw-overwrite"
    }

    fn cpu_fwd(
        &self,
        storage: &mut candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> Result<()> {
        let (candle_core::CpuStorage::F32(data), Some((a, b))) =
            (storage, layout.contiguous_offsets())
        else {
            bail!("AdamW: a weight that is not a contiguous f32 tensor");
        };
        if b - a != self.0.len() {
            bail!("AdamW: {} new values for {} weights", self.0.len(), b - a);
        }
        data[a..b].copy_from_slice(self.0);
        Ok(())
    }
}

/// Chunks the host loops split a variable into.
const CHUNK: usize = 1 << 14;

/// Runs `f` over the contiguous f32 data of `theta` and `g` when both are on the CPU and
/// hold `len` elements (`None` otherwise).
fn with_host_data<R>(
    theta: &Tensor,
    g: &Tensor,
    len: usize,
    f: impl FnOnce(&[f32], &[f32]) -> R,
) -> Option<R> {
    let g = g.contiguous().ok()?;
    let (theta, g) = (lock(theta)?, lock(&g)?);
    let (theta, g) = (theta.data(), g.data());
    (theta.len() == len && g.len() == len).then(|| f(theta, g))
}

/// One AdamW step of an f32 variable's elements (each of `g` mapped to `g · mul + add`
/// first) into `out` (the new θ, m and v), and whether they are all finite. Element by
/// element, in chunks on rayon's threads (the same result on any number).
fn stage(
    k: &HostAdam,
    (theta, g, (mul, add)): (&[f32], &[f32], (f32, f32)),
    (m, v): (&[f32], &[f32]),
    out: &mut [Vec<f32>; 3],
) -> bool {
    let [theta2, m2, v2] = out;
    for buf in [&mut *theta2, &mut *m2, &mut *v2] {
        buf.resize(m.len(), 0.0);
    }
    theta2
        .par_chunks_mut(CHUNK)
        .zip(m2.par_chunks_mut(CHUNK).zip(v2.par_chunks_mut(CHUNK)))
        .zip(theta.par_chunks(CHUNK).zip(g.par_chunks(CHUNK)))
        .zip(m.par_chunks(CHUNK).zip(v.par_chunks(CHUNK)))
        .all(|(((theta2, (m2, v2)), (theta, g)), (m, v))| {
            crate::policy::lm::cpu::kernels::simd::vectorised(
                #[inline(always)]
                || {
                    // Zipped slices (no bounds checks).
                    let mut finite = true;
                    let outs = theta2.iter_mut().zip(m2.iter_mut()).zip(v2.iter_mut());
                    let ins = theta.iter().zip(g.iter()).zip(m.iter().zip(v.iter()));
                    for (((t2, m2), v2), ((&t, &g), (&m, &v))) in outs.zip(ins) {
                        let (a, b, c) = k.apply(t, g * mul + add, m, v);
                        (*t2, *m2, *v2) = (a, b, c);
                        finite &= a.is_finite() & b.is_finite() & c.is_finite();
                    }
                    finite
                },
            )
        })
}

/// Puts [`stage`]'s values in place: the moments swapped in, the weights written over the
/// variable's.
fn commit(
    var: &Var,
    (m, v): (&mut Vec<f32>, &mut Vec<f32>),
    out: &mut [Vec<f32>; 3],
) -> Result<()> {
    let [theta2, m2, v2] = out;
    std::mem::swap(m, m2);
    std::mem::swap(v, v2);
    var.as_tensor().inplace_op1(&Overwrite(theta2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// A step that would leave NaN in a weight or a moment changes nothing (weights,
    /// moments, step count) and names the variable; moments saved with NaN are refused.
    #[test]
    fn a_step_that_would_leave_nan_changes_nothing_and_names_the_variable() -> Result<()> {
        let dev = Device::Cpu;
        for dtype in [DType::F32, DType::F64] {
            let a = Var::from_tensor(&Tensor::new(&[1.0f32, 2.0], &dev)?.to_dtype(dtype)?)?;
            let b = Var::from_tensor(&Tensor::new(&[3.0f32], &dev)?.to_dtype(dtype)?)?;
            let mut opt = AdamW::new(
                vec![("a".into(), a.clone()), ("b".into(), b.clone())],
                AdamParams::default(),
            )?;
            let loss = || -> Result<GradStore> {
                (a.as_tensor().sum_all()? + b.as_tensor().sum_all()?)?.backward()
            };
            assert_eq!(opt.step(&loss()?)?, None);
            let saved: HashMap<String, Tensor> = opt.state()?.into_iter().collect();
            // b's second moment goes bad (as a damaged file's would, had it loaded).
            let mut bad = saved.clone();
            bad.insert("exp_avg_sq.b".into(), (&saved["exp_avg_sq.b"] * f64::NAN)?);
            let err = opt.load_state(&bad, 1).expect_err("refused");
            assert!(
                err.contains("exp_avg_sq.b holds NaN at flat index 0"),
                "{err}"
            );
            match &mut opt.slots[1].moments {
                Moments::Host(_, v) => v[0] = f32::NAN,
                Moments::Device(_, v) => *v = (&*v * f64::NAN)?,
            }
            let before: Vec<Vec<f64>> = [&a, &b]
                .iter()
                .map(|v| v.as_tensor().to_dtype(DType::F64)?.to_vec1::<f64>())
                .collect::<Result<_>>()?;
            assert_eq!(opt.step(&loss()?)?, Some("b".to_string()), "{dtype:?}");
            let after: Vec<Vec<f64>> = [&a, &b]
                .iter()
                .map(|v| v.as_tensor().to_dtype(DType::F64)?.to_vec1::<f64>())
                .collect::<Result<_>>()?;
            assert_eq!(before, after, "{dtype:?}: a weight changed");
            assert_eq!(opt.steps(), 1);
            let m_a = opt.state()?[0].1.to_dtype(DType::F64)?.to_vec1::<f64>()?;
            let saved_m_a = saved["exp_avg.a"].to_dtype(DType::F64)?.to_vec1::<f64>()?;
            assert_eq!(m_a, saved_m_a, "{dtype:?}: a's moment changed");
        }
        Ok(())
    }

    /// Two steps on θ = 1 with gradients 0.5 then −1, worked by hand:
    /// step 1: m = 0.05, v = 0.00025, m̂ = 0.5, v̂ = 0.25, θ = 1·(1 − 0.1·0.01) − 0.1·0.5/0.5 = 0.899;
    /// step 2: m = −0.055, v = 0.00124975, m̂ = −0.055/0.19, v̂ = 0.00124975/0.001999,
    /// θ = 0.899·0.999 + 0.1·0.289474/0.790688 = 0.934711.
    /// (f32 variables take the fused loop on the CPU, f64 ones candle's operations.)
    #[test]
    fn two_steps_match_the_hand_computation() -> Result<()> {
        let dev = Device::Cpu;
        for dtype in [DType::F32, DType::F64] {
            let var = Var::from_tensor(&Tensor::new(&[1.0f32], &dev)?.to_dtype(dtype)?)?;
            let mut opt = AdamW::new(
                vec![("w".into(), var.clone())],
                AdamParams {
                    lr: 0.1,
                    weight_decay: 0.01,
                    ..Default::default()
                },
            )?;
            let first =
                |t: &Tensor| -> Result<f32> { Ok(t.to_dtype(DType::F32)?.to_vec1::<f32>()?[0]) };
            for (g, want) in [0.5f32, -1.0].into_iter().zip([0.899f32, 0.934_711]) {
                // loss = g·θ has gradient g.
                let loss = (var.as_tensor() * f64::from(g))?.sum_all()?;
                assert_eq!(opt.step(&loss.backward()?)?, None);
                let got = first(var.as_tensor())?;
                assert!(
                    (got - want).abs() < 1e-5,
                    "{dtype:?}: θ = {got}, expected {want}"
                );
            }
            assert_eq!(opt.steps(), 2);
            let state: HashMap<String, Tensor> = opt.state()?.into_iter().collect();
            let (m, v) = (first(&state["exp_avg.w"])?, first(&state["exp_avg_sq.w"])?);
            assert!(
                (m + 0.055).abs() < 1e-6 && (v - 0.001_249_75).abs() < 1e-8,
                "{dtype:?}: m = {m}, v = {v}"
            );
        }
        Ok(())
    }

    /// `step_host` (slices, a scale) takes the same steps as `step` (a gradient store with
    /// the gradients already scaled), bit for bit, a variable without a gradient left alone;
    /// a step that would leave an infinity changes nothing and names the variable.
    #[test]
    fn the_host_step_equals_the_tensor_step() -> Result<()> {
        let dev = Device::Cpu;
        let make = || -> Result<(Var, Var, AdamW)> {
            let a = Var::new(&[1.0f32, -2.0, 0.5], &dev)?;
            let b = Var::new(&[3.0f32, 0.25], &dev)?;
            let opt = AdamW::new(
                vec![("a".into(), a.clone()), ("b".into(), b.clone())],
                AdamParams {
                    lr: 0.05,
                    weight_decay: 0.1,
                    ..Default::default()
                },
            )?;
            Ok((a, b, opt))
        };
        let (a1, b1, mut tensor) = make()?;
        let (a2, b2, mut host) = make()?;
        for (k, scale) in [1.0f32, 0.37, 1.0].into_iter().enumerate() {
            let ga = [0.3f32 * (k as f32 + 1.0), -1.25, 2.0];
            let gb = [-0.5f32, 0.125];
            // b has a gradient at the second step only.
            let with_b = k == 1;
            let mut store = a1.as_tensor().sqr()?.sum_all()?.backward()?;
            let scaled = |g: &[f32]| g.iter().map(|x| x * scale).collect::<Vec<f32>>();
            store.insert(a1.as_tensor(), Tensor::new(scaled(&ga), &dev)?);
            if with_b {
                store.insert(b1.as_tensor(), Tensor::new(scaled(&gb), &dev)?);
            } else {
                store.remove(b1.as_tensor());
            }
            assert_eq!(tensor.step(&store)?, None);
            let gs = [Some(&ga[..]), with_b.then_some(&gb[..])];
            assert_eq!(host.step_host(&gs, scale)?, None);
            for (x, y) in [(&a1, &a2), (&b1, &b2)] {
                let (x, y) = (
                    x.as_tensor().to_vec1::<f32>()?,
                    y.as_tensor().to_vec1::<f32>()?,
                );
                let same = x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(same, "step {k}: {x:?} against {y:?}");
            }
        }
        assert_eq!(host.steps(), tensor.steps());
        let before = (
            a2.as_tensor().to_vec1::<f32>()?,
            b2.as_tensor().to_vec1::<f32>()?,
        );
        let bad = [
            Some(&[1.0f32, 1.0, 1.0][..]),
            Some(&[f32::INFINITY, 0.0][..]),
        ];
        assert_eq!(host.step_host(&bad, 1.0)?, Some("b".to_string()));
        let after = (
            a2.as_tensor().to_vec1::<f32>()?,
            b2.as_tensor().to_vec1::<f32>()?,
        );
        assert_eq!(before, after, "a refused step changed a weight");
        assert_eq!(host.steps(), 3);
        assert!(
            host.step_host(&bad[..1], 1.0).is_err(),
            "one gradient for two variables"
        );
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
                    let state: HashMap<String, Tensor> = opt.state()?.into_iter().collect();
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
