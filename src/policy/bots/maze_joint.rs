//! The joint search behind `maze_planner`: a best-first (A*) search over the whole team's
//! state, every agent's position and keys, the keys still on the map and the locked doors
//! opened, with the maze's own rules for a step (moves see the doors as they were at the
//! step's start; a key is picked up by stepping on it; a locked door entered with its key
//! opens for good; afterwards a plate door is open while an agent stands on one of its plates
//! or in the doorway). The heuristic, the largest of the agents' distances to an exit with
//! every door open, never overestimates, so the plan found is a shortest one. One plan
//! serves every step of an episode while the team follows it; a state off the plan plans
//! again.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::maze::Known;
use crate::envs::maze::{act, view};

/// States a search may open before it gives up (the planner then falls back to its rule for
/// the rest of the episode): about 150 MB.
pub const MAX_STATES: usize = 1_000_000;

/// The largest team the joint search plans for (5ⁿ joint moves a state); larger teams
/// follow the planner's rule.
pub const MAX_AGENTS: usize = 3;

/// The team's state at the start of a step (a small copyable value: a search holds many).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Joint {
    /// Agents in the team (at most [`MAX_AGENTS`]).
    pub n: u8,
    /// Cell of each agent, by slot (the first `n`).
    pub at: [u32; MAX_AGENTS],
    /// Key colours each agent carries, by slot (the first `n`).
    pub keys: [u32; MAX_AGENTS],
    /// Keys of the map (by [`Maze::keys`] index) taken since the plan's start.
    pub taken: u64,
    /// Locked doors (by [`Maze::locks`] index) opened since the plan's start.
    pub unlocked: u64,
    /// Plate-door groups open at the step's start.
    pub open: u64,
}

/// The maze as the plan's start saw it.
pub struct Maze<'a> {
    m: &'a Known<'a>,
    /// Key cells and their colours.
    keys: Vec<(usize, u8)>,
    /// The colour of each locked door.
    lock_colour: Vec<u8>,
    key_at: HashMap<usize, usize>,
    lock_at: HashMap<usize, usize>,
    /// Plate-door group of each door or plate cell.
    door_group: HashMap<usize, u8>,
    plate_group: HashMap<usize, u8>,
}

impl<'a> Maze<'a> {
    /// The maze of `m`; `None` when it holds more keys or locked doors than the state can
    /// count (64 of each).
    pub fn new(m: &'a Known<'a>) -> Option<Self> {
        let mut keys = Vec::new();
        let mut locks = Vec::new();
        let mut door_group = HashMap::new();
        let mut plate_group = HashMap::new();
        for (i, &c) in m.cells.iter().enumerate() {
            match view::kind(c) {
                view::KEY => keys.push((i, view::link(c))),
                view::LOCKED => locks.push((i, view::link(c))),
                view::DOOR_OPEN | view::DOOR_CLOSED => {
                    door_group.insert(i, view::link(c));
                }
                view::PLATE => {
                    plate_group.insert(i, view::link(c));
                }
                _ => {}
            }
        }
        if keys.len() > 64 || locks.len() > 64 {
            return None;
        }
        Some(Self {
            key_at: keys.iter().enumerate().map(|(k, &(i, _))| (i, k)).collect(),
            lock_at: locks
                .iter()
                .enumerate()
                .map(|(k, &(i, _))| (i, k))
                .collect(),
            lock_colour: locks.iter().map(|&(_, c)| c).collect(),
            keys,
            door_group,
            plate_group,
            m,
        })
    }

    /// The state the map shows with agents at `at` carrying `keys` (`None` for more than
    /// [`MAX_AGENTS`] agents).
    pub fn start(&self, cells: &[u32], carried: &[u32]) -> Option<Joint> {
        let n = cells.len();
        if n > MAX_AGENTS || carried.len() != n {
            return None;
        }
        let (mut at, mut keys) = ([0u32; MAX_AGENTS], [0u32; MAX_AGENTS]);
        at[..n].copy_from_slice(cells);
        keys[..n].copy_from_slice(carried);
        let open = self
            .door_group
            .iter()
            .filter(|&(&i, _)| view::kind(self.m.cells[i]) == view::DOOR_OPEN)
            .fold(0u64, |o, (_, &g)| o | (1 << (g & 63)));
        let mut s = Joint {
            n: n as u8,
            at,
            keys,
            taken: 0,
            unlocked: 0,
            open,
        };
        self.forget_spent_keys(&mut s);
        Some(s)
    }

    /// Keys of colours whose doors are all open no longer matter: states that differ only in
    /// them become one state (carried keys dropped, keys on the map counted as taken).
    fn forget_spent_keys(&self, s: &mut Joint) {
        let needed = self
            .lock_colour
            .iter()
            .enumerate()
            .filter(|&(k, _)| s.unlocked & (1 << k) == 0)
            .fold(0u32, |m, (_, &c)| m | (1 << c));
        for k in &mut s.keys[..usize::from(s.n)] {
            *k &= needed;
        }
        for (k, &(_, c)) in self.keys.iter().enumerate() {
            if needed & (1 << c) == 0 {
                s.taken |= 1 << k;
            }
        }
    }

