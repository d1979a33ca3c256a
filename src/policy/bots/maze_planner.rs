//! `maze_planner`: the full-map upper bound of the cooperative maze. Every planner sees the
//! whole map and all teammates. When a whole team of up to three agents is on the planner,
//! it follows a shortest joint plan found by a search over every agent's moves together
//! ([`super::maze_joint`]; planned once, followed while the team stays on it), which solves
//! every solvable maze within its state budget, plate doors in any number included. Larger
//! teams, mixed teams, and the rare maze whose search exceeds the budget follow the
//! deterministic joint rule below, applied by each planner to the shared state, so
//! planners coordinate without talking (the rule can deadlock with two or more plate doors:
//! each agent holding the other's plate):
//!
//! 1. *Hold.* The lowest-slot agent on a plate of door `D` stays while another agent stands
//!    in `D` or `D` lies on another agent's relaxed path to the exit (relaxed: every door
//!    taken as open).
//! 2. *The laggard* `j*` is, among agents that cannot reach an exit now (shut and locked
//!    doors closed), the one with the most shut doors on its relaxed path (ties: lowest
//!    slot). Its obstacle is the first shut door on that path.
//!    - A locked door: if a key of its colour lies on the map, the lowest-slot agent that
//!      can reach one fetches it; an agent carrying that colour walks into the door.
//!    - A plate door: the lowest-slot other agent that can reach one of its plates (without
//!      going through it) walks to the nearest and stays there (then rule 1 holds it).
//!    - `j*` itself walks its relaxed path and waits at shut doors.
//! 3. Agents that can reach an exit walk there; the others walk their relaxed path and wait
//!    at shut doors.

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::maze::Known;
use super::maze_joint::{Joint, MAX_AGENTS, Maze};
use crate::envs::maze::{act, view};
use crate::policy::{Decision, Policy};

/// The full-map planner (an oracle bot).
#[derive(Default)]
pub struct MazePlanner {
    /// Searches already run this step, per arena: every planner of an arena sees the same
    /// map and the same positions, so they share them.
    memo: BTreeMap<u32, Memo>,
    /// Each arena's joint plan ([`super::maze_joint`]), kept while the team follows it.
    plans: BTreeMap<u32, Plan>,
    /// Arenas whose search found no plan, and the step it ran at (this episode they follow
    /// the rule).
    gave_up: BTreeMap<u32, u32>,
}

/// The searches of one arena at one step that do not depend on who asks: distance fields
/// to the exits, relaxed (every door open) and as things are now (no keys).
#[derive(Default)]
struct Memo {
    relaxed: Option<Vec<u32>>,
    now: Option<Vec<u32>>,
}

/// The joint state every planner of an arena sees alike.
struct Shared<'a> {
    m: Known<'a>,
    /// Cell of each agent, by slot (`usize::MAX` for slots not seen).
    at: Vec<usize>,
    memo: RefCell<&'a mut Memo>,
}

impl Shared<'_> {
    fn kind(&self, i: usize) -> u8 {
        view::kind(self.m.cells[i])
    }
    fn link(&self, i: usize) -> u8 {
        view::link(self.m.cells[i])
    }
    /// Open now, without keys.
    fn open(&self, i: usize) -> bool {
        view::walkable(self.m.cells[i], 0)
    }
    fn relaxed(&self, i: usize) -> bool {
        !matches!(self.kind(i), view::WALL | view::UNKNOWN)
    }
    fn is_exit(&self, i: usize) -> bool {
        self.kind(i) == view::EXIT
    }
    fn shut(&self, i: usize) -> bool {
        matches!(self.kind(i), view::DOOR_CLOSED | view::LOCKED)
    }
    fn relaxed_path(&self, from: usize) -> Vec<usize> {
        let mut memo = self.memo.borrow_mut();
        let dist = memo
            .relaxed
            .get_or_insert_with(|| self.m.distances(|i| self.relaxed(i), |i| self.is_exit(i)));
        self.m
            .descend(from, dist, |i| self.relaxed(i))
            .unwrap_or_default()
    }
    fn reaches_exit(&self, from: usize) -> bool {
        let mut memo = self.memo.borrow_mut();
        let dist = memo
            .now
            .get_or_insert_with(|| self.m.distances(|i| self.open(i), |i| self.is_exit(i)));
        dist[from] != u32::MAX
    }
    fn slots(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.at
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, c)| c != usize::MAX)
    }
    /// Whether a door of plate/door name `g` lies on `path` or someone stands in one.
    fn door_needed(&self, g: u8, holder: usize) -> bool {
        let is_door = |i: usize| {
            matches!(self.kind(i), view::DOOR_OPEN | view::DOOR_CLOSED) && self.link(i) == g
        };
        self.slots().any(|(s, c)| {
            s != holder && (is_door(c) || self.relaxed_path(c).iter().any(|&i| is_door(i)))
        })
    }
}

