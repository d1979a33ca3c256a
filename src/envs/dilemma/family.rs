//! The descriptors of the three social-dilemma families.

use bevy::prelude::EntityWorldMut;

use std::sync::Arc;

use super::{GRID_ACTIONS, cleanup, commons, gridworld, matrix, text};
use crate::core::{Facing, GridPos};
use crate::envs::family::{Family, Spawner};
use crate::envs::text::FamilyText;
use crate::scene::{FamilySpec, Scene, ViewSpec, ZapSpec};

/// Repeated two-player matrix games.
pub struct Matrix;
/// Commons Harvest.
pub struct CommonsHarvest;
/// Clean Up.
pub struct CleanUp;

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
    fn name(&self) -> &'static str {
        "Matrix"
    }
    fn about(&self) -> &'static str {
        "repeated two-player matrix games (Prisoner's Dilemma, Stag Hunt, Chicken)"
    }
    fn actions(&self, scene: &Scene) -> Vec<String> {
        match &scene.spec.family {
            FamilySpec::Matrix(m) => m.actions.clone(),
            _ => Vec::new(),
        }
    }
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
        let FamilySpec::Matrix(p) = &scene.spec.family else {
            unreachable!("envs::family::of gives Matrix for Matrix scenes only")
        };
        Box::new(MatrixSpawner(matrix::MatrixGame::new(p)))
    }
    fn text(&self, scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        let FamilySpec::Matrix(p) = &scene.spec.family else {
            return None;
        };
        Some(Arc::new(text::MatrixText {
            rounds: p.rounds,
            payoffs: p.payoffs.clone(),
        }))
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
    fn name(&self) -> &'static str {
        "CommonsHarvest"
    }
    fn about(&self) -> &'static str {
        "Commons Harvest: apples regrow only near other apples; zapping beam"
    }
    fn actions(&self, _scene: &Scene) -> Vec<String> {
        grid_actions()
    }
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
        let FamilySpec::CommonsHarvest(p) = &scene.spec.family else {
            unreachable!("envs::family::of gives CommonsHarvest for its scenes only")
        };
        let map = gridworld::DilemmaMap::from_scene(scene);
        let regrowth = commons::HarvestRegrowth::new(p, &map);
        let rules = rules(scene, (p.view, p.zap, 0, p.apple_reward));
        Box::new(CommonsSpawner(map, rules, regrowth))
    }
    fn text(&self, _scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        Some(Arc::new(text::GridText))
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
    fn name(&self) -> &'static str {
        "CleanUp"
    }
    fn about(&self) -> &'static str {
        "Clean Up: apples grow only while the river is clean; cleaning beam"
    }
    fn actions(&self, _scene: &Scene) -> Vec<String> {
        grid_actions()
    }
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
        let FamilySpec::CleanUp(p) = &scene.spec.family else {
            unreachable!("envs::family::of gives CleanUp for its scenes only")
        };
        Box::new(CleanUpSpawner(
            gridworld::DilemmaMap::from_scene(scene),
            rules(scene, (p.view, p.zap, p.clean_length, p.apple_reward)),
            cleanup::RiverPollution::new(p),
        ))
    }
    fn text(&self, _scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        Some(Arc::new(text::GridText))
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
