//! The maze's systems for one step: observe (window, known map, teammates, words heard,
//! legal moves), apply moves (keys, locks, talk), update doors, reward, summarize.

use bevy::math::IVec2;
use bevy::prelude::*;
use rand::seq::SliceRandom;

use super::codes::{act, view};
use super::map::MazeArena;
use super::{Heard, MazeSenses};
use crate::core::*;

/// MAPPO's global state of a maze, for each agent: every cell as it is (doors open or
/// closed, keys not yet taken, plates, the exit; the whole map, whatever anyone knows),
/// agents drawn as itself or a teammate, then the step and every agent's position and keys,
/// in slot order.
pub fn state_mazes(
    arenas: Query<(&EpisodeClock, &MazeArena, &ArenaAgents), Without<Idle>>,
    mut agents: Query<&mut GlobalView>,
    mut shared: Local<Vec<f32>>,
) {
    for (clock, maze, members) in &arenas {
        let w = maze.layout.width.max(1);
        let h = (maze.tiles.len() / w).max(1);
        shared.clear();
        shared.push(clock.step as f32 / 1000.0);
        for (slot, p) in maze.pos.iter().enumerate() {
            shared.extend([p.x as f32 / w as f32, p.y as f32 / h as f32]);
            let keys = maze.keys.get(slot).copied().unwrap_or(0);
            shared.extend((0..8).map(|k| ((keys >> k) & 1) as f32));
        }
        for (slot, &e) in members.entities().iter().enumerate() {
            let Ok(mut g) = agents.get_mut(e) else {
                continue;
            };
            let g = &mut g.0;
            g.cells.clear();
            g.cells.extend(maze.tiles.iter().map(|&c| c & 0x0f));
            for (s, p) in maze.pos.iter().enumerate() {
                let i = p.y as usize * w + p.x as usize;
                if let Some(c) = g.cells.get_mut(i)
                    && *c != view::SELF
                {
                    *c = if s == slot {
                        view::SELF
                    } else {
                        view::TEAMMATE
                    };
                }
            }
            g.dense.clone_from(&shared);
        }
    }
}

/// Writes every agent's observation and legal moves, and clears what it said last step
/// (its word now lives in the arena, where teammates hear it this step).
pub fn observe_mazes(
    arenas: Query<(&EpisodeClock, &MazeArena)>,
    mut agents: Query<
        (
            &InArena,
            &Agent,
            &mut Observation,
            &mut MazeSenses,
            &mut ActionMask,
            &mut Utterance,
            (Has<Oracle>, Has<OracleTeacher>),
        ),
        Without<Idle>,
    >,
) {
    agents.par_iter_mut().for_each(
        |(in_arena, agent, mut obs, mut senses, mut mask, mut say, (oracle, teacher))| {
            let Ok((clock, maze)) = arenas.get(in_arena.0) else {
                return;
            };
            say.0 = None;
            let slot = usize::from(agent.slot);
            let Some(&me) = maze.pos.get(slot) else {
                return;
            };
            let keys = maze.keys.get(slot).copied().unwrap_or(0);
            let obs = &mut *obs;
            obs.step = clock.step;
            obs.pos = [me.x, me.y];
            senses.keys = keys;
            // Known map: everything for oracles and full knowledge, else the agent's share.
            let (w, h) = (maze.layout.width, maze.layout.height);
            obs.map_width = w as u16;
            obs.map_height = h as u16;
            obs.map.clear();
            // An oracle teacher's seat: the whole map for the teacher beside the learner's.
            obs.oracle_map.0.clear();
            if teacher && !oracle {
                obs.oracle_map = (std::mem::take(&mut obs.oracle_map.0), w as u16, h as u16);
                obs.oracle_map.0.extend_from_slice(&maze.tiles);
            }
            if oracle || maze.rules.knowledge == super::params::Knowledge::Full {
                obs.map.extend_from_slice(&maze.tiles);
            } else {
                obs.map.extend(maze.tiles.iter().enumerate().map(|(i, &c)| {
                    if maze.knows(slot, i) {
                        c
                    } else {
                        view::UNKNOWN
                    }
                }));
            }
            // Local window, allocentric, centred on the agent; it is always known.
            let r = i32::from(maze.rules.view);
            let side = (2 * r + 1) as usize;
            obs.view_width = side as u8;
            obs.view_height = side as u8;
            obs.view_self = (r as u8, r as u8);
            obs.view.clear();
            for dy in -r..=r {
                for dx in -r..=r {
                    let code = match maze.index(me + IVec2::new(dx, dy)) {
                        Some(i) => {
                            obs.map[i] = maze.tiles[i];
                            maze.tiles[i]
                        }
                        None => view::WALL,
                    };
                    obs.view.push(code);
                }
            }
            obs.others.clear();
            senses.heard.clear();
            for (s, &p) in maze.pos.iter().enumerate() {
                if s == slot {
                    continue;
                }
                obs.others.push(Perceived {
                    slot: s as u16,
                    team: maze.rules.slot_team.get(s).copied().unwrap_or(0),
                    ally: true,
                    pos: [p.x, p.y],
                });
                let (dx, dy) = (p.x - me.x, p.y - me.y);
                if dx.abs() <= r && dy.abs() <= r {
                    obs.view[((dy + r) * (2 * r + 1) + dx + r) as usize] = view::TEAMMATE;
                }
                if let Some(Some(word)) = maze.said.get(s) {
                    senses.heard.push(Heard {
                        from: s as u16,
                        word: *word,
                    });
                }
            }
            obs.view[(r * (2 * r + 1) + r) as usize] = view::SELF;
            let mut m = ActionMask::only(act::NOOP);
            for (a, dx, dy) in act::MOVES {
                if let Some(i) = maze.index(me + IVec2::new(dx, dy))
                    && view::walkable(maze.tiles[i], keys)
                {
                    m.0 |= 1 << a;
                }
            }
            *mask = m;
        },
    );
}

