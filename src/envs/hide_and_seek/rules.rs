//! The systems of hide-and-seek besides acting: observe (vision), reward (who sees whom),
//! summarise, hash and draw.

use bevy::math::IVec2;
use bevy::prelude::*;

use super::actions::{held, legal_actions};
use super::codes::view;
use super::map::{Grip, HnsArena, ObjectKind};
use super::{HnsSenses, SeenObject};
use crate::core::*;

/// Writes every agent's view (what its vision cone lights), the agents it sees, its legal
/// actions, and for oracle bots the whole map.
pub fn observe_hide_and_seek(
    arenas: Query<(&EpisodeClock, &HnsArena)>,
    mut agents: Query<
        (
            &InArena,
            &Agent,
            &GridPos,
            &Facing,
            &Grip,
            (Has<Oracle>, Has<OracleTeacher>),
            &mut Observation,
            &mut HnsSenses,
            &mut ActionMask,
        ),
        Without<Idle>,
    >,
) {
    agents.par_iter_mut().for_each_init(
        || (Vec::new(), Vec::new()),
        |(clear, seen),
         (in_arena, agent, pos, facing, grip, (oracle, teacher), mut obs, mut senses, mut mask)| {
            let Ok((clock, arena)) = arenas.get(in_arena.0) else {
                return;
            };
            let slot = usize::from(agent.slot);
            let side = arena.side[slot];
            let (p, f) = (pos.0, facing.0);
            let obs = &mut *obs;
            let (w, h, (sc, sr)) = arena.window();
            obs.step = clock.step;
            obs.pos = [p.x, p.y];
            obs.facing = f as u8;
            obs.team = arena.team[slot];
            obs.view_width = w as u8;
            obs.view_height = h as u8;
            obs.view_self = (sc, sr);
            senses.prep_left = arena.prep_steps.saturating_sub(clock.step);
            let holding = held(arena, slot, grip, p, f.delta());
            senses.holding = holding.is_some();
            obs.others.clear();
            obs.view.clear();
            obs.view.resize(w * h, view::UNSEEN);
            seen.clear();
            if arena.entities {
                seen.resize(arena.objects.len(), false);
            }
            let (cells, others) = (&mut obs.view, &mut obs.others);
            let crop = arena.crop.as_deref();
            arena.vision.cast(
                p,
                f,
                |c| arena.blocks_sight(c),
                |i, c| {
                    let code = agent_code(arena, c, slot, side, others);
                    match crop {
                        None => cells[i] = code,
                        Some(crop) => {
                            let k = crop.index[i];
                            if k != u16::MAX {
                                cells[usize::from(k)] = code;
                            }
                        }
                    }
                    if arena.entities
                        && let Some(o) = arena.object_at(c)
                    {
                        seen[o] = true;
                    }
                },
                clear,
            );
            obs.others.sort_by_key(|o| o.slot);
            let senses = &mut *senses;
            senses.objects.clear();
            senses.doorways.clear();
            senses.entities.clear();
            if arena.entities {
                senses.objects.extend(
                    arena
                        .objects
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| seen[i])
                        .map(|(i, o)| SeenObject {
                            index: i as u8,
                            kind: o.kind,
                            pos: [o.pos.x, o.pos.y],
                            ours: o.locked_by == Some(side),
                            theirs: o.locked_by.is_some_and(|s| s != side),
                            held: o.held_by == Some(slot as u16),
                        }),
                );
                senses.doorways.extend(
                    arena
                        .scene_doorways()
                        .iter()
                        .map(|&d| ([d.x, d.y], arena.doorways.contains(&d))),
                );
                entity_features(arena, slot, p, f, &obs.others, senses);
            }
            if oracle {
                let (mw, mh) = (arena.tiles.width(), arena.tiles.height());
                obs.map_width = mw as u16;
                obs.map_height = mh as u16;
                draw_codes(arena, slot, &mut obs.map);
            }
            // An oracle teacher's seat: the whole map for the teacher, beside the learner's
            // view.
            if teacher && !oracle {
                let (mw, mh) = (arena.tiles.width(), arena.tiles.height());
                obs.oracle_map.1 = mw as u16;
                obs.oracle_map.2 = mh as u16;
                draw_codes(arena, slot, &mut obs.oracle_map.0);
            }
            let prep = clock.step < arena.prep_steps;
            *mask = legal_actions(arena, slot, p, f, holding, prep);
        },
    );
}

/// Numbers per entity slot of [`entity_features`]: another agent, an object, a doorway.
pub const ENTITY_WIDTHS: [usize; 3] = [6, 9, 5];

