//! The [`Family`] descriptor: what the rest of the program needs to know of an environment
//! family, given by the family's own folder. Every shipped family is listed once, in
//! [`FAMILIES`]; spawning, checking a scene, the action words, the talk vocabulary, the
//! viewer's colours and the listing of families all go through it, so adding a family is
//! one folder under `src/envs/` and one line in [`FAMILIES`] (and its plugin in
//! `sim::SimPlugins`, its parameters in `scene::FamilySpec`: see docs/scenes.md).
//!
//! A family defined in another crate is [`register`]ed instead, by the program before it
//! reads a scene that names it: scenes may then name it (`family: CoinGame(...)`, parsed as
//! [`FamilySpec::Custom`] with the parser the family gives in [`Family::params`]), and its
//! descriptor gives what the shipped families have elsewhere: its systems
//! ([`Family::build`], added by every app `SimPlugins` builds), its observation text
//! ([`Family::text`]), the words of the default tokenizer ([`Family::words`]).
//! docs/families.md walks through one.
//!
//! A whole family in a few lines: agents who `work` are paid the scene's `wage` a step.
//!
//! ```
//! use bevy::prelude::*;
//! use emergence::core::{ActSystems, Action, ArenaAgents, Reward, add_family_systems};
//! use emergence::envs::family::{Family, Spawner, register};
//! use emergence::headless::{RunConfig, run};
//! use emergence::scene::custom::{ParamsParser, parser_of};
//! use emergence::scene::{FamilySpec, Scene};
//!
//! /// The parameters, as a scene writes them: `family: Tally(wage: 2.0)`.
//! #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct Wage {
//!     wage: f32,
//! }
//!
//! /// An arena of the family: what work pays.
//! #[derive(Component, Clone)]
//! struct Workshop(f32);
//!
//! /// Its one rule: action 1 (`work`) earns the wage.
//! fn pay(shops: Query<(&Workshop, &ArenaAgents)>, mut agents: Query<(&Action, &mut Reward)>) {
//!     for (shop, members) in &shops {
//!         for &e in members.entities() {
//!             if let Ok((action, mut reward)) = agents.get_mut(e) {
//!                 reward.0 += shop.0 * f32::from(action.0);
//!             }
//!         }
//!     }
//! }
//!
//! struct Tally;
//! struct Shops(f32);
//!
//! impl Spawner for Shops {
//!     fn arena(&self, arena: &mut EntityWorldMut<'_>) {
//!         arena.insert(Workshop(self.0));
//!     }
//!     fn agent(&self, _agent: &mut EntityWorldMut<'_>) {}
//! }
//!
//! impl Family for Tally {
//!     fn name(&self) -> &'static str {
//!         "Tally"
//!     }
//!     fn about(&self) -> &'static str {
//!         "work pays a wage"
//!     }
//!     fn actions(&self, _scene: &Scene) -> Vec<String> {
//!         vec!["rest".into(), "work".into()]
//!     }
//!     fn params(&self) -> Option<ParamsParser> {
//!         Some(parser_of::<Wage>)
//!     }
//!     fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
//!         let wage = match &scene.spec.family {
//!             FamilySpec::Custom(c) => c.params::<Wage>().map_or(0.0, |w| w.wage),
//!             _ => 0.0,
//!         };
//!         Box::new(Shops(wage))
//!     }
//!     fn build(&self, app: &mut App) {
//!         add_family_systems(app, "tally", pay.in_set(ActSystems::Apply));
//!     }
//! }
//!
//! register(&Tally)?;
//! let src = r#"(
//!     name: "tally",
//!     family: Tally(wage: 2.0),
//!     map: ["SS"],
//!     legend: {'S': Spawn},
//!     teams: [(name: "workers", count: 2, policy: "random")],
//!     episode: (max_steps: 10),
//! )"#;
//! let scene = emergence::load::parse_scene(src, std::path::Path::new("tally.scene.ron"))?;
//! let mut cfg = RunConfig::new(scene);
//! cfg.arenas = 8;
//! cfg.episodes = 4;
//! let report = run(&cfg, |_| {})?;
//! // Random workers work half of their 10 steps, at 2 a step.
//! assert!((report.team_returns[0] - 10.0).abs() < 3.0, "{:?}", report.team_returns);
//!
//! // A misspelt parameter is refused where it stands.
//! let bad = src.replace("wage: 2.0", "wages: 2.0");
//! let err = emergence::load::parse_scene(&bad, std::path::Path::new("tally.scene.ron"));
//! assert!(err.unwrap_err().to_string().starts_with("tally.scene.ron:3:19"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A family's systems are a Bevy plugin of its own (they run on the arenas that carry its
//! components); its parameters stay in the scene layer (`scene/params.rs`), which is data
//! and parses every family's block in one serde pass, so that every error has its line and
//! column.

use bevy::prelude::EntityWorldMut;

use std::sync::RwLock;

use crate::envs::text::FamilyText;
use crate::scene::custom::ParamsParser;
use crate::scene::{Ctx, FamilySpec, Scene, SceneError};
use std::sync::Arc;

