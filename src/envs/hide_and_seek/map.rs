//! The state of one hide-and-seek arena: static tiles, movable objects (boxes and ramps)
//! with their locks, who stands where, and the episode's statistics; and its reset.

use bevy::math::IVec2;
use bevy::prelude::*;
use rand::Rng;
use std::sync::Arc;

use super::codes::view;
use super::params::HideSeekParams;
use super::vision::{Crop, Vision};
use crate::core::*;
use crate::envs::spawn::SpawnCells;
use crate::scene::{Scene, Thing};

/// What kind of movable object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// Blocks movement and sight.
    Box,
    /// Lets agents climb over one box or low wall; does not block sight.
    Ramp,
}

/// A box or ramp.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Object {
    /// Box or ramp.
    pub kind: ObjectKind,
    /// Where it is.
    pub pos: IVec2,
    /// Where it started the episode.
    pub start: IVec2,
    /// The side (0 hiders, 1 seekers) that locked it, if locked.
    pub locked_by: Option<u8>,
    /// The slot of the agent holding it, if held.
    pub held_by: Option<u16>,
    /// Largest distance from `start` this episode (Euclidean, cells).
    pub max_displacement: f32,
}

impl Object {
    /// Moves the object to `to`, keeping its displacement record.
    pub fn move_to(&mut self, to: IVec2) {
        self.pos = to;
        let d = (to - self.start).as_vec2().length();
        self.max_displacement = self.max_displacement.max(d);
    }
}

/// Episode statistics of an arena.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HnsStats {
    /// Steps after preparation.
    pub play_steps: u32,
    /// Steps after preparation in which a seeker saw a hider.
    pub seen_steps: u32,
    /// Boxes locked when preparation ended (`None` until it has).
    pub boxes_locked_at_prep_end: Option<u32>,
    /// Ramps locked when preparation ended.
    pub ramps_locked_at_prep_end: Option<u32>,
    /// Doorways holding a box the hiders locked, when preparation ended.
    pub doorways_blocked_at_prep_end: Option<u32>,
    /// Rooms shut at the end of the preparation phase ([`HnsArena::rooms_shut`]).
    pub rooms_shut_at_prep_end: Option<u32>,
    /// Objects pushed.
    pub pushes: u32,
    /// Objects pulled.
    pub pulls: u32,
    /// Ramp climbs.
    pub climbs: u32,
    /// Lock and unlock actions that took effect.
    pub locks: u32,
}

/// The per-arena state of hide-and-seek.
#[derive(Component, Debug, Clone)]
pub struct HnsArena {
    /// Static tiles: `view::FLOOR`, `view::WALL` or `view::LOW_WALL`.
    pub tiles: Arc<Grid<u8>>,
    /// Boxes and ramps.
    pub objects: Vec<Object>,
    template: Arc<Vec<Object>>,
    /// Object index + 1 at each cell, 0 if none.
    pub obj: Grid<u8>,
    /// Cells that stop sight: walls and boxes (kept with `obj`).
    opaque: Grid<bool>,
    /// Tiles and objects as each side sees them (kept with `obj` and the locks).
    pub codes: [Grid<u8>; 2],
    /// Agent slot + 1 at each cell, 0 if none.
    pub occ: Grid<u16>,
    /// Where each slot stands (kept with `occ`).
    pub seats: Vec<IVec2>,
    /// Side of each slot: 0 hider, 1 seeker.
    pub side: Arc<Vec<u8>>,
    /// Team of each slot.
    pub team: Arc<Vec<u8>>,
    /// Start cells.
    pub spawns: Arc<SpawnCells>,
    /// This episode's doorways: floor cells in a one-cell gap of a wall line (walls on two
    /// opposite sides, open on the other two), where a box shuts a room.
    pub doorways: Arc<Vec<IVec2>>,
    /// The scene's tiles and doorways, before a door dropout.
    scene_map: (Arc<Grid<u8>>, Arc<Vec<IVec2>>),
    /// The scene map's parts bounded by walls and doorways (doorways left out): the largest
    /// is the outside, the others are rooms. The fort's measure ([`HnsArena::rooms_shut`]).
    pub regions: Arc<Regions>,
    /// Per doorway that may be walled up ([`HnsArena::droppable_doorways`]): the tiles with
    /// it walled and the doorways left.
    dropped: Arc<Vec<(Arc<Grid<u8>>, Arc<Vec<IVec2>>)>>,
    /// Probability that an episode walls one of them up.
    door_dropout: f32,
    /// With `scatter_objects`: per object, the cells it may be placed on each episode (its
    /// region's floor, no doorway); empty otherwise.
    scatter: Arc<Vec<Vec<IVec2>>>,
    /// Steps of preparation at the start of each episode.
    pub prep_steps: u32,
    /// Per-step team reward size.
    pub reward: f32,
    /// The vision tables.
    pub vision: Arc<Vision>,
    /// The observation's window where the scene makes it smaller than the vision's.
    pub crop: Option<Arc<Crop>>,
    /// The observation carries the entity list (`entities` in the scene).
    pub entities: bool,
    /// Whether a seeker saw a hider at the end of the last step.
    pub hider_seen: bool,
    /// Episode statistics.
    pub stats: HnsStats,
    shuffle_spawns: bool,
    random_facing: bool,
}

