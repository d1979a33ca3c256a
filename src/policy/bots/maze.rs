//! Scripted bots for the cooperative maze: an explorer that ignores talk, and a pair that
//! talks (the talker tells the follower which way to go). They read the known map of their
//! observation (which includes the local window) and remember nothing between steps. The
//! full-map planner is in [`super::maze_planner`].

use rand::Rng;
use std::collections::VecDeque;

use crate::core::Observation;
use crate::envs::maze::{act, talk, view};
use crate::policy::{Decision, Policy};

/// Goes to the exit along a path it knows; otherwise picks up keys it knows how to reach;
/// otherwise walks to the nearest edge of the unknown (frontier exploration); otherwise a
/// random legal move. Ignores talk.
pub struct MazeExplorer;
/// Walks to the exit like [`MazeExplorer`], and every step tells its first teammate the
/// move that teammate should take towards the exit, worked out on the talker's own known
/// map (through known cells if it can, locked doors taken as open; else through unknown
/// cells too, taken as open): "north"/"south"/"east"/"west", or "here" when it
/// stands on the exit.
pub struct MazeTalker;
/// First picks up a key it knows how to reach when it carries none (the talker cannot see
/// what it carries); then does what it last heard when that move is legal, stays on
/// "here", and explores like [`MazeExplorer`] otherwise.
pub struct MazeFollower;

/// Keeps a wall on its right hand (the oldest rule for getting out of a maze): steps onto
/// the exit when it is a neighbour and stays there; otherwise turns right if it can, else
/// goes straight, else left, else back, its heading being its last move (north at the start
/// of an episode). It reads only the four cells around it and its last move, so a learner
/// that remembers one turn reads all it decides on: the teacher to clone where a
/// planner's choices (a search over the whole known map) are more than a small model can
/// copy. In a maze without loops it walks every corridor at most twice; ignores talk.
#[derive(Default)]
pub struct MazeWallFollower {
    /// Each agent's heading (its last move), by (arena, slot); cleared at step 0.
    heading: std::collections::HashMap<(u32, u16), u8>,
}

/// A map to search: width, height and codes.
pub(super) struct Known<'a> {
    pub w: usize,
    pub h: usize,
    pub cells: &'a [u8],
}

