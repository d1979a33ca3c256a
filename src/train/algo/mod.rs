//! The training algorithms, one module each, named as their papers name them. Each module's
//! header holds its paper's formula, its source, and where this implementation differs and
//! why; each computes the advantages (the credit every decision is pushed by) and the value
//! targets of a [`Batch`]. The gradient steps they share (the clipped surrogate or the plain
//! policy gradient, the value loss, the entropy bonus, the KL to the reference) are in
//! [`crate::train::trainer`] and [`crate::train::loss`].
//!
//! | `--algo` | module | paper |
//! |---|---|---|
//! | `reinforce` | [`reinforce`] | Williams 1992, with a learned baseline |
//! | `ippo` | [`ippo`] | de Witt et al. 2020 (PPO per agent: Schulman et al. 2017) |
//! | `mappo` | [`mappo`] | Yu et al. 2022 |
//! | `magrpo` | [`magrpo`] | Liu et al. 2025 (CoMLRL), arXiv 2508.04652 |
//! | `advantage-alignment` | [`advantage_alignment`] | Duque et al., arXiv 2406.14662 and 2511.19405 |
//! | `cory` | [`cory`] | Ma et al. 2024, arXiv 2410.06101 |

pub mod advantage_alignment;
pub mod cory;
pub mod ippo;
pub mod magrpo;
pub mod mappo;
pub mod reinforce;

use std::collections::BTreeMap;

use super::Batch;

/// The groups of `batch`'s arenas (`group_size` consecutive arenas each, which share their
/// seed), as group → arena → its trajectories' indices in the batch.
pub(crate) fn groups(batch: &Batch, group_size: u32) -> BTreeMap<u32, BTreeMap<u32, Vec<usize>>> {
    let mut out: BTreeMap<u32, BTreeMap<u32, Vec<usize>>> = BTreeMap::new();
    for (i, tr) in batch.trajectories.iter().enumerate() {
        out.entry(tr.arena / group_size.max(1))
            .or_default()
            .entry(tr.arena)
            .or_default()
            .push(i);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::train::{Step, Trajectory};

    /// A trajectory of two legal actions with these rewards (values 0).
    pub fn traj(arena: u32, slot: u16, rewards: &[f32]) -> Trajectory {
        Trajectory {
            arena,
            slot,
            terminated: true,
            steps: rewards
                .iter()
                .map(|&reward| Step {
                    tokens: vec![],
                    encoded: Default::default(),
                    global: Default::default(),
                    legal: vec![true, true],
                    action: 0,
                    logprob: 0.0,
                    said: None,
                    said_logprob: 0.0,
                    value: 0.0,
                    reward,
                    memory: Vec::new(),
                    read: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Element-wise equality within 1e-5.
    pub fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len(), "{a:?} != {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} != {b:?}");
        }
    }
}
