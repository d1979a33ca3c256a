//! Mechanics shared by Commons Harvest and Clean Up: the map, egocentric observation,
//! movement, eating apples, the zapping and cleaning beams, removal and respawn.

use bevy::math::IVec2;
use bevy::prelude::*;
use rand::Rng;
use rand::seq::SliceRandom;
use std::sync::Arc;

use super::codes::{act, view};
use super::params::{CleanUpParams, HarvestParams, ViewSpec, ZapSpec};
use crate::core::*;
use crate::envs::spawn::SpawnCells;
use crate::metrics::social_outcomes;
use crate::scene::{Scene, Thing};

/// Where each slot may start (and respawn): its team's own cells, or the shared pool.
#[derive(Debug, Clone)]
pub struct SpawnPlan {
    /// The start cells.
    pub cells: SpawnCells,
    /// Team of each slot.
    pub slot_team: Vec<u8>,
}

impl SpawnPlan {
    fn candidates(&self, slot: usize) -> &[u32] {
        self.cells.candidates(self.slot_team[slot])
    }
}

/// Episode counters of a grid dilemma arena.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DilemmaCounters {
    /// Apples eaten.
    pub apples_eaten: u32,
    /// Zapping beams fired.
    pub zaps: u32,
    /// Agents hit by a zap.
    pub zap_hits: u32,
    /// Cleaning beams fired.
    pub cleans: u32,
    /// Dirt cells cleaned.
    pub cells_cleaned: u32,
}

/// The map of one grid-dilemma arena.
#[derive(Component, Debug, Clone)]
pub struct DilemmaMap {
    /// Tile codes (`view::FLOOR` … `view::DIRT`), row-major.
    pub tiles: Grid<u8>,
    template: Arc<Grid<u8>>,
    /// Occupancy: 0 free, otherwise slot + 1 of the agent standing there.
    pub occ: Grid<u16>,
    /// Cells where apples can grow.
    pub apple_sites: Arc<Vec<u32>>,
    /// River cells (Clean Up).
    pub river: Arc<Vec<u32>>,
    /// River cells currently dirty.
    pub dirty: u32,
    /// Spawn cells.
    pub spawn: Arc<SpawnPlan>,
    /// Episode counters.
    pub counters: DilemmaCounters,
    /// For each facing, the map offset of every view cell, row-major.
    view_offsets: Arc<[Vec<IVec2>; 4]>,
}

/// The rules of a grid-dilemma arena that every agent's action needs.
#[derive(Component, Debug, Clone, Copy)]
pub struct DilemmaRules {
    /// Observation window.
    pub view: ViewSpec,
    /// Zapping beam.
    pub zap: ZapSpec,
    /// Cleaning beam length; 0 disables cleaning (Commons Harvest).
    pub clean_length: u8,
    /// Reward per apple.
    pub apple_reward: f32,
    /// Random facing at spawn.
    pub random_facing: bool,
    /// Shuffle spawn cells each episode.
    pub shuffle_spawns: bool,
}

/// A grid-dilemma agent's part of its observation, written beside its [`Observation`] in
/// `SimSystems::Observe`.
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GridSenses {
    /// Steps left before the agent may fire its beam again (0: ready).
    pub cooldown: u16,
}

/// An agent's beam state.
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Beams {
    /// Steps until it may zap again.
    pub cooldown: u16,
    /// Removed from play until this step (zapped), if removed.
    pub removed_until: Option<u32>,
}

