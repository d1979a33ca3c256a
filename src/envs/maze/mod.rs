//! Cooperative maze (work in progress: the family's systems land in the next commits).

use bevy::prelude::*;

use crate::core::*;
use crate::scene::Scene;

/// Action words of the maze, by index.
pub const ACTIONS: [&str; 5] = ["noop", "north", "east", "south", "west"];

/// The per-arena state of a maze.
#[derive(Component, Debug, Clone)]
pub struct MazeArena;

impl MazeArena {
    /// Builds the arena state of `scene` (a maze scene).
    pub fn from_scene(_scene: &Scene) -> Self {
        MazeArena
    }
}

/// The components every maze agent carries besides the core ones.
pub fn agent_components() -> impl Bundle {
    (GridPos::default(), Utterance::default())
}

/// The maze family.
#[derive(Default)]
pub struct MazePlugin;

impl Plugin for MazePlugin {
    fn build(&self, _app: &mut App) {}
}
