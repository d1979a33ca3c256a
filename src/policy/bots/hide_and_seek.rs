//! Scripted bots for hide-and-seek: a seeker that chases, a hider that flees, and a
//! fort-building hider (an oracle: it reads the whole map) that pushes boxes into its
//! room's doorways during preparation and locks them.

use bevy::math::IVec2;
use rand::Rng;
use std::collections::{BTreeMap, VecDeque};

use crate::core::Dir4;
use crate::envs::hide_and_seek::{act, view};
use crate::policy::{Decision, Policy};

/// Chases the last hider it saw (heading for where it last saw one), explores otherwise.
#[derive(Default)]
pub struct Seeker {
    last_seen: BTreeMap<(u32, u16), IVec2>,
}

/// Flees the seekers it sees; wanders during preparation.
pub struct Hider;

/// During preparation, pushes boxes into its room's doorways and locks them; then stays in
/// its fort (fleeing like [`Hider`] if it has no room or is seen outside one).
#[derive(Default)]
pub struct FortBuilder {
    rooms: BTreeMap<(u32, u16), Room>,
}

fn pos(d: &Decision<'_>) -> IVec2 {
    IVec2::new(d.obs.pos[0], d.obs.pos[1])
}

fn facing(d: &Decision<'_>) -> Dir4 {
    Dir4::ALL[usize::from(d.obs.facing % 4)]
}

/// The direction of the larger component of `v` (then the smaller), `None` for zero.
fn dirs_towards(v: IVec2) -> [Option<Dir4>; 2] {
    let x = match v.x.signum() {
        1 => Some(Dir4::East),
        -1 => Some(Dir4::West),
        _ => None,
    };
    let y = match v.y.signum() {
        1 => Some(Dir4::South),
        -1 => Some(Dir4::North),
        _ => None,
    };
    if v.x.abs() >= v.y.abs() {
        [x, y]
    } else {
        [y, x]
    }
}

/// One step of heading `dir`: forward if facing it, backward if it is behind, else a turn.
fn head(d: &Decision<'_>, dir: Dir4) -> Option<u8> {
    let f = facing(d);
    if f == dir {
        d.mask.allows(act::FORWARD).then_some(act::FORWARD)
    } else if f.back() == dir {
        d.mask.allows(act::BACKWARD).then_some(act::BACKWARD)
    } else if f.right() == dir {
        Some(act::TURN_RIGHT)
    } else {
        Some(act::TURN_LEFT)
    }
}

/// Forward when possible, turning now and then.
fn wander(d: &mut Decision<'_>) -> u8 {
    let roll: f32 = d.rng.random();
    if d.mask.allows(act::FORWARD) && roll < 0.75 {
        act::FORWARD
    } else if roll < 0.875 {
        act::TURN_LEFT
    } else {
        act::TURN_RIGHT
    }
}

/// Heads towards `target` along one axis or the other; wanders when both are blocked.
fn go_towards(d: &mut Decision<'_>, target: IVec2) -> u8 {
    for dir in dirs_towards(target - pos(d)).into_iter().flatten() {
        if let Some(a) = head(d, dir) {
            return a;
        }
    }
    wander(d)
}

/// Opponents in sight (agents of the other side), nearest first.
fn opponents(d: &Decision<'_>) -> Vec<IVec2> {
    let me = pos(d);
    let mut v: Vec<IVec2> = d
        .obs
        .others
        .iter()
        .filter(|o| !o.ally)
        .map(|o| IVec2::new(o.pos[0], o.pos[1]))
        .collect();
    v.sort_by_key(|p| ((*p - me).abs().element_sum(), p.y, p.x));
    v
}

fn flee(d: &mut Decision<'_>) -> u8 {
    if let Some(&o) = opponents(d).first() {
        return go_towards(d, pos(d) * 2 - o);
    }
    if d.senses.prep_left() > 0 {
        wander(d)
    } else {
        act::NOOP
    }
}

impl Policy for Seeker {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch.iter_mut() {
            let key = (d.agent.arena, d.agent.slot);
            if d.obs.step == 0 {
                self.last_seen.remove(&key);
            }
            let a = if d.mask.count() <= 1 {
                act::NOOP
            } else {
                if let Some(&o) = opponents(d).first() {
                    self.last_seen.insert(key, o);
                }
                match self.last_seen.get(&key).copied() {
                    Some(t) if (t - pos(d)).abs().element_sum() <= 1 && opponents(d).is_empty() => {
                        self.last_seen.remove(&key);
                        wander(d)
                    }
                    Some(t) => go_towards(d, t),
                    None => wander(d),
                }
            };
            d.action.0 = a;
        }
    }
}