impl DilemmaMap {
    /// Builds the map of `scene` (a grid dilemma scene).
    pub fn from_scene(scene: &Scene) -> Self {
        let mut tiles = Grid::filled(scene.width, scene.height, view::FLOOR);
        let mut sites = Vec::new();
        let mut river = Vec::new();
        for (i, thing) in scene.cells.iter().enumerate() {
            let code = match thing {
                Thing::Wall => view::WALL,
                Thing::Apple => view::APPLE,
                Thing::AppleSite => view::APPLE_SITE,
                Thing::River => view::RIVER,
                Thing::Dirt => view::DIRT,
                _ => view::FLOOR,
            };
            if matches!(thing, Thing::Apple | Thing::AppleSite) {
                sites.push(i as u32);
            }
            if matches!(thing, Thing::River | Thing::Dirt) {
                river.push(i as u32);
            }
            tiles.cells_mut()[i] = code;
        }
        let spawn = SpawnPlan {
            cells: SpawnCells::from_scene(scene),
            slot_team: scene.agents.iter().map(|a| a.team).collect(),
        };
        let dirty = river
            .iter()
            .filter(|&&i| tiles.cells()[i as usize] == view::DIRT)
            .count() as u32;
        let family = &scene.spec.family;
        let v = match (
            family.params::<HarvestParams>(),
            family.params::<CleanUpParams>(),
        ) {
            (Some(p), _) => p.view,
            (_, Some(p)) => p.view,
            _ => ViewSpec::default(),
        };
        let view_offsets = Arc::new(Dir4::ALL.map(|facing| {
            let mut offs = Vec::new();
            for ahead in (-i32::from(v.behind)..=i32::from(v.ahead)).rev() {
                for right in -i32::from(v.side)..=i32::from(v.side) {
                    offs.push(facing.to_world(right, ahead));
                }
            }
            offs
        }));
        Self {
            view_offsets,
            occ: Grid::filled(scene.width, scene.height, 0),
            template: Arc::new(tiles.clone()),
            tiles,
            apple_sites: Arc::new(sites),
            river: Arc::new(river),
            dirty,
            spawn: Arc::new(spawn),
            counters: DilemmaCounters::default(),
        }
    }

    /// Live apples on the map.
    pub fn apples(&self) -> usize {
        self.apple_sites
            .iter()
            .filter(|&&i| self.tiles.cells()[i as usize] == view::APPLE)
            .count()
    }

    /// Whether an agent may step onto `p`.
    pub fn walkable(&self, p: IVec2) -> bool {
        matches!(self.tiles.get(p), Some(t) if t != view::WALL) && self.occ.get(p) == Some(0)
    }

    fn free_cell(&self, slot: usize, rng: &mut impl Rng) -> Option<IVec2> {
        let free: Vec<u32> = self
            .spawn
            .candidates(slot)
            .iter()
            .copied()
            .filter(|&i| self.occ.cells()[i as usize] == 0)
            .collect();
        if free.is_empty() {
            return None;
        }
        Some(
            self.tiles
                .pos(free[rng.random_range(0..free.len())] as usize),
        )
    }
}

/// Lays out the map and places the agents of arenas starting an episode.
pub fn reset_grid_dilemmas(
    mut arenas: Query<(
        &EpisodeClock,
        &mut DilemmaMap,
        &DilemmaRules,
        &mut ArenaRng,
        &ArenaAgents,
    )>,
    mut agents: Query<(&mut GridPos, &mut Facing, &mut Beams)>,
) {
    for (clock, mut map, rules, mut rng, members) in &mut arenas {
        if clock.phase != ArenaPhase::JustReset {
            continue;
        }
        let map = &mut *map;
        map.tiles.cells_mut().copy_from_slice(map.template.cells());
        map.occ.cells_mut().fill(0);
        map.dirty = map
            .river
            .iter()
            .filter(|&&i| map.tiles.cells()[i as usize] == view::DIRT)
            .count() as u32;
        map.counters = DilemmaCounters::default();
        let plan = map.spawn.clone();
        let cells = plan
            .cells
            .assign(&plan.slot_team, rules.shuffle_spawns, false, &mut rng.0);
        for (slot, (&e, cell)) in members.entities().iter().zip(cells).enumerate() {
            let facing = if rules.random_facing {
                Dir4::ALL[rng.0.random_range(0..4)]
            } else {
                Dir4::North
            };
            let Ok((mut pos, mut face, mut beams)) = agents.get_mut(e) else {
                continue;
            };
            *beams = Beams::default();
            face.0 = facing;
            match cell {
                Some(i) => {
                    pos.0 = map.tiles.pos(i as usize);
                    map.occ.cells_mut()[i as usize] = slot as u16 + 1;
                }
                // Validation guarantees enough cells; stay out of play if not.
                None => beams.removed_until = Some(u32::MAX),
            }
        }
    }
}

