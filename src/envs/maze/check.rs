//! The scene rules of the maze: its parameters' ranges; at most 32 agents, and two for plate
//! doors; the talking bots' words, every door's plate or key, the
//! generator's room for the doors asked.

use super::params::{GenerateSpec, MazeParams};
use super::talk;
use crate::scene::locate::Seg;
use crate::scene::{
    ArenaShape, Ctx, FAM, Scene, SceneError, SceneSpec, Thing, check_int, check_range,
    out_of_range, rule,
};

/// Maze scenes whose teams use the talking bots: the vocabulary starts with the words they
/// say and listen for, in the default order.
pub(crate) fn check_talk(cx: &Ctx<'_>, spec: &SceneSpec, m: &MazeParams) -> Result<(), SceneError> {
    let talking = spec
        .teams
        .iter()
        .any(|t| talk::TALKING_POLICIES.contains(&t.policy.key().as_str()));
    let words = talk::WORDS;
    if talking && (m.vocabulary.len() < words.len() || m.vocabulary[..words.len()] != words) {
        return Err(cx.value_at(
            &[FAM, Seg::Field("vocabulary")],
            rule(
                "maze_talker and maze_follower need the default words first in the vocabulary",
                format!("a vocabulary that starts with {words:?} (the default)"),
            ),
        ));
    }
    Ok(())
}

/// Maze maps: an exit; every door has a plate of its name and every plate a door; every
/// locked door has a key of its colour and every key a locked door.
pub(crate) fn check_map(cx: &Ctx<'_>, cells: &[Thing]) -> Result<(), SceneError> {
    let map = [Seg::Field("map")];
    if !cells.iter().any(|t| matches!(t, Thing::Exit)) {
        return Err(cx.field_at(&map, rule("the maze has no exit", "at least one Exit cell")));
    }
    let names = |f: fn(&Thing) -> Option<&String>| -> Vec<&String> {
        let mut v: Vec<&String> = cells.iter().filter_map(f).collect();
        v.sort();
        v.dedup();
        v
    };
    let plates = names(|t| {
        if let Thing::Plate(n) = t {
            Some(n)
        } else {
            None
        }
    });
    let doors = names(|t| {
        if let Thing::Door(n) = t {
            Some(n)
        } else {
            None
        }
    });
    let keys = names(|t| if let Thing::Key(n) = t { Some(n) } else { None });
    let locks = names(|t| {
        if let Thing::LockedDoor(n) = t {
            Some(n)
        } else {
            None
        }
    });
    let pairs = [
        (
            &doors,
            &plates,
            "Door",
            "Plate",
            "a door that no plate opens",
        ),
        (
            &plates,
            &doors,
            "Plate",
            "Door",
            "a plate that opens no door",
        ),
        (
            &locks,
            &keys,
            "LockedDoor",
            "Key",
            "a locked door without its key",
        ),
        (
            &keys,
            &locks,
            "Key",
            "LockedDoor",
            "a key that opens no door",
        ),
    ];
    for (have, need, a, b, what) in pairs {
        if let Some(n) = have.iter().find(|n| !need.contains(n)) {
            return Err(cx.field_at(
                &map,
                rule(
                    format!("the map has {what}: {a}({n:?})"),
                    format!("a {b}({n:?}) on the map too"),
                ),
            ));
        }
    }
    let most = super::view::MAX_LINKS;
    if keys.len() > most || plates.len() > most {
        return Err(cx.field_at(
            &map,
            out_of_range(
                "key colours / plate names",
                format!("{} / {}", keys.len(), plates.len()),
                "at most 16 key colours and 16 plate names",
            ),
        ));
    }
    Ok(())
}

/// A generated maze has room for the doors asked (the generator's capacity for its size).
pub(crate) fn check_generate(
    cx: &Ctx<'_>,
    g: &GenerateSpec,
    agents: usize,
) -> Result<(), SceneError> {
    if let Err(why) = super::generate::check_capacity(g, agents) {
        return Err(cx.field_at(
            &[FAM, Seg::Field("generate")],
            rule(why, "a larger width and height, or fewer doors"),
        ));
    }
    Ok(())
}

