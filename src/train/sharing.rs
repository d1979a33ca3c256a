//! Parameter sharing across the learning agents: one model for all of them (the default), a
//! LoRA adapter per role or per agent over one frozen base, or a separate model per learning
//! team, each trained on its own team's decisions only.

use crate::policy::{Decision, Policy, PolicyStats};
use crate::scene::Scene;

/// The model index of each slot under [`crate::train::Sharing::Separate`]: the rank of the agent's team
/// among the teams that have agents on the learning policy `learner` (`lm` or `mlp`);
/// `None` for slots not on it. Also the number of models.
pub fn models_of_slots(scene: &Scene, learner: &str) -> (Vec<Option<usize>>, usize) {
    let mut teams: Vec<u8> = Vec::new();
    for a in scene.agents.iter().filter(|a| a.policy == learner) {
        if !teams.contains(&a.team) {
            teams.push(a.team);
        }
    }
    let of_slot = scene
        .agents
        .iter()
        .map(|a| {
            (a.policy == learner)
                .then(|| teams.iter().position(|&t| t == a.team))
                .flatten()
        })
        .collect();
    (of_slot, teams.len())
}

/// Several models as one policy of the registry: each decision goes to its slot's model,
/// each model answers its share in one batched forward.
pub struct RoutedPolicy {
    models: Vec<Box<dyn Policy>>,
    model_of_slot: Vec<Option<usize>>,
}

impl RoutedPolicy {
    /// `models[m]` decides for the slots that `model_of_slot` maps to `m`.
    pub fn new(models: Vec<Box<dyn Policy>>, model_of_slot: Vec<Option<usize>>) -> Self {
        Self {
            models,
            model_of_slot,
        }
    }
}

impl Policy for RoutedPolicy {
    fn setup(&mut self, scene: &Scene, actions: &[String]) -> Result<(), String> {
        for m in &mut self.models {
            m.setup(scene, actions)?;
        }
        Ok(())
    }

    fn reads_features(&self) -> bool {
        self.models.iter().any(|m| m.reads_features())
    }

    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        let of = |d: &Decision<'_>| {
            self.model_of_slot
                .get(usize::from(d.agent.slot))
                .copied()
                .flatten()
                .unwrap_or(0)
        };
        batch.sort_by_key(of);
        let mut rest: &mut [Decision<'_>] = batch;
        while let Some(first) = rest.first() {
            let m = of(first);
            let n = rest.iter().take_while(|d| of(d) == m).count();
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(n);
            if let Some(model) = self.models.get_mut(m) {
                model.decide(part);
            }
            rest = tail;
        }
    }

    fn failure(&self) -> Option<String> {
        self.models.iter().find_map(|m| m.failure())
    }

    fn stats(&self) -> Option<PolicyStats> {
        let mut out = PolicyStats::default();
        for s in self.models.iter().filter_map(|m| m.stats()) {
            out += s;
        }
        Some(out)
    }
}
