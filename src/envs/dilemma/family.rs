//! The descriptors of the three social-dilemma families.

use bevy::prelude::EntityWorldMut;

use std::sync::Arc;

use super::params::{CleanUpParams, HarvestParams, MatrixParams, ViewSpec, ZapSpec};
use super::{DilemmaPlugin, GRID_ACTIONS, check, cleanup, commons, gridworld, matrix, text, view};
use crate::core::{Facing, GridPos};
use crate::envs::family::{Family, Spawner, shipped_family};
use crate::envs::text::FamilyText;
use crate::scene::{
    ArenaShape, Ctx, FamilyRules, Layout, ParamsParser, Scene, SceneError, SceneSpec, Thing,
    parser_of,
};

/// Repeated two-player matrix games.
pub struct Matrix;
/// Commons Harvest.
pub struct CommonsHarvest;
/// Clean Up.
pub struct CleanUp;

shipped_family!(Matrix);
shipped_family!(CommonsHarvest);
shipped_family!(CleanUp);

/// The three families' systems, added once whichever of them builds first.
fn build(app: &mut bevy::app::App) {
    if !app.is_plugin_added::<DilemmaPlugin>() {
        app.add_plugins(DilemmaPlugin);
    }
}

/// The words of the dilemmas' text ([`text`]) beyond those every family writes.
const WORDS: &str = "round rounds of you other got no played yet so far legend teammate wall \
    apple empty cell river dirt outside view ahead is up steps reward zapped out zap ready in \
    are play";

/// The words of a grid dilemma's or a matrix game's text: its own, the map's characters, the
/// actions (the matrix game's default ones too).
fn words() -> Vec<String> {
    let chars = view::CHARS.iter().map(|c| c.to_string());
    let actions = GRID_ACTIONS.iter().chain(&["cooperate", "defect"]);
    WORDS
        .split_whitespace()
        .map(String::from)
        .chain(chars)
        .chain(actions.map(|s| s.to_string()))
        .collect()
}

/// A grid dilemma's parameters of type `P` (the family's own, by [`crate::envs::family::of`]).
fn params<P: Clone + Default + 'static>(scene: &Scene) -> P {
    scene.spec.family.params_or_default()
}

/// The grid dilemmas' legend.
fn grid_allows(thing: &Thing, river: bool) -> bool {
    matches!(thing, Thing::Apple | Thing::AppleSite)
        || (river && matches!(thing, Thing::River | Thing::Dirt))
}

impl FamilyRules for Matrix {
    fn name(&self) -> &'static str {
        "Matrix"
    }
    fn params(&self) -> ParamsParser {
        parser_of::<MatrixParams>
    }
    fn legend(&self) -> &'static str {
        "no legend (matrix games have no map)"
    }
    fn layout(&self, _spec: &SceneSpec) -> Layout {
        Layout::NoMap
    }
    fn check_params(&self, cx: &Ctx<'_>, spec: &SceneSpec) -> Result<(), SceneError> {
        match spec.family.params::<MatrixParams>() {
            Some(m) => check::check_matrix(cx, m),
            None => Ok(()),
        }
    }
    fn check_arena(
        &self,
        cx: &Ctx<'_>,
        spec: &SceneSpec,
        arena: ArenaShape<'_>,
    ) -> Result<(), SceneError> {
        check::check_matrix_arena(cx, spec, arena)
    }
}

impl FamilyRules for CommonsHarvest {
    fn name(&self) -> &'static str {
        "CommonsHarvest"
    }
    fn params(&self) -> ParamsParser {
        parser_of::<HarvestParams>
    }
    fn allows(&self, thing: &Thing) -> bool {
        grid_allows(thing, false)
    }
    fn legend(&self) -> &'static str {
        "Floor, Wall, Apple, AppleSite, Spawn or TeamSpawn(\"team\")"
    }
    fn check_params(&self, cx: &Ctx<'_>, spec: &SceneSpec) -> Result<(), SceneError> {
        match spec.family.params::<HarvestParams>() {
            Some(h) => check::check_harvest(cx, h),
            None => Ok(()),
        }
    }
    fn check_map(
        &self,
        cx: &Ctx<'_>,
        _spec: &SceneSpec,
        cells: &[Thing],
    ) -> Result<(), SceneError> {
        check::check_orchard(cx, "CommonsHarvest", cells, false)
    }
}

impl FamilyRules for CleanUp {
    fn name(&self) -> &'static str {
        "CleanUp"
    }
    fn params(&self) -> ParamsParser {
        parser_of::<CleanUpParams>
    }
    fn allows(&self, thing: &Thing) -> bool {
        grid_allows(thing, true)
    }
    fn legend(&self) -> &'static str {
        "Floor, Wall, Apple, AppleSite, River, Dirt, Spawn or TeamSpawn(\"team\")"
    }
    fn check_params(&self, cx: &Ctx<'_>, spec: &SceneSpec) -> Result<(), SceneError> {
        match spec.family.params::<CleanUpParams>() {
            Some(c) => check::check_cleanup(cx, c),
            None => Ok(()),
        }
    }
    fn check_map(
        &self,
        cx: &Ctx<'_>,
        _spec: &SceneSpec,
        cells: &[Thing],
    ) -> Result<(), SceneError> {
        check::check_orchard(cx, "CleanUp", cells, true)
    }
}