/// Writes every agent's egocentric view and its legal actions.
pub fn observe_grid_dilemmas(
    arenas: Query<(&EpisodeClock, &DilemmaMap, &DilemmaRules)>,
    mut agents: Query<
        (
            &InArena,
            &Agent,
            &GridPos,
            &Facing,
            &Beams,
            &mut Observation,
            &mut GridSenses,
            &mut ActionMask,
        ),
        Without<Idle>,
    >,
) {
    agents.par_iter_mut().for_each(
        |(in_arena, agent, pos, facing, beams, mut obs, mut senses, mut mask)| {
            let Ok((clock, map, rules)) = arenas.get(in_arena.0) else {
                return;
            };
            let v = rules.view;
            let (w, h) = (
                2 * usize::from(v.side) + 1,
                usize::from(v.ahead) + usize::from(v.behind) + 1,
            );
            let obs = &mut *obs;
            obs.step = clock.step;
            obs.view_width = w as u8;
            obs.view_height = h as u8;
            obs.view_self = (v.side, v.ahead);
            senses.cooldown = beams.cooldown;
            obs.removed = beams.removed_until.is_some();
            obs.view.resize(w * h, view::OUTSIDE);
            let my_team = map.spawn.slot_team[agent.slot as usize];
            if obs.removed {
                obs.view.fill(view::OUTSIDE);
            } else {
                let (tiles, occ) = (map.tiles.cells(), map.occ.cells());
                let offsets = &map.view_offsets[facing.0 as usize];
                for (cell, &o) in obs.view.iter_mut().zip(offsets.iter()) {
                    let p = pos.0 + o;
                    *cell = if map.tiles.contains(p) {
                        let i = map.tiles.index(p);
                        match occ[i] {
                            0 => tiles[i],
                            s if usize::from(s - 1) == agent.slot as usize => view::SELF,
                            s if map.spawn.slot_team[usize::from(s - 1)] == my_team => {
                                view::TEAMMATE
                            }
                            _ => view::OTHER,
                        }
                    } else {
                        view::OUTSIDE
                    };
                }
            }
            *mask = if obs.removed {
                ActionMask::only(act::NOOP)
            } else {
                let mut m = ActionMask::all(act::CLEAN as usize + 1);
                if beams.cooldown > 0 || rules.zap.length == 0 {
                    m.0 &= !(1 << act::ZAP);
                }
                if rules.clean_length == 0 {
                    m.0 &= !(1 << act::CLEAN);
                }
                m
            };
        },
    );
}

/// MAPPO's global state of a grid dilemma, for each agent: every map cell (apples, river
/// dirt, agents drawn as itself, its team or the others), then the step, the share of the
/// river that is dirty, and every agent's position, facing, zap cooldown and whether it is
/// removed, in slot order.
pub fn state_grid_dilemmas(
    arenas: Query<(&EpisodeClock, &DilemmaMap, &ArenaAgents), Without<Idle>>,
    mut agents: Query<(&GridPos, &Facing, &Beams, &mut GlobalView)>,
    mut shared: Local<Vec<f32>>,
) {
    for (clock, map, members) in &arenas {
        let (w, h) = (map.tiles.width() as f32, map.tiles.height() as f32);
        shared.clear();
        shared.push(clock.step as f32 / 1000.0);
        shared.push(map.dirty as f32 / map.river.len().max(1) as f32);
        for &e in members.entities() {
            let Ok((p, f, b, _)) = agents.get(e) else {
                continue;
            };
            shared.extend([p.0.x as f32 / w, p.0.y as f32 / h]);
            push_one_hot(&mut shared, f.0 as usize, 4);
            shared.push(f32::from(b.cooldown) / 10.0);
            shared.push(f32::from(u8::from(b.removed_until.is_some())));
        }
        for (slot, &e) in members.entities().iter().enumerate() {
            let Ok((.., mut g)) = agents.get_mut(e) else {
                continue;
            };
            let my_team = map.spawn.slot_team.get(slot).copied();
            let g = &mut g.0;
            g.cells.clear();
            g.cells.extend(
                map.tiles
                    .cells()
                    .iter()
                    .zip(map.occ.cells())
                    .map(|(&t, &o)| match o {
                        0 => t,
                        s if usize::from(s - 1) == slot => view::SELF,
                        s if map.spawn.slot_team.get(usize::from(s - 1)).copied() == my_team => {
                            view::TEAMMATE
                        }
                        _ => view::OTHER,
                    }),
            );
            g.dense.clone_from(&shared);
        }
    }
}

