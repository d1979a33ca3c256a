//! The decisions of a batch as the update reads them: each with its advantage and value
//! target, from the algorithm's estimator (`algo/`: REINFORCE's returns, GAE for IPPO and
//! CORY, GAE on the centralised critic's values for MAPPO, MAGRPO's group baseline, Advantage
//! Alignment's credits), normalised over the batch where the algorithm normalises them.

use super::{Model, Trainer};
use crate::policy::mlp::Encoded;
use crate::train::advantage::normalise;
use crate::train::algo;
use crate::train::critic::Critic;
use crate::train::rollout::Batch;
use crate::train::{Algo, TrainError, UpdateError};

/// One decision as the update reads it: the rollout's own rows borrowed, not copied (an
/// update of 51,200 decisions had spent 12 ms of its 180 copying them).
pub(super) struct Sample<'b> {
    /// The arena it was taken in (which rank computes its gradient).
    pub(super) arena: u32,
    /// MAPPO: the critic's input (global state and the agent's one-hot slot).
    pub(super) global: Encoded,
    /// An `mlp`'s input.
    pub(super) encoded: &'b Encoded,
    /// The owner of the agent's adapter under LoRA (its role or slot index).
    pub(super) owner: usize,
    pub(super) tokens: &'b [u32],
    pub(super) legal: &'b [bool],
    pub(super) action: u8,
    /// The word choice that went with the action (families with talk).
    pub(super) said: Option<u8>,
    /// The decision's log-probability when taken: the action's and the word's.
    pub(super) logprob: f32,
    pub(super) value: f32,
    pub(super) adv: f32,
    pub(super) target: f32,
    /// A network with memory: the state the decision was made from.
    pub(super) memory: &'b [f32],
    /// Whether a training sequence starts here (every [`SEQUENCE`]-th step of an episode; a
    /// language model with memory: where a window of its turns begins).
    pub(super) start: bool,
    /// A language model with memory: how its context was read.
    pub(super) read: Option<crate::core::ContextRead>,
}

/// Steps per training sequence of a network with memory (`gru`): each episode is cut into
/// sequences of this many steps, each started from the state its first decision was made
/// from (stored in the rollout) and run through the GRU with backpropagation through its
/// steps; minibatches are whole sequences, shuffled as units (Sample Factory's and
/// CleanRL's recurrent PPO train on chunks the same way; 32 is Sample Factory's default
/// recurrence).
pub const SEQUENCE: usize = 32;

/// MAPPO's critic input: a global state and the valued agent's one-hot slot.
fn with_slot(state: &Encoded, slot: u16, slots: usize) -> Encoded {
    let mut row = state.clone();
    crate::core::push_one_hot(&mut row.dense, usize::from(slot), slots);
    row
}

impl Trainer {
    /// Per trajectory of `batch` (in its order): advantages and value targets.
    fn advantages(
        &self,
        batch: &Batch,
        critic_values: Option<&(Vec<Vec<f32>>, Vec<Option<f32>>)>,
    ) -> Result<Vec<(Vec<f32>, Vec<f32>)>, TrainError> {
        let h = &self.hyper;
        Ok(match (self.algo, critic_values) {
            (Algo::Reinforce, _) => algo::reinforce::advantages(batch, h),
            (Algo::Mappo, Some((c, after))) => algo::mappo::advantages(batch, h, c, after),
            (Algo::Ippo | Algo::Mappo | Algo::Cory, _) => algo::ippo::advantages(batch, h),
            (Algo::Magrpo, _) => algo::magrpo::advantages(batch, h),
            (Algo::AdvantageAlignment, _) => algo::advantage_alignment::advantages(batch, h)?,
        })
    }

    /// MAPPO: every trajectory's critic inputs, step by step.
    fn globals(&self, batch: &Batch) -> Result<Vec<Vec<Encoded>>, TrainError> {
        batch
            .trajectories
            .iter()
            .map(|tr| {
                tr.steps
                    .iter()
                    .map(|s| {
                        if s.global.cells.is_empty() && s.global.dense.is_empty() {
                            return Err(UpdateError::NoGlobalState {
                                arena: tr.arena,
                                slot: tr.slot,
                            }
                            .into());
                        }
                        Ok(with_slot(&s.global, tr.slot, batch.slots))
                    })
                    .collect()
            })
            .collect()
    }