/// Applies every agent's move, in an order drawn from the arena's stream each step. Doors
/// keep the state they had at the start of the step; a key is picked up by whoever steps
/// on it first; a locked door entered with its key opens for good (the key is kept).
/// Records what every agent said.
pub fn apply_maze_actions(
    mut arenas: Query<(&EpisodeClock, &mut MazeArena, &mut ArenaRng, &ArenaAgents), Without<Idle>>,
    mut agents: Query<(&Action, &mut GridPos, &Utterance)>,
    mut order: Local<Vec<usize>>,
) {
    for (clock, mut maze, mut rng, members) in &mut arenas {
        if !clock.is_live() {
            continue;
        }
        let maze = &mut *maze;
        let ents = members.entities();
        order.clear();
        order.extend(0..ents.len().min(maze.pos.len()));
        order.shuffle(&mut rng.0);
        for &slot in order.iter() {
            let Ok((action, mut pos, _)) = agents.get_mut(ents[slot]) else {
                continue;
            };
            let Some(&(_, dx, dy)) = act::MOVES.iter().find(|m| m.0 == action.0) else {
                continue;
            };
            let to = maze.pos[slot] + IVec2::new(dx, dy);
            let Some(i) = maze.index(to) else {
                continue;
            };
            let code = maze.tiles[i];
            if !view::walkable(code, maze.keys[slot]) {
                continue;
            }
            match view::kind(code) {
                view::KEY => {
                    maze.keys[slot] |= 1 << view::link(code);
                    maze.tiles[i] = view::FLOOR;
                    maze.counters.keys_picked += 1;
                }
                view::LOCKED => {
                    maze.tiles[i] = view::FLOOR;
                    maze.counters.doors_unlocked += 1;
                }
                _ => {}
            }
            maze.pos[slot] = to;
            pos.0 = to;
        }
        for (slot, &e) in ents.iter().enumerate() {
            let word = agents
                .get(e)
                .ok()
                .and_then(|(_, _, say)| say.0)
                .filter(|&w| usize::from(w) < maze.rules.words);
            if let Some(s) = maze.said.get_mut(slot) {
                *s = word;
                maze.counters.messages += u32::from(word.is_some());
            }
        }
    }
}

/// Opens doors whose plates (or doorways) are occupied after the moves, shuts the others,
/// and counts agent-steps on plates.
pub fn update_maze_doors(mut arenas: Query<(&EpisodeClock, &mut MazeArena), Without<Idle>>) {
    for (clock, mut maze) in &mut arenas {
        if !clock.is_live() {
            continue;
        }
        maze.update_doors();
        let on_plates = maze
            .pos
            .iter()
            .filter(|&&p| {
                maze.index(p)
                    .is_some_and(|i| view::kind(maze.tiles[i]) == view::PLATE)
            })
            .count() as u32;
        maze.counters.plate_steps += on_plates;
    }
}

/// Charges every agent the step cost; when every agent stands on an exit, pays the success
/// reward to all and ends the episode (termination).
pub fn reward_maze_agents(
    mut arenas: Query<(&mut EpisodeClock, &mut MazeArena, &ArenaAgents), Without<Idle>>,
    mut rewards: Query<&mut Reward>,
) {
    for (mut clock, mut maze, members) in &mut arenas {
        if !clock.is_live() {
            continue;
        }
        let success = maze.pos.iter().all(|&p| {
            maze.index(p)
                .is_some_and(|i| view::kind(maze.tiles[i]) == view::EXIT)
        });
        let r = -maze.rules.step_cost
            + if success {
                maze.rules.success_reward
            } else {
                0.0
            };
        for &e in members.entities() {
            if let Ok(mut reward) = rewards.get_mut(e) {
                reward.0 += r;
            }
        }
        if success {
            maze.counters.success = true;
            clock.terminated = true;
        }
    }
}

/// Fills the episode's metrics for arenas that just ended.
pub fn summarize_mazes(mut arenas: Query<(&EpisodeClock, &MazeArena, &mut EpisodeMetrics)>) {
    for (clock, maze, mut metrics) in &mut arenas {
        if clock.phase != ArenaPhase::Ending {
            continue;
        }
        let c = maze.counters;
        let m = &mut metrics.0;
        m.insert("success", f64::from(u8::from(c.success)));
        let steps = if c.success {
            clock.step
        } else {
            clock.max_steps
        };
        m.insert("steps_to_exit", f64::from(steps));
        m.insert("messages", f64::from(c.messages));
        m.insert("keys_picked", f64::from(c.keys_picked));
        m.insert("doors_unlocked", f64::from(c.doors_unlocked));
        m.insert("plate_steps", f64::from(c.plate_steps));
    }
}