impl Policy for Hider {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch.iter_mut() {
            d.action.0 = flee(d);
        }
    }
}

/// The oracle map as the fort builder reads it.
struct MapView<'a> {
    cells: &'a [u8],
    w: i32,
    h: i32,
}

impl<'a> MapView<'a> {
    /// The oracle map of `d`'s observation (`None` for an agent without one).
    fn of(d: &'a Decision<'_>) -> Option<Self> {
        (!d.obs.map.is_empty()).then(|| MapView {
            cells: &d.obs.map,
            w: i32::from(d.obs.map_width),
            h: i32::from(d.obs.map_height),
        })
    }
    fn at(&self, p: IVec2) -> u8 {
        if p.x < 0 || p.y < 0 || p.x >= self.w || p.y >= self.h {
            view::WALL
        } else {
            self.cells[(p.y * self.w + p.x) as usize]
        }
    }
    fn solid(&self, p: IVec2) -> bool {
        matches!(self.at(p), view::WALL | view::LOW_WALL)
    }
    fn object(&self, p: IVec2) -> bool {
        (view::BOX..=view::RAMP_LOCKED_THEIRS).contains(&self.at(p))
    }
    /// A one-cell gap in a wall line.
    fn doorway(&self, p: IVec2) -> bool {
        let s = |d: Dir4| self.solid(p + d.delta());
        !self.solid(p)
            && ((s(Dir4::East) && s(Dir4::West) && !s(Dir4::North) && !s(Dir4::South))
                || (s(Dir4::North) && s(Dir4::South) && !s(Dir4::East) && !s(Dir4::West)))
    }
    fn index(&self, p: IVec2) -> usize {
        (p.y * self.w + p.x) as usize
    }
    /// Breadth-first search from `from` over cells where `ok` holds: the distance to the
    /// nearest cell where `goal` holds, and that cell.
    fn nearest(
        &self,
        from: IVec2,
        ok: impl Fn(IVec2) -> bool,
        goal: impl Fn(IVec2) -> bool,
    ) -> Option<(u32, IVec2)> {
        let mut seen = vec![false; self.cells.len()];
        let mut queue = VecDeque::from([(from, 0u32)]);
        seen[self.index(from)] = true;
        while let Some((c, n)) = queue.pop_front() {
            if goal(c) {
                return Some((n, c));
            }
            for dir in Dir4::ALL {
                let next = c + dir.delta();
                if ok(next) && !seen[self.index(next)] {
                    seen[self.index(next)] = true;
                    queue.push_back((next, n + 1));
                }
            }
        }
        None
    }
    /// Breadth-first search from `from` over cells where `ok` holds; the first step
    /// (direction) of a shortest path to a cell where `goal` holds, and its length.
    fn bfs(
        &self,
        from: IVec2,
        ok: impl Fn(IVec2, Dir4) -> bool,
        goal: impl Fn(IVec2) -> bool,
    ) -> Option<(Option<Dir4>, u32)> {
        let mut first: Vec<Option<(Option<Dir4>, u32)>> = vec![None; self.cells.len()];
        let mut queue = VecDeque::new();
        first[self.index(from)] = Some((None, 0));
        queue.push_back(from);
        while let Some(c) = queue.pop_front() {
            let (dir0, n) = first[self.index(c)]?;
            if goal(c) {
                return Some((dir0, n));
            }
            for dir in Dir4::ALL {
                let nb = c + dir.delta();
                if nb.x < 0 || nb.y < 0 || nb.x >= self.w || nb.y >= self.h {
                    continue;
                }
                if first[self.index(nb)].is_none() && ok(nb, dir) {
                    first[self.index(nb)] = Some((dir0.or(Some(dir)), n + 1));
                    queue.push_back(nb);
                }
            }
        }
        None
    }
}

/// The room a builder starts in, or (starting outside every room, as Baker et al.'s
/// quadrant game places hiders anywhere) the room behind the doorway nearest to it, and its
/// doorways (with their outward directions); found once per episode: walls do not move.
struct Room {
    cells: Vec<bool>,
    doors: Vec<(IVec2, Dir4)>,
    /// This builder's rank among its team by distance to the nearest doorway at the start
    /// (the nearest first; ties by position): builder `k` starts on doorway `k`, and
    /// builders beyond the doorways' count wait inside.
    rank: usize,
}

