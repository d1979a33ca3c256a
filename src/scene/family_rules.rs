//! Scene rules particular to one family: hide-and-seek sides, maze maps and talk.

use super::checks::{FAM, out_of_range, rule};
use super::error::SceneError;
use super::locate::Seg;
use super::schema::*;
use super::validate::Ctx;

/// Hide-and-seek teams: every team's role is `hider` or `seeker`, and both sides exist.
pub(crate) fn check_hide_seek_teams(cx: &Ctx<'_>, spec: &SceneSpec) -> Result<(), SceneError> {
    let mut sides = [false; 2];
    for (i, t) in spec.teams.iter().enumerate() {
        let role = t.role.as_deref().unwrap_or(&t.name);
        match role {
            "hider" | "hiders" => sides[0] = true,
            "seeker" | "seekers" => sides[1] = true,
            other => {
                let at = if t.role.is_some() { "role" } else { "name" };
                return Err(cx.value_at(
                    &[Seg::Field("teams"), Seg::Index(i), Seg::Field(at)],
                    rule(
                        format!("team {:?} has role {other:?}", t.name),
                        "role \"hider\" or \"seeker\" (the role defaults to the team name)",
                    ),
                ));
            }
        }
    }
    if !sides[0] || !sides[1] {
        let missing = if sides[0] { "seeker" } else { "hider" };
        return Err(cx.field_at(
            &[Seg::Field("teams")],
            rule(
                format!("hide-and-seek needs a {missing} team"),
                "at least one team with role \"hider\" and one with role \"seeker\"",
            ),
        ));
    }
    Ok(())
}

/// Maze scenes whose teams use the talking bots: the vocabulary starts with the words they
/// say and listen for, in the default order.
pub(crate) fn check_maze_talk(
    cx: &Ctx<'_>,
    spec: &SceneSpec,
    m: &MazeParams,
) -> Result<(), SceneError> {
    use crate::envs::maze::talk;
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
pub(crate) fn check_maze_map(cx: &Ctx<'_>, cells: &[Thing]) -> Result<(), SceneError> {
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
    let most = crate::envs::maze::view::MAX_LINKS;
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
