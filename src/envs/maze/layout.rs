//! The static layout of one maze: initial tiles, spawn cells, and which cells are plates,
//! doors, keys and exits of each name or colour. Fixed maps build one per run from the
//! scene; generated mazes build one per episode ([`super::generate`]).

use super::codes::view;
use crate::scene::{Scene, Thing};

/// A maze before anyone moves: doors closed, keys on the ground.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Width in cells.
    pub width: usize,
    /// Height in cells.
    pub height: usize,
    /// Initial cell codes ([`view`]), row-major.
    pub tiles: Vec<u8>,
    /// Per team: its own spawn cells (empty: the team uses `shared`).
    pub team_cells: Vec<Vec<u32>>,
    /// Spawn cells of teams without their own (generated mazes: the start area).
    pub shared: Vec<u32>,
    /// Per plate/door name: its plate cells.
    pub plates: Vec<Vec<u32>>,
    /// Per plate/door name: its door cells.
    pub doors: Vec<Vec<u32>>,
    /// Per key colour: the cells where its keys lie at the start.
    pub keys: Vec<Vec<u32>>,
    /// Exit cells.
    pub exits: Vec<u32>,
}

impl Layout {
    /// A layout of `tiles`, indexing its plates, doors, keys and exits.
    pub fn new(
        width: usize,
        height: usize,
        tiles: Vec<u8>,
        team_cells: Vec<Vec<u32>>,
        shared: Vec<u32>,
    ) -> Self {
        let mut plates = vec![Vec::new(); view::MAX_LINKS];
        let mut doors = vec![Vec::new(); view::MAX_LINKS];
        let mut keys = vec![Vec::new(); view::MAX_LINKS];
        let mut exits = Vec::new();
        for (i, &c) in tiles.iter().enumerate() {
            let l = usize::from(view::link(c));
            match view::kind(c) {
                view::PLATE => plates[l].push(i as u32),
                view::DOOR_CLOSED | view::DOOR_OPEN => doors[l].push(i as u32),
                view::KEY => keys[l].push(i as u32),
                view::EXIT => exits.push(i as u32),
                _ => {}
            }
        }
        let trim = |v: &mut Vec<Vec<u32>>| {
            while v.last().is_some_and(|x| x.is_empty()) {
                v.pop();
            }
        };
        trim(&mut plates);
        trim(&mut doors);
        trim(&mut keys);
        Self {
            width,
            height,
            tiles,
            team_cells,
            shared,
            plates,
            doors,
            keys,
            exits,
        }
    }

    /// The layout of a fixed-map maze scene. Plate/door names and key colours are numbered
    /// in sorted order (the scene checks allow at most [`view::MAX_LINKS`] of each).
    pub fn from_scene(scene: &Scene) -> Self {
        let mut names: Vec<&String> = Vec::new();
        let mut colours: Vec<&String> = Vec::new();
        for t in &scene.cells {
            match t {
                Thing::Plate(n) | Thing::Door(n) => names.push(n),
                Thing::Key(n) | Thing::LockedDoor(n) => colours.push(n),
                _ => {}
            }
        }
        for v in [&mut names, &mut colours] {
            v.sort();
            v.dedup();
        }
        let index = |v: &[&String], n: &String| v.iter().position(|x| *x == n).unwrap_or(0) as u8;
        let tiles = scene
            .cells
            .iter()
            .map(|t| match t {
                Thing::Wall => view::WALL,
                Thing::Plate(n) => view::with_link(view::PLATE, index(&names, n)),
                Thing::Door(n) => view::with_link(view::DOOR_CLOSED, index(&names, n)),
                Thing::Key(n) => view::with_link(view::KEY, index(&colours, n)),
                Thing::LockedDoor(n) => view::with_link(view::LOCKED, index(&colours, n)),
                Thing::Exit => view::EXIT,
                _ => view::FLOOR,
            })
            .collect();
        let cells = |v: &[usize]| v.iter().map(|&i| i as u32).collect::<Vec<u32>>();
        Self::new(
            scene.width,
            scene.height,
            tiles,
            scene.spawn_cells.iter().map(|c| cells(c)).collect(),
            cells(&scene.shared_spawns),
        )
    }

    /// The same maze mirrored left to right: cell `(x, y)` becomes `(width − 1 − x, y)`,
    /// spawn cells with it (a team's cells keep their order).
    pub fn mirrored(&self) -> Self {
        let w = self.width;
        let flip = |i: usize| i - i % w + (w - 1 - i % w);
        let cells = |v: &[u32]| {
            v.iter()
                .map(|&i| flip(i as usize) as u32)
                .collect::<Vec<u32>>()
        };
        let tiles = (0..self.tiles.len()).map(|i| self.tiles[flip(i)]).collect();
        Self::new(
            w,
            self.height,
            tiles,
            self.team_cells.iter().map(|c| cells(c)).collect(),
            cells(&self.shared),
        )
    }

    /// Every spawn cell (teams' own, then shared).
    pub fn start_cells(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.team_cells.iter().flatten().copied().collect();
        v.extend(&self.shared);
        v
    }

    /// The in-map 4-neighbours of cell `i`, north, east, south, west.
    pub fn neighbours(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let (w, h) = (self.width as i32, self.height as i32);
        let (x, y) = ((i % self.width) as i32, (i / self.width) as i32);
        [(0, -1), (1, 0), (0, 1), (-1, 0)]
            .into_iter()
            .map(move |(dx, dy)| (x + dx, y + dy))
            .filter(move |&(nx, ny)| nx >= 0 && ny >= 0 && nx < w && ny < h)
            .map(move |(nx, ny)| (ny * w + nx) as usize)
    }

    /// Cells reachable from `from` through cells for which `pass` holds (the start cells
    /// are included whatever `pass` says).
    pub fn reach(&self, from: &[u32], pass: impl Fn(usize) -> bool) -> Vec<bool> {
        let mut seen = vec![false; self.tiles.len()];
        let mut queue = std::collections::VecDeque::new();
        for &s in from {
            if let Some(v) = seen.get_mut(s as usize)
                && !*v
            {
                *v = true;
                queue.push_back(s as usize);
            }
        }
        while let Some(i) = queue.pop_front() {
            for n in self.neighbours(i) {
                if !seen[n] && pass(n) {
                    seen[n] = true;
                    queue.push_back(n);
                }
            }
        }
        seen
    }
}