/// Baker et al.'s entity list for the agent in `slot` at `p` facing `f` as numbers, into
/// `senses.entities` from the agents it sees (`others`) and `senses`' objects and doorways:
/// its own map position, then one slot per other agent (slot order), per box or ramp (map
/// order) and per doorway of the scene's map (map order), so the length depends only on
/// the scene. Places are in cells divided by the map's larger side, both on the map (`x`,
/// `y`) and relative to the agent (`ahead` along its facing, `right` to its right).
/// - agent: seen, on my side, ahead, right, x, y;
/// - object: seen, is a ramp, ahead, right, x, y, locked by my side, locked by the other,
///   held by me;
/// - doorway: open this episode (not walled by a door dropout), ahead, right, x, y.
///
/// Agents and objects not seen this step are all zeros, as the paper masks them; doorways
/// are always known (the paper's agents learn the fixed walls of their map; a grid agent
/// would need to learn each doorway's cell).
pub fn entity_features(
    arena: &HnsArena,
    slot: usize,
    p: IVec2,
    f: Dir4,
    others: &[Perceived],
    senses: &mut HnsSenses,
) {
    let n = arena.tiles.width().max(arena.tiles.height()) as f32;
    let (fw, rt) = (f.delta(), f.right().delta());
    let place = |q: [i32; 2]| {
        let d = IVec2::from(q) - p;
        [
            d.dot(fw) as f32 / n,
            d.dot(rt) as f32 / n,
            q[0] as f32 / n,
            q[1] as f32 / n,
        ]
    };
    let flag = |b: bool| f32::from(u8::from(b));
    let out = &mut senses.entities;
    out.extend([p.x as f32 / n, p.y as f32 / n]);
    for s in (0..arena.side.len()).filter(|&s| s != slot) {
        match others.iter().find(|o| usize::from(o.slot) == s) {
            Some(o) => {
                out.extend([1.0, flag(o.ally)]);
                out.extend(place(o.pos));
            }
            None => out.extend([0.0; ENTITY_WIDTHS[0]]),
        }
    }
    let mut seen = senses.objects.iter().peekable();
    for i in 0..arena.objects.len() {
        match seen.next_if(|o| usize::from(o.index) == i) {
            Some(o) => {
                out.extend([1.0, flag(o.kind == ObjectKind::Ramp)]);
                out.extend(place(o.pos));
                out.extend([flag(o.ours), flag(o.theirs), flag(o.held)]);
            }
            None => out.extend([0.0; ENTITY_WIDTHS[1]]),
        }
    }
    for &(d, open) in &senses.doorways {
        out.push(flag(open));
        out.extend(place(d));
    }
}

/// MAPPO's global state of hide-and-seek, for each agent: the whole map as it would see it
/// with nothing hidden (`draw_codes`: walls, boxes and ramps with whose lock, agents as
/// itself, its side or the other), then the step, the preparation steps left, whether a
/// hider is seen, and every agent's position, facing, side and grip, in slot order.
pub fn state_hide_and_seek(
    arenas: Query<(&EpisodeClock, &HnsArena, &ArenaAgents), Without<Idle>>,
    mut agents: Query<(&Facing, &Grip, &mut GlobalView)>,
    mut shared: Local<Vec<f32>>,
) {
    for (clock, arena, members) in &arenas {
        let (w, h) = (arena.tiles.width() as f32, arena.tiles.height() as f32);
        shared.clear();
        shared.push(clock.step as f32 / 1000.0);
        shared.push(arena.prep_steps.saturating_sub(clock.step) as f32 / 100.0);
        shared.push(f32::from(u8::from(arena.hider_seen)));
        for (slot, &e) in members.entities().iter().enumerate() {
            let Ok((f, grip, _)) = agents.get(e) else {
                continue;
            };
            let p = arena.seats.get(slot).copied().unwrap_or_default();
            shared.extend([p.x as f32 / w, p.y as f32 / h]);
            push_one_hot(&mut shared, f.0 as usize, 4);
            shared.push(f32::from(arena.side.get(slot).copied().unwrap_or(0)));
            shared.push(f32::from(u8::from(grip.0.is_some())));
        }
        for (slot, &e) in members.entities().iter().enumerate() {
            let Ok((.., mut g)) = agents.get_mut(e) else {
                continue;
            };
            draw_codes(arena, slot, &mut g.0.cells);
            g.0.dense.clone_from(&shared);
        }
    }
}