/// The first agent slot hit by a beam from `from` along `dir`, up to `len` cells (walls stop it).
fn beam_cells(
    map: &DilemmaMap,
    from: IVec2,
    dir: Dir4,
    len: u8,
) -> impl Iterator<Item = IVec2> + '_ {
    (1..=i32::from(len))
        .map(move |k| from + dir.delta() * k)
        .take_while(move |&p| matches!(map.tiles.get(p), Some(t) if t != view::WALL))
}

/// Applies every agent's action, in an order drawn from the arena's stream each step:
/// moves (eating apples stepped on), turns, zaps (the first agent in the beam is removed
/// for `zap.timeout` steps) and cleaning (every dirty cell in the beam turns clean).
/// Removed agents respawn on a free spawn cell of theirs when their time is up.
pub fn apply_grid_actions(
    mut arenas: Query<
        (
            &EpisodeClock,
            &mut DilemmaMap,
            &DilemmaRules,
            &mut ArenaRng,
            &ArenaAgents,
        ),
        Without<Idle>,
    >,
    mut agents: Query<(
        &Action,
        &mut GridPos,
        &mut Facing,
        &mut Reward,
        &mut Beams,
        &mut AgentStats,
    )>,
    mut order: Local<Vec<usize>>,
) {
    for (clock, mut map, rules, mut rng, members) in &mut arenas {
        let t = clock.step;
        let map = &mut *map;
        let ents = members.entities();
        order.clear();
        order.extend(0..ents.len());
        order.shuffle(&mut rng.0);
        for &slot in order.iter() {
            let Ok((action, mut pos, mut facing, mut reward, mut beams, mut stats)) =
                agents.get_mut(ents[slot])
            else {
                continue;
            };
            beams.cooldown = beams.cooldown.saturating_sub(1);
            if let Some(until) = beams.removed_until {
                if t >= until
                    && let Some(p) = map.free_cell(slot, &mut rng.0)
                {
                    beams.removed_until = None;
                    pos.0 = p;
                    let i = map.occ.index(p);
                    map.occ.cells_mut()[i] = slot as u16 + 1;
                } else {
                    stats.removed_steps += 1;
                }
                continue;
            }
            let step = |right: i32, ahead: i32| facing.0.to_world(right, ahead);
            let delta = match action.0 {
                act::FORWARD => Some(step(0, 1)),
                act::BACKWARD => Some(step(0, -1)),
                act::STEP_LEFT => Some(step(-1, 0)),
                act::STEP_RIGHT => Some(step(1, 0)),
                _ => None,
            };
            let mut hit = None;
            match action.0 {
                _ if delta.is_some() => {
                    let to = pos.0 + delta.unwrap_or_default();
                    if map.walkable(to) {
                        let (from_i, to_i) = (map.occ.index(pos.0), map.occ.index(to));
                        map.occ.cells_mut()[from_i] = 0;
                        map.occ.cells_mut()[to_i] = slot as u16 + 1;
                        pos.0 = to;
                        if map.tiles.cells()[to_i] == view::APPLE {
                            map.tiles.cells_mut()[to_i] = view::APPLE_SITE;
                            map.counters.apples_eaten += 1;
                            reward.0 += rules.apple_reward;
                        }
                    }
                }
                act::TURN_LEFT => facing.0 = facing.0.left(),
                act::TURN_RIGHT => facing.0 = facing.0.right(),
                act::ZAP if beams.cooldown == 0 && rules.zap.length > 0 => {
                    beams.cooldown = rules.zap.cooldown;
                    reward.0 += rules.zap.cost;
                    map.counters.zaps += 1;
                    hit = beam_cells(map, pos.0, facing.0, rules.zap.length)
                        .map(|p| map.occ.cells()[map.occ.index(p)])
                        .find(|&s| s != 0)
                        .map(|s| usize::from(s - 1));
                }
                act::CLEAN if rules.clean_length > 0 => {
                    map.counters.cleans += 1;
                    let cells: Vec<usize> = beam_cells(map, pos.0, facing.0, rules.clean_length)
                        .map(|p| map.tiles.index(p))
                        .filter(|&i| map.tiles.cells()[i] == view::DIRT)
                        .collect();
                    for i in cells {
                        map.tiles.cells_mut()[i] = view::RIVER;
                        map.dirty -= 1;
                        map.counters.cells_cleaned += 1;
                    }
                }
                _ => {}
            }
            if let Some(target) = hit
                && let Ok((_, tpos, _, _, mut tbeams, _)) = agents.get_mut(ents[target])
            {
                tbeams.removed_until = Some(t + u32::from(rules.zap.timeout));
                let i = map.occ.index(tpos.0);
                map.occ.cells_mut()[i] = 0;
                map.counters.zap_hits += 1;
            }
        }
    }
}

