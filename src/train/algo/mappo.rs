//! MAPPO: PPO with a centralised critic (Yu et al. 2022, "The Surprising Effectiveness of
//! PPO in Cooperative Multi-Agent Games").
//!
//! The actors are the agents' own policies on their own observations (as in [`super::ippo`]);
//! the critic `V(s, i)` reads the arena's global state `s` plus the valued agent's one-hot
//! slot `i` (the paper's agent-specific global state, "AS"), and GAE runs over its values:
//!
//! ```text
//! δ_t  = r_t + γ V(s_{t+1}, i) − V(s_t, i)
//! A_t  = δ_t + γλ A_{t+1}
//! loss = the clipped surrogate of IPPO; the critic ([`crate::train::critic::Critic`], two
//!        tanh layers) learns with its own clipped value loss and optimizer
//! ```
//!
//! A truncated episode bootstraps from the critic's value of the global state after its
//! last step ([`crate::train::Batch::final_states`]).
//!
//! Where this differs from the paper: the global state is every agent's observation
//! feature row in the arena (the `mlp` features), concatenated in slot order, not the
//! family's true state (positions, map cells, objects) that the paper's environments
//! provide; the value normalisation (PopArt) is replaced by taking the value loss in units
//! of the batch's return spread.

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
