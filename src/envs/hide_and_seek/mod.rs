//! Hide-and-seek (work in progress).

use bevy::prelude::*;

use crate::core::*;
use crate::scene::Scene;

/// Action words, by index.
pub const ACTIONS: [&str; 9] = [
    "noop",
    "forward",
    "backward",
    "turn_left",
    "turn_right",
    "grab",
    "release",
    "lock",
    "unlock",
];

/// The per-arena state.
#[derive(Component, Debug, Clone)]
pub struct HnsArena;

impl HnsArena {
    /// Builds the arena state of `scene`.
    pub fn from_scene(_scene: &Scene) -> Self {
        HnsArena
    }
}

/// The components every hide-and-seek agent carries besides the core ones.
pub fn agent_components() -> impl Bundle {
    (GridPos::default(), Facing::default())
}

/// The hide-and-seek family.
#[derive(Default)]
pub struct HideAndSeekPlugin;

impl Plugin for HideAndSeekPlugin {
    fn build(&self, _app: &mut App) {}
}