impl<'a> Known<'a> {
    /// The agent's known map.
    pub fn of(obs: &'a Observation) -> Option<Self> {
        let (w, h) = (usize::from(obs.map_width), usize::from(obs.map_height));
        (w > 0 && obs.map.len() == w * h).then_some(Self {
            w,
            h,
            cells: &obs.map,
        })
    }
    /// Row-major index of a position, if on the map.
    pub fn index(&self, p: [i32; 2]) -> Option<usize> {
        let [x, y] = p;
        (x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h)
            .then(|| y as usize * self.w + x as usize)
    }
    /// The in-map neighbours of `i`, with the move that reaches each.
    pub fn neighbours(&self, i: usize) -> impl Iterator<Item = (u8, usize)> + '_ {
        let (x, y) = ((i % self.w) as i32, (i / self.w) as i32);
        act::MOVES
            .into_iter()
            .filter_map(move |(a, dx, dy)| self.index([x + dx, y + dy]).map(|n| (a, n)))
    }
    /// The cells of a shortest path from `from` (excluded) to the nearest cell where `goal`
    /// holds, through cells where `pass` holds (goal cells must pass too). Ties go to the
    /// first found, neighbours in action order. `Some(empty)` if `from` is a goal.
    pub fn path(
        &self,
        from: usize,
        pass: impl Fn(usize) -> bool,
        goal: impl Fn(usize) -> bool,
    ) -> Option<Vec<usize>> {
        if goal(from) {
            return Some(Vec::new());
        }
        let mut parent = vec![usize::MAX; self.cells.len()];
        parent[from] = from;
        let mut q = VecDeque::from([from]);
        while let Some(i) = q.pop_front() {
            for (_, n) in self.neighbours(i) {
                if parent[n] != usize::MAX || !pass(n) {
                    continue;
                }
                parent[n] = i;
                if goal(n) {
                    let mut path = vec![n];
                    let mut c = n;
                    while parent[c] != from {
                        c = parent[c];
                        path.push(c);
                    }
                    path.reverse();
                    return Some(path);
                }
                q.push_back(n);
            }
        }
        None
    }
    /// Steps from every cell to the nearest cell where `goal` (and `pass`) holds, moving
    /// through cells where `pass` holds (`u32::MAX`: unreachable). The start cell itself
    /// need not pass, as in [`Known::path`]. One search answers for every start.
    pub fn distances(
        &self,
        pass: impl Fn(usize) -> bool,
        goal: impl Fn(usize) -> bool,
    ) -> Vec<u32> {
        let mut dist = vec![u32::MAX; self.cells.len()];
        let mut q = VecDeque::new();
        for (i, d) in dist.iter_mut().enumerate() {
            if goal(i) && pass(i) {
                *d = 0;
                q.push_back(i);
            }
        }
        while let Some(c) = q.pop_front() {
            for (_, n) in self.neighbours(c) {
                if dist[n] == u32::MAX {
                    dist[n] = dist[c] + 1;
                    if pass(n) {
                        q.push_back(n);
                    }
                }
            }
        }
        dist
    }
    /// A shortest path from `from` down a distance field made by [`Known::distances`] with
    /// the same `pass` (ties: neighbours in action order).
    pub fn descend(
        &self,
        from: usize,
        dist: &[u32],
        pass: impl Fn(usize) -> bool,
    ) -> Option<Vec<usize>> {
        if dist[from] == u32::MAX {
            return None;
        }
        let mut path = Vec::with_capacity(dist[from] as usize);
        let mut cur = from;
        while dist[cur] > 0 {
            let next = self
                .neighbours(cur)
                .map(|(_, n)| n)
                .find(|&n| pass(n) && dist[n] == dist[cur] - 1)?;
            path.push(next);
            cur = next;
        }
        Some(path)
    }
    /// Like [`Known::path`], but ties between the nearest goals are broken at random from
    /// `rng` (so a memoryless explorer does not swing between two frontiers).
    pub fn path_any(
        &self,
        from: usize,
        pass: impl Fn(usize) -> bool,
        goal: impl Fn(usize) -> bool,
        rng: &mut impl Rng,
    ) -> Option<Vec<usize>> {
        let mut parent = vec![usize::MAX; self.cells.len()];
        let mut dist = vec![u32::MAX; self.cells.len()];
        parent[from] = from;
        dist[from] = 0;
        let mut q = VecDeque::from([from]);
        let mut found: Vec<usize> = Vec::new();
        while let Some(i) = q.pop_front() {
            if found.first().is_some_and(|&f| dist[i] >= dist[f]) {
                break;
            }
            for (_, n) in self.neighbours(i) {
                if parent[n] != usize::MAX || !pass(n) {
                    continue;
                }
                parent[n] = i;
                dist[n] = dist[i] + 1;
                if goal(n) {
                    found.push(n);
                } else {
                    q.push_back(n);
                }
            }
        }
        let mut c = *found.get(rng.random_range(0..found.len().max(1)))?;
        let mut path = vec![c];
        while parent[c] != from {
            c = parent[c];
            path.push(c);
        }
        path.reverse();
        Some(path)
    }
    /// The move from cell `a` to its neighbour `b`.
    pub fn move_to(&self, a: usize, b: usize) -> u8 {
        self.neighbours(a)
            .find(|&(_, n)| n == b)
            .map_or(act::NOOP, |(m, _)| m)
    }
    /// The first move of a path from `from` (noop when empty or absent).
    pub fn first_move(&self, from: usize, path: Option<Vec<usize>>) -> Option<u8> {
        path.map(|p| p.first().map_or(act::NOOP, |&n| self.move_to(from, n)))
    }
}

/// A random legal move from the agent's stream (noop if none).
fn random_move(d: &mut Decision<'_>) -> u8 {
    let n = d.mask.count();
    let k = if n > 1 { d.rng.random_range(0..n) } else { 0 };
    d.mask.nth(k).unwrap_or(act::NOOP)
}

/// The explorer's move: exit, else a key, else the frontier, else random.
fn explore(d: &mut Decision<'_>) -> u8 {
    let Some(m) = Known::of(d.obs) else {
        return act::NOOP;
    };
    let Some(me) = m.index(d.obs.pos) else {
        return act::NOOP;
    };
    let keys = d.senses.keys();
    let pass = |i: usize| view::walkable(m.cells[i], keys);
    let kind = |i: usize| view::kind(m.cells[i]);
    let chosen = m
        .first_move(me, m.path(me, pass, |i| kind(i) == view::EXIT))
        .or_else(|| m.first_move(me, m.path(me, pass, |i| kind(i) == view::KEY)))
        .or_else(|| {
            let frontier =
                |i: usize| i != me && m.neighbours(i).any(|(_, n)| kind(n) == view::UNKNOWN);
            m.first_move(me, m.path_any(me, pass, frontier, &mut *d.rng))
        });
    match chosen {
        Some(a) if d.mask.allows(a) => a,
        _ => random_move(d),
    }
}