/// The parts of a map bounded by walls and doorways.
#[derive(Debug, Clone, Default)]
pub struct Regions {
    /// The largest part's floor cells.
    pub outside: Vec<IVec2>,
    /// Every other part's floor cells, in map order of their first cell.
    pub rooms: Vec<Vec<IVec2>>,
}

impl Regions {
    /// The parts of `tiles` cut at `doorways`.
    fn of(tiles: &Grid<u8>, doorways: &[IVec2]) -> Self {
        let mut taken = vec![false; tiles.cells().len()];
        let mut parts: Vec<Vec<IVec2>> = Vec::new();
        for i in 0..taken.len() {
            let p = tiles.pos(i);
            if taken[i] || tiles.get(p) != Some(view::FLOOR) || doorways.contains(&p) {
                continue;
            }
            let part = region(tiles, doorways, p);
            for c in &part {
                taken[tiles.index(*c)] = true;
            }
            parts.push(part);
        }
        let Some(largest) = (0..parts.len()).max_by_key(|&k| (parts[k].len(), usize::MAX - k))
        else {
            return Self::default();
        };
        let outside = parts.remove(largest);
        Self {
            outside,
            rooms: parts,
        }
    }
}

/// The object an agent holds (index into [`HnsArena::objects`]).
#[derive(Component, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Grip(pub Option<u8>);

/// Side of a role name: 0 hiders, 1 seekers.
pub fn side_of(role: &str) -> u8 {
    u8::from(matches!(role, "seeker" | "seekers"))
}

impl HnsArena {
    /// Builds the arena state of `scene` with the family parameters `p`.
    pub fn from_scene(scene: &Scene, p: &HideSeekParams) -> Self {
        let mut tiles = Grid::filled(scene.width, scene.height, view::FLOOR);
        let mut objects = Vec::new();
        for (i, thing) in scene.cells.iter().enumerate() {
            let pos = tiles.pos(i);
            tiles.cells_mut()[i] = match thing {
                Thing::Wall => view::WALL,
                Thing::LowWall => view::LOW_WALL,
                _ => view::FLOOR,
            };
            let kind = match thing {
                Thing::Box => Some(ObjectKind::Box),
                Thing::Ramp => Some(ObjectKind::Ramp),
                _ => None,
            };
            if let Some(kind) = kind {
                objects.push(Object {
                    kind,
                    pos,
                    start: pos,
                    locked_by: None,
                    held_by: None,
                    max_displacement: 0.0,
                });
            }
        }
        let max_steps = scene.spec.episode.max_steps;
        let doorways = Arc::new(doorways(&tiles));
        let regions = Arc::new(Regions::of(&tiles, &doorways));
        let vision = Arc::new(Vision::new(p.vision_cone, p.vision_range));
        let tiles = Arc::new(tiles);
        let side = scene
            .agents
            .iter()
            .map(|a| side_of(&scene.roles[usize::from(a.role)]))
            .collect();
        let mut arena = Self {
            opaque: Grid::filled(scene.width, scene.height, false),
            codes: [
                Grid::filled(scene.width, scene.height, 0),
                Grid::filled(scene.width, scene.height, 0),
            ],
            obj: Grid::filled(scene.width, scene.height, 0),
            occ: Grid::filled(scene.width, scene.height, 0),
            seats: vec![IVec2::ZERO; scene.agents.len()],
            scene_map: (tiles.clone(), doorways.clone()),
            regions,
            dropped: Arc::new(Vec::new()),
            door_dropout: p.door_dropout,
            scatter: Arc::new(Vec::new()),
            tiles,
            template: Arc::new(objects.clone()),
            objects,
            side: Arc::new(side),
            team: Arc::new(scene.agents.iter().map(|a| a.team).collect()),
            spawns: Arc::new(SpawnCells::from_scene(scene)),
            doorways,
            prep_steps: (p.prep_fraction * max_steps as f32).floor() as u32,
            reward: p.reward,
            crop: (p.window > 0 && p.window < p.vision_range)
                .then(|| Arc::new(vision.crop(p.window))),
            vision,
            entities: p.entities,
            hider_seen: false,
            stats: HnsStats::default(),
            shuffle_spawns: scene.spec.randomize.shuffle_spawns,
            random_facing: scene.spec.randomize.random_facing,
        };
        if p.scatter_objects {
            let (tiles, doorways) = &arena.scene_map;
            let places = arena
                .template
                .iter()
                .map(|o| region(tiles, doorways, o.pos))
                .collect();
            arena.scatter = Arc::new(places);
        }
        if arena.door_dropout > 0.0 {
            let (tiles, doorways) = arena.scene_map.clone();
            let dropped = arena
                .droppable_doorways()
                .into_iter()
                .map(|d| {
                    let mut walled = (*tiles).clone();
                    let i = walled.index(d);
                    walled.cells_mut()[i] = view::WALL;
                    let left = doorways.iter().copied().filter(|&p| p != d).collect();
                    (Arc::new(walled), Arc::new(left))
                })
                .collect();
            arena.dropped = Arc::new(dropped);
        }
        arena
    }