/// What a family provides.
pub trait Family: Send + Sync + 'static {
    /// The name a scene gives (`family: Maze(...)`), as [`crate::scene::FamilySpec::name`].
    fn name(&self) -> &'static str;
    /// One line on what it is, for `emergence list` and the docs.
    fn about(&self) -> &'static str;
    /// The action words of `scene`, by index.
    fn actions(&self, scene: &Scene) -> Vec<String>;
    /// The words agents may say, if the family has talk.
    fn vocabulary(&self, _scene: &Scene) -> Option<Vec<String>> {
        None
    }
    /// The rules of `scene` its data alone cannot check (errors located in `cx.src`).
    fn check(&self, _cx: &Ctx<'_>, _scene: &Scene) -> Result<(), SceneError> {
        Ok(())
    }
    /// What the arenas and agents of `scene` are spawned with, built once per run.
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner>;
    /// The colour of a map character the family draws its own way (`None`: the shared
    /// colours of `frames::palette`).
    fn tile_colour(&self, _c: char) -> Option<[u8; 3]> {
        None
    }
    /// A family from outside this crate: adds its systems (with
    /// [`crate::core::add_family_systems`]), state hashers, map drawers and resources to an
    /// app. Every app built from [`crate::SimPlugins`] calls it for each registered family
    /// (the shipped families' plugins are in `SimPlugins` itself).
    fn build(&self, _app: &mut bevy::app::App) {}
    /// A family from outside this crate: how its parameters are read from a scene (usually
    /// `Some(emergence::scene::custom::parser_of::<MyParams>)`). The shipped families' are
    /// [`FamilySpec`]'s variants (`None`).
    fn params(&self) -> Option<ParamsParser> {
        None
    }
    /// How its observations read as text (the language model's prompt, the viewer's
    /// inspector), built once for `scene`. `None`: role, team, step and the view's codes as
    /// digits ([`crate::envs::text::PlainText`]).
    fn text(&self, _scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        None
    }
    /// Words its text writes that the default tokenizer must know (beyond action words,
    /// team and role names and the talk vocabulary, which it always gets). The shipped
    /// families' words are the tokenizer's own list.
    fn words(&self, _scene: &Scene) -> Vec<String> {
        Vec::new()
    }
}

impl std::fmt::Debug for dyn Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Family({})", self.name())
    }
}

/// Inserts a family's components into each new arena and agent (the core components are
/// the spawner's caller's).
pub trait Spawner {
    /// The components of one arena (cloned from state built once; maps share their static
    /// parts).
    fn arena(&self, arena: &mut EntityWorldMut<'_>);
    /// The components every agent of the family carries besides the core ones.
    fn agent(&self, agent: &mut EntityWorldMut<'_>);
}

/// Every shipped family, in the order `emergence list` shows them.
pub static FAMILIES: &[&dyn Family] = &[
    &super::dilemma::family::Matrix,
    &super::dilemma::family::CommonsHarvest,
    &super::dilemma::family::CleanUp,
    &super::hide_and_seek::family::HideAndSeek,
    &super::maze::family::Maze,
];

/// Families registered from outside this crate, in registration order.
static REGISTERED: RwLock<Vec<&'static dyn Family>> = RwLock::new(Vec::new());

/// Why a family cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// A shipped family has the name.
    #[error("family {0}: a shipped family has this name")]
    Shipped(&'static str),
    /// It gives no [`Family::params`], so no scene could name it.
    #[error("family {0}: Family::params gives no parser, so no scene could name it")]
    NoParams(&'static str),
}

/// Adds `family` to the families scenes may name; call it before reading such a scene (and
/// before building an app, which adds the systems of the families registered by then).
/// Registering a family of the same name again replaces it.
pub fn register(family: &'static dyn Family) -> Result<(), RegisterError> {
    let name = family.name();
    if FAMILIES.iter().any(|f| f.name() == name) {
        return Err(RegisterError::Shipped(name));
    }
    let parse = family.params().ok_or(RegisterError::NoParams(name))?;
    crate::scene::custom::register_params(name, parse).map_err(|_| RegisterError::Shipped(name))?;
    let mut reg = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    reg.retain(|f| f.name() != name);
    reg.push(family);
    Ok(())
}

/// The shipped families, then those registered.
pub fn all() -> Vec<&'static dyn Family> {
    let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    FAMILIES
        .iter()
        .copied()
        .chain(reg.iter().copied())
        .collect()
}

/// The families registered from outside this crate, in registration order.
pub fn registered() -> Vec<&'static dyn Family> {
    REGISTERED.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The family called `name`.
pub fn named(name: &str) -> Option<&'static dyn Family> {
    let shipped = FAMILIES.iter().copied().find(|f| f.name() == name);
    shipped.or_else(|| {
        let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
        reg.iter().copied().find(|f| f.name() == name)
    })
}

/// The family of `scene` (the one match on the scene's family in the program: the compiler
/// checks that every family the format knows has its descriptor).
pub fn of(scene: &Scene) -> &'static dyn Family {
    use super::{dilemma, hide_and_seek, maze};
    match &scene.spec.family {
        FamilySpec::Matrix(_) => &dilemma::family::Matrix,
        FamilySpec::CommonsHarvest(_) => &dilemma::family::CommonsHarvest,
        FamilySpec::CleanUp(_) => &dilemma::family::CleanUp,
        FamilySpec::HideAndSeek(_) => &hide_and_seek::family::HideAndSeek,
        FamilySpec::Maze(_) => &maze::family::Maze,
        // A scene names a custom family only once it is registered (the parser is found
        // through the registry), and registrations are never removed.
        FamilySpec::Custom(c) => named(c.name).unwrap_or_else(|| {
            unreachable!("family {} parsed without a registered descriptor", c.name)
        }),
    }
}

/// The names of every family, shipped and registered.
pub fn names() -> Vec<&'static str> {
    all().iter().map(|f| f.name()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_the_scene_format_knows_is_registered_once() {
        let mut seen = names();
        assert_eq!(seen.len(), 5);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), FAMILIES.len(), "a family registered twice");
        for name in ["Matrix", "CommonsHarvest", "CleanUp", "HideAndSeek", "Maze"] {
            assert!(named(name).is_some(), "{name} has no descriptor");
        }
    }
}
