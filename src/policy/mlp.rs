//! `mlp`: the classic-MARL baseline. The same observations as the language model, as
//! feature rows (one-hot view cells plus header fields), through a small two-layer tanh
//! network in candle with a policy head and a value head; all its agents, across all arenas,
//! in one batched forward per step. Weights come from a seeded stream. It is the fast path
//! for long CPU runs, and an `mlp` agent can share an arena with a language-model agent.

use candle_core::{D, Device, Tensor};
use candle_nn::{Linear, Module};
use rand::{Rng, SeedableRng};
use std::time::Instant;

use super::sampling::sample;
use super::{Decision, Policy, PolicyStats};
use crate::core::Observation;

/// Values each view cell may take in the one-hot code (cell codes are below 16; maze codes
/// keep their kind in the low nibble).
const CODES: usize = 16;
/// Hidden width of both layers.
const HIDDEN: usize = 64;

/// The feature row of an observation: one-hot view cells, then one-hot known-map cells,
/// then header fields. Its length depends only on the scene.
pub fn features(obs: &Observation, out: &mut Vec<f32>) {
    out.clear();
    for grid in [&obs.view, &obs.map] {
        for &c in grid.iter() {
            let k = usize::from(c & 0x0f);
            out.extend((0..CODES).map(|i| if i == k { 1.0 } else { 0.0 }));
        }
    }
    out.push(obs.step as f32 / 1000.0);
    out.push(f32::from(obs.cooldown) / 10.0);
    out.push(f32::from(u8::from(obs.removed)));
    out.push(obs.prep_left as f32 / 100.0);
    out.push(f32::from(u8::from(obs.holding)));
    out.extend((0..4).map(|f| {
        if usize::from(obs.facing) == f {
            1.0
        } else {
            0.0
        }
    }));
    out.extend((0..8).map(|k| ((obs.keys >> k) & 1) as f32));
    out.push(obs.others.len() as f32 / 4.0);
    out.push(obs.heard.len() as f32 / 4.0);
    // Repeated games: the last three rounds, one-hot, newest first, and the other's counts.
    for k in 0..3 {
        match obs.history.iter().rev().nth(k) {
            Some(h) => out.extend(
                [h[0] == 0, h[0] == 1, h[1] == 0, h[1] == 1].map(|b| f32::from(u8::from(b))),
            ),
            None => out.extend([0.0; 4]),
        }
    }
    let total = (obs.other_counts[0] + obs.other_counts[1]).max(1) as f32;
    out.extend(obs.other_counts.map(|c| c as f32 / total));
}

struct Net {
    l1: Linear,
    l2: Linear,
    pi: Linear,
    v: Linear,
    inputs: usize,
}

fn seeded_linear(
    rng: &mut rand_chacha::ChaCha8Rng,
    inp: usize,
    out: usize,
    gain: f32,
    dev: &Device,
) -> candle_core::Result<Linear> {
    // Uniform(±gain·sqrt(3/inp)): variance gain²/inp.
    let bound = gain * (3.0 / inp as f32).sqrt();
    let w: Vec<f32> = (0..inp * out)
        .map(|_| rng.random_range(-bound..=bound))
        .collect();
    Ok(Linear::new(
        Tensor::from_vec(w, (out, inp), dev)?,
        Some(Tensor::zeros(out, candle_core::DType::F32, dev)?),
    ))
}

impl Net {
    fn new(inputs: usize, actions: usize, seed: u64, dev: &Device) -> candle_core::Result<Self> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        Ok(Self {
            l1: seeded_linear(&mut rng, inputs, HIDDEN, 1.0, dev)?,
            l2: seeded_linear(&mut rng, HIDDEN, HIDDEN, 1.0, dev)?,
            pi: seeded_linear(&mut rng, HIDDEN, actions, 0.01, dev)?,
            v: seeded_linear(&mut rng, HIDDEN, 1, 1.0, dev)?,
            inputs,
        })
    }

    /// Action logits `(b, actions)` and values `(b)`.
    fn forward(&self, x: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let h = self.l2.forward(&self.l1.forward(x)?.tanh()?)?.tanh()?;
        Ok((
            self.pi.forward(&h)?,
            self.v.forward(&h)?.squeeze(D::Minus1)?,
        ))
    }
}

/// The `mlp` policy.
pub struct MlpPolicy {
    seed: u64,
    actions: usize,
    device: Device,
    net: Option<Net>,
    stats: PolicyStats,
    failure: Option<String>,
}

impl MlpPolicy {
    /// A policy whose weights come from `seed`.
    pub fn new(seed: u64, device: Device) -> Self {
        Self {
            seed,
            actions: 0,
            device,
            net: None,
            stats: PolicyStats::default(),
            failure: None,
        }
    }
}

impl Policy for MlpPolicy {
    fn setup(&mut self, _scene: &crate::scene::Scene, actions: &[String]) -> Result<(), String> {
        self.actions = actions.len();
        self.net = None;
        Ok(())
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        if batch.is_empty() || self.actions == 0 {
            return;
        }
        let start = Instant::now();
        let mut row = Vec::new();
        features(batch[0].obs, &mut row);
        if self.net.as_ref().is_none_or(|n| n.inputs != row.len()) {
            match Net::new(row.len(), self.actions, self.seed, &self.device) {
                Ok(net) => self.net = Some(net),
                Err(e) => {
                    self.stats.errors += 1;
                    self.failure
                        .get_or_insert(format!("cannot build the network: {e}"));
                    return;
                }
            }
        }
        let Some(net) = &self.net else {
            return;
        };
        let n = net.inputs;
        let mut flat = Vec::with_capacity(batch.len() * n);
        for d in batch.iter() {
            features(d.obs, &mut row);
            row.resize(n, 0.0);
            flat.extend_from_slice(&row);
        }
        let out = Tensor::from_vec(flat, (batch.len(), n), &self.device)
            .and_then(|x| net.forward(&x))
            .and_then(|(l, v)| Ok((l.to_vec2::<f32>()?, v.to_vec1::<f32>()?)));
        let (logits, values) = match out {
            Ok(out) => out,
            Err(e) => {
                self.stats.errors += 1;
                self.failure.get_or_insert(format!("forward pass: {e}"));
                return;
            }
        };
        for ((d, l), v) in batch.iter_mut().zip(&logits).zip(&values) {
            let mask = d.mask;
            let (pick, probs, logprob, entropy) = sample(l, |i| mask.allows(i as u8), d.rng);
            d.action.0 = pick as u8;
            d.trace.tokens.clear();
            d.trace.logprob = logprob;
            d.trace.entropy = entropy;
            d.trace.probs = probs;
            d.trace.value = Some(*v);
        }
        self.stats.decisions += batch.len() as u64;
        self.stats.forwards += 1;
        self.stats.seconds += start.elapsed().as_secs_f64();
    }

    fn stats(&self) -> Option<PolicyStats> {
        Some(self.stats)
    }
}
