//! REINFORCE with a learned baseline (Williams 1992; the baseline as in Sutton & Barto,
//! ch. 13.4).
//!
//! ```text
//! G_t  = Σ_{u≥t} γ^{u−t} r_u
//! A_t  = G_t − V(s_t)                    (V: the model's value head, trained towards G_t)
//! loss = −mean_t [ Â_t log π(a_t | s_t) ]  (Â: A normalised over the batch)
//! ```
//!
//! One pass over the batch, one gradient step per minibatch. Every learner is independent:
//! it treats the others as part of its environment, which is why naive learners drift to
//! mutual defection in the Prisoner's Dilemma (Foerster et al. 2018, LOLA).

use crate::train::advantage::returns_to_go;
use crate::train::{Batch, Hyper};

/// Advantages `G_t − V(s_t)` and targets `G_t` of every trajectory of `batch`, in its order.
pub fn advantages(batch: &Batch, h: &Hyper) -> Vec<(Vec<f32>, Vec<f32>)> {
    batch
        .trajectories
        .iter()
        .map(|tr| {
            let rewards: Vec<f32> = tr.steps.iter().map(|s| s.reward).collect();
            let g = returns_to_go(&rewards, h.gamma);
            let adv = g.iter().zip(&tr.steps).map(|(g, s)| g - s.value).collect();
            (adv, g)
        })
        .collect()
}
