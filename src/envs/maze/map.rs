//! The state of one maze arena: its layout, the tiles as they are now (doors open or shut,
//! keys taken, locks opened), where the agents stand, what they carry and said; the reset
//! that lays it out each episode; the state-hash and replay hooks.

use bevy::math::IVec2;
use bevy::prelude::*;
use rand::Rng;
use std::sync::Arc;

use super::codes::view;
use super::generate::generate;
use super::layout::Layout;
use super::params::{GenerateSpec, Knowledge};
use crate::core::*;
use crate::envs::spawn::SpawnCells;
use crate::scene::Scene;

/// Episode counters of a maze arena.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MazeCounters {
    /// Words said (by every agent).
    pub messages: u32,
    /// Keys picked up.
    pub keys_picked: u32,
    /// Locked doors opened.
    pub doors_unlocked: u32,
    /// Agent-steps spent standing on a plate.
    pub plate_steps: u32,
    /// Every agent stood on an exit at the end of a step.
    pub success: bool,
}

/// The rules of a maze arena, from the scene.
#[derive(Debug, Clone)]
pub struct MazeRules {
    /// Radius of the local window.
    pub view: u8,
    /// What each agent knows beyond its window.
    pub knowledge: Knowledge,
    /// Reward to every agent on success.
    pub success_reward: f32,
    /// Cost per step to every agent.
    pub step_cost: f32,
    /// Number of words in the vocabulary.
    pub words: usize,
    /// Generate a maze each episode (or once, with a fixed seed) instead of the fixed map.
    pub generate: Option<GenerateSpec>,
    /// Shuffle spawn cells each episode (fixed maps).
    pub shuffle_spawns: bool,
    /// Play the layout mirrored left to right in half the episodes.
    pub mirror: bool,
    /// Team of each slot.
    pub slot_team: Vec<u8>,
}

/// The per-arena state of a maze.
#[derive(Component, Debug, Clone)]
pub struct MazeArena {
    /// The rules.
    pub rules: Arc<MazeRules>,
    /// The layout of the current episode.
    pub layout: Arc<Layout>,
    /// The layout before mirroring: the scene's, or this episode's generated maze.
    pub base: Arc<Layout>,
    /// `base` mirrored, made at the first mirrored episode of a fixed map.
    mirror_image: Option<Arc<Layout>>,
    /// Cell codes now, row-major.
    pub tiles: Vec<u8>,
    /// Position of each slot.
    pub pos: Vec<IVec2>,
    /// Keys carried by each slot (bit per colour).
    pub keys: Vec<u32>,
    /// The word each slot said on the last step, heard by the others on this one.
    pub said: Vec<Option<u8>>,
    /// Scattered knowledge: the slot that knows each cell (this episode).
    pub owner: Vec<u8>,
    /// Episode counters.
    pub counters: MazeCounters,
}

impl MazeArena {
    /// Builds the arena state of `scene` (a maze scene).
    pub fn from_scene(scene: &Scene) -> Self {
        let p = super::family::params(scene);
        let n = scene.agents.len();
        let layout = if p.generate.is_some() {
            Layout::new(
                scene.width,
                scene.height,
                vec![view::WALL; scene.width * scene.height],
                Vec::new(),
                Vec::new(),
            )
        } else {
            Layout::from_scene(scene)
        };
        Self {
            rules: Arc::new(MazeRules {
                view: p.view,
                knowledge: p.knowledge,
                success_reward: p.success_reward,
                step_cost: p.step_cost,
                words: p.vocabulary.len(),
                generate: p.generate.clone(),
                shuffle_spawns: scene.spec.randomize.shuffle_spawns,
                mirror: scene.spec.randomize.mirror,
                slot_team: scene.agents.iter().map(|a| a.team).collect(),
            }),
            tiles: layout.tiles.clone(),
            base: Arc::new(layout.clone()),
            mirror_image: None,
            layout: Arc::new(layout),
            pos: vec![IVec2::ZERO; n],
            keys: vec![0; n],
            said: vec![None; n],
            owner: Vec::new(),
            counters: MazeCounters::default(),
        }
    }

    /// Width of the map.
    pub fn width(&self) -> usize {
        self.layout.width
    }

    /// Row-major index of `p`, if it lies on the map.
    #[inline]
    pub fn index(&self, p: IVec2) -> Option<usize> {
        let (w, h) = (self.layout.width as i32, self.layout.height as i32);
        (p.x >= 0 && p.y >= 0 && p.x < w && p.y < h).then(|| (p.y * w + p.x) as usize)
    }

    /// Whether some agent stands on cell `i`.
    pub fn occupied(&self, i: usize) -> bool {
        self.pos.iter().any(|&p| self.index(p) == Some(i))
    }