    /// The scene's doorways that a door dropout may wall up: no box or ramp starts on them
    /// and no agent does.
    pub fn droppable_doorways(&self) -> Vec<IVec2> {
        let spawn = |p: IVec2| {
            let i = self.scene_map.0.index(p) as u32;
            self.spawns.shared.contains(&i) || self.spawns.team_cells.iter().any(|c| c.contains(&i))
        };
        self.scene_map
            .1
            .iter()
            .copied()
            .filter(|&p| !self.template.iter().any(|o| o.pos == p) && !spawn(p))
            .collect()
    }

    /// Width and height of the observation window and the viewer's column and row in it.
    pub fn window(&self) -> (usize, usize, (u8, u8)) {
        match &self.crop {
            Some(c) => (c.width, c.height, c.viewer),
            None => self.vision.window(),
        }
    }

    /// The scene's doorways, before a door dropout (the entity list's doorway slots).
    pub fn scene_doorways(&self) -> &[IVec2] {
        &self.scene_map.1
    }

    /// Whether sight is stopped at `p` (walls, boxes, off the map).
    #[inline]
    pub fn blocks_sight(&self, p: IVec2) -> bool {
        self.opaque.get(p).is_none_or(|o| o)
    }

    /// Recomputes what cell `i` shows (to each side) and whether it stops sight; called
    /// whenever an object arrives, leaves, or is locked or unlocked there.
    pub fn update_cell(&mut self, i: usize) {
        let o = self.obj.cells()[i];
        let t = self.tiles.cells()[i];
        let boxed = o != 0 && self.objects[usize::from(o - 1)].kind == ObjectKind::Box;
        self.opaque.cells_mut()[i] = t == view::WALL || boxed;
        for side in 0..2 {
            self.codes[side].cells_mut()[i] = if o == 0 {
                t
            } else {
                self.object_code(usize::from(o - 1), side as u8)
            };
        }
    }

    /// Whether `p` is open floor with no object and no agent.
    #[inline]
    pub fn free(&self, p: IVec2) -> bool {
        self.tiles.get(p) == Some(view::FLOOR)
            && self.obj.cells()[self.obj.index(p)] == 0
            && self.occ.cells()[self.occ.index(p)] == 0
    }

    /// The object at `p`, if any.
    #[inline]
    pub fn object_at(&self, p: IVec2) -> Option<usize> {
        match self.obj.get(p) {
            Some(o) if o > 0 => Some(usize::from(o - 1)),
            _ => None,
        }
    }

    /// Moves object `i` to `to` (which must be free of objects).
    pub fn move_object(&mut self, i: usize, to: IVec2) {
        let from = self.objects[i].pos;
        let (a, b) = (self.obj.index(from), self.obj.index(to));
        self.obj.cells_mut()[a] = 0;
        self.obj.cells_mut()[b] = i as u8 + 1;
        self.objects[i].move_to(to);
        self.update_cell(a);
        self.update_cell(b);
    }