fn grid_actions() -> Vec<String> {
    GRID_ACTIONS.iter().map(|s| s.to_string()).collect()
}

fn rules(
    scene: &Scene,
    (view, zap, clean_length, apple_reward): (ViewSpec, ZapSpec, u8, f32),
) -> gridworld::DilemmaRules {
    gridworld::DilemmaRules {
        view,
        zap,
        clean_length,
        apple_reward,
        random_facing: scene.spec.randomize.random_facing,
        shuffle_spawns: scene.spec.randomize.shuffle_spawns,
    }
}

/// A grid dilemma's agents: a cell, a facing, beams.
fn grid_agent(agent: &mut EntityWorldMut<'_>) {
    agent.insert((
        GridPos::default(),
        Facing::default(),
        gridworld::Beams::default(),
        gridworld::GridSenses::default(),
    ));
}

impl Family for Matrix {
    fn about(&self) -> &'static str {
        "repeated two-player matrix games (Prisoner's Dilemma, Stag Hunt, Chicken)"
    }
    fn actions(&self, scene: &Scene) -> Vec<String> {
        params::<MatrixParams>(scene).actions
    }
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
        let p = params::<MatrixParams>(scene);
        Box::new(MatrixSpawner(matrix::MatrixGame::new(&p)))
    }
    fn text(&self, scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        let p = params::<MatrixParams>(scene);
        Some(Arc::new(text::MatrixText {
            rounds: p.rounds,
            payoffs: p.payoffs,
        }))
    }
    fn build(&self, app: &mut bevy::app::App) {
        build(app);
    }
    fn words(&self, _scene: Option<&Scene>) -> Vec<String> {
        words()
    }
    fn describe(&self, scene: &Scene) -> String {
        let m = params::<MatrixParams>(scene);
        format!("game      {} rounds, payoffs {:?}\n", m.rounds, m.payoffs)
    }
}

struct MatrixSpawner(matrix::MatrixGame);

impl Spawner for MatrixSpawner {
    fn arena(&self, arena: &mut EntityWorldMut<'_>) {
        arena.insert(self.0.clone());
    }
    fn agent(&self, agent: &mut EntityWorldMut<'_>) {
        agent.insert(matrix::MatrixSenses::default());
    }
}

impl Family for CommonsHarvest {
    fn about(&self) -> &'static str {
        "Commons Harvest: apples regrow only near other apples; zapping beam"
    }
    fn actions(&self, _scene: &Scene) -> Vec<String> {
        grid_actions()
    }
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
        let p = &params::<HarvestParams>(scene);
        let map = gridworld::DilemmaMap::from_scene(scene);
        let regrowth = commons::HarvestRegrowth::new(p, &map);
        let rules = rules(scene, (p.view, p.zap, 0, p.apple_reward));
        Box::new(CommonsSpawner(map, rules, regrowth))
    }
    fn text(&self, _scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        Some(Arc::new(text::GridText))
    }
    fn build(&self, app: &mut bevy::app::App) {
        build(app);
    }
    fn words(&self, _scene: Option<&Scene>) -> Vec<String> {
        words()
    }
    fn describe(&self, _scene: &Scene) -> String {
        String::new()
    }
}

struct CommonsSpawner(
    gridworld::DilemmaMap,
    gridworld::DilemmaRules,
    commons::HarvestRegrowth,
);

impl Spawner for CommonsSpawner {
    fn arena(&self, arena: &mut EntityWorldMut<'_>) {
        arena.insert((self.0.clone(), self.1, self.2.clone()));
    }
    fn agent(&self, agent: &mut EntityWorldMut<'_>) {
        grid_agent(agent);
    }
}

impl Family for CleanUp {
    fn about(&self) -> &'static str {
        "Clean Up: apples grow only while the river is clean; cleaning beam"
    }
    fn actions(&self, _scene: &Scene) -> Vec<String> {
        grid_actions()
    }
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
        let p = &params::<CleanUpParams>(scene);
        Box::new(CleanUpSpawner(
            gridworld::DilemmaMap::from_scene(scene),
            rules(scene, (p.view, p.zap, p.clean_length, p.apple_reward)),
            cleanup::RiverPollution::new(p),
        ))
    }
    fn text(&self, _scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        Some(Arc::new(text::GridText))
    }
    fn build(&self, app: &mut bevy::app::App) {
        build(app);
    }
    fn words(&self, _scene: Option<&Scene>) -> Vec<String> {
        words()
    }
    fn describe(&self, _scene: &Scene) -> String {
        String::new()
    }
    fn tile_colour(&self, c: char) -> Option<[u8; 3]> {
        // Polluted river.
        (c == '#').then_some([110, 85, 45])
    }
}

struct CleanUpSpawner(
    gridworld::DilemmaMap,
    gridworld::DilemmaRules,
    cleanup::RiverPollution,
);

impl Spawner for CleanUpSpawner {
    fn arena(&self, arena: &mut EntityWorldMut<'_>) {
        arena.insert((self.0.clone(), self.1, self.2));
    }
    fn agent(&self, agent: &mut EntityWorldMut<'_>) {
        grid_agent(agent);
    }
}