/// The maze rules of `scene` (parsed from `cx.src`): talk words, the map's doors, plates and
/// keys, the generator's capacity.
pub(crate) fn check_scene(cx: &Ctx<'_>, scene: &Scene, m: &MazeParams) -> Result<(), SceneError> {
    check_talk(cx, &scene.spec, m)?;
    match &m.generate {
        Some(g) => check_generate(cx, g, scene.agents.len()),
        None => check_map(cx, &scene.cells),
    }
}

fn f(name: &'static str) -> [Seg<'static>; 2] {
    [FAM, Seg::Field(name)]
}

pub(crate) fn check_params(cx: &Ctx<'_>, m: &MazeParams) -> Result<(), SceneError> {
    check_int(cx, &f("view"), "family.view", m.view.into(), 0, 7)?;
    if m.vocabulary.len() > crate::core::MAX_WORDS {
        return Err(cx.value_at(
            &f("vocabulary"),
            out_of_range(
                "family.vocabulary",
                format!("{} words", m.vocabulary.len()),
                "0 to 32 words (none: the agents cannot speak)",
            ),
        ));
    }
    for (i, w) in m.vocabulary.iter().enumerate() {
        let bad = w.is_empty() || !w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if bad || m.vocabulary[..i].contains(w) {
            return Err(cx.value_at(
                &[FAM, Seg::Field("vocabulary"), Seg::Index(i)],
                rule(
                    format!("family.vocabulary[{i}] {w:?} is not a new single word"),
                    "distinct words of letters, digits and '_'",
                ),
            ));
        }
    }
    check_range(
        cx,
        &f("success_reward"),
        "family.success_reward",
        m.success_reward,
        -1e6,
        1e6,
    )?;
    check_range(
        cx,
        &f("step_cost"),
        "family.step_cost",
        m.step_cost,
        -1e6,
        1e6,
    )?;
    if let Some(g) = &m.generate {
        let p = |name| [FAM, Seg::Field("generate"), Seg::Field(name)];
        for (name, v) in [("width", g.width), ("height", g.height)] {
            if !(7..=63).contains(&v) || v % 2 == 0 {
                return Err(cx.value_at(
                    &p(name),
                    out_of_range(
                        &format!("family.generate.{name}"),
                        v,
                        "an odd number from 7 to 63",
                    ),
                ));
            }
        }
        check_int(
            cx,
            &p("plate_doors"),
            "family.generate.plate_doors",
            g.plate_doors.into(),
            0,
            8,
        )?;
        check_int(
            cx,
            &p("key_doors"),
            "family.generate.key_doors",
            g.key_doors.into(),
            0,
            8,
        )?;
    }
    Ok(())
}

/// At most 32 agents an arena; a generated maze's plate doors need two (with no map of the
/// scene's own).
pub(crate) fn check_arena(
    cx: &Ctx<'_>,
    spec: &SceneSpec,
    m: &MazeParams,
    arena: ArenaShape<'_>,
) -> Result<(), SceneError> {
    if m.generate.is_some() && !spec.map.is_empty() {
        return Err(cx.field_at(
            &[Seg::Field("map")],
            rule(
                "the scene has both a map and family.generate",
                "either a fixed map or generate: (...), not both",
            ),
        ));
    }
    if arena.agents > 32 {
        return Err(cx.field_at(
            &[Seg::Field("teams")],
            out_of_range("agents per arena", arena.agents, "at most 32 in a maze"),
        ));
    }
    if let Some(g) = &m.generate
        && g.plate_doors > 0
        && arena.agents < 2
    {
        return Err(cx.value_at(
            &[FAM, Seg::Field("generate"), Seg::Field("plate_doors")],
            rule(
                "plate doors need one agent on the plate and one going through, but the scene has 1 agent",
                "plate_doors: 0 for a solo maze, or two or more agents",
            ),
        ));
    }
    Ok(())
}
