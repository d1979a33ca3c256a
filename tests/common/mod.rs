//! Shared helpers for the integration tests: scenes from strings, apps built headless.
#![allow(dead_code)]

use bevy::app::App;
use bevy::prelude::*;
use emergence::core::*;
use emergence::headless::{RunConfig, build_app};
use emergence::scene::{Scene, parse_scene};
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