/// The whole map as the agent in `slot` would see it with nothing hidden (oracle bots).
fn draw_codes(arena: &HnsArena, slot: usize, out: &mut Vec<u8>) {
    let side = arena.side[slot];
    out.clear();
    out.extend_from_slice(arena.codes[usize::from(side)].cells());
    for (s, &p) in arena.seats.iter().enumerate() {
        let i = arena.occ.index(p);
        if arena.occ.cells()[i] == s as u16 + 1 {
            out[i] = if s == slot {
                view::SELF
            } else if arena.side[s] == side {
                view::TEAMMATE
            } else {
                view::OPPONENT
            };
        }
    }
}

/// The code of cell `c` for the agent in `slot`; agents seen there go into `others`.
fn agent_code(
    arena: &HnsArena,
    c: IVec2,
    slot: usize,
    side: u8,
    others: &mut Vec<Perceived>,
) -> u8 {
    if !arena.tiles.contains(c) {
        return view::WALL;
    }
    match arena.occ.cells()[arena.occ.index(c)] {
        0 => arena.code_at(c, side),
        s => {
            let s = usize::from(s - 1);
            if s == slot {
                return view::SELF;
            }
            others.push(Perceived {
                slot: s as u16,
                team: arena.team[s],
                ally: arena.side[s] == side,
                pos: [c.x, c.y],
            });
            if arena.side[s] == side {
                view::TEAMMATE
            } else {
                view::OPPONENT
            }
        }
    }
}

/// The team reward after preparation: hiders +r if no seeker sees any hider, else −r;
/// seekers the opposite. During preparation every reward stays zero.
pub fn reward_hide_and_seek(
    mut arenas: Query<(&EpisodeClock, &mut HnsArena, &ArenaAgents), Without<Idle>>,
    mut agents: Query<(&GridPos, &Facing, &mut Reward)>,
    mut seats: Local<Vec<(IVec2, Dir4)>>,
) {
    for (clock, mut arena, members) in &mut arenas {
        let t = clock.step;
        if t + 1 == arena.prep_steps {
            arena.stats.boxes_locked_at_prep_end = Some(arena.locked(ObjectKind::Box));
            arena.stats.ramps_locked_at_prep_end = Some(arena.locked(ObjectKind::Ramp));
            arena.stats.doorways_blocked_at_prep_end = Some(arena.doorways_blocked());
            arena.stats.rooms_shut_at_prep_end = Some(arena.rooms_shut().0);
        }
        if t < arena.prep_steps {
            continue;
        }
        seats.clear();
        seats.extend(
            members
                .entities()
                .iter()
                .filter_map(|&e| agents.get(e).ok().map(|(p, f, _)| (p.0, f.0))),
        );
        let seen = hider_seen(&arena, &seats);
        arena.hider_seen = seen;
        arena.stats.play_steps += 1;
        arena.stats.seen_steps += u32::from(seen);
        let r = arena.reward;
        for (slot, &e) in members.entities().iter().enumerate() {
            if let Ok((_, _, mut reward)) = agents.get_mut(e) {
                let hider = arena.side[slot] == 0;
                reward.0 += if hider == seen { -r } else { r };
            }
        }
    }
}

/// Whether any seeker sees any hider, with agents at `seats` (slot order).
pub fn hider_seen(arena: &HnsArena, seats: &[(IVec2, Dir4)]) -> bool {
    seats.iter().enumerate().any(|(s, &(sp, sf))| {
        arena.side[s] == 1
            && seats
                .iter()
                .enumerate()
                .any(|(h, &(hp, _))| arena.side[h] == 0 && arena.sees(sp, sf, hp))
    })
}

