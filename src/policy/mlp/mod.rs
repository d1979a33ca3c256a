//! `mlp`: the classic-MARL baseline. The same observations as the language model, as
//! feature rows (one-hot view cells plus header fields), through a small two-layer tanh
//! network with a policy head and a value head; all its agents, across all arenas, in one
//! batched forward per step. Its weights are candle variables ([`MlpNet`]) drawn from a
//! seeded stream; deciding and training run the fused path ([`Fused`]: plain buffers, one
//! `gemm` per product, a hand-written backward), checked against the candle path it
//! replaced. It is the fast path for long CPU runs, and an `mlp` agent can share an arena
//! with a language-model agent.
//!
//! It learns with the same trainer as the language model (`train --learner mlp`): the
//! network lives behind an [`MlpHandle`] that the policy and the trainer share, so an
//! update is seen by the next decision. A trained network is a folder of `mlp.json` (its
//! sizes) and `mlp.safetensors`; a scene or `--eval-against` names it `mlp:DIR`.
//!
//! `gru` (`train --learner gru`, [`MlpPolicy::with_memory`]) is the same network with memory:
//! its second layer a GRU cell ([`MlpNet::cell`]) whose state each agent carries through its
//! episode (reset at its first step) and records with each decision
//! ([`crate::core::DecisionTrace::memory`]), so that the trainer can run sequences of the
//! rollout from their stored states.

mod fused;
#[cfg(test)]
mod memory_tests;
mod net;

pub use fused::{Fused, LossSpec, Row, StepStats, ValueSpec};
pub use net::{CONFIG_FILE, HIDDEN, Heads, MlpConfig, MlpNet, WEIGHTS_FILE, features, first_layer};

use candle_core::Device;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::sampling::choose;
use super::{Decision, Policy, PolicyStats};
pub use crate::core::{CODES, Encoded};
pub use crate::envs::senses::encode;

/// The network shared by an [`MlpPolicy`] and its trainer: empty until the policy meets its
/// first observation (the feature count depends on the scene), or filled from a folder.
#[derive(Clone, Default)]
pub struct MlpHandle(Arc<Mutex<Option<MlpNet>>>);

impl std::fmt::Debug for MlpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MlpHandle")
    }
}

impl MlpHandle {
    /// The network, once there is one (a clone sharing its variables).
    pub fn net(&self) -> Option<MlpNet> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `net` in.
    pub fn set(&self, net: MlpNet) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(net);
    }
}

/// The `mlp` policy.
pub struct MlpPolicy {
    seed: u64,
    actions: usize,
    /// The scene's talk vocabulary (0 without talk).
    words: usize,
    device: Device,
    handle: MlpHandle,
    /// Read the network from this folder at setup.
    folder: Option<PathBuf>,
    stats: PolicyStats,
    failure: Option<String>,
    /// The fused forward's buffers ([`Fused`]), made at the first decision.
    fused: Option<Fused>,
    /// Whether the network has a GRU core (`Some(true)`: the `gru` policy and learner), has
    /// none (`Some(false)`), or is whatever its folder holds (`None`, `mlp:DIR`).
    memory: Option<bool>,
    /// A network with memory: each agent's state after its last decision.
    states: BTreeMap<crate::core::Agent, Vec<f32>>,
    /// While [`Policy::follow`] runs: keep the choices in the batch (a teacher's).
    follow: bool,
}

impl MlpPolicy {
    /// A policy whose weights come from `seed`.
    pub fn new(seed: u64, device: Device) -> Self {
        Self::with_handle(seed, device, MlpHandle::default())
    }

    /// A policy whose network is shared through `handle` (a trainer holds the other end);
    /// a network already in the handle is kept.
    pub fn with_handle(seed: u64, device: Device, handle: MlpHandle) -> Self {
        Self {
            seed,
            actions: 0,
            words: 0,
            device,
            handle,
            folder: None,
            stats: PolicyStats::default(),
            failure: None,
            fused: None,
            memory: Some(false),
            states: BTreeMap::new(),
            follow: false,
        }
    }

