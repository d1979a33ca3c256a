//! The hide-and-seek descriptor.

use bevy::prelude::EntityWorldMut;

use std::sync::Arc;

use super::{ACTIONS, HnsArena, agent_components, check, text};
use crate::envs::family::{Family, Spawner};
use crate::envs::text::FamilyText;
use crate::scene::{Ctx, FamilySpec, Scene, SceneError};

/// Hide-and-seek.
pub struct HideAndSeek;

impl Family for HideAndSeek {
    fn name(&self) -> &'static str {
        "HideAndSeek"
    }
    fn about(&self) -> &'static str {
        "hide-and-seek: vision cones, boxes, ramps, locks, a preparation phase"
    }
    fn actions(&self, _scene: &Scene) -> Vec<String> {
        ACTIONS.iter().map(|s| s.to_string()).collect()
    }
    fn check(&self, cx: &Ctx<'_>, scene: &Scene) -> Result<(), SceneError> {
        check::check_teams(cx, &scene.spec)?;
        check::check_door_dropout(cx, scene)
    }
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
        let FamilySpec::HideAndSeek(p) = &scene.spec.family else {
            unreachable!("envs::family::of gives HideAndSeek for its scenes only")
        };
        Box::new(HnsSpawner(HnsArena::from_scene(scene, p)))
    }
    fn text(&self, _scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        Some(Arc::new(text::HideAndSeekText))
    }
    fn tile_colour(&self, c: char) -> Option<[u8; 3]> {
        // Low walls, boxes and ramps, locked or not.
        match c {
            '=' => Some([80, 80, 90]),
            'b' => Some([160, 110, 60]),
            'B' | 'X' => Some([120, 80, 40]),
            'r' => Some([120, 140, 150]),
            'R' | 'Y' => Some([85, 100, 110]),
            _ => None,
        }
    }
}

struct HnsSpawner(HnsArena);

impl Spawner for HnsSpawner {
    fn arena(&self, arena: &mut EntityWorldMut<'_>) {
        arena.insert(self.0.clone());
    }
    fn agent(&self, agent: &mut EntityWorldMut<'_>) {
        agent.insert(agent_components());
    }
}