/// The cells reachable from `from` without crossing a wall or a doorway.
fn region(m: &MapView<'_>, from: IVec2) -> Vec<bool> {
    let mut room = vec![false; m.cells.len()];
    let mut stack = vec![from];
    room[m.index(from)] = true;
    while let Some(c) = stack.pop() {
        for dir in Dir4::ALL {
            let n = c + dir.delta();
            if !m.solid(n) && !m.doorway(n) && !room[m.index(n)] {
                room[m.index(n)] = true;
                stack.push(n);
            }
        }
    }
    room
}

fn find_room(m: &MapView<'_>, me: IVec2, slot: u16) -> Room {
    // The room: cells reachable from here without crossing a wall or a doorway.
    let mut room = region(m, me);
    if room.iter().filter(|&&r| r).count() * 2 > m.cells.len() {
        // Outside: the part of the map behind the nearest doorway.
        if let Some((_, door)) = m.nearest(me, |p| !m.solid(p), |p| m.doorway(p)) {
            let behind = Dir4::ALL
                .into_iter()
                .map(|dir| door + dir.delta())
                .find(|&n| !m.solid(n) && !room[m.index(n)]);
            if let Some(n) = behind {
                room = region(m, n);
            }
        }
    }
    // The room's doorways, rotated by slot so that two builders start on different ones.
    let mut doors: Vec<(IVec2, Dir4)> = Vec::new();
    for y in 0..m.h {
        for x in 0..m.w {
            let p = IVec2::new(x, y);
            if m.doorway(p)
                && let Some(dir) = Dir4::ALL
                    .into_iter()
                    .find(|dir| !m.solid(p - dir.delta()) && room[m.index(p - dir.delta())])
            {
                doors.push((p, dir));
            }
        }
    }
    let _ = slot;
    let near = |p: IVec2| {
        let d = doors
            .iter()
            .map(|&(dr, _)| (p - dr).abs().element_sum())
            .min();
        (d.unwrap_or(0), p.y, p.x)
    };
    let mine = near(me);
    let rank = (0..m.h)
        .flat_map(|y| (0..m.w).map(move |x| IVec2::new(x, y)))
        .filter(|&p| m.at(p) == view::TEAMMATE && near(p) < mine)
        .count();
    if !doors.is_empty() {
        let turn = rank % doors.len();
        doors.rotate_left(turn);
    }
    Room {
        cells: room,
        doors,
        rank,
    }
}

