//! The [`Family`] descriptor: what the rest of the program needs to know of an environment
//! family, given by the family's own folder. A family is one type that implements two
//! traits: [`crate::scene::FamilyRules`] (its name, how its parameters are read and checked,
//! its legend, what its arena needs: what the scene reader asks, in the layer below) and
//! [`Family`] (its systems, spawner, action words, talk, text, words and colours). Nothing
//! else in the program names a family: spawning, checking a scene, the prompt, the tokenizer,
//! the viewer's colours, `emergence check` and `emergence list` all go through these.
//!
//! A shipped family is one folder under `src/envs/` whose descriptor says
//! `shipped_family!(MyFamily);` (it lists itself at link time, through `inventory`), plus
//! its `mod` line in `envs/mod.rs`. A family defined in another crate is [`register`]ed
//! instead, by the program before it reads a scene that names it. Either way scenes may then
//! name it (`family: CoinGame(...)`), its parameters read by the parser it gives, and every
//! app built from `SimPlugins` adds its systems ([`Family::build`]). docs/families.md walks
//! through one.
//!
//! A whole family in a few lines: agents who `work` are paid the scene's `wage` a step.
//!
//! ```
//! use bevy::prelude::*;
//! use emergence::core::{ActSystems, Action, ArenaAgents, Reward, add_family_systems};
//! use emergence::envs::family::{Family, Spawner, register};
//! use emergence::headless::{RunConfig, run};
//! use emergence::scene::{FamilyRules, ParamsParser, Scene, parser_of};
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
//! impl FamilyRules for Tally {
//!     fn name(&self) -> &'static str {
//!         "Tally"
//!     }
//!     fn params(&self) -> ParamsParser {
//!         parser_of::<Wage>
//!     }
//! }
//!
//! impl Family for Tally {
//!     fn about(&self) -> &'static str {
//!         "work pays a wage"
//!     }
//!     fn actions(&self, _scene: &Scene) -> Vec<String> {
//!         vec!["rest".into(), "work".into()]
//!     }
//!     fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
//!         let wage = scene.spec.family.params::<Wage>().map_or(0.0, |w| w.wage);
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
//! components); its parameters are a serde type in its folder, read in the scene's one serde
//! pass, so that every error has its line and column.

use bevy::prelude::EntityWorldMut;

use std::sync::{OnceLock, RwLock};

use crate::envs::text::FamilyText;
use crate::scene::{Ctx, FamilyRules, Scene, SceneError};
use std::sync::Arc;

/// What a family provides.
pub trait Family: FamilyRules {
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
    /// Adds its systems (with [`crate::core::add_family_systems`], usually through a plugin
    /// of its own), state hashers, map drawers and resources to an app. Every app built from
    /// [`crate::SimPlugins`] calls it for every family, shipped and registered.
    fn build(&self, _app: &mut bevy::app::App) {}
    /// The lines `emergence check` prints about `scene`'s parameters (each ending in a
    /// newline; the default: the parameters as Rust writes them).
    fn describe(&self, scene: &Scene) -> String {
        format!("params    {:?}\n", scene.spec.family.any_params())
    }
    /// How its observations read as text (the language model's prompt, the viewer's
    /// inspector), built once for `scene`. `None`: role, team, step and the view's codes as
    /// digits ([`crate::envs::text::PlainText`]).
    fn text(&self, _scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        None
    }
    /// Words its text writes that the default tokenizer must know (beyond action words,
    /// team and role names and the talk vocabulary, which it always gets): for `scene`, or
    /// with `None` those of any scene of the family (a shipped family's words are in every
    /// default tokenizer, so that one tokenizer serves every shipped scene).
    fn words(&self, _scene: Option<&Scene>) -> Vec<String> {
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

/// A shipped family, submitted from its folder by `shipped_family!` and collected at link
/// time.
pub struct ShippedFamily(pub &'static dyn Family);

inventory::collect!(ShippedFamily);

/// Lists a shipped family from its own folder: `shipped_family!(Maze);` in its descriptor's
/// file (the type implements [`Family`] and [`FamilyRules`]). The scene reader and the rest
/// of the program then know it; nothing outside the folder names it but its `mod` line.
macro_rules! shipped_family {
    ($family:ident) => {
        inventory::submit!($crate::scene::ShippedRules(&$family));
        inventory::submit!($crate::envs::family::ShippedFamily(&$family));
    };
}
pub(crate) use shipped_family;

/// The shipped families, in the order of their names.
pub fn shipped() -> &'static [&'static dyn Family] {
    static SHIPPED: OnceLock<Vec<&'static dyn Family>> = OnceLock::new();
    SHIPPED.get_or_init(|| {
        let mut v: Vec<_> = inventory::iter::<ShippedFamily>().map(|s| s.0).collect();
        v.sort_by_key(|f| f.name());
        v
    })
}

/// Families registered from outside this crate, in registration order.
static REGISTERED: RwLock<Vec<&'static dyn Family>> = RwLock::new(Vec::new());

/// Why a family cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// A shipped family has the name.
    #[error("family {0}: a shipped family has this name")]
    Shipped(&'static str),
}

/// Adds `family` to the families scenes may name; call it before reading such a scene (and
/// before building an app, which adds the systems of the families registered by then).
/// Registering a family of the same name again replaces it.
pub fn register(family: &'static dyn Family) -> Result<(), RegisterError> {
    let name = family.name();
    if shipped().iter().any(|f| f.name() == name) {
        return Err(RegisterError::Shipped(name));
    }
    crate::scene::family::register_rules(family).map_err(|_| RegisterError::Shipped(name))?;
    let mut reg = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    reg.retain(|f| f.name() != name);
    reg.push(family);
    Ok(())
}

/// The shipped families, then those registered.
pub fn all() -> Vec<&'static dyn Family> {
    let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    shipped()
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
    let shipped = shipped().iter().copied().find(|f| f.name() == name);
    shipped.or_else(|| {
        let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
        reg.iter().copied().find(|f| f.name() == name)
    })
}

/// The family of `scene`. A scene names a family only once the family is known (its
/// parameters are read by the parser it gives), and registrations are never removed.
pub fn of(scene: &Scene) -> &'static dyn Family {
    let name = scene.spec.family.name();
    named(name).unwrap_or_else(|| unreachable!("family {name} read without a descriptor"))
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
        // The five, and the tests' `payday`.
        assert_eq!(seen.len(), 6);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), shipped().len(), "a family registered twice");
        for name in ["Matrix", "CommonsHarvest", "CleanUp", "HideAndSeek", "Maze"] {
            assert!(named(name).is_some(), "{name} has no descriptor");
            let rules = crate::scene::family::rules_named(name);
            assert_eq!(
                rules.map(|r| r.name()),
                Some(name),
                "{name} has no scene rules"
            );
        }
        assert_eq!(crate::scene::family::shipped_names(), names());
    }
}
