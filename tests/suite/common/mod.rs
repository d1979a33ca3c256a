//! Shared helpers for the integration tests: scenes from strings, apps built headless.
#![allow(dead_code)]

use bevy::app::App;
use bevy::prelude::*;
use emergence::core::*;
use emergence::headless::{RunConfig, build_app};
use emergence::load::parse_scene;
use emergence::scene::Scene;
use std::path::Path;

/// Parses a scene written in the test, panicking with the error if it is invalid.
pub fn scene(src: &str) -> Scene {
    parse_scene(src, Path::new("test.scene.ron")).unwrap_or_else(|e| panic!("{e}"))
}

/// A headless app of `src` with `arenas` arenas and `episodes` episodes each.
pub fn test_app(src: &str, arenas: u32, episodes: u32, seed: u64) -> App {
    let mut cfg = RunConfig::new(scene(src));
    cfg.arenas = arenas;
    cfg.episodes = episodes;
    cfg.seed = seed;
    cfg.record_arenas = vec![];
    build_app(&cfg).unwrap_or_else(|e| panic!("{e}"))
}

/// Entity of arena `i`.
pub fn arena(app: &App, i: usize) -> Entity {
    app.world().resource::<Arenas>().entities[i]
}

/// Agents of arena `i`, slot order.
pub fn agents(app: &App, i: usize) -> Vec<Entity> {
    app.world()
        .get::<ArenaAgents>(arena(app, i))
        .expect("arena")
        .entities()
        .to_vec()
}

/// Runs `n` steps.
pub fn step(app: &mut App, n: usize) {
    for _ in 0..n {
        app.update();
    }
}

/// A policy the test drives: each slot plays the action set for it (noop by default).
pub struct Puppet(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl emergence::policy::Policy for Puppet {
    fn decide(&mut self, batch: &mut [emergence::policy::Decision<'_>]) {
        let acts = self.0.lock().expect("puppet lock");
        for d in batch.iter_mut() {
            d.action.0 = acts.get(usize::from(d.agent.slot)).copied().unwrap_or(0);
        }
    }
}

/// Replaces policy `name` of `app` with a [`Puppet`]; returns the per-slot actions to set.
pub fn puppet(app: &mut App, name: &str) -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
    let acts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    app.world_mut()
        .resource_mut::<emergence::policy::PolicyRegistry>()
        .insert(name, Box::new(Puppet(acts.clone())));
    acts
}

/// Sets the actions of the puppets for the next step.
pub fn set_actions(acts: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>, a: &[u8]) {
    *acts.lock().expect("puppet lock") = a.to_vec();
}

/// Actions written over whatever the policies chose, just before the rules apply them
/// (per slot; `None` leaves the policy's choice): tests the rules' own guards, which the
/// legal-action fallback would otherwise hide.
#[derive(Resource, Default)]
pub struct Forced(pub Vec<Option<u8>>);

fn force_actions_system(forced: Res<Forced>, mut agents: Query<(&Agent, &mut Action)>) {
    for (agent, mut action) in &mut agents {
        if let Some(Some(a)) = forced.0.get(usize::from(agent.slot)) {
            action.0 = *a;
        }
    }
}

/// Installs [`Forced`] actions in `app`.
pub fn force_actions(app: &mut App) {
    app.init_resource::<Forced>().add_systems(
        SimSchedule,
        force_actions_system
            .in_set(SimSystems::Act)
            .before(ActSystems::Apply),
    );
}

/// Words written over what the policies said, just before the rules apply the step (per
/// slot; `None` leaves the policy's word).
#[derive(Resource, Default)]
pub struct ForcedWords(pub Vec<Option<u8>>);

fn force_words_system(forced: Res<ForcedWords>, mut agents: Query<(&Agent, &mut Utterance)>) {
    for (agent, mut say) in &mut agents {
        if let Some(Some(w)) = forced.0.get(usize::from(agent.slot)) {
            say.0 = Some(*w);
        }
    }
}

/// Installs [`ForcedWords`] in `app`.
pub fn force_words(app: &mut App) {
    app.init_resource::<ForcedWords>().add_systems(
        SimSchedule,
        force_words_system
            .in_set(SimSystems::Act)
            .before(ActSystems::Apply),
    );
}

/// The example program `name` (`examples/NAME/`), which `cargo test` and `cargo nextest`
/// build beside the test binary's folder.
pub fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("examples").join(name))
        .expect("target folder");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build --example {name}`",
        bin.display()
    );
    bin
}
