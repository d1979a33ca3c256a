//! MAGRPO: multi-agent group-relative policy optimisation (Liu et al. 2025, "LLM
//! Collaboration With Multi-Agent Reinforcement Learning", arXiv 2508.04652; the CoMLRL
//! library).
//!
//! Cooperative agents share one reward; there is no critic. A group is several rollouts
//! from the same start, and each rollout is credited with how much better its shared return
//! was than its group's:
//!
//! ```text
//! R_{n,t} = Σ_i r^i_{n,t}                          (the shared reward of arena n at step t)
//! G_{n,t} = Σ_{u≥t} γ^{u−t} R_{n,u}
//! A_{n,t} = (G_{n,t} − mean_m G_{m,t}) / (std_m G_{m,t} + ε)     (m over the group)
//! loss    = −mean min(ρ Â, clip(ρ, 1−ε, 1+ε) Â) − c_e H[π]  (+ β k3 KL to the reference)
//! ```
//!
//! Every agent of arena `n` gets `A_{n,t}` at step `t`.
//!
//! What a group is here, and how it differs from the paper: a group is `group_size`
//! consecutive arenas that share their seed ([`crate::core::Arenas`]): whole episodes from
//! the same start state with the same world randomness, which diverge as soon as the agents'
//! samples differ; the mean at step `t` is over the group's arenas at that step. In the
//! paper, a group is the `G` joint responses the agents sample from one and the same history
//! at a turn; for several turns the episode branches from that history (a tree of rollouts),
//! so every member of a group shares its whole past. Here only the first step of a group
//! shares its history exactly; later steps compare rollouts whose pasts may differ, so the
//! group mean is a baseline of the start state's value rather than of the current
//! history's. The tree would cost `G^T` rollouts for `T` steps; whole episodes cost `G`.
//! (The variance of the two was not measured: the grouping is unchanged from earlier
//! versions of this module.)

use crate::train::advantage::{group_relative, returns_to_go};
use crate::train::{Batch, Hyper};
use std::collections::BTreeMap;

use super::groups;

/// Each arena's shared reward (the sum over its trained agents) as returns-to-go, minus the
/// mean over its group's arenas at the same step (over their std when `group_std`); every
/// agent of the arena gets the arena's advantage. Targets are the shared returns-to-go.
pub fn advantages(batch: &Batch, h: &Hyper) -> Vec<(Vec<f32>, Vec<f32>)> {
    let mut out = vec![(Vec::new(), Vec::new()); batch.trajectories.len()];
    let summed = batch.shared_rewards();
    for arenas in groups(batch, h.group_size).values() {
        let shared: Vec<(u32, Vec<f32>)> = arenas
            .keys()
            .map(|a| (*a, returns_to_go(&summed[a], h.gamma)))
            .collect();
        let len = shared.iter().map(|(_, g)| g.len()).max().unwrap_or(0);
        let mut adv: BTreeMap<u32, Vec<f32>> = shared
            .iter()
            .map(|(a, g)| (*a, vec![0.0; g.len()]))
            .collect();
        for t in 0..len {
            let present: Vec<(u32, f32)> = shared
                .iter()
                .filter_map(|(a, g)| g.get(t).map(|&x| (*a, x)))
                .collect();
            let rel = group_relative(
                &present.iter().map(|p| p.1).collect::<Vec<_>>(),
                h.group_std,
                1e-6,
            );
            for ((a, _), r) in present.iter().zip(rel) {
                if let Some(v) = adv.get_mut(a) {
                    v[t] = r;
                }
            }
        }
        for (a, g) in &shared {
            for &i in &arenas[a] {
                let n = batch.trajectories[i].steps.len();
                out[i] = (adv[a][..n].to_vec(), g[..n].to_vec());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::algo::tests::traj;

    fn hyper(std: bool) -> Hyper {
        Hyper {
            gamma: 1.0,
            group_size: 2,
            group_std: std,
            ..Hyper::default()
        }
    }

    /// Arena 0: rewards [1, 0] and [1, 2], shared [2, 2], returns-to-go [4, 2];
    /// arena 1: [0, 0] and [0, 1], shared [0, 1], returns-to-go [1, 1]. Group means
    /// [2.5, 1.5], so arena 0 gets [1.5, 0.5] and arena 1 [−1.5, −0.5]; over the group std
    /// ([1.5, 0.5]) both become ±[1, 1].
    #[test]
    fn magrpo_credits_the_shared_return_against_the_group() {
        let batch = Batch {
            trajectories: vec![
                traj(0, 0, &[1.0, 0.0]),
                traj(0, 1, &[1.0, 2.0]),
                traj(1, 0, &[0.0, 0.0]),
                traj(1, 1, &[0.0, 1.0]),
            ],
            ..Default::default()
        };
        let plain = advantages(&batch, &hyper(false));
        assert_eq!(plain[0].0, vec![1.5, 0.5]);
        assert_eq!(plain[1].0, vec![1.5, 0.5]);
        assert_eq!(plain[2].0, vec![-1.5, -0.5]);
        assert_eq!(plain[0].1, vec![4.0, 2.0]);
        let scaled = advantages(&batch, &hyper(true));
        for (i, sign) in [(0, 1.0f32), (3, -1.0)] {
            for a in &scaled[i].0 {
                assert!((a - sign).abs() < 1e-4, "{:?}", scaled[i].0);
            }
        }
    }
}
