//! The maze descriptor.

use bevy::prelude::EntityWorldMut;

use std::sync::Arc;

use super::{ACTIONS, MazeArena, agent_components, check, text};
use crate::envs::family::{Family, Spawner};
use crate::envs::text::FamilyText;
use crate::scene::{Ctx, FamilySpec, Scene, SceneError};

/// The cooperative maze.
pub struct Maze;

impl Family for Maze {
    fn name(&self) -> &'static str {
        "Maze"
    }
    fn about(&self) -> &'static str {
        "cooperative maze: split knowledge, plates and doors, keys, talk, shared exit"
    }
    fn actions(&self, _scene: &Scene) -> Vec<String> {
        ACTIONS.iter().map(|s| s.to_string()).collect()
    }
    fn vocabulary(&self, scene: &Scene) -> Option<Vec<String>> {
        match &scene.spec.family {
            // An empty vocabulary: the agents cannot speak (no talk at all, not even
            // silence as a choice).
            FamilySpec::Maze(p) => Some(p.vocabulary.clone()).filter(|v| !v.is_empty()),
            _ => None,
        }
    }
    fn check(&self, cx: &Ctx<'_>, scene: &Scene) -> Result<(), SceneError> {
        match &scene.spec.family {
            FamilySpec::Maze(m) => check::check_scene(cx, scene, m),
            _ => Ok(()),
        }
    }
    fn text(&self, scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        let FamilySpec::Maze(p) = &scene.spec.family else {
            return None;
        };
        Some(Arc::new(text::MazeText::new(scene, p.vocabulary.clone())))
    }
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
        Box::new(MazeSpawner(MazeArena::from_scene(scene)))
    }
    fn tile_colour(&self, c: char) -> Option<[u8; 3]> {
        // Plates, doors, keys, locks, exits.
        match c {
            'p' => Some([120, 100, 150]),
            'D' => Some([150, 60, 40]),
            '/' => Some([90, 65, 50]),
            'k' => Some([220, 200, 90]),
            'L' => Some([140, 120, 40]),
            'E' => Some([60, 160, 120]),
            _ => None,
        }
    }
}

struct MazeSpawner(MazeArena);

impl Spawner for MazeSpawner {
    fn arena(&self, arena: &mut EntityWorldMut<'_>) {
        arena.insert(self.0.clone());
    }
    fn agent(&self, agent: &mut EntityWorldMut<'_>) {
        agent.insert(agent_components());
    }
}