/// Fills the episode's metrics for arenas that just ended.
pub fn summarize_grid_dilemmas(
    mut arenas: Query<(
        &EpisodeClock,
        &DilemmaMap,
        &ArenaAgents,
        &mut EpisodeMetrics,
    )>,
    agents: Query<(&EpisodeReturn, &AgentStats)>,
) {
    for (clock, map, members, mut metrics) in &mut arenas {
        if clock.phase != ArenaPhase::Ending {
            continue;
        }
        let (returns, stats): (Vec<f32>, Vec<AgentStats>) = members
            .entities()
            .iter()
            .filter_map(|&e| agents.get(e).ok())
            .map(|(r, s)| (r.0, *s))
            .unzip();
        let m = &mut metrics.0;
        *m = social_outcomes(&returns, &stats, clock.step);
        let c = map.counters;
        m.insert("apples_eaten", f64::from(c.apples_eaten));
        m.insert("apples_left", map.apples() as f64);
        m.insert("zaps", f64::from(c.zaps));
        m.insert("zap_hits", f64::from(c.zap_hits));
        if !map.river.is_empty() {
            m.insert("cleans", f64::from(c.cleans));
            m.insert("cells_cleaned", f64::from(c.cells_cleaned));
            m.insert(
                "dirt_fraction",
                f64::from(map.dirty) / map.river.len() as f64,
            );
        }
    }
}

/// Adds a grid dilemma arena's tiles and beam states to the per-step hash.
pub fn hash_grid_dilemma(world: &World, arena: Entity, hash: &mut StateHash) {
    let Some(map) = world.get::<DilemmaMap>(arena) else {
        return;
    };
    hash.write(map.tiles.cells());
    if let Some(members) = world.get::<ArenaAgents>(arena) {
        for &e in members.entities() {
            if let Some(b) = world.get::<Beams>(e) {
                hash.write(&b.cooldown.to_le_bytes());
                hash.write(&b.removed_until.unwrap_or(u32::MAX).to_le_bytes());
            }
        }
    }
}

/// Draws a grid dilemma arena's tiles for replays.
pub fn draw_grid_dilemma(world: &World, arena: Entity) -> Option<(usize, Vec<char>)> {
    let map = world.get::<DilemmaMap>(arena)?;
    let chars = map
        .tiles
        .cells()
        .iter()
        .map(|&c| view::CHARS[usize::from(c)])
        .collect();
    Some((map.tiles.width(), chars))
}

/// The cells an agent's beam crossed this step (zap or clean), for the viewer's effects.
pub fn beam_marks(world: &World, arena: Entity, agent: Entity) -> Vec<(CellMark, IVec2)> {
    let (Some(map), Some(rules)) = (
        world.get::<DilemmaMap>(arena),
        world.get::<DilemmaRules>(arena),
    ) else {
        return Vec::new();
    };
    let (Some(action), Some(pos), Some(facing), Some(beams)) = (
        world.get::<Action>(agent),
        world.get::<GridPos>(agent),
        world.get::<Facing>(agent),
        world.get::<Beams>(agent),
    ) else {
        return Vec::new();
    };
    let len = match action.0 {
        act::ZAP
            if rules.zap.length > 0
                && (rules.zap.cooldown == 0 || beams.cooldown == rules.zap.cooldown) =>
        {
            rules.zap.length
        }
        act::CLEAN => rules.clean_length,
        _ => 0,
    };
    beam_cells(map, pos.0, facing.0, len)
        .map(|p| (CellMark::Beam, p))
        .collect()
}
