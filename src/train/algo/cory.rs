//! CORY (Ma et al., 2024, "Coevolving with the Other You"): the language model is duplicated
//! into two copies that play an arena's two learning agents. Each step the *pioneer* decides
//! first; the *observer* then reads its own observation plus the pioneer's choice
//! (`ally said WORD`) and decides. Both learn from the summed reward of the two, and the
//! roles swap every K updates, so each copy learns to lead and to follow.
//!
//! ```text
//! R_t      = r^pioneer_t + r^observer_t                 (both copies learn from the sum)
//! loss^c   = PPO(π_c; GAE over R, V_c) + β_KL · KL(π_c ‖ π_ref)    for each copy c
//! pioneer  a¹ ~ π_p(· | o¹);   observer  a² ~ π_o(· | o², "ally said a¹")
//! ```
//!
//! Source: Ma et al. 2024, "Coevolving with the Other You", arXiv 2410.06101, and its code
//! (github.com/Harry67Hu/CORY, `imdb_train/cory.py`). The KL penalty to the frozen starting
//! model is on by default, as in the paper: its code starts TRL's adaptive KL controller at
//! 0.4 (target 6) and subtracts the per-token KL from the reward; here an action is one
//! token, and the k3 estimate of the KL is a loss term with a fixed coefficient of 0.4
//! (`--kl-coef`), on advantages normalised over the batch as the code normalises its
//! scores (`use_score_norm`). The paper's code swaps the roles every 5 iterations and
//! rebuilds its optimizers at each swap; here every 2 (`--swap-every`), keeping each copy's
//! optimizer state.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::policy::lm::LmPolicy;
use crate::policy::{Decision, Policy, PolicyStats};
use crate::scene::Scene;

/// Which copy drives each slot of an arena: the learning (`lm`) agents in slot order get
/// copies 0 and 1; other slots none. `None` unless there are exactly two learning agents.
pub fn copies_of_slots(scene: &Scene) -> Option<Vec<Option<usize>>> {
    let mut next = 0;
    let out: Vec<Option<usize>> = scene
        .agents
        .iter()
        .map(|a| {
            (a.policy == "lm").then(|| {
                next += 1;
                next - 1
            })
        })
        .collect();
    (next == 2).then_some(out)
}

/// The two copies as one policy of the registry (every learning agent is bound to it).
pub struct CoryPolicy {
    copies: [LmPolicy; 2],
    pioneer: Arc<AtomicUsize>,
    copy_of_slot: Vec<Option<usize>>,
    actions: Vec<String>,
}

impl CoryPolicy {
    /// The copies, and the shared index of the current pioneer (0 or 1) that the trainer
    /// flips when roles swap.
    pub fn new(copies: [LmPolicy; 2], pioneer: Arc<AtomicUsize>) -> Self {
        Self {
            copies,
            pioneer,
            copy_of_slot: Vec::new(),
            actions: Vec::new(),
        }
    }
}

impl Policy for CoryPolicy {
    fn setup(&mut self, scene: &Scene, actions: &[String]) -> Result<(), String> {
        self.copy_of_slot = copies_of_slots(scene)
            .ok_or("cory needs exactly two agents on `lm` in the scene (pioneer and observer)")?;
        self.actions = actions.to_vec();
        for c in &mut self.copies {
            c.setup(scene, actions)?;
        }
        Ok(())
    }

    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        let p = self.pioneer.load(Ordering::Relaxed) & 1;
        let copy = |d: &Decision<'_>| {
            self.copy_of_slot
                .get(usize::from(d.agent.slot))
                .copied()
                .flatten()
        };
        // Pioneers first (a stable sort keeps the arenas' order within each part).
        batch.sort_by_key(|d| copy(d) != Some(p));
        let k = batch.iter().take_while(|d| copy(d) == Some(p)).count();
        let (pioneers, observers) = batch.split_at_mut(k);
        self.copies[p].decide_with_suffix(pioneers, &[]);
        let chosen: HashMap<u32, u8> = pioneers
            .iter()
            .map(|d| (d.agent.arena, d.action.0))
            .collect();
        let suffix: Vec<Option<String>> = observers
            .iter()
            .map(|d| {
                chosen.get(&d.agent.arena).and_then(|&a| {
                    self.actions
                        .get(usize::from(a))
                        .map(|w| format!("ally said {w}\n"))
                })
            })
            .collect();
        self.copies[1 - p].decide_with_suffix(observers, &suffix);
    }

    fn failure(&self) -> Option<String> {
        self.copies.iter().find_map(Policy::failure)
    }

    fn stats(&self) -> Option<PolicyStats> {
        let [a, b] = &self.copies;
        let mut out = a.stats()?;
        out += b.stats()?;
        Some(out)
    }
}