    /// A policy whose network has a GRU core when `memory` (the `gru` learner and policy):
    /// each agent's state is carried from step to step and reset at its episode's start.
    pub fn with_memory(mut self, memory: bool) -> Self {
        self.memory = Some(memory);
        self
    }

    /// A policy that reads its network from a model folder (`mlp.json`, `mlp.safetensors`)
    /// when it is set up.
    pub fn from_folder(dir: PathBuf, device: Device, handle: MlpHandle) -> Self {
        Self {
            folder: Some(dir),
            memory: None,
            ..Self::with_handle(0, device, handle)
        }
    }

    /// The network, built from the seed for observations like `e` if there is none yet.
    fn net(&mut self, e: &Encoded) -> Result<MlpNet, String> {
        if let Some(net) = self.handle.net() {
            if !net.fits(e) {
                return Err(format!(
                    "the network reads {} cells and {} header fields; this scene's \
                     observations have {} and {} (it was trained on another scene or map size)",
                    net.cells,
                    net.dense,
                    e.cells.len(),
                    e.dense.len()
                ));
            }
            return Ok(net);
        }
        let net = MlpNet::with_core(
            e.cells.len(),
            e.dense.len(),
            self.actions,
            self.words,
            self.memory.unwrap_or(false),
            self.seed,
            &self.device,
        )
        .map_err(|e| format!("cannot build the network: {e}"))?;
        self.handle.set(net.clone());
        Ok(net)
    }
}

/// Whether `e` holds nothing (features not encoded this step).
fn is_empty(e: &Encoded) -> bool {
    e.cells.is_empty() && e.dense.is_empty()
}

