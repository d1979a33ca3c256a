//! The [`Family`] descriptor: what the rest of the program needs to know of an environment
//! family, given by the family's own folder. Every family is registered once, in
//! [`FAMILIES`]; spawning, checking a scene, the action words, the talk vocabulary, the
//! viewer's colours and the listing of families all go through it, so adding a family is
//! one folder under `src/envs/` and one line in [`FAMILIES`] (and its plugin in
//! `sim::SimPlugins`, its parameters in `scene::FamilySpec`: see docs/scenes.md).
//!
//! A family's systems are a Bevy plugin of its own (they run on the arenas that carry its
//! components); its parameters stay in the scene layer (`scene/params.rs`), which is data
//! and parses every family's block in one serde pass, so that every error has its line and
//! column.

use bevy::prelude::EntityWorldMut;

use crate::scene::{Ctx, FamilySpec, Scene, SceneError};

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

/// Every family, in the order `emergence list` shows them.
pub static FAMILIES: &[&dyn Family] = &[
    &super::dilemma::family::Matrix,
    &super::dilemma::family::CommonsHarvest,
    &super::dilemma::family::CleanUp,
    &super::hide_and_seek::family::HideAndSeek,
    &super::maze::family::Maze,
];

/// The family called `name`.
pub fn named(name: &str) -> Option<&'static dyn Family> {
    FAMILIES.iter().copied().find(|f| f.name() == name)
}

/// The family of `scene` (the one match on the scene's family in the program: the compiler
/// checks that every family the format knows has its descriptor).
pub fn of(scene: &Scene) -> &'static dyn Family {
    use super::{dilemma, hide_and_seek, maze};
    match scene.spec.family {
        FamilySpec::Matrix(_) => &dilemma::family::Matrix,
        FamilySpec::CommonsHarvest(_) => &dilemma::family::CommonsHarvest,
        FamilySpec::CleanUp(_) => &dilemma::family::CleanUp,
        FamilySpec::HideAndSeek(_) => &hide_and_seek::family::HideAndSeek,
        FamilySpec::Maze(_) => &maze::family::Maze,
    }
}

/// The names of every family.
pub fn names() -> Vec<&'static str> {
    FAMILIES.iter().map(|f| f.name()).collect()
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