impl Policy for MazeExplorer {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch {
            d.action.0 = explore(d);
        }
    }
}

/// The move a quarter turn clockwise of `m` (north, east, south, west in turn).
fn clockwise(m: u8) -> u8 {
    match m {
        act::NORTH => act::EAST,
        act::EAST => act::SOUTH,
        act::SOUTH => act::WEST,
        _ => act::NORTH,
    }
}

impl Policy for MazeWallFollower {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch {
            let key = (d.agent.arena, d.agent.slot);
            if d.obs.step == 0 {
                self.heading.remove(&key);
            }
            let known = Known::of(d.obs);
            let cell = |p: [i32; 2]| {
                known
                    .as_ref()
                    .and_then(|m| m.index(p).map(|i| view::kind(m.cells[i])))
                    .unwrap_or(view::UNKNOWN)
            };
            let [x, y] = d.obs.pos;
            if cell([x, y]) == view::EXIT {
                d.action.0 = act::NOOP;
                continue;
            }
            let exit = act::MOVES
                .into_iter()
                .find(|&(a, dx, dy)| d.mask.allows(a) && cell([x + dx, y + dy]) == view::EXIT)
                .map(|(a, _, _)| a);
            let h = self.heading.get(&key).copied().unwrap_or(act::NORTH);
            let right = clockwise(h);
            let back = clockwise(right);
            let left = clockwise(back);
            let a = exit
                .or_else(|| {
                    [right, h, left, back]
                        .into_iter()
                        .find(|&a| d.mask.allows(a))
                })
                .unwrap_or(act::NOOP);
            if a != act::NOOP {
                self.heading.insert(key, a);
            }
            d.action.0 = a;
        }
    }
}

/// The word the talker says to the teammate at `pos`: the first move of a path to the exit
/// on the talker's known map (unknown cells and shut doors taken as open), or "here".
fn advice(d: &Decision<'_>, pos: [i32; 2]) -> Option<u8> {
    let m = Known::of(d.obs)?;
    let at = m.index(pos)?;
    let kind = |i: usize| view::kind(m.cells[i]);
    if kind(at) == view::EXIT {
        return Some(talk::HERE);
    }
    let known = |i: usize| view::walkable(m.cells[i], u32::MAX);
    let open = |i: usize| kind(i) == view::UNKNOWN || known(i);
    let relaxed = |i: usize| open(i) || matches!(kind(i), view::DOOR_CLOSED | view::LOCKED);
    let exit = |i: usize| kind(i) == view::EXIT;
    let path = m
        .path(at, known, exit)
        .or_else(|| m.path(at, open, exit))
        .or_else(|| m.path(at, relaxed, exit))?;
    talk::word_of_move(m.move_to(at, *path.first()?))
}

impl Policy for MazeTalker {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch {
            let word = d.obs.others.first().and_then(|o| advice(d, o.pos));
            if let Some(say) = d.say.as_deref_mut() {
                say.0 = word;
            }
            d.action.0 = explore(d);
        }
    }
}

/// The first move towards the nearest key on the known map, when the agent carries none.
fn fetch_key(d: &Decision<'_>) -> Option<u8> {
    let m = Known::of(d.obs)?;
    let me = m.index(d.obs.pos)?;
    if d.senses.keys() != 0 {
        return None;
    }
    let pass = |i: usize| view::walkable(m.cells[i], 0);
    let a = m.first_move(
        me,
        m.path(me, pass, |i| view::kind(m.cells[i]) == view::KEY),
    )?;
    d.mask.allows(a).then_some(a)
}

impl Policy for MazeFollower {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch {
            let heard = d.senses.heard().first().map(|h| h.word);
            if let Some(a) = fetch_key(d) {
                d.action.0 = a;
                continue;
            }
            d.action.0 = match heard {
                Some(talk::HERE) => act::NOOP,
                Some(w) => match talk::move_of_word(w) {
                    Some(a) if d.mask.allows(a) => a,
                    _ => explore(d),
                },
                None => explore(d),
            };
        }
    }
}
