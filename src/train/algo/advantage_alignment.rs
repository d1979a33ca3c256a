//! Advantage Alignment (Duque et al., "Advantage Alignment Algorithms", arXiv 2406.14662;
//! for language-model agents "Learning Robust Social Strategies with Large Language Models",
//! arXiv 2511.19405 and its code, github.com/dereckpiche/AdAlignLLM).
//!
//! Opponent shaping without differentiating through the opponent: an agent's action at `t`
//! is credited with its own advantage plus a term that is positive when its own past
//! advantages and the others' advantage now have the same sign: "what was good for me, when
//! it is also good for them now, is made more likely". Agents that learn this way reward
//! cooperation and punish defection (reciprocity), where naive learners defect.
//!
//! For learning agent `i` in an arena, over one episode of `T` steps:
//!
//! ```text
//! G^i_{n,t}  = Σ_{u≥t} γ^{u−t} r^i_{n,u}                                (Monte Carlo return)
//! A^i_{n,t}  = G^i_{n,t} − 1/(N−1) Σ_{m≠n} G^i_{m,t}    (leave-one-out over the N rollouts n of a group)
//! Â^i_t      = (A^i_t − mean(A)) / std(A)          (whitened over the batch: every agent, every step)
//! w^i_t      = Σ_{k<t} γ^{t−k+1} Â^i_k                                  (own past, discounted)
//! credit^i_t = Â^i_t + β · w^i_t · Σ_{j≠i} Â^j_t
//! ```
//!
//! - The baseline (AdAlignLLM `get_rloo_credits`): rollout `n`'s return minus the mean of the
//!   same agent's returns-to-go at the same step in the other rollouts of its group. A group
//!   is `group_size` consecutive arenas that share their seed ([`crate::core::Arenas`]): the
//!   same start and the same world randomness, different samples of the policies. A group of
//!   one has no other rollout to compare with, so it is refused (see [`check_group`]).
//! - The discount inside the sum is the authors' code's (`get_advantage_alignment_weights`
//!   with `exclude_k_equals_t`, then multiplied by γ once more): `γ^{t−k+1}`, `k<t` only, and
//!   no outer `γ^t` (their `skip_discounted_state_visitation`). The own term is the plain
//!   advantage.
//! - Normalisation before the product: the advantages are whitened (mean subtracted,
//!   divided by the standard deviation) over the whole batch (every learning agent, every
//!   step) before they are multiplied, so `β` means the same on a 0-5 payoff as on a 0-50
//!   one. The original code whitens its advantages over the batch before the product
//!   (`normalize_advantages`); the language-model code divides the rewards by a fixed
//!   constant (5 for the Prisoner's Dilemma), which is the same thing for that one game
//!   only. The leave-one-out advantages have mean 0 in every group already (steps that fall
//!   back to the value estimate aside), so mostly the scale changes.
//! - More than two learning agents: the term sums over the other agents of the arena
//!   (the original Melting Pot code, `aa_terms`: `(1 − I) A`); the language-model code
//!   supports two players only.
//!
//! Where this differs from the papers, and why:
//! - The update is the clipped PPO surrogate over `epochs` passes (2 by default; the original
//!   paper's code is proximal too, `proximal: True`), not AdAlignLLM's single REINFORCE step
//!   with a truncated importance ratio: the same batch is used twice, which the small
//!   budgets here need. The credits are not normalised again after the product (the
//!   trainer normalises other algorithms' advantages over the batch): subtracting the
//!   batch's mean credit would shift the first step's credit, which has no shaping term, by
//!   the mean of the others' shaping terms. Measured on the Prisoner's Dilemma (seed 1, 32
//!   arenas, 2 passes): with that second normalisation, self-play earned 2.41 per round
//!   after 30 updates and cooperated first in half the games; without it, 2.91 and always.
//! - Defaults (see [`crate::train::Hyper::for_algo`]): β 0.5 and γ 0.9 as in AdAlignLLM's
//!   Prisoner's Dilemma configuration; a group of 8 arenas where the authors compare all of
//!   an iteration's matches (their seeds are all different; a matrix game has no world
//!   randomness, so a group there is simply 8 more matches to compare with).
//! - Where episodes of one group end at different steps, a step that only one rollout of the
//!   group reached has no other to compare with; its baseline is the agent's value estimate.
//! - The returns are Monte Carlo returns of the episode as played: a truncated episode is
//!   not bootstrapped (the papers' games end by their rules).

use std::collections::BTreeMap;

use super::groups;
use crate::train::TrainError;
use crate::train::advantage::{leave_one_out, returns_to_go};
use crate::train::{Batch, Hyper};

/// Refuses a group of one: the leave-one-out baseline needs another rollout of the same
/// start to compare with (a run's settings are checked for it before it starts,
/// [`crate::train::rules::check`]; this guards a direct call).
pub fn check_group(group_size: u32) -> Result<(), TrainError> {
    if group_size < 2 {
        return Err(crate::train::SettingsError::AdvantageAlignmentGroup(group_size).into());
    }
    Ok(())
}

