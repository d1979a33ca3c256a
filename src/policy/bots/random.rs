//! The `random` policy: a uniformly random legal action from the agent's own stream.

use rand::Rng;

use crate::policy::{Decision, Policy};

/// Uniformly random legal action.
pub struct RandomPolicy;

impl Policy for RandomPolicy {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch {
            let n = d.mask.count();
            let k = if n > 1 { d.rng.random_range(0..n) } else { 0 };
            d.action.0 = d.mask.nth(k).unwrap_or(0);
        }
    }
}
