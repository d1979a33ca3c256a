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
    /// Where the decisions' observations come from.
    pub rows: Rows,
}

/// Where a bench's observations come from. The fused step costs a cell nothing when it shows
/// its usual code (the one most of the minibatch's rows show there), so the figures depend on
/// the rows; PyTorch's update does the same arithmetic whatever the values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rows {
    /// Every cell drawn uniformly from the 16 codes, every header field from ±1: 15 of 16
    /// cells away from their usual code, the fused path's worst case.
    #[default]
    Uniform,
    /// The shipped quadrant scene (`scenes/hide_and_seek/quadrant.scene.ron`, the sizes
    /// above) played by random agents, each decision's features as `train` records them:
    /// what an iteration of `emergence train` on it updates on.
    Quadrant,
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
            rows: Rows::Uniform,
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
        let mut played = match spec.rows {
            Rows::Uniform => None,
            Rows::Quadrant => Some(quadrant_rows(spec.arenas, spec.steps, spec.seed)?.into_iter()),
        };
        let mut trajectories = Vec::new();
        for arena in 0..spec.arenas {
            for slot in 0..slots {
                let mut seen = played.as_mut().and_then(|p| p.next());
                let steps = (0..spec.steps)
                    .map(|t| {
                        let mut step = random_step(&mut rng);
                        if let Some((encoded, legal)) = seen.as_mut().and_then(|s| s.get_mut(t)) {
                            step.encoded = std::mem::take(encoded);
                            step.legal = std::mem::take(legal);
                            step.legal[usize::from(step.action)] = true;
                        }
                        step
                    })
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

/// The features and legal actions of every agent (arena by arena, slot by slot) at each of
/// `steps` steps of the shipped quadrant scene, every agent playing `random`.
#[allow(clippy::type_complexity)]
fn quadrant_rows(
    arenas: usize,
    steps: usize,
    seed: u64,
) -> Result<Vec<Vec<(Encoded, Vec<bool>)>>, TrainError> {
    use crate::core::{ActionMask, ArenaAgents, Arenas, EncodeFeatures, Features};
    use crate::headless::{RunConfig, build_app};
    let path = "scenes/hide_and_seek/quadrant.scene.ron";
    let text = crate::scene::shipped()
        .into_iter()
        .find(|(p, _)| p.as_path() == std::path::Path::new(path))
        .map(|(_, t)| t)
        .ok_or_else(|| TrainError::Config(format!("{path} is not shipped")))?;
    let mut scene = crate::load::parse_scene(text, std::path::Path::new(path))
        .map_err(|e| TrainError::Config(e.to_string()))?;
    for a in &mut scene.agents {
        a.policy = "random".into();
    }
    scene.spec.episode.max_steps = steps as u32;
    let mut run = RunConfig::new(scene);
    run.arenas = arenas as u32;
    run.seed = seed;
    run.record_arenas = Vec::new();
    let mut app = build_app(&run)?;
    app.insert_resource(EncodeFeatures);
    let mut out: Vec<Vec<(Encoded, Vec<bool>)>> = Vec::new();
    for _ in 0..steps {
        app.update();
        let world = app.world();
        let mut k = 0;
        for &arena in &world.resource::<Arenas>().entities {
            let Some(members) = world.get::<ArenaAgents>(arena) else {
                continue;
            };
            for &e in members.entities() {
                let (Some(f), Some(mask)) = (world.get::<Features>(e), world.get::<ActionMask>(e))
                else {
                    continue;
                };
                if out.len() <= k {
                    out.push(Vec::with_capacity(steps));
                }
                let legal = (0..ACTIONS).map(|a| mask.0 & (1 << a) != 0).collect();
                out[k].push((f.0.clone(), legal));
                k += 1;
            }
        }
    }
    if out.iter().any(|r| {
        r.first()
            .is_some_and(|(e, _)| e.cells.len() != CELLS || e.dense.len() != DENSE)
    }) {
        return Err(TrainError::Config(format!("{path}: not the bench's sizes")));
    }
    Ok(out)
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

    /// The played rows are the quadrant's: its sizes, most cells at the code most rows show
    /// there (the uniform rows: about one in sixteen), legal masks with the taken action in.
    #[test]
    fn the_quadrant_rows_are_played_observations() {
        let usual = |u: &MlpUpdate| {
            let rows: Vec<&Step> = u.batch.trajectories.iter().flat_map(|t| &t.steps).collect();
            let mut at_usual = 0usize;
            for k in 0..CELLS {
                let mut counts = [0usize; CODES];
                for r in &rows {
                    counts[usize::from(r.encoded.cells[k])] += 1;
                }
                at_usual += counts.iter().max().unwrap();
            }
            assert!(rows.iter().all(|r| r.legal[usize::from(r.action)]));
            at_usual as f64 / (rows.len() * CELLS) as f64
        };
        let spec = UpdateBench {
            arenas: 2,
            steps: 50,
            ..Default::default()
        };
        let played = MlpUpdate::new(UpdateBench {
            rows: Rows::Quadrant,
            ..spec
        })
        .unwrap();
        let uniform = MlpUpdate::new(spec).unwrap();
        assert_eq!(played.samples(), 400);
        let (p, u) = (usual(&played), usual(&uniform));
        assert!(
            p > 0.6 && u < 0.2,
            "cells at their usual code: played {p}, uniform {u}"
        );
        let first = &played.batch.trajectories[0].steps[0].encoded;
        assert_eq!((first.cells.len(), first.dense.len()), (CELLS, DENSE));
    }
}