/// The shaping weights of one agent over one trajectory, from its normalised advantages:
/// `w_t = Σ_{k<t} γ^{t−k+1} Â_k` (so `w_0 = 0`).
pub fn own_past(adv: &[f32], gamma: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(adv.len());
    // s_t = Σ_{k<t} γ^{t−k} Â_k, kept incrementally: s_{t+1} = γ (s_t + Â_t); w_t = γ s_t.
    let mut s = 0.0f32;
    for &a in adv {
        out.push(gamma * s);
        s = gamma * (s + a);
    }
    out
}

/// The credit of one agent over one trajectory: `Â_t + β · w_t · O_t`, with `own` its
/// normalised advantages and `others` the sum of the other agents' at each step.
pub fn credit(own: &[f32], others: &[f32], gamma: f32, beta: f32) -> Vec<f32> {
    let w = own_past(own, gamma);
    own.iter()
        .zip(others)
        .zip(w)
        .map(|((a, o), w)| a + beta * w * o)
        .collect()
}

/// Advantages (the credits) and value targets (the returns-to-go) of every trajectory of
/// `batch`, in its order.
pub fn advantages(batch: &Batch, h: &Hyper) -> Result<Vec<(Vec<f32>, Vec<f32>)>, TrainError> {
    check_group(h.group_size)?;
    let rtg: Vec<Vec<f32>> = batch
        .trajectories
        .iter()
        .map(|tr| {
            returns_to_go(
                &tr.steps.iter().map(|s| s.reward).collect::<Vec<_>>(),
                h.gamma,
            )
        })
        .collect();
    let grouped = groups(batch, h.group_size);
    // Leave-one-out advantages: per group, per slot, per step.
    let mut adv: Vec<Vec<f32>> = rtg.clone();
    for arenas in grouped.values() {
        if let Some((a, idx)) = arenas.iter().find(|(_, idx)| idx.len() < 2) {
            return Err(crate::train::UpdateError::OneLearner {
                arena: *a,
                agents: idx.len(),
            }
            .into());
        }
        let mut by_slot: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for idx in arenas.values() {
            for &i in idx {
                by_slot
                    .entry(batch.trajectories[i].slot)
                    .or_default()
                    .push(i);
            }
        }
        for trajs in by_slot.values() {
            let len = trajs.iter().map(|&i| rtg[i].len()).max().unwrap_or(0);
            for t in 0..len {
                let present: Vec<usize> = trajs
                    .iter()
                    .copied()
                    .filter(|&i| t < rtg[i].len())
                    .collect();
                if present.len() < 2 {
                    for &i in &present {
                        adv[i][t] = rtg[i][t] - batch.trajectories[i].steps[t].value;
                    }
                    continue;
                }
                let loo = leave_one_out(&present.iter().map(|&i| rtg[i][t]).collect::<Vec<_>>());
                for (&i, a) in present.iter().zip(loo) {
                    adv[i][t] = a;
                }
            }
        }
    }
    // Normalised by the spread over the whole batch, before the product.
    let all: Vec<f32> = adv.iter().flatten().copied().collect();
    let n = all.len().max(1) as f32;
    let mean = all.iter().sum::<f32>() / n;
    let std = (all.iter().map(|a| (a - mean).powi(2)).sum::<f32>() / n).sqrt();
    let norm: Vec<Vec<f32>> = adv
        .iter()
        .map(|a| a.iter().map(|x| (x - mean) / (std + 1e-8)).collect())
        .collect();
    let mut out = vec![(Vec::new(), Vec::new()); batch.trajectories.len()];
    for arenas in grouped.values() {
        for idx in arenas.values() {
            for &i in idx {
                let len = norm[i].len();
                let others: Vec<f32> = (0..len)
                    .map(|t| {
                        idx.iter()
                            .filter(|&&j| j != i)
                            .map(|&j| norm[j].get(t).copied().unwrap_or(0.0))
                            .sum()
                    })
                    .collect();
                out[i] = (
                    credit(&norm[i], &others, h.gamma, h.aa_beta),
                    rtg[i].clone(),
                );
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::algo::tests::{close, traj};

    #[test]
    fn the_own_past_is_discounted_as_the_authors_code_has_it() {
        // γ 0.5, Â = [1, 2, 4]: w_0 = 0; w_1 = 0.5²·1 = 0.25; w_2 = 0.5³·1 + 0.5²·2 = 0.625.
        close(&own_past(&[1.0, 2.0, 4.0], 0.5), &[0.0, 0.25, 0.625]);
        // Credit with β 2 and others [10, 1, −1]: [1, 2 + 2·0.25·1, 4 + 2·0.625·(−1)].
        close(
            &credit(&[1.0, 2.0, 4.0], &[10.0, 1.0, -1.0], 0.5, 2.0),
            &[1.0, 2.5, 2.75],
        );
        // β 0 is the plain advantage: no outer discount.
        close(&credit(&[1.0, 1.0], &[5.0, 5.0], 0.5, 0.0), &[1.0, 1.0]);
    }

    /// Two arenas of one group, γ 1. Player 0's returns-to-go: [1, 0] (arena 0), [4, 1]
    /// (arena 1); player 1's: [2, 2], [0, 0]. Leave-one-out: player 0 [−3, −1] and [3, 1],
    /// player 1 [2, 2] and [−2, −2]. Over the batch the mean is 0 and the std
    /// s = sqrt((9+1+9+1+4+4+4+4)/8) = sqrt(4.5). Arena 0, player 0, β 0.5:
    /// Â = [−3, −1]/s, others Â = [2, 2]/s; w = [0, 1·(−3/s)];
    /// credit = [−3/s, −1/s + 0.5·(−3/s)·(2/s)].
    #[test]
    fn credits_by_hand() {
        let batch = Batch {
            trajectories: vec![
                traj(0, 0, &[1.0, 0.0]),
                traj(0, 1, &[0.0, 2.0]),
                traj(1, 0, &[3.0, 1.0]),
                traj(1, 1, &[0.0, 0.0]),
            ],
            ..Default::default()
        };
        let h = Hyper {
            gamma: 1.0,
            group_size: 2,
            aa_beta: 0.5,
            ..Hyper::default()
        };
        let out = advantages(&batch, &h).expect("two players");
        let s = 4.5f32.sqrt();
        close(
            &out[0].0,
            &[-3.0 / s, -1.0 / s + 0.5 * (-3.0 / s) * (2.0 / s)],
        );
        // Player 1 in arena 0: Â [2, 2]/s, others [−3, −1]/s; w_1 = 2/s.
        close(
            &out[1].0,
            &[2.0 / s, 2.0 / s + 0.5 * (2.0 / s) * (-1.0 / s)],
        );
        assert_eq!(out[0].1, vec![1.0, 0.0]);
    }

    /// The shaping term does not change when every reward is scaled: Â is scale-free.
    #[test]
    fn the_credit_does_not_depend_on_the_rewards_scale() {
        let rewards = [
            [3.0, 0.0, 5.0],
            [1.0, 5.0, 0.0],
            [3.0, 3.0, 1.0],
            [0.0, 1.0, 1.0],
        ];
        let batch = |k: f32| Batch {
            trajectories: rewards
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let r: Vec<f32> = r.iter().map(|x| x * k).collect();
                    traj((i / 2) as u32, (i % 2) as u16, &r)
                })
                .collect(),
            ..Default::default()
        };
        let h = Hyper {
            gamma: 0.9,
            group_size: 2,
            aa_beta: 1.0,
            ..Hyper::default()
        };
        let one = advantages(&batch(1.0), &h).expect("scale 1");
        let ten = advantages(&batch(10.0), &h).expect("scale 10");
        for (a, b) in one.iter().zip(&ten) {
            close(&a.0, &b.0);
        }
    }

    /// Three learners: each is shaped by the sum of the two others' advantages.
    #[test]
    fn with_three_learners_the_term_sums_over_the_others() {
        let batch = Batch {
            trajectories: vec![
                traj(0, 0, &[1.0, 0.0]),
                traj(0, 1, &[0.0, 2.0]),
                traj(0, 2, &[2.0, 2.0]),
                traj(1, 0, &[3.0, 1.0]),
                traj(1, 1, &[0.0, 0.0]),
                traj(1, 2, &[1.0, 0.0]),
            ],
            ..Default::default()
        };
        let h = Hyper {
            gamma: 1.0,
            group_size: 2,
            aa_beta: 1.0,
            ..Hyper::default()
        };
        let with = advantages(&batch, &h).expect("three");
        let plain = advantages(
            &batch,
            &Hyper {
                aa_beta: 0.0,
                ..h.clone()
            },
        )
        .expect("plain");
        // credit_1 − Â_1 = w_1 · (Â¹_1 + Â²_1), with w_1 = Â⁰_0 (γ 1).
        let extra = with[0].0[1] - plain[0].0[1];
        let want = plain[0].0[0] * (plain[1].0[1] + plain[2].0[1]);
        assert!((extra - want).abs() < 1e-5, "{extra} vs {want}");
    }

    #[test]
    fn a_group_of_one_and_a_lone_learner_are_refused() {
        let batch = Batch {
            trajectories: vec![traj(0, 0, &[1.0]), traj(0, 1, &[1.0])],
            ..Default::default()
        };
        let one = Hyper {
            group_size: 1,
            ..Hyper::default()
        };
        let err = advantages(&batch, &one).unwrap_err().to_string();
        assert!(err.contains("at least 2 arenas"), "{err}");
        let lone = Batch {
            trajectories: vec![traj(0, 0, &[1.0]), traj(1, 0, &[1.0])],
            ..Default::default()
        };
        let two = Hyper {
            group_size: 2,
            ..Hyper::default()
        };
        let err = advantages(&lone, &two).unwrap_err().to_string();
        assert!(err.contains("2 or more on `lm`"), "{err}");
    }
}
