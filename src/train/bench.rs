//! The `mlp` learner's update on a synthetic batch of a hide-and-seek iteration's size, for
//! benches: `benches/update.rs` (`update/mlp/iteration`) and the Python bindings'
//! `bench_mlp_update`, which `python/benches/update_vs_torch.py` times against PyTorch's
//! update of the same shapes in the same process. It runs the trainer's own
//! [`Trainer::update`] (the code `emergence train --learner mlp` runs): advantages, the
//! minibatches, the fused step, the optimizer.

use super::{Algo, Batch, Hyper, LearnerKind, Step, TrainError, Trainer, Trajectory, UpdateStats};
use crate::core::{CODES, Encoded};
use crate::policy::mlp::{MlpHandle, MlpNet};
use candle_core::Device;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The quadrant scene's sizes: 91 view cells, 69 header fields, 9 actions.
pub const CELLS: usize = 91;
/// Header fields.
pub const DENSE: usize = 69;
/// Actions.
pub const ACTIONS: usize = 9;

/// What to update on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateBench {
    /// Arenas (each of 4 agents).
    pub arenas: usize,
    /// Steps of each episode (every agent decides at each).
    pub steps: usize,
    /// The algorithm (`ippo`: the PPO loss with a value head).
    pub algo: Algo,
    /// Passes over the batch.
    pub epochs: usize,
    /// Decisions a gradient step.
    pub minibatch: usize,
    /// Seeds the weights, the batch and the minibatch order.
    pub seed: u64,
}

impl Default for UpdateBench {
    /// An IPPO iteration of 64 quadrant arenas: 64 × 4 agents × 200 steps = 51,200 decisions.
    fn default() -> Self {
        Self {
            arenas: 64,
            steps: 200,
            algo: Algo::Ippo,
            epochs: 4,
            minibatch: 1024,
            seed: 0,
        }
    }
}

/// A trainer and the batch it updates on, made once; [`MlpUpdate::run`] takes one update.
pub struct MlpUpdate {
    trainer: Trainer,
    batch: Batch,
    rng: ChaCha8Rng,
}

impl MlpUpdate {
    /// The network, its trainer (the `mlp` learner's settings for `algo`, with `spec`'s
    /// epochs and minibatch) and a batch of random decisions.
    pub fn new(spec: UpdateBench) -> Result<Self, TrainError> {
        let device = Device::Cpu;
        let handle = MlpHandle::default();
        handle.set(MlpNet::new(CELLS, DENSE, ACTIONS, spec.seed, &device)?);
        let hyper = Hyper {
            epochs: spec.epochs,
            minibatch: spec.minibatch,
            ..Hyper::for_learner(spec.algo, LearnerKind::Mlp)
        };
        let trainer = Trainer::new_mlp(&handle, ACTIONS, spec.algo, hyper, spec.seed, &device)?;
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let slots = 4;
        let mut trajectories = Vec::new();
        for arena in 0..spec.arenas {
            for slot in 0..slots {
                let steps = (0..spec.steps)
                    .map(|_| random_step(&mut rng))
                    .collect::<Vec<_>>();
                trajectories.push(Trajectory {
                    arena: arena as u32,
                    slot: slot as u16,
                    team: (slot / 2) as u8,
                    steps,
                    terminated: true,
                    ..Default::default()
                });
            }
        }
        Ok(Self {
            trainer,
            batch: Batch {
                trajectories,
                episodes: Vec::new(),
                slots,
            },
            rng,
        })
    }

    /// Decisions in the batch.
    pub fn samples(&self) -> usize {
        self.batch.trajectories.iter().map(|t| t.steps.len()).sum()
    }

    /// One update (its seconds in [`UpdateStats::update_seconds`]).
    pub fn run(&mut self) -> Result<UpdateStats, TrainError> {
        self.trainer.update(&self.batch, &mut self.rng)
    }
}

/// Seconds of one update of `spec` on a pool of `threads` threads (the batch and the trainer
/// made before the clock starts).
pub fn time_update(spec: UpdateBench, threads: usize) -> Result<f64, TrainError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .build()
        .map_err(|e| TrainError::Config(format!("a pool of {threads} threads: {e}")))?;
    pool.install(|| MlpUpdate::new(spec)?.run().map(|s| s.update_seconds))
}

/// A decision of random cells and fields, legal actions (the taken one always), a
/// log-probability near a uniform policy's, a value and a reward.
fn random_step(rng: &mut ChaCha8Rng) -> Step {
    let action = rng.random_range(0..ACTIONS as u8);
    let mut legal: Vec<bool> = (0..ACTIONS).map(|_| rng.random_bool(0.7)).collect();
    legal[usize::from(action)] = true;
    Step {
        encoded: Encoded {
            cells: (0..CELLS)
                .map(|_| rng.random_range(0..CODES as u8))
                .collect(),
            dense: (0..DENSE).map(|_| rng.random_range(-1.0..1.0)).collect(),
        },
        legal,
        action,
        logprob: -(ACTIONS as f32).ln() + rng.random_range(-0.3..0.3),
        value: rng.random_range(-0.5..0.5),
        reward: rng.random_range(-1.0..1.0),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The synthetic update runs every minibatch of a small batch and moves the weights.
    #[test]
    fn the_synthetic_update_takes_every_step() {
        let mut u = MlpUpdate::new(UpdateBench {
            arenas: 2,
            steps: 300,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(u.samples(), 2400);
        let s = u.run().unwrap();
        // 2400 decisions in minibatches of 1024: 3 a pass, 4 passes.
        assert_eq!((s.steps, s.skipped, s.samples), (12, 0, 2400));
        assert!(s.grad_norm > 0.0 && s.update_seconds > 0.0, "{s:?}");
    }
}