impl Policy for MlpPolicy {
    fn setup(&mut self, scene: &crate::scene::Scene, actions: &[String]) -> Result<(), String> {
        self.actions = actions.len();
        self.words = crate::envs::family::of(scene)
            .vocabulary(scene)
            .map_or(0, |w| w.len());
        if let Some(dir) = &self.folder {
            let net = MlpNet::load(dir, &self.device)?;
            if net.actions != self.actions || net.words != self.words {
                return Err(format!(
                    "{}: the network has {} actions and {} words to say; this scene has {} \
                     and {}",
                    dir.join(CONFIG_FILE).display(),
                    net.actions,
                    net.words,
                    self.actions,
                    self.words
                ));
            }
            if let Some(m) = self.memory
                && m != net.memory
            {
                let kind = |m: bool| {
                    if m {
                        "a GRU core (gru)"
                    } else {
                        "no memory (mlp)"
                    }
                };
                return Err(format!(
                    "{}: the network has {}; this run's learner has {}",
                    dir.join(CONFIG_FILE).display(),
                    kind(net.memory),
                    kind(m)
                ));
            }
            self.handle.set(net);
        }
        Ok(())
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    fn reads_features(&self) -> bool {
        true
    }

    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        if batch.is_empty() || self.actions == 0 || self.failure.is_some() {
            return;
        }
        let start = Instant::now();
        // The rows the step encoded once ([`crate::core::Features`]); a caller that built
        // its decisions by hand, without them, has them encoded here.
        let own: Vec<Encoded> = if batch.iter().any(|d| is_empty(d.features)) {
            batch
                .iter()
                .map(|d| {
                    let mut e = Encoded::default();
                    encode(d.obs, d.senses, &mut e);
                    e
                })
                .collect()
        } else {
            Vec::new()
        };
        let refs: Vec<&Encoded> = if own.is_empty() {
            batch.iter().map(|d| d.features).collect()
        } else {
            own.iter().collect()
        };
        let net = match self.net(refs[0]) {
            Ok(net) => net,
            Err(e) => {
                self.stats.errors += 1;
                self.failure.get_or_insert(e);
                return;
            }
        };
        if refs.iter().any(|r| !net.fits(r)) {
            self.stats.errors += 1;
            self.failure
                .get_or_insert("observations of different sizes in one scene".into());
            return;
        }
        // A network with memory: each agent's state, zeros at its episode's first step.
        static ZEROS: [f32; HIDDEN] = [0.0; HIDDEN];
        let states: Vec<&[f32]> = if net.memory {
            batch
                .iter()
                .map(|d| match self.states.get(&d.agent) {
                    Some(s) if d.obs.step > 0 => s.as_slice(),
                    _ => &ZEROS[..],
                })
                .collect()
        } else {
            Vec::new()
        };
        // The fused forward (plain buffers, kept across steps): the numbers the trainer's
        // fused step computes, without a tensor per operation.
        let fused = match &mut self.fused {
            Some(f) if f.fits(&net) => f,
            slot => slot.insert(Fused::new(&net)),
        };
        if let Err(e) = fused.infer_from(&net, &refs, &states) {
            self.stats.errors += 1;
            self.failure.get_or_insert(format!("forward pass: {e}"));
            return;
        }
        let fused = &*fused;
        if let Some((d, (i, v))) = batch.iter().enumerate().find_map(|(k, d)| {
            let mask = d.mask;
            super::sampling::first_non_finite(fused.logits(k), |i| mask.allows(i as u8))
                .map(|bad| (d, bad))
        }) {
            self.stats.errors += 1;
            self.failure.get_or_insert(format!(
                "its action distribution is not a distribution (score {v} for action {i} of \
                 agent {} in arena {}): its weights hold NaN or infinities; stopped",
                d.agent.slot, d.agent.arena
            ));
            return;
        }
        for (k, d) in batch.iter_mut().enumerate() {
            let (l, v) = (fused.logits(k), fused.value(k));
            let mask = d.mask;
            let given = self.follow.then_some(usize::from(d.action.0));
            let (pick, probs, logprob, entropy) = choose(l, |i| mask.allows(i as u8), d.rng, given);
            d.action.0 = pick as u8;
            d.trace.tokens.clear();
            d.trace.logprob = logprob;
            d.trace.entropy = entropy;
            d.trace.probs = probs;
            d.trace.value = Some(v);
            d.trace.said = None;
            d.trace.said_logprob = 0.0;
            // The state decided from, for the trainer's sequences (none without memory).
            d.trace.memory.clear();
            d.trace
                .memory
                .extend_from_slice(states.get(k).copied().unwrap_or_default());
        }
        // Then what to say: silence (choice 0) or word k (choice k + 1), from its own head.
        if fused.talks() {
            for (k, d) in batch.iter_mut().enumerate() {
                let (Some(w), Some(say)) = (fused.words(k), d.say.as_deref_mut()) else {
                    continue;
                };
                let given = self.follow.then(|| say.0.map_or(0, |k| usize::from(k) + 1));
                let (pick, _, logprob, _) = choose(w, |_| true, d.rng, given);
                say.0 = pick.checked_sub(1).map(|k| k as u8);
                d.trace.said = Some(pick as u8);
                d.trace.said_logprob = logprob;
            }
        }
        if net.memory {
            for (k, d) in batch.iter().enumerate() {
                let next = self.states.entry(d.agent).or_default();
                next.clear();
                next.extend_from_slice(fused.state(k));
            }
        }
        self.stats.decisions += batch.len() as u64;
        self.stats.forwards += 1;
        self.stats.seconds += start.elapsed().as_secs_f64();
    }

    fn stats(&self) -> Option<PolicyStats> {
        Some(self.stats)
    }