fn build_fort(d: &mut Decision<'_>, rooms: &mut BTreeMap<(u32, u16), Room>) -> Option<u8> {
    let key = (d.agent.arena, d.agent.slot);
    if d.obs.step == 0 {
        rooms.remove(&key);
    }
    if d.senses.prep_left() == 0 {
        return None;
    }
    let m = MapView::of(d)?;
    let me = pos(d);
    let room = rooms
        .entry(key)
        .or_insert_with(|| find_room(&m, me, d.agent.slot));
    let (doors, rank) = (&room.doors, room.rank);
    let room = &room.cells;
    // A room is a part of the map shut off by doorways, not the whole map.
    if doors.is_empty() || room.iter().filter(|&&r| r).count() * 2 > m.cells.len() {
        return None;
    }
    let in_room = |p: IVec2| !m.solid(p) && room[m.index(p)];
    // Free to walk or push into: no wall, no object, and nobody standing there (agents
    // block each other; two builders planning through each other's cells would trade
    // places forever).
    let walk = |p: IVec2| {
        !m.solid(p) && !m.object(p) && !matches!(m.at(p), view::TEAMMATE | view::OPPONENT)
    };
    // Started outside: in through a doorway first (none left open: no fort to make).
    if !in_room(me) {
        let (first, _) = m.bfs(me, |p, _| walk(p), in_room)?;
        return head(d, first?);
    }
    let f = facing(d);
    // Goes to `stand` and faces `dir`, then does `then`.
    let approach = |d: &Decision<'_>, stand: IVec2, dir: Dir4, then: u8| -> Option<u8> {
        if me == stand {
            return Some(if f == dir {
                then
            } else if f.right() == dir {
                act::TURN_RIGHT
            } else {
                act::TURN_LEFT
            });
        }
        let (first, _) = m.bfs(me, |p, _| walk(p) && !m.doorway(p), |p| p == stand)?;
        head(d, first?)
    };
    // First lock boxes already in a doorway.
    for &(door, out) in doors {
        if m.at(door) == view::BOX
            && let Some(a) = approach(d, door - out.delta(), out, act::LOCK)
        {
            return Some(a);
        }
    }
    // Then bring the nearest box to an open doorway, pushing it outwards: a builder per
    // doorway (by slot); builders beyond the room's doorways (one door walled up, two
    // builders) wait inside, out of the way, where two would fight over the same box.
    if rank >= doors.len() {
        // The room's cell farthest from its doorways (ties: the first in row order).
        let far = (0..m.h)
            .flat_map(|y| (0..m.w).map(move |x| IVec2::new(x, y)))
            .filter(|&p| in_room(p) && !m.object(p))
            .max_by_key(|&p| {
                let near = doors
                    .iter()
                    .map(|&(dr, _)| (p - dr).abs().element_sum())
                    .min();
                (near.unwrap_or(0), -p.y, -p.x)
            })?;
        if me == far {
            return Some(act::NOOP);
        }
        return match m.bfs(me, |p, _| walk(p) && !m.doorway(p), |p| p == far) {
            Some((Some(first), _)) => head(d, first),
            _ => Some(act::NOOP),
        };
    }
    // A teammate still outside the room: the box that would close its way in (onto the
    // doorway, or onto the cell inside it) waits until it is in or preparation nearly over
    // (with one doorway the latecomer was shut out).
    let mate_outside = (0..m.h)
        .flat_map(|y| (0..m.w).map(move |x| IVec2::new(x, y)))
        .any(|p| m.at(p) == view::TEAMMATE && !in_room(p));
    for &(door, out) in doors {
        if m.object(door) {
            continue;
        }
        // Boxes of the room, nearest the doorway first; the first that can be pushed in.
        let mut boxes: Vec<IVec2> = (0..m.h)
            .flat_map(|y| (0..m.w).map(move |x| IVec2::new(x, y)))
            .filter(|&b| m.at(b) == view::BOX && in_room(b))
            .collect();
        boxes.sort_by_key(|b| ((*b - door).abs().element_sum(), b.y, b.x));
        let mut best: Option<(u32, IVec2, Dir4)> = None;
        for b in boxes {
            {
                // Box moves: into a free cell, with room for the pusher behind it.
                let path = m.bfs(
                    b,
                    |n, dir| {
                        let pusher = n - dir.delta() * 2;
                        (n == door || (in_room(n) && walk(n)) || n == b)
                            && (walk(pusher) || pusher == b)
                            && !m.doorway(pusher)
                    },
                    |p| p == door,
                );
                if let Some((Some(dir), len)) = path {
                    best = Some((len, b, dir));
                    break;
                }
            }
        }
        if let Some((_, b, dir)) = best {
            let closes = b + dir.delta() == door || b + dir.delta() == door - out.delta();
            if closes && mate_outside && me == b - dir.delta() && d.senses.prep_left() > 3 {
                return Some(act::NOOP);
            }
            if let Some(a) = approach(d, b - dir.delta(), dir, act::FORWARD) {
                return Some(a);
            }
        }
    }
    Some(act::NOOP)
}

impl Policy for FortBuilder {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch.iter_mut() {
            let mut a = build_fort(d, &mut self.rooms).unwrap_or_else(|| flee(d));
            // Two builders side by side that plan around each other can step back and
            // forth in lockstep for ever: a move next to a teammate waits one step in three
            // (random backoff, from the agent's own stream), which breaks the symmetry.
            if matches!(a, act::FORWARD | act::BACKWARD)
                && d.senses.prep_left() > 0
                && teammate_adjacent(d)
                && d.rng.random_range(0..3) == 0
            {
                a = act::NOOP;
            }
            d.action.0 = a;
        }
    }
}

/// Whether a teammate stands next to the agent (four neighbours), on the oracle map.
fn teammate_adjacent(d: &Decision<'_>) -> bool {
    let Some(m) = MapView::of(d) else {
        return false;
    };
    let me = pos(d);
    Dir4::ALL
        .into_iter()
        .any(|dir| m.at(me + dir.delta()) == view::TEAMMATE)
}
