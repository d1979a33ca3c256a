//! IPPO: independent PPO per agent (de Witt et al. 2020, "Is Independent Learning All You
//! Need in the StarCraft Multi-Agent Challenge?"; PPO: Schulman et al. 2017).
//!
//! ```text
//! δ_t  = r_t + γ V(s_{t+1}) − V(s_t)
//! A_t  = δ_t + γλ A_{t+1}                                     (GAE, γ 0.99, λ 0.95)
//! ρ_t  = π(a_t | s_t) / π_old(a_t | s_t)
//! loss = −mean_t min(ρ_t Â_t, clip(ρ_t, 1−ε, 1+ε) Â_t)        (ε 0.2)
//!      + c_v · max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²) − c_e · H[π]
//! ```
//!
//! Every agent's own value head (the model's, on its own observation) is the critic. A
//! terminated episode bootstraps from 0; a truncated one from the value of the state after
//! its last step ([`crate::train::Trajectory::bootstrap`]), as CleanRL's `ppo.py` does with
//! `next_value`. Where the rollout could not record that value, the last value estimate
//! (the state before the last step) stands in.

use crate::train::advantage::gae;
use crate::train::{Batch, Hyper, Trajectory};

/// The value GAE bootstraps from after `tr`'s last step: 0 when the rules ended the episode,
/// the value of the state after the last step when it was truncated.
pub fn bootstrap(tr: &Trajectory, critic_bootstrap: Option<f32>) -> f32 {
    if tr.terminated {
        0.0
    } else {
        critic_bootstrap
            .or(tr.bootstrap)
            .or_else(|| tr.steps.last().map(|s| s.value))
            .unwrap_or(0.0)
    }
}

/// GAE advantages and value targets of every trajectory of `batch`, in its order, from the
/// values the agents acted with.
pub fn advantages(batch: &Batch, h: &Hyper) -> Vec<(Vec<f32>, Vec<f32>)> {
    batch
        .trajectories
        .iter()
        .map(|tr| {
            let rewards: Vec<f32> = tr.steps.iter().map(|s| s.reward).collect();
            let values: Vec<f32> = tr.steps.iter().map(|s| s.value).collect();
            gae(&rewards, &values, bootstrap(tr, None), h.gamma, h.lambda)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::algo::tests::{close, traj};

    /// A truncated trajectory bootstraps from the state after its last step, not the one
    /// before it. r = [1, 1], V = [0.5, 2], V(after) = 4, γ 0.5, λ 1:
    /// δ_1 = 1 + 0.5·4 − 2 = 1; δ_0 = 1 + 0.5·2 − 0.5 = 1.5; A_0 = 1.5 + 0.5·1 = 2.
    /// Bootstrapping from V(s_1) = 2 instead would give A_1 = 0, A_0 = 1.5.
    #[test]
    fn a_truncated_episode_bootstraps_from_the_state_after_its_last_step() {
        let mut tr = traj(0, 0, &[1.0, 1.0]);
        tr.steps[0].value = 0.5;
        tr.steps[1].value = 2.0;
        tr.terminated = false;
        tr.bootstrap = Some(4.0);
        let h = Hyper {
            gamma: 0.5,
            lambda: 1.0,
            ..Hyper::default()
        };
        let batch = Batch {
            trajectories: vec![tr.clone()],
            ..Default::default()
        };
        let (adv, targets) = &advantages(&batch, &h)[0];
        close(adv, &[2.0, 1.0]);
        close(targets, &[2.5, 3.0]);
        // Terminated: the same rewards bootstrap from 0. δ_1 = 1 − 2 = −1;
        // δ_0 = 1.5; A_0 = 1.5 − 0.5 = 1.
        tr.terminated = true;
        let batch = Batch {
            trajectories: vec![tr],
            ..Default::default()
        };
        close(&advantages(&batch, &h)[0].0, &[1.0, -1.0]);
    }
}