    /// Opens every door with an agent on one of its plates or in its doorway; shuts the rest.
    pub fn update_doors(&mut self) {
        let layout = self.layout.clone();
        for (g, doors) in layout.doors.iter().enumerate() {
            let held = layout
                .plates
                .get(g)
                .is_some_and(|ps| ps.iter().any(|&p| self.occupied(p as usize)));
            for &d in doors {
                let open = held || self.occupied(d as usize);
                let kind = if open {
                    view::DOOR_OPEN
                } else {
                    view::DOOR_CLOSED
                };
                self.tiles[d as usize] = view::with_link(kind, g as u8);
            }
        }
    }

    /// Whether slot `slot` knows cell `i` (beyond its window).
    #[inline]
    pub fn knows(&self, slot: usize, i: usize) -> bool {
        let n = self.pos.len().max(1);
        match self.rules.knowledge {
            Knowledge::Full => true,
            Knowledge::Local => false,
            Knowledge::Strips => {
                let (x, w) = (i % self.layout.width, self.layout.width);
                x * n / w == slot
            }
            Knowledge::Scattered => self.owner.get(i).is_some_and(|&o| usize::from(o) == slot),
        }
    }
}

/// Lays out the maze and places the agents of arenas starting an episode: a new maze for
/// generated scenes (from the fixed seed, or drawn from the arena's stream), mirrored on a
/// coin where the scene asks (`randomize: (mirror: true)`), spawn cells
/// in team order (shuffled if the scene asks), empty pockets, silence, and, for scattered
/// knowledge, a fresh owner for every cell.
pub fn reset_mazes(
    mut arenas: Query<(&EpisodeClock, &mut MazeArena, &mut ArenaRng, &ArenaAgents)>,
    mut agents: Query<(&mut GridPos, &mut Utterance)>,
) {
    for (clock, mut maze, mut rng, members) in &mut arenas {
        if clock.phase != ArenaPhase::JustReset {
            continue;
        }
        let maze = &mut *maze;
        let n = members.entities().len();
        if let Some(g) = &maze.rules.generate {
            let seed = match g.seed {
                Some(s) => s,
                None => rng.0.random(),
            };
            let mut grng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed);
            maze.base = Arc::new(generate(g, n, &mut grng));
            maze.mirror_image = None;
        }
        // The coin is drawn only in scenes that mirror, so other scenes' streams are unchanged.
        maze.layout = if maze.rules.mirror && rng.0.random::<bool>() {
            let base = maze.base.clone();
            maze.mirror_image
                .get_or_insert_with(|| Arc::new(base.mirrored()))
                .clone()
        } else {
            maze.base.clone()
        };
        let layout = maze.layout.clone();
        maze.tiles.clear();
        maze.tiles.extend_from_slice(&layout.tiles);
        maze.counters = MazeCounters::default();
        maze.keys = vec![0; n];
        maze.said = vec![None; n];
        maze.pos = vec![IVec2::ZERO; n];
        // Agents may share cells, so a short list is reused from its start.
        let spawn = SpawnCells {
            team_cells: layout.team_cells.clone(),
            shared: layout.shared.clone(),
        };
        let cells = spawn.assign(
            &maze.rules.slot_team,
            maze.rules.shuffle_spawns,
            true,
            &mut rng.0,
        );
        for (slot, (&e, cell)) in members.entities().iter().zip(cells).enumerate() {
            let cell = cell.unwrap_or(0) as usize;
            if let Ok((mut pos, mut say)) = agents.get_mut(e) {
                let p = IVec2::new((cell % layout.width) as i32, (cell / layout.width) as i32);
                pos.0 = p;
                maze.pos[slot] = p;
                say.0 = None;
            }
        }
        if maze.rules.knowledge == Knowledge::Scattered {
            let k = n.max(1);
            maze.owner = (0..layout.tiles.len())
                .map(|_| rng.0.random_range(0..k) as u8)
                .collect();
        }
        maze.update_doors();
    }
}

/// Adds a maze arena's tiles, pockets and words to the per-step hash.
pub fn hash_maze(world: &World, arena: Entity, hash: &mut StateHash) {
    let Some(m) = world.get::<MazeArena>(arena) else {
        return;
    };
    hash.write(&m.tiles);
    for (k, s) in m.keys.iter().zip(&m.said) {
        hash.write(&k.to_le_bytes());
        hash.write(&[s.map_or(0, |w| w.wrapping_add(1))]);
    }
    let c = m.counters;
    for v in [c.messages, c.keys_picked, c.doors_unlocked, c.plate_steps] {
        hash.write(&v.to_le_bytes());
    }
}

/// Draws a maze arena's tiles for replays.
pub fn draw_maze(world: &World, arena: Entity) -> Option<(usize, Vec<char>)> {
    let m = world.get::<MazeArena>(arena)?;
    Some((
        m.width(),
        m.tiles.iter().map(|&c| view::char_of(c)).collect(),
    ))
}