/// Fills the episode's statistics for arenas that just ended.
pub fn summarize_hide_and_seek(mut arenas: Query<(&EpisodeClock, &HnsArena, &mut EpisodeMetrics)>) {
    for (clock, arena, mut metrics) in &mut arenas {
        if clock.phase != ArenaPhase::Ending {
            continue;
        }
        let s = arena.stats;
        let max_disp = |kind| {
            arena
                .objects
                .iter()
                .filter(|o| o.kind == kind)
                .map(|o| f64::from(o.max_displacement))
                .fold(0.0, f64::max)
        };
        let m = &mut metrics.0;
        m.insert("max_box_displacement", max_disp(ObjectKind::Box));
        m.insert("max_ramp_displacement", max_disp(ObjectKind::Ramp));
        let boxes_now = arena.locked(ObjectKind::Box);
        let ramps_now = arena.locked(ObjectKind::Ramp);
        m.insert(
            "boxes_locked_prep_end",
            f64::from(s.boxes_locked_at_prep_end.unwrap_or(boxes_now)),
        );
        m.insert("boxes_locked_end", f64::from(boxes_now));
        m.insert(
            "ramps_locked_prep_end",
            f64::from(s.ramps_locked_at_prep_end.unwrap_or(ramps_now)),
        );
        m.insert("ramps_locked_end", f64::from(ramps_now));
        // Doorways holding a box the hiders locked; the fort: the share of the map's rooms
        // that cannot be entered from the outside (1: every room shut).
        if !arena.doorways.is_empty() {
            let blocked = s
                .doorways_blocked_at_prep_end
                .unwrap_or_else(|| arena.doorways_blocked());
            m.insert("doorways_blocked_prep_end", f64::from(blocked));
        }
        let (shut_now, rooms) = arena.rooms_shut();
        if rooms > 0 {
            let shut = s.rooms_shut_at_prep_end.unwrap_or(shut_now);
            m.insert("fort_prep_end", f64::from(shut) / f64::from(rooms));
        }
        m.insert("hider_seen_steps", f64::from(s.seen_steps));
        if s.play_steps > 0 {
            m.insert(
                "hider_success",
                1.0 - f64::from(s.seen_steps) / f64::from(s.play_steps),
            );
        }
        m.insert("pushes", f64::from(s.pushes));
        m.insert("pulls", f64::from(s.pulls));
        m.insert("ramp_climbs", f64::from(s.climbs));
    }
}

/// Adds an arena's objects and grips to the per-step hash.
pub fn hash_hide_and_seek(world: &World, arena: Entity, hash: &mut StateHash) {
    let Some(a) = world.get::<HnsArena>(arena) else {
        return;
    };
    for o in &a.objects {
        hash.write(&o.pos.x.to_le_bytes());
        hash.write(&o.pos.y.to_le_bytes());
        hash.write(&[o.locked_by.map_or(255, |s| s)]);
        hash.write(&o.held_by.map_or(u16::MAX, |s| s).to_le_bytes());
    }
    hash.write(&[u8::from(a.hider_seen)]);
    if let Some(members) = world.get::<ArenaAgents>(arena) {
        for &e in members.entities() {
            if let Some(g) = world.get::<Grip>(e) {
                hash.write(&[g.0.unwrap_or(255)]);
            }
        }
    }
}

/// Draws an arena's tiles and objects for replays (locks as the hiders see them: `B`/`R`
/// locked by hiders, `X`/`Y` by seekers).
pub fn draw_hide_and_seek(world: &World, arena: Entity) -> Option<(usize, Vec<char>)> {
    let a = world.get::<HnsArena>(arena)?;
    let w = a.tiles.width();
    let chars = (0..w * a.tiles.height())
        .map(|i| view::CHARS[usize::from(a.code_at(a.tiles.pos(i), 0))])
        .collect();
    Some((w, chars))
}

/// The cells an agent sees from where it now stands (its vision cone, cut by walls and
/// boxes), from the same ray casting as its observation, and, for a hider that a seeker sees
/// after the preparation phase (what the team reward counts), a catch mark on its cell; for
/// the viewer.
pub fn sight_marks(world: &World, arena: Entity, agent: Entity) -> Vec<(CellMark, IVec2)> {
    let (Some(a), Some(pos), Some(facing), Some(me)) = (
        world.get::<HnsArena>(arena),
        world.get::<GridPos>(agent),
        world.get::<Facing>(agent),
        world.get::<Agent>(agent),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    a.vision.cast(
        pos.0,
        facing.0,
        |c| a.blocks_sight(c),
        |_, c| {
            if c != pos.0 {
                out.push((CellMark::Sight, c));
            }
        },
        &mut Vec::new(),
    );
    // The step that just ran is `clock.step - 1`; rewards count from `prep_steps` on.
    let play = world
        .get::<EpisodeClock>(arena)
        .is_some_and(|c| c.step > a.prep_steps);
    let hider = a.side.get(usize::from(me.slot)) == Some(&0);
    if play
        && hider
        && let Some(members) = world.get::<ArenaAgents>(arena)
    {
        let caught = members.entities().iter().enumerate().any(|(slot, &e)| {
            a.side.get(slot) == Some(&1)
                && match (world.get::<GridPos>(e), world.get::<Facing>(e)) {
                    (Some(p), Some(f)) => a.sees(p.0, f.0, pos.0),
                    _ => false,
                }
        });
        if caught {
            out.push((CellMark::Caught, pos.0));
        }
    }
    out
}