    /// Moves the agent in `slot` from `from` to `to`.
    pub fn move_agent(&mut self, slot: usize, from: IVec2, to: IVec2) {
        let (a, b) = (self.occ.index(from), self.occ.index(to));
        self.occ.cells_mut()[a] = 0;
        self.occ.cells_mut()[b] = slot as u16 + 1;
        self.seats[slot] = to;
    }

    /// Whether the viewer in `slot` at `from` facing `facing` sees cell `to`.
    pub fn sees(&self, from: IVec2, facing: Dir4, to: IVec2) -> bool {
        self.vision.sees(from, facing, to, |p| self.blocks_sight(p))
    }

    /// Locked objects of `kind`.
    pub fn locked(&self, kind: ObjectKind) -> u32 {
        self.objects
            .iter()
            .filter(|o| o.kind == kind && o.locked_by.is_some())
            .count() as u32
    }

    /// Doorways that hold a box the hiders locked: the fort's measure (a room with every
    /// doorway so shut cannot be entered or seen into without a ramp).
    pub fn doorways_blocked(&self) -> u32 {
        self.objects
            .iter()
            .filter(|o| {
                o.kind == ObjectKind::Box
                    && o.locked_by == Some(0)
                    && self.doorways.contains(&o.pos)
            })
            .count() as u32
    }

    /// The map's rooms that cannot be entered from the outside now, and the rooms: a room is
    /// shut when none of its cells can be reached from the outside's through floor (this
    /// episode's tiles: a doorway walled up by a door dropout is wall) that holds no box the
    /// hiders locked. Boxes the hiders did not lock, ramps and agents do not shut a way (an
    /// unlocked box can be pushed or pulled aside); a box locked in a doorway or on the cell
    /// just inside it does. The fort's measure, from the geometry alone.
    pub fn rooms_shut(&self) -> (u32, u32) {
        let rooms = &self.regions.rooms;
        if rooms.is_empty() {
            return (0, 0);
        }
        let open = |p: IVec2| {
            self.tiles.get(p) == Some(view::FLOOR)
                && !self.object_at(p).is_some_and(|i| {
                    let o = &self.objects[i];
                    o.kind == ObjectKind::Box && o.locked_by == Some(0)
                })
        };
        let starts = self.regions.outside.iter().copied().filter(|&p| open(p));
        let reached = flood(&self.tiles, starts, open);
        let shut = rooms
            .iter()
            .filter(|room| !room.iter().any(|&p| reached[self.tiles.index(p)]))
            .count();
        (shut as u32, rooms.len() as u32)
    }

    /// The code of map cell `p` for an observer of `side` (tiles and objects; no agents).
    #[inline]
    pub fn code_at(&self, p: IVec2, side: u8) -> u8 {
        self.codes[usize::from(side & 1)]
            .get(p)
            .unwrap_or(view::WALL)
    }

    /// The code of object `i` for an observer of `side`.
    #[inline]
    pub fn object_code(&self, i: usize, side: u8) -> u8 {
        let o = &self.objects[i];
        let base = match o.kind {
            ObjectKind::Box => view::BOX,
            ObjectKind::Ramp => view::RAMP,
        };
        match o.locked_by {
            None => base,
            Some(s) if s == side => base + 1,
            Some(_) => base + 2,
        }
    }
}

