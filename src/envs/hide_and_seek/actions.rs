//! Acting in hide-and-seek: what each action does (move, push, pull, climb, grab, lock),
//! which actions are legal, and the system that applies them.

use bevy::math::IVec2;
use bevy::prelude::*;
use rand::seq::SliceRandom;

use super::codes::act;
use super::map::{Grip, HnsArena, ObjectKind};
use super::view;
use crate::core::*;

/// What moving forward would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// Nothing: the way is blocked.
    Blocked,
    /// Step onto a free cell.
    Step(IVec2),
    /// Push object `0` to cell `1` and step into its place.
    Push(usize, IVec2),
    /// Climb the ramp in front over the box or low wall behind it, landing on the cell.
    Climb(IVec2),
}

/// What moving forward from `pos` facing `f` would do for the agent in `slot`.
/// Ramp rule: with a ramp in front, a box or low wall right behind the ramp and a free cell
/// behind that, the agent lands on that free cell (the ramp and the box stay; locked ramps
/// can be climbed too). Otherwise an object in front is pushed one cell if it is unlocked,
/// not held by another agent, and the cell beyond is free floor.
pub fn forward(arena: &HnsArena, slot: usize, pos: IVec2, f: IVec2) -> Forward {
    let c = pos + f;
    if arena.free(c) {
        return Forward::Step(c);
    }
    let Some(i) = arena.object_at(c) else {
        return Forward::Blocked;
    };
    let o = &arena.objects[i];
    let beyond = c + f;
    let mine = o.held_by == Some(slot as u16);
    if o.kind == ObjectKind::Ramp && !mine {
        let over_box = arena
            .object_at(beyond)
            .is_some_and(|j| arena.objects[j].kind == ObjectKind::Box);
        let over_low_wall = arena.tiles.get(beyond) == Some(view::LOW_WALL);
        if (over_box || over_low_wall) && arena.free(beyond + f) {
            return Forward::Climb(beyond + f);
        }
    }
    if o.locked_by.is_none() && (o.held_by.is_none() || mine) && arena.free(beyond) {
        return Forward::Push(i, beyond);
    }
    Forward::Blocked
}

/// The object the agent in `slot` validly holds: its own grip on an unlocked object right
/// in front of it.
pub fn held(arena: &HnsArena, slot: usize, grip: &Grip, pos: IVec2, f: IVec2) -> Option<usize> {
    let i = usize::from(grip.0?);
    let o = arena.objects.get(i)?;
    (o.held_by == Some(slot as u16) && o.locked_by.is_none() && o.pos == pos + f).then_some(i)
}

/// The legal actions of the agent in `slot`.
pub fn legal_actions(
    arena: &HnsArena,
    slot: usize,
    pos: IVec2,
    facing: Dir4,
    holding: Option<usize>,
    prep: bool,
) -> ActionMask {
    let side = arena.side[slot];
    if prep && side == 1 {
        return ActionMask::only(act::NOOP);
    }
    let f = facing.delta();
    let mut m = (1u32 << act::NOOP) | (1 << act::TURN_LEFT) | (1 << act::TURN_RIGHT);
    if forward(arena, slot, pos, f) != Forward::Blocked {
        m |= 1 << act::FORWARD;
    }
    if arena.free(pos - f) {
        m |= 1 << act::BACKWARD;
    }
    if holding.is_some() {
        m |= 1 << act::RELEASE;
    }
    if let Some(i) = arena.object_at(pos + f) {
        let o = &arena.objects[i];
        match o.locked_by {
            None => {
                m |= 1 << act::LOCK;
                if holding.is_none() && o.held_by.is_none() {
                    m |= 1 << act::GRAB;
                }
            }
            Some(s) if s == side => m |= 1 << act::UNLOCK,
            Some(_) => {}
        }
    }
    ActionMask(m)
}

/// Applies every agent's action, in an order drawn from the arena's stream each step.
/// Seekers do nothing during preparation whatever they chose.
pub fn apply_hide_and_seek(
    mut arenas: Query<(&EpisodeClock, &mut HnsArena, &mut ArenaRng, &ArenaAgents), Without<Idle>>,
    mut agents: Query<(&Action, &mut GridPos, &mut Facing, &mut Grip)>,
    mut order: Local<Vec<usize>>,
) {
    for (clock, mut arena, mut rng, members) in &mut arenas {
        let arena = &mut *arena;
        let ents = members.entities();
        let prep = clock.step < arena.prep_steps;
        order.clear();
        order.extend(0..ents.len());
        order.shuffle(&mut rng.0);
        for &slot in order.iter() {
            let Ok((action, mut pos, mut facing, mut grip)) = agents.get_mut(ents[slot]) else {
                continue;
            };
            let side = arena.side[slot];
            let f = facing.0.delta();
            // A grip lapses when its object was locked, moved away or taken.
            let holding = held(arena, slot, &grip, pos.0, f);
            if holding.is_none() {
                release(arena, slot, &mut grip);
            }
            if prep && side == 1 {
                continue;
            }
            let front = arena.object_at(pos.0 + f);
            match action.0 {
                act::FORWARD => match forward(arena, slot, pos.0, f) {
                    Forward::Blocked => {}
                    Forward::Step(to) => {
                        arena.move_agent(slot, pos.0, to);
                        pos.0 = to;
                    }
                    Forward::Push(i, to) => {
                        arena.move_object(i, to);
                        arena.move_agent(slot, pos.0, pos.0 + f);
                        pos.0 += f;
                        arena.stats.pushes += 1;
                    }
                    Forward::Climb(to) => {
                        arena.move_agent(slot, pos.0, to);
                        pos.0 = to;
                        arena.stats.climbs += 1;
                    }
                },
                act::BACKWARD if arena.free(pos.0 - f) => {
                    let from = pos.0;
                    arena.move_agent(slot, from, from - f);
                    pos.0 = from - f;
                    if let Some(i) = holding {
                        arena.move_object(i, from);
                        arena.stats.pulls += 1;
                    }
                }
                act::TURN_LEFT | act::TURN_RIGHT => {
                    release(arena, slot, &mut grip);
                    facing.0 = if action.0 == act::TURN_LEFT {
                        facing.0.left()
                    } else {
                        facing.0.right()
                    };
                }
                act::GRAB => {
                    if let Some(i) = front
                        && holding.is_none()
                        && arena.objects[i].locked_by.is_none()
                        && arena.objects[i].held_by.is_none()
                    {
                        arena.objects[i].held_by = Some(slot as u16);
                        grip.0 = Some(i as u8);
                    }
                }
                act::RELEASE => release(arena, slot, &mut grip),
                act::LOCK => {
                    if let Some(i) = front
                        && arena.objects[i].locked_by.is_none()
                    {
                        let o = &mut arena.objects[i];
                        o.locked_by = Some(side);
                        o.held_by = None;
                        arena.stats.locks += 1;
                        let c = arena.obj.index(pos.0 + f);
                        arena.update_cell(c);
                    }
                }
                act::UNLOCK => {
                    if let Some(i) = front
                        && arena.objects[i].locked_by == Some(side)
                    {
                        arena.objects[i].locked_by = None;
                        arena.stats.locks += 1;
                        let c = arena.obj.index(pos.0 + f);
                        arena.update_cell(c);
                    }
                }
                _ => {}
            }
        }
    }
}

fn release(arena: &mut HnsArena, slot: usize, grip: &mut Grip) {
    if let Some(i) = grip.0.take()
        && let Some(o) = arena.objects.get_mut(usize::from(i))
        && o.held_by == Some(slot as u16)
    {
        o.held_by = None;
    }
}
