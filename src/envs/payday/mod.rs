//! A family that exists to prove that a shipped family is its folder and one line: built in
//! tests only (`#[cfg(test)] mod payday;` in `envs/mod.rs` is the line), it is listed from
//! here by `shipped_family!` and nothing else in the crate names it. Agents who `work` are
//! paid the scene's `wage` a step; its maps may hold `Exit` cells (a legend thing of its
//! own). `headless`'s tests read a scene of it, check a misspelt parameter and the legend,
//! run it and build a tokenizer for it, without registering anything.

use bevy::prelude::*;
use serde::{Deserialize, Serialize};

use crate::core::{
    ActSystems, Action, ArenaAgents, GridPos, Reward, add_family_systems, run_family_while,
};
use crate::envs::family::{Family, Spawner, shipped_family};
use crate::scene::{
    Ctx, FamilyRules, ParamsParser, Scene, SceneError, SceneSpec, Thing, parser_of,
};

/// The family's name in scenes.
pub(crate) const NAME: &str = "Payday";

/// Its parameters: `family: Payday(wage: 2.0)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct PaydayParams {
    /// Paid for a step of work.
    pub wage: f32,
}

impl Default for PaydayParams {
    fn default() -> Self {
        Self { wage: 1.0 }
    }
}

/// An arena of the family: what work pays.
#[derive(Component, Clone)]
struct Workshop(f32);

/// Action 1 (`work`) earns the wage.
fn pay(shops: Query<(&Workshop, &ArenaAgents)>, mut agents: Query<(&Action, &mut Reward)>) {
    for (shop, members) in &shops {
        for &e in members.entities() {
            if let Ok((action, mut reward)) = agents.get_mut(e) {
                reward.0 += shop.0 * f32::from(action.0);
            }
        }
    }
}

/// The family's descriptor.
pub(crate) struct Payday;

shipped_family!(Payday);

impl FamilyRules for Payday {
    fn name(&self) -> &'static str {
        NAME
    }
    fn params(&self) -> ParamsParser {
        parser_of::<PaydayParams>
    }
    fn allows(&self, thing: &Thing) -> bool {
        matches!(thing, Thing::Exit)
    }
    fn legend(&self) -> &'static str {
        "Floor, Wall, Exit, Spawn or TeamSpawn(\"team\")"
    }
    fn check_params(&self, cx: &Ctx<'_>, spec: &SceneSpec) -> Result<(), SceneError> {
        let wage = spec.family.params::<PaydayParams>().map_or(0.0, |p| p.wage);
        if !(0.0..=100.0).contains(&wage) {
            return Err(cx.param_error("wage", format!("wage is {wage}"), "0 to 100"));
        }
        Ok(())
    }
}

struct Shops(f32);

impl Spawner for Shops {
    fn arena(&self, arena: &mut EntityWorldMut<'_>) {
        arena.insert(Workshop(self.0));
    }
    fn agent(&self, agent: &mut EntityWorldMut<'_>) {
        agent.insert(GridPos::default());
    }
}

impl Family for Payday {
    fn about(&self) -> &'static str {
        "work pays a wage (a test fixture)"
    }
    fn actions(&self, _scene: &Scene) -> Vec<String> {
        vec!["rest".into(), "work".into()]
    }
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
        let wage = scene
            .spec
            .family
            .params::<PaydayParams>()
            .map_or(0.0, |p| p.wage);
        Box::new(Shops(wage))
    }
    fn build(&self, app: &mut App) {
        add_family_systems(app, "payday", pay.in_set(ActSystems::Apply));
        run_family_while::<Workshop>(app, "payday");
    }
    fn words(&self, _scene: Option<&Scene>) -> Vec<String> {
        vec!["payslip".into()]
    }
}