    /// The code of cell `i` in state `s`.
    fn code(&self, s: &Joint, i: usize) -> u8 {
        if let Some(&k) = self.key_at.get(&i)
            && s.taken & (1 << k) != 0
        {
            return view::FLOOR;
        }
        if let Some(&k) = self.lock_at.get(&i)
            && s.unlocked & (1 << k) != 0
        {
            return view::FLOOR;
        }
        if let Some(&g) = self.door_group.get(&i) {
            let kind = if s.open & (1 << (g & 63)) != 0 {
                view::DOOR_OPEN
            } else {
                view::DOOR_CLOSED
            };
            return view::with_link(kind, g);
        }
        self.m.cells[i]
    }

    fn done(&self, s: &Joint) -> bool {
        s.at[..usize::from(s.n)]
            .iter()
            .all(|&c| view::kind(self.m.cells[c as usize]) == view::EXIT)
    }

    /// Every cell's distance to the nearest exit with every door open (the search's
    /// heuristic; computed when a search starts, not on the steps that follow a plan).
    fn relaxed(&self) -> Vec<u32> {
        let m = self.m;
        m.distances(
            |i| !matches!(view::kind(m.cells[i]), view::WALL | view::UNKNOWN),
            |i| view::kind(m.cells[i]) == view::EXIT,
        )
    }

    /// The largest of the agents' relaxed distances to an exit.
    fn heuristic(relaxed: &[u32], s: &Joint) -> u32 {
        s.at[..usize::from(s.n)]
            .iter()
            .map(|&c| relaxed[c as usize])
            .max()
            .unwrap_or(0)
    }

    /// Each agent's legal moves in `s`: (action, target cell).
    fn moves(&self, s: &Joint, slot: usize) -> Vec<(u8, usize)> {
        let c = s.at[slot] as usize;
        std::iter::once((act::NOOP, c))
            .chain(
                self.m
                    .neighbours(c)
                    .filter(|&(_, n)| view::walkable(self.code(s, n), s.keys[slot])),
            )
            .collect()
    }

    /// The state after every agent takes its move of `targets` from `s`; `None` when two
    /// agents would step on one key at once (who gets it is drawn by the game).
    fn step(&self, s: &Joint, targets: &[usize]) -> Option<Joint> {
        let mut next = *s;
        for (slot, &t) in targets.iter().enumerate() {
            next.at[slot] = t as u32;
            if t == s.at[slot] as usize {
                continue;
            }
            if let Some(&k) = self.key_at.get(&t)
                && s.taken & (1 << k) == 0
            {
                if next.taken & (1 << k) != 0 {
                    return None;
                }
                next.taken |= 1 << k;
                next.keys[slot] |= 1 << self.keys[k].1;
            }
            if let Some(&k) = self.lock_at.get(&t) {
                next.unlocked |= 1 << k;
            }
        }
        self.forget_spent_keys(&mut next);
        next.open = 0;
        for &c in &next.at[..usize::from(next.n)] {
            let c = c as usize;
            if let Some(&g) = self.plate_group.get(&c).or_else(|| self.door_group.get(&c)) {
                next.open |= 1 << (g & 63);
            }
        }
        Some(next)
    }

    /// A shortest sequence of joint moves (an action per slot) from `start` to every agent on
    /// an exit, with the state each starts from; `None` when there is none within
    /// [`MAX_STATES`] states.
    pub fn plan(&self, start: Joint) -> Option<Vec<(Joint, Vec<u8>)>> {
        let n = usize::from(start.n);
        let relaxed = self.relaxed();
        let mut nodes: Vec<(Joint, usize, [u8; MAX_AGENTS], u32)> =
            vec![(start, usize::MAX, [act::NOOP; MAX_AGENTS], 0)];
        let mut seen: HashMap<Joint, usize> = HashMap::from([(start, 0)]);
        // (f, tie-break towards deeper nodes, then first found), node id.
        let mut open = BinaryHeap::from([Reverse((
            Self::heuristic(&relaxed, &start),
            Reverse(0u32),
            0usize,
        ))]);
        while let Some(Reverse((_, Reverse(g), id))) = open.pop() {
            if nodes[id].3 != g {
                continue;
            }
            let s = nodes[id].0;
            if self.done(&s) {
                let mut out = Vec::new();
                let mut cur = id;
                while nodes[cur].1 != usize::MAX {
                    let parent = nodes[cur].1;
                    out.push((nodes[parent].0, nodes[cur].2[..n].to_vec()));
                    cur = parent;
                }
                out.reverse();
                return Some(out);
            }
            if nodes.len() > MAX_STATES {
                return None;
            }
            let options: Vec<Vec<(u8, usize)>> = (0..n).map(|k| self.moves(&s, k)).collect();
            let mut pick = vec![0usize; n];
            loop {
                let targets: Vec<usize> = (0..n).map(|k| options[k][pick[k]].1).collect();
                if let Some(next) = self.step(&s, &targets) {
                    let g2 = g + 1;
                    let better = seen.get(&next).is_none_or(|&old| nodes[old].3 > g2);
                    if better {
                        let mut acts = [act::NOOP; MAX_AGENTS];
                        for k in 0..n {
                            acts[k] = options[k][pick[k]].0;
                        }
                        let h = Self::heuristic(&relaxed, &next);
                        let nid = nodes.len();
                        nodes.push((next, id, acts, g2));
                        seen.insert(next, nid);
                        open.push(Reverse((g2 + h, Reverse(g2), nid)));
                    }
                }
                // The next combination of moves (odometer order).
                let mut k = 0;
                while k < n {
                    pick[k] += 1;
                    if pick[k] < options[k].len() {
                        break;
                    }
                    pick[k] = 0;
                    k += 1;
                }
                if k == n {
                    break;
                }
            }
        }
        None
    }
}