    fn follow(&mut self, batch: &mut [Decision<'_>]) -> Result<(), String> {
        self.follow = true;
        self.decide(batch);
        self.follow = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Observation;
    use candle_core::Tensor;

    /// Two observations of 5 cells and the header fields, as a grid family would give.
    fn rows() -> Vec<Encoded> {
        let mut out = Vec::new();
        for (k, cells) in [[1u8, 0, 3, 15, 2], [2, 2, 0, 1, 9]]
            .into_iter()
            .enumerate()
        {
            let obs = Observation {
                view: cells.to_vec(),
                step: 7 * k as u32,
                facing: k as u8,
                team: 1,
                ..Default::default()
            };
            let mut e = Encoded::default();
            encode(&obs, Default::default(), &mut e);
            out.push(e);
        }
        out
    }

    fn net(e: &Encoded) -> MlpNet {
        let net = MlpNet::new(e.cells.len(), e.dense.len(), 4, 11, &Device::Cpu).expect("net");
        // A policy head as large as the others, so that its gradients are not tiny.
        let pi = net.vars()[4].1.clone();
        pi.set(&(pi.as_tensor() * 100.0).expect("scale"))
            .expect("set");
        net
    }

    /// The first layer's column sums are the product of the written-out one-hot row.
    #[test]
    fn the_cell_sum_equals_the_one_hot_product() {
        let rows = rows();
        let net = net(&rows[0]);
        let refs: Vec<&Encoded> = rows.iter().collect();
        let (logits, values) = net.forward(&refs).expect("forward");
        // By hand: x · W1ᵀ + b1 → tanh → ... over `features`' dense rows.
        let x: Vec<f32> = rows
            .iter()
            .flat_map(|e| {
                let mut f: Vec<f32> = Vec::new();
                for &c in &e.cells {
                    f.extend((0..CODES).map(|i| f32::from(u8::from(i == usize::from(c)))));
                }
                f.extend_from_slice(&e.dense);
                f
            })
            .collect();
        let x = Tensor::from_vec(x, (2, net.inputs()), &Device::Cpu).expect("x");
        let w = |i: usize| net.vars()[i].1.as_tensor().clone();
        let layer = |x: &Tensor, i: usize| {
            x.matmul(&w(i).t().expect("t"))
                .and_then(|y| y.broadcast_add(&w(i + 1)))
                .expect("layer")
        };
        let h = layer(&x, 0).tanh().expect("tanh");
        let h = layer(&h, 2).tanh().expect("tanh");
        let want_l: Vec<Vec<f32>> = layer(&h, 4).to_vec2().expect("l");
        let want_v: Vec<f32> = layer(&h, 6).squeeze(1).expect("v").to_vec1().expect("v");
        let got_l: Vec<Vec<f32>> = logits.to_vec2().expect("l");
        let got_v: Vec<f32> = values.to_vec1().expect("v");
        for (a, b) in got_l.iter().flatten().zip(want_l.iter().flatten()) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        for (a, b) in got_v.iter().zip(&want_v) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        // And `features` writes the same row out.
        let mut f = Vec::new();
        features(
            &Observation {
                view: vec![1, 0, 3, 15, 2],
                team: 1,
                ..Default::default()
            },
            Default::default(),
            &mut f,
        );
        assert_eq!(f.len(), net.inputs());
        assert_eq!(f[1], 1.0);
        assert_eq!(f[CODES], 1.0);
    }

    /// Every variable gets a gradient, and each agrees with central finite differences (f32,
    /// so steps of 1e-2 and a tolerance of 2% of the largest derivative).
    #[test]
    fn gradients_reach_every_variable_and_match_finite_differences() {
        let rows = rows();
        let net = net(&rows[0]);
        let refs: Vec<&Encoded> = rows.iter().collect();
        let coef = Tensor::new(
            &[[0.3f32, -1.0, 0.7, 0.2], [-0.5, 0.4, 1.1, -0.9]],
            &Device::Cpu,
        )
        .expect("coef");
        let loss = |net: &MlpNet| -> Tensor {
            let (l, v) = net.forward(&refs).expect("forward");
            let a = (l * &coef).and_then(|x| x.sum_all()).expect("a");
            let b = v.sqr().and_then(|x| x.sum_all()).expect("b");
            (a + b).expect("loss")
        };
        check_gradients(&net, &|n| loss(n));
    }

    /// Every variable of `net` gets a nonzero gradient from `loss`, and each agrees with
    /// central finite differences (f32, so steps of 1e-2 and a tolerance of 2% of the
    /// largest derivative) at a few entries and at the largest.
    pub(super) fn check_gradients(net: &MlpNet, loss: &dyn Fn(&MlpNet) -> Tensor) {
        let grads = loss(net).backward().expect("backward");
        for (name, var) in net.vars() {
            let g: Vec<f32> = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{name}: no gradient"))
                .flatten_all()
                .and_then(|g| g.to_vec1())
                .expect("g");
            let top = g.iter().fold(0f32, |m, x| m.max(x.abs()));
            assert!(top > 0.0, "{name}: a zero gradient");
            let mut picks: Vec<usize> = (0..g.len()).step_by((g.len() / 5).max(1)).collect();
            picks.extend(
                g.iter()
                    .enumerate()
                    .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
                    .map(|(i, _)| i),
            );
            let flat: Vec<f32> = var
                .as_tensor()
                .flatten_all()
                .and_then(|t| t.to_vec1())
                .expect("w");
            for i in picks {
                let at = |x: f32| -> f32 {
                    let mut w = flat.clone();
                    w[i] = x;
                    let t = Tensor::from_vec(w, var.as_tensor().shape(), &Device::Cpu).expect("t");
                    var.set(&t).expect("set");
                    loss(net).to_scalar::<f32>().expect("loss")
                };
                let eps = 1e-2;
                let fd = (at(flat[i] + eps) - at(flat[i] - eps)) / (2.0 * eps);
                at(flat[i]);
                assert!(
                    (fd - g[i]).abs() <= 0.02 * top.max(1e-3),
                    "{name}[{i}]: backward {} vs finite difference {fd}",
                    g[i]
                );
            }
        }
    }

    /// A saved network reads back to the same outputs; a broken folder is named with what
    /// was expected.
    #[test]
    fn a_saved_network_loads_back_and_bad_files_are_named() {
        let rows = rows();
        let net = net(&rows[0]);
        let refs: Vec<&Encoded> = rows.iter().collect();
        let dir = tempfile::tempdir().expect("tmp");
        net.save(dir.path()).expect("save");
        let back = MlpNet::load(dir.path(), &Device::Cpu).expect("load");
        let a: Vec<Vec<f32>> = net.forward(&refs).expect("a").0.to_vec2().expect("a");
        let b: Vec<Vec<f32>> = back.forward(&refs).expect("b").0.to_vec2().expect("b");
        assert_eq!(a, b);
        // A clone shares the variables; a frozen copy does not.
        let frozen = net.frozen_copy().expect("copy");
        let shared = net.clone();
        let w = &net.vars()[0].1;
        w.set(&w.as_tensor().zeros_like().expect("z")).expect("set");
        let sum = |n: &MlpNet| {
            n.vars()[0]
                .1
                .as_tensor()
                .abs()
                .and_then(|x| x.sum_all())
                .and_then(|x| x.to_scalar::<f32>())
                .expect("sum")
        };
        assert_eq!(sum(&shared), 0.0);
        assert!(sum(&frozen) > 0.0);

        let cfg = dir.path().join(CONFIG_FILE);
        std::fs::write(&cfg, "{\n  \"cells\": 5,\n  \"dense\": x\n}").expect("write");
        let err = MlpNet::load(dir.path(), &Device::Cpu)
            .err()
            .expect("bad json");
        assert!(err.contains("mlp.json:3:"), "{err}");
        // One cell more than the weights hold.
        let sizes = format!(
            r#"{{"cells": 6, "dense": {}, "actions": 4, "hidden": 64}}"#,
            net.dense
        );
        std::fs::write(&cfg, sizes).expect("write");
        let err = MlpNet::load(dir.path(), &Device::Cpu)
            .err()
            .expect("bad shape");
        assert!(
            err.contains("l1.weight has shape") && err.contains("6 cells"),
            "{err}"
        );
        back.save(dir.path()).expect("save");
        let mut map = candle_core::safetensors::load(dir.path().join(WEIGHTS_FILE), &Device::Cpu)
            .expect("load");
        map.insert(
            "v.bias".into(),
            Tensor::new(&[f32::NAN], &Device::Cpu).expect("nan"),
        );
        candle_core::safetensors::save(&map, dir.path().join(WEIGHTS_FILE)).expect("save");
        let err = MlpNet::load(dir.path(), &Device::Cpu).err().expect("nan");
        assert!(err.contains("v.bias holds NaN"), "{err}");
    }
}
