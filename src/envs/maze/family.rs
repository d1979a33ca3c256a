//! The maze descriptor.

use bevy::prelude::EntityWorldMut;

use std::sync::Arc;

use super::params::MazeParams;
use super::{ACTIONS, MazeArena, MazePlugin, agent_components, check, text, view};
use crate::envs::family::{Family, Spawner, shipped_family};
use crate::envs::text::FamilyText;
use crate::scene::{
    ArenaShape, Ctx, FamilyRules, Layout, ParamsParser, Scene, SceneError, SceneSpec, Thing,
    parser_of,
};

/// The cooperative maze.
pub struct Maze;

shipped_family!(Maze);

/// The words of the maze's text ([`text`]) beyond those every family writes.
const WORDS: &str = "legend you teammate wall plate shut door open key locked exit unknown \
    said map north is up steps at keys none reward say";

/// The scene's parameters (the maze's own, by [`crate::envs::family::of`]).
pub(crate) fn params(scene: &Scene) -> MazeParams {
    scene.spec.family.params_or_default()
}

impl FamilyRules for Maze {
    fn name(&self) -> &'static str {
        "Maze"
    }
    fn params(&self) -> ParamsParser {
        parser_of::<MazeParams>
    }
    fn allows(&self, thing: &Thing) -> bool {
        matches!(
            thing,
            Thing::Plate(_) | Thing::Door(_) | Thing::Key(_) | Thing::LockedDoor(_) | Thing::Exit
        )
    }
    fn legend(&self) -> &'static str {
        "Floor, Wall, Plate(\"a\"), Door(\"a\"), Key(\"red\"), LockedDoor(\"red\"), Exit, Spawn or TeamSpawn(\"team\")"
    }
    fn layout(&self, spec: &SceneSpec) -> Layout {
        match spec
            .family
            .params::<MazeParams>()
            .and_then(|m| m.generate.as_ref())
        {
            Some(g) => Layout::Generated {
                width: usize::from(g.width),
                height: usize::from(g.height),
            },
            None => Layout::Map,
        }
    }
    fn mirrors(&self) -> bool {
        true
    }
    fn check_params(&self, cx: &Ctx<'_>, spec: &SceneSpec) -> Result<(), SceneError> {
        match spec.family.params::<MazeParams>() {
            Some(m) => check::check_params(cx, m),
            None => Ok(()),
        }
    }
    fn check_arena(
        &self,
        cx: &Ctx<'_>,
        spec: &SceneSpec,
        arena: ArenaShape<'_>,
    ) -> Result<(), SceneError> {
        match spec.family.params::<MazeParams>() {
            Some(m) => check::check_arena(cx, spec, m, arena),
            None => Ok(()),
        }
    }
}

impl Family for Maze {
    fn about(&self) -> &'static str {
        "cooperative maze: split knowledge, plates and doors, keys, talk, shared exit"
    }
    fn actions(&self, _scene: &Scene) -> Vec<String> {
        ACTIONS.iter().map(|s| s.to_string()).collect()
    }
    fn vocabulary(&self, scene: &Scene) -> Option<Vec<String>> {
        // An empty vocabulary: the agents cannot speak (no talk at all, not even silence as
        // a choice).
        Some(params(scene).vocabulary).filter(|v| !v.is_empty())
    }
    fn check(&self, cx: &Ctx<'_>, scene: &Scene) -> Result<(), SceneError> {
        check::check_scene(cx, scene, &params(scene))
    }
    fn text(&self, scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        let p = params(scene);
        Some(Arc::new(text::MazeText::new(
            scene,
            p.vocabulary,
            p.knowledge,
        )))
    }
    fn build(&self, app: &mut bevy::app::App) {
        app.add_plugins(MazePlugin);
    }
    fn words(&self, scene: Option<&Scene>) -> Vec<String> {
        let chars = view::CHARS.iter().map(|c| c.to_string());
        let mut words: Vec<String> = WORDS
            .split_whitespace()
            .map(String::from)
            .chain(chars)
            .chain(ACTIONS.iter().map(|s| s.to_string()))
            .chain(MazeParams::default().vocabulary)
            .collect();
        // The scene's keys' names.
        for t in scene.map_or(&[][..], |s| &s.cells) {
            if let Thing::Key(n) | Thing::LockedDoor(n) = t {
                words.push(n.clone());
            }
        }
        words
    }
    fn describe(&self, scene: &Scene) -> String {
        let m = params(scene);
        let mut s = match &m.generate {
            Some(g) => format!(
                "maze      generated {}×{}, {} plate doors, {} key doors, {}\n",
                g.width,
                g.height,
                g.plate_doors,
                g.key_doors,
                g.seed
                    .map_or("a new layout every episode".to_string(), |x| format!(
                        "layout seed {x}"
                    ))
            ),
            None => "maze      fixed map\n".to_string(),
        };
        s += &format!(
            "knowledge {:?}; window radius {}; vocabulary {}\n",
            m.knowledge,
            m.view,
            m.vocabulary.join(" ")
        );
        s
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