/// Lays out objects and places agents of arenas starting an episode.
pub fn reset_hide_and_seek(
    mut arenas: Query<(&EpisodeClock, &mut HnsArena, &mut ArenaRng, &ArenaAgents)>,
    mut agents: Query<(&mut GridPos, &mut Facing, &mut Grip)>,
) {
    for (clock, mut arena, mut rng, members) in &mut arenas {
        if clock.phase != ArenaPhase::JustReset {
            continue;
        }
        let arena = &mut *arena;
        // The door dropout's draws only where the scene asks for one, so that other scenes'
        // streams are unchanged.
        if arena.door_dropout > 0.0 {
            let (tiles, doorways) = if rng.0.random::<f32>() < arena.door_dropout {
                let k = rng.0.random_range(0..arena.dropped.len().max(1));
                arena
                    .dropped
                    .get(k)
                    .cloned()
                    .unwrap_or_else(|| arena.scene_map.clone())
            } else {
                arena.scene_map.clone()
            };
            arena.tiles = tiles;
            arena.doorways = doorways;
        }
        arena.objects.clone_from(&arena.template);
        arena.obj.cells_mut().fill(0);
        for (i, o) in arena.objects.iter().enumerate() {
            let c = arena.obj.index(o.pos);
            arena.obj.cells_mut()[c] = i as u8 + 1;
        }
        for i in 0..arena.obj.cells().len() {
            arena.update_cell(i);
        }
        arena.occ.cells_mut().fill(0);
        arena.stats = HnsStats::default();
        arena.hider_seen = false;
        if arena.prep_steps == 0 {
            arena.stats.boxes_locked_at_prep_end = Some(0);
            arena.stats.ramps_locked_at_prep_end = Some(0);
            arena.stats.doorways_blocked_at_prep_end = Some(0);
            arena.stats.rooms_shut_at_prep_end = Some(0);
        }
        let cells = arena
            .spawns
            .assign(&arena.team, arena.shuffle_spawns, false, &mut rng.0);
        for (slot, (&e, cell)) in members.entities().iter().zip(cells).enumerate() {
            let facing = if arena.random_facing {
                Dir4::ALL[rng.0.random_range(0..4)]
            } else {
                Dir4::North
            };
            let Ok((mut pos, mut face, mut grip)) = agents.get_mut(e) else {
                continue;
            };
            grip.0 = None;
            face.0 = facing;
            // Validation guarantees a cell per agent.
            if let Some(i) = cell {
                pos.0 = arena.tiles.pos(i as usize);
                arena.occ.cells_mut()[i as usize] = slot as u16 + 1;
                arena.seats[slot] = pos.0;
            }
        }
        // Objects scattered after the agents stand, each on a free cell of its region (its
        // own start cell among them), in object order.
        let scatter = arena.scatter.clone();
        for (i, cells) in scatter.iter().enumerate() {
            let from = arena.objects[i].pos;
            let free: Vec<IVec2> = cells
                .iter()
                .copied()
                .filter(|&c| c == from || arena.free(c))
                .collect();
            if free.is_empty() {
                continue;
            }
            let to = free[rng.0.random_range(0..free.len())];
            if to != from {
                arena.move_object(i, to);
            }
            let o = &mut arena.objects[i];
            o.start = to;
            o.max_displacement = 0.0;
        }
    }
}

/// The floor cells reachable from `from` without crossing a wall or a doorway (doorways
/// themselves left out), in row-major order.
fn region(tiles: &Grid<u8>, doorways: &[IVec2], from: IVec2) -> Vec<IVec2> {
    let open = |p: IVec2| tiles.get(p) == Some(view::FLOOR) && !doorways.contains(&p);
    let seen = flood(tiles, [from], open);
    (0..seen.len())
        .filter(|&i| seen[i] && open(tiles.pos(i)))
        .map(|i| tiles.pos(i))
        .collect()
}

/// The cells of `tiles` reached from `starts` by steps to the four neighbours through cells
/// where `open` holds (which must be false off the map), as a mask; the starts count as
/// reached.
fn flood(
    tiles: &Grid<u8>,
    starts: impl IntoIterator<Item = IVec2>,
    open: impl Fn(IVec2) -> bool,
) -> Vec<bool> {
    let mut seen = vec![false; tiles.cells().len()];
    let mut stack: Vec<IVec2> = Vec::new();
    for p in starts {
        if !seen[tiles.index(p)] {
            seen[tiles.index(p)] = true;
            stack.push(p);
        }
    }
    while let Some(c) = stack.pop() {
        for d in [IVec2::X, IVec2::NEG_X, IVec2::Y, IVec2::NEG_Y] {
            let n = c + d;
            if open(n) && !seen[tiles.index(n)] {
                seen[tiles.index(n)] = true;
                stack.push(n);
            }
        }
    }
    seen
}

/// The doorways of `tiles`: floor cells with walls (or the map's edge) on two opposite sides
/// and no wall on the other two. Low walls count as walls (they stop movement).
fn doorways(tiles: &Grid<u8>) -> Vec<IVec2> {
    let solid = |p: IVec2| tiles.get(p).is_none_or(|t| t != view::FLOOR);
    (0..tiles.cells().len())
        .map(|i| tiles.pos(i))
        .filter(|&p| {
            let s = |d: IVec2| solid(p + d);
            let (e, w, n, so) = (s(IVec2::X), s(IVec2::NEG_X), s(IVec2::NEG_Y), s(IVec2::Y));
            !solid(p) && ((e && w && !n && !so) || (n && so && !e && !w))
        })
        .collect()
}