/// The first move along `path` if legal, else noop (waiting at a shut door).
fn walk(d: &Decision<'_>, m: &Known<'_>, me: usize, path: Option<Vec<usize>>) -> u8 {
    match m.first_move(me, path) {
        Some(a) if d.mask.allows(a) => a,
        _ => act::NOOP,
    }
}

fn plan(d: &Decision<'_>, memo: &mut Memo) -> u8 {
    let Some(m) = Known::of(d.obs) else {
        return act::NOOP;
    };
    let my_slot = usize::from(d.agent.slot);
    let n = d
        .obs
        .others
        .iter()
        .map(|o| usize::from(o.slot) + 1)
        .max()
        .unwrap_or(0);
    let mut at = vec![usize::MAX; n.max(my_slot + 1)];
    for o in &d.obs.others {
        at[usize::from(o.slot)] = m.index(o.pos).unwrap_or(usize::MAX);
    }
    let Some(me) = m.index(d.obs.pos) else {
        return act::NOOP;
    };
    at[my_slot] = me;
    let s = Shared {
        m,
        at,
        memo: RefCell::new(memo),
    };
    let m = &s.m;
    let keys = d.senses.keys();
    let mine = |i: usize| view::walkable(m.cells[i], keys);

    // 1. Hold a plate while its door is needed.
    if s.kind(me) == view::PLATE {
        let g = s.link(me);
        let first_on = s
            .slots()
            .find(|&(_, c)| s.kind(c) == view::PLATE && s.link(c) == g)
            .map(|(slot, _)| slot);
        if first_on == Some(my_slot) && s.door_needed(g, my_slot) {
            return act::NOOP;
        }
    }

    // 2. The laggard and its obstacle.
    let laggard = s
        .slots()
        .filter(|&(_, c)| !s.reaches_exit(c))
        .map(|(slot, c)| {
            let path = s.relaxed_path(c);
            let shut = path.iter().filter(|&&i| s.shut(i)).count();
            (slot, path, shut)
        })
        .fold(
            None,
            |best: Option<(usize, Vec<usize>, usize)>, x| match best {
                Some(b) if b.2 >= x.2 => Some(b),
                _ => Some(x),
            },
        );
    if let Some((j, path, _)) = laggard {
        if let Some(&door) = path.iter().find(|&&i| s.shut(i)) {
            let g = s.link(door);
            if s.kind(door) == view::LOCKED {
                let is_key = |i: usize| s.kind(i) == view::KEY && s.link(i) == g;
                let fetcher = s
                    .slots()
                    .find(|&(_, c)| m.path(c, |i| s.open(i), is_key).is_some());
                if fetcher.map(|f| f.0) == Some(my_slot) {
                    return walk(d, m, me, m.path(me, mine, is_key));
                }
                if keys & (1 << g) != 0 {
                    return walk(d, m, me, m.path(me, mine, |i| i == door));
                }
            } else {
                let is_plate = |i: usize| s.kind(i) == view::PLATE && s.link(i) == g;
                let helper = s.slots().find(|&(slot, c)| {
                    slot != j && m.path(c, |i| i != door && s.open(i), is_plate).is_some()
                });
                if helper.map(|h| h.0) == Some(my_slot) {
                    if is_plate(me) {
                        return act::NOOP;
                    }
                    return walk(d, m, me, m.path(me, |i| i != door && mine(i), is_plate));
                }
            }
        }
        if j == my_slot {
            return walk(d, m, me, Some(path));
        }
    }

    // 3. To the exit if possible, else along the relaxed path.
    if s.is_exit(me) {
        return act::NOOP;
    }
    match m.path(me, mine, |i| s.is_exit(i)) {
        Some(p) => walk(d, m, me, Some(p)),
        None => walk(d, m, me, Some(s.relaxed_path(me))),
    }
}

