//! Environment families, one folder each. A family lists itself from its folder
//! (`shipped_family!` in `family.rs`); this file only declares the folders, so adding a family
//! is its folder and its `mod` line here. Each is a plugin over the shared core;
//! [`crate::policy::spawn_arenas`] builds the arenas of a scene with the components its
//! family needs.

pub mod dilemma;
pub mod family;
pub mod hide_and_seek;
pub mod maze;
#[cfg(test)]
pub(crate) mod payday;
pub mod senses;
pub mod spawn;
pub mod text;

use bevy::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::fmt;

use crate::core::*;
use crate::scene::{Ctx, Scene, SceneError};

/// The action words of a scene's family, by index.
#[derive(Resource, Debug, Clone, Default)]
pub struct ActionNames(pub Vec<String>);

/// The words agents may say (families with talk), by index.
#[derive(Resource, Debug, Clone, Default)]
pub struct Vocabulary(pub Vec<String>);

/// The scene a run was built from.
#[derive(Resource, Debug, Clone)]
pub struct ActiveScene(pub std::sync::Arc<Scene>);

/// A scene that cannot be spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnError(pub String);

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpawnError {}

/// The action words of `scene`'s family.
pub fn action_names(scene: &Scene) -> Vec<String> {
    family::of(scene).actions(scene)
}

/// The family rules of `scene` (parsed from `src`, which locates the errors): the checks a
/// scene's data alone cannot make.
pub fn check_scene(scene: &Scene, src: &str) -> Result<(), SceneError> {
    let cx = Ctx {
        path: &scene.path,
        src,
    };
    family::of(scene).check(&cx, scene)
}

/// Who decides for the agents of one arena, in slot order: the policy layer gives these
/// when it spawns (the environment knows only handles).
pub struct Deciders<'a> {
    /// Each slot's policy handle.
    pub handles: &'a [PolicyHandle],
    /// Slots whose policy reads the whole map (they get [`Oracle`]).
    pub oracle: &'a [bool],
    /// Slots whose policy imitates an oracle teacher (they get [`OracleTeacher`]; empty:
    /// none).
    pub oracle_teacher: &'a [bool],
}

/// Spawns the arenas of `scene` whose indices are `indices` (`0..n` in one process; a rank's
/// share of them under data-parallel training, `crate::train::dist`), each agent with its
/// slot's policy handle. Each arena runs `episodes` episodes (forever if `None`) with streams
/// derived from `seed` and its index. The policies themselves are registered by the caller
/// (`policy::spawn_arenas` does both).
pub fn spawn_agents(
    world: &mut World,
    scene: &Scene,
    deciders: Deciders<'_>,
    indices: std::ops::Range<u32>,
    seed: u64,
    episodes: Option<u32>,
) -> Result<(), SpawnError> {
    let (handles, oracle) = (deciders.handles, deciders.oracle);
    let names = action_names(scene);
    let n_actions = names.len();
    let max_steps = scene.spec.episode.max_steps;
    // Family state is built once and cloned into each arena (maps share their static
    // parts through `Arc`s).
    let family = family::of(scene).spawner(scene);
    let first = indices.start;
    let mut entities = Vec::with_capacity(indices.len());
    for index in indices {
        let mut arena = world.spawn((
            Arena { index },
            EpisodeClock::new(max_steps),
            ArenaRng(stream_rng(seed, index, 0, None)),
            EpisodeMetrics::default(),
        ));
        family.arena(&mut arena);
        let arena_entity = arena.id();
        entities.push(arena_entity);
        for (slot, (spec, handle)) in scene.agents.iter().zip(handles).enumerate() {
            let mut agent = world.spawn((
                Agent {
                    arena: index,
                    slot: slot as u16,
                },
                InArena(arena_entity),
                Team(spec.team),
                Role(spec.role),
                *handle,
                Action::default(),
                ActionMask::all(n_actions),
                Reward::default(),
                EpisodeReturn::default(),
                Done::default(),
                AgentStats::default(),
                (
                    Observation::default(),
                    GlobalView::default(),
                    Features::default(),
                ),
                AgentRng(ChaCha8Rng::seed_from_u64(0)),
                DecisionTrace::default(),
            ));
            family.agent(&mut agent);
            if oracle[slot] {
                agent.insert(Oracle);
            }
            if deciders.oracle_teacher.get(slot).copied().unwrap_or(false) {
                agent.insert(OracleTeacher);
            }
        }
    }
    world.insert_resource(Arenas {
        entities,
        first,
        episode_budget: episodes,
        seed,
        group_size: 1,
        gate: None,
    });
    world.insert_resource(ActionNames(names));
    if let Some(words) = family::of(scene).vocabulary(scene) {
        world.insert_resource(Vocabulary(words));
    }
    world.insert_resource(SceneTeams(
        scene.team_names().iter().map(|s| s.to_string()).collect(),
    ));
    world.insert_resource(ActiveScene(std::sync::Arc::new(scene.clone())));
    Ok(())
}
