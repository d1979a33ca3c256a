//! Scripted bots for Commons Harvest and Clean Up. They read only the egocentric view (row 0
//! is farthest ahead) and move with egocentric actions, like any learned policy would.

use rand::Rng;

use crate::envs::dilemma::{act, view};
use crate::policy::{Decision, Policy};

/// Walks to the nearest visible apple and eats it; wanders otherwise.
pub struct GreedyHarvester;
/// Like [`GreedyHarvester`] but never eats an apple that has no other apple within L2
/// radius 2 in its view (the last apple of a patch, without which the patch never regrows).
pub struct SustainableHarvester;
/// Cleans visible river dirt with its beam; harvests greedily when no dirt is in view.
pub struct Cleaner;
/// Harvests greedily and never cleans (in Clean Up it lives off the cleaners' work).
pub struct FreeRider;

/// A cell of the view as (right, ahead) offsets from the agent.
fn offsets<'a>(d: &'a Decision<'_>) -> impl Iterator<Item = (i32, i32, u8)> + 'a {
    let w = i32::from(d.obs.view_width);
    let (sc, sr) = (i32::from(d.obs.view_self.0), i32::from(d.obs.view_self.1));
    d.obs.view.iter().enumerate().map(move |(i, &c)| {
        let (col, row) = (i as i32 % w, i as i32 / w);
        (col - sc, sr - row, c)
    })
}

/// The code at egocentric offset (right, ahead), `OUTSIDE` if not in view.
fn at(d: &Decision<'_>, right: i32, ahead: i32) -> u8 {
    let w = i32::from(d.obs.view_width);
    let h = i32::from(d.obs.view_height);
    let col = i32::from(d.obs.view_self.0) + right;
    let row = i32::from(d.obs.view_self.1) - ahead;
    if col < 0 || row < 0 || col >= w || row >= h {
        return view::OUTSIDE;
    }
    d.obs.view[(row * w + col) as usize]
}

fn walkable(code: u8) -> bool {
    matches!(
        code,
        view::FLOOR | view::APPLE | view::APPLE_SITE | view::RIVER | view::DIRT
    )
}

/// Whether the apple at (r, a) has another apple within L2 radius 2 in view.
fn has_neighbour_apple(d: &Decision<'_>, r: i32, a: i32) -> bool {
    (-2..=2).any(|dr: i32| {
        (-2..=2).any(|da: i32| {
            (dr, da) != (0, 0) && dr * dr + da * da <= 4 && at(d, r + dr, a + da) == view::APPLE
        })
    })
}

/// The egocentric move towards (r, a), avoiding cells for which `avoid` holds.
fn step_towards(d: &Decision<'_>, r: i32, a: i32, avoid: &dyn Fn(i32, i32) -> bool) -> Option<u8> {
    let mut options: Vec<(u8, i32, i32)> = Vec::with_capacity(2);
    let vertical = if a > 0 {
        Some((act::FORWARD, 0, 1))
    } else if a < 0 {
        Some((act::BACKWARD, 0, -1))
    } else {
        None
    };
    let horizontal = if r > 0 {
        Some((act::STEP_RIGHT, 1, 0))
    } else if r < 0 {
        Some((act::STEP_LEFT, -1, 0))
    } else {
        None
    };
    if a.abs() >= r.abs() {
        options.extend(vertical);
        options.extend(horizontal);
    } else {
        options.extend(horizontal);
        options.extend(vertical);
    }
    options
        .into_iter()
        .find(|&(_, dr, da)| walkable(at(d, dr, da)) && !avoid(dr, da))
        .map(|(m, _, _)| m)
}

/// Forward when possible, turning now and then; turns away from walls.
fn wander(d: &mut Decision<'_>) -> u8 {
    let roll: f32 = d.rng.random();
    if walkable(at(d, 0, 1)) && roll < 0.7 {
        act::FORWARD
    } else if roll < 0.85 {
        act::TURN_LEFT
    } else {
        act::TURN_RIGHT
    }
}

/// The nearest cell (Manhattan, then scan order) whose code satisfies `want`.
fn nearest(d: &Decision<'_>, want: &dyn Fn(i32, i32, u8) -> bool) -> Option<(i32, i32)> {
    offsets(d)
        .filter(|&(r, a, c)| (r, a) != (0, 0) && want(r, a, c))
        .min_by_key(|&(r, a, _)| r.abs() + a.abs())
        .map(|(r, a, _)| (r, a))
}

fn harvest(d: &mut Decision<'_>, sustainable: bool) -> u8 {
    let protected =
        |r: i32, a: i32| sustainable && at(d, r, a) == view::APPLE && !has_neighbour_apple(d, r, a);
    let target = nearest(d, &|r, a, c| c == view::APPLE && !protected(r, a));
    let choice = target.and_then(|(r, a)| step_towards(d, r, a, &protected));
    let ahead_protected = protected(0, 1);
    match choice {
        Some(m) => m,
        None => {
            let m = wander(d);
            if m == act::FORWARD && ahead_protected {
                act::TURN_LEFT
            } else {
                m
            }
        }
    }
}

fn clean_or_harvest(d: &mut Decision<'_>) -> u8 {
    // Dirt in line ahead within the beam's reach (3 cells), with nothing solid between.
    for ahead in 1..=3 {
        match at(d, 0, ahead) {
            view::DIRT => {
                return if d.mask.allows(act::CLEAN) {
                    act::CLEAN
                } else {
                    act::NOOP
                };
            }
            view::WALL | view::OUTSIDE => break,
            _ => {}
        }
    }
    match nearest(d, &|_, _, c| c == view::DIRT) {
        Some((r, 0)) => {
            if r > 0 {
                act::TURN_RIGHT
            } else {
                act::TURN_LEFT
            }
        }
        Some((r, a)) if a < 0 && r == 0 => act::TURN_RIGHT,
        Some((r, a)) => step_towards(d, r, a - 1, &|_, _| false).unwrap_or_else(|| wander(d)),
        None => harvest(d, false),
    }
}

fn run(batch: &mut [Decision<'_>], f: fn(&mut Decision<'_>) -> u8) {
    for d in batch {
        let a = if d.obs.removed { act::NOOP } else { f(d) };
        d.action.0 = if d.mask.allows(a) { a } else { act::NOOP };
    }
}

impl Policy for GreedyHarvester {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        run(batch, |d| harvest(d, false));
    }
}

impl Policy for SustainableHarvester {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        run(batch, |d| harvest(d, true));
    }
}

impl Policy for Cleaner {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        run(batch, clean_or_harvest);
    }
}

impl Policy for FreeRider {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        run(batch, |d| harvest(d, false));
    }
}