/// The joint moves ahead of an arena's team, each with the state it starts from.
type Plan = std::collections::VecDeque<(Joint, Vec<u8>)>;

/// The team's joint state as `group` (every agent of one arena, all planners) sees it.
fn joint_of(group: &[&Decision<'_>], maze: &Maze<'_>, m: &Known<'_>) -> Option<Joint> {
    let n = group.len();
    let mut at = vec![u32::MAX; n];
    let mut keys = vec![0u32; n];
    for d in group {
        let slot = usize::from(d.agent.slot);
        *at.get_mut(slot)? = m.index(d.obs.pos)? as u32;
        keys[slot] = d.senses.keys();
    }
    if at.contains(&u32::MAX) {
        return None;
    }
    maze.start(&at, &keys)
}

impl MazePlanner {
    /// The joint actions of `group` (every agent of one arena, in any order) this step,
    /// by slot: the next of the arena's plan when the team stands where the plan expects,
    /// else from a new search; `None` when the search finds no plan (too many agents or
    /// states, or no way out).
    fn joint_actions(&mut self, arena: u32, group: &[&Decision<'_>]) -> Option<Vec<u8>> {
        if group.len() > MAX_AGENTS {
            return None;
        }
        // A search that failed is not run again until the next episode.
        let step = group[0].obs.step;
        if self.gave_up.get(&arena).is_some_and(|&s| s < step) {
            return None;
        }
        self.gave_up.remove(&arena);
        let m = Known::of(group[0].obs)?;
        let maze = Maze::new(&m)?;
        let now = joint_of(group, &maze, &m)?;
        let plan = self.plans.entry(arena).or_default();
        let on_plan = plan
            .front()
            .is_some_and(|(s, _)| s.at == now.at && s.open == now.open);
        if !on_plan {
            match maze.plan(now) {
                Some(p) => *plan = p.into(),
                None => {
                    plan.clear();
                    self.gave_up.insert(arena, step);
                    return None;
                }
            }
        }
        plan.pop_front().map(|(_, acts)| acts)
    }
}

impl Policy for MazePlanner {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        self.memo.clear();
        // Arenas whose whole team plans together follow a joint plan.
        let mut by_arena: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, d) in batch.iter().enumerate() {
            by_arena.entry(d.agent.arena).or_default().push(i);
        }
        let mut chosen: Vec<Option<u8>> = vec![None; batch.len()];
        for (arena, idx) in &by_arena {
            let team = batch[idx[0]].obs.others.len() + 1;
            if idx.len() != team {
                continue;
            }
            let group: Vec<&Decision<'_>> = idx.iter().map(|&i| &batch[i]).collect();
            if let Some(acts) = self.joint_actions(*arena, &group) {
                for &i in idx {
                    chosen[i] = acts.get(usize::from(batch[i].agent.slot)).copied();
                }
            }
        }
        for (d, c) in batch.iter_mut().zip(chosen) {
            let memo = self.memo.entry(d.agent.arena).or_default();
            d.action.0 = match c {
                Some(a) if d.mask.allows(a) => a,
                _ => plan(d, memo),
            };
        }
    }
}
