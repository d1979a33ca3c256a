//! The hide-and-seek descriptor.

use bevy::prelude::EntityWorldMut;

use std::sync::Arc;

use super::params::HideSeekParams;
use super::{ACTIONS, HideAndSeekPlugin, HnsArena, agent_components, check, text, view};
use crate::envs::family::{Family, Spawner, shipped_family};
use crate::envs::text::FamilyText;
use crate::scene::{
    Ctx, FamilyRules, ParamsParser, Scene, SceneError, SceneSpec, Thing, parser_of,
};

/// Hide-and-seek.
pub struct HideAndSeek;

shipped_family!(HideAndSeek);

/// The words of hide-and-seek's text ([`text`]) beyond those every family writes.
const WORDS: &str = "legend you your side other wall low box locked by them ramp unseen view \
    ahead is up steps preparation left play phase holding an object at facing reward ally \
    opponent see nobody door open";

/// The scene's parameters (hide-and-seek's own, by [`crate::envs::family::of`]).
fn params(scene: &Scene) -> HideSeekParams {
    scene.spec.family.params_or_default()
}

impl FamilyRules for HideAndSeek {
    fn name(&self) -> &'static str {
        "HideAndSeek"
    }
    fn params(&self) -> ParamsParser {
        parser_of::<HideSeekParams>
    }
    fn allows(&self, thing: &Thing) -> bool {
        matches!(thing, Thing::Box | Thing::Ramp | Thing::LowWall)
    }
    fn legend(&self) -> &'static str {
        "Floor, Wall, LowWall, Box, Ramp, Spawn or TeamSpawn(\"team\")"
    }
    fn check_params(&self, cx: &Ctx<'_>, spec: &SceneSpec) -> Result<(), SceneError> {
        match spec.family.params::<HideSeekParams>() {
            Some(h) => check::check_params(cx, h),
            None => Ok(()),
        }
    }
    fn check_map(
        &self,
        cx: &Ctx<'_>,
        _spec: &SceneSpec,
        cells: &[Thing],
    ) -> Result<(), SceneError> {
        check::check_map(cx, cells)
    }
}

impl Family for HideAndSeek {
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
        Box::new(HnsSpawner(HnsArena::from_scene(scene, &params(scene))))
    }
    fn text(&self, _scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        Some(Arc::new(text::HideAndSeekText))
    }
    fn build(&self, app: &mut bevy::app::App) {
        app.add_plugins(HideAndSeekPlugin);
    }
    fn words(&self, _scene: Option<&Scene>) -> Vec<String> {
        let chars = view::CHARS.iter().map(|c| c.to_string());
        WORDS
            .split_whitespace()
            .map(String::from)
            .chain(chars)
            .chain(ACTIONS.iter().map(|s| s.to_string()))
            .collect()
    }
    fn describe(&self, scene: &Scene) -> String {
        let h = params(scene);
        let count = |k: Thing| scene.cells.iter().filter(|t| **t == k).count();
        let (boxes, ramps) = (count(Thing::Box), count(Thing::Ramp));
        let mut s = format!(
            "rules     preparation {} steps; vision {}° cone, range {}; {boxes} boxes, {ramps} ramps\n",
            (h.prep_fraction * scene.spec.episode.max_steps as f32).floor(),
            h.vision_cone,
            h.vision_range
        );
        if h.window > 0 && h.window < h.vision_range {
            s += &format!("view      a window of range {}\n", h.window);
        }
        if h.entities {
            s += "view      the entity list (agents, boxes, ramps, doorways)\n";
        }
        s
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
