//! MAPPO: PPO with a centralised critic (Yu et al. 2022, "The Surprising Effectiveness of
//! PPO in Cooperative Multi-Agent Games").
//!
//! The actors are the agents' own policies on their own observations (as in [`super::ippo`]);
//! the critic `V(s, i)` reads the arena's true global state `s` as its family gives it from
//! agent `i`'s side ([`crate::core::GlobalView`]: the whole map's cells, every agent's
//! position and status, facings where the family has them, the step, hide-and-seek's
//! phase), followed by `i`'s own observation
//! and its one-hot slot: the paper's agent-specific global state, "AS" (in a matrix game the
//! state is the observation, so it appears twice, which the paper's feature pruning would
//! drop). GAE runs over its values:
//!
//! ```text
//! δ_t  = r_t + γ V(s_{t+1}, i) − V(s_t, i)
//! A_t  = δ_t + γλ A_{t+1}
//! loss = the clipped surrogate of IPPO; the critic ([`crate::train::critic::Critic`], two
//!        tanh layers) learns with its own clipped value loss and optimizer
//! ```
//!
//! A truncated episode bootstraps from the critic's value of the global state after its
//! last step ([`crate::train::Trajectory::final_global`]).
//!
//! Measured on the corridor maze (`mlp` without a talk head, 60 updates of 16 arenas, seeds
//! 3/4/5, return per agent on 128 fresh arenas): the state alone, 0.19 / 0.36 / 0.19; with
//! the agent's observation, 0.47 / 0.54 / 0.51 (what an agent knows of the map predicts where
//! it will go); IPPO, 0.35 / 0.41 / 0.42.
//!
//! Where this differs from the paper: the value normalisation (PopArt) is replaced by taking
//! the value loss in units of the batch's return spread; the state's cells are one-hot codes
//! (the paper's environments give vectors of their own design).

use crate::train::advantage::gae;
use crate::train::{Batch, Hyper};

use super::ippo::bootstrap;

/// GAE advantages and targets of every trajectory of `batch`, in its order, over the
/// critic's values (`critic[i][t]` for trajectory `i` at step `t`; `after[i]` its value of
/// the state after the last step, for a truncated episode).
pub fn advantages(
    batch: &Batch,
    h: &Hyper,
    critic: &[Vec<f32>],
    after: &[Option<f32>],
) -> Vec<(Vec<f32>, Vec<f32>)> {
    batch
        .trajectories
        .iter()
        .zip(critic)
        .zip(after)
        .map(|((tr, v), after)| {
            let rewards: Vec<f32> = tr.steps.iter().map(|s| s.reward).collect();
            // Without the state after the last step, the critic's last value stands in.
            let after = after.or_else(|| v.last().copied());
            gae(&rewards, v, bootstrap(tr, after), h.gamma, h.lambda)
        })
        .collect()
}