    /// Every decision of `batch`, trajectory by trajectory, with its advantage and target.
    pub(super) fn samples<'b>(&mut self, batch: &'b Batch) -> Result<Vec<Sample<'b>>, TrainError> {
        let globals = if self.algo == Algo::Mappo {
            let g = self.globals(batch)?;
            let Some(first) = g.iter().flatten().next() else {
                // Nothing to learn from (a model whose agents made no decision this time).
                return Ok(Vec::new());
            };
            let (cells, dense) = (first.cells.len(), first.dense.len());
            if self.critic.is_none() {
                self.critic = Some(Critic::new(
                    cells,
                    dense,
                    self.seed,
                    self.opt.params.lr,
                    &self.device,
                )?);
            }
            if let Some(c) = &self.critic
                && let Some(bad) = g.iter().flatten().find(|r| !c.fits(r))
            {
                let (cc, cd) = c.sizes();
                return Err(UpdateError::CriticShape {
                    cells: cc,
                    dense: cd,
                    got_cells: bad.cells.len(),
                    got_dense: bad.dense.len(),
                }
                .into());
            }
            Some(g)
        } else {
            None
        };
        let critic_values: Option<(Vec<Vec<f32>>, Vec<Option<f32>>)> =
            match (&globals, &self.critic) {
                (Some(g), Some(c)) => {
                    let values = g
                        .iter()
                        .map(|rows| c.values(&rows.iter().collect::<Vec<_>>()))
                        .collect::<Result<Vec<_>, _>>()?;
                    // A truncated episode: the critic's value of the state after its last step.
                    let after = batch
                        .trajectories
                        .iter()
                        .map(|tr| {
                            if tr.terminated {
                                return Ok(None);
                            }
                            let Some(state) = &tr.final_global else {
                                return Ok(None);
                            };
                            let row = with_slot(state, tr.slot, batch.slots);
                            if !c.fits(&row) {
                                return Ok(None);
                            }
                            Ok(c.values(&[&row])?.first().copied())
                        })
                        .collect::<Result<Vec<_>, TrainError>>()?;
                    Some((values, after))
                }
                _ => None,
            };
        let advantages = self.advantages(batch, critic_values.as_ref())?;
        // Whether this model learns what its agents say (and so rates decisions by both).
        let trains_words = match &self.model {
            Model::Lm(m) => m.talk.is_some(),
            Model::Mlp(m) => m.net.as_ref().is_some_and(|n| n.words > 0),
        };
        let mut out = Vec::with_capacity(batch.trajectories.iter().map(|t| t.steps.len()).sum());
        for (i, (traj, (adv, targets))) in batch.trajectories.iter().zip(advantages).enumerate() {
            for (t, ((s, a), target)) in traj.steps.iter().zip(adv).zip(targets).enumerate() {
                let start = match &self.model {
                    // A language model with memory: where a window begins (its context read
                    // afresh from position 0).
                    Model::Lm(m) if m.memory => {
                        t == 0 || s.read.is_none_or(|r| r.computed_from == 0)
                    }
                    _ => t % SEQUENCE == 0,
                };
                out.push(Sample {
                    arena: traj.arena,
                    global: globals
                        .as_ref()
                        .map(|g| g[i][t].clone())
                        .unwrap_or_default(),
                    encoded: &s.encoded,
                    owner: match &self.model {
                        Model::Lm(m) => m.owner.index(traj.role, traj.slot),
                        Model::Mlp(_) => 0,
                    },
                    tokens: &s.tokens,
                    legal: &s.legal,
                    action: s.action,
                    said: s.said.filter(|_| trains_words),
                    logprob: s.logprob + if trains_words { s.said_logprob } else { 0.0 },
                    value: critic_values.as_ref().map_or(s.value, |c| c.0[i][t]),
                    adv: a,
                    target,
                    memory: &s.memory,
                    start,
                    read: s.read,
                });
            }
        }
        // MAGRPO's advantages are already in units of their group's spread, Advantage
        // Alignment's credits in units of the batch's advantage spread (normalised before the
        // product, as its paper's code does, and not again after it).
        if !matches!(self.algo, Algo::Magrpo | Algo::AdvantageAlignment) {
            let mut adv: Vec<f32> = out.iter().map(|s| s.adv).collect();
            self.advantage_spread = Some(normalise(&mut adv));
            for (s, a) in out.iter_mut().zip(adv) {
                s.adv = a;
            }
        }
        Ok(out)
    }
}
