//! The scene rules of hide-and-seek: its parameters' ranges; at most 250 boxes and ramps;
//! every team is a side, and both sides play; a door
//! dropout needs doorways to drop.

use super::params::HideSeekParams;
use crate::scene::locate::Seg;
use crate::scene::{
    Ctx, FAM, Scene, SceneError, SceneSpec, Thing, check_int, check_range, out_of_range, rule,
};

/// `door_dropout` above 0: the map has two doorways or more that may be walled up (no box,
/// ramp or spawn cell on them), so that a room keeps a way in.
pub(crate) fn check_door_dropout(cx: &Ctx<'_>, scene: &Scene) -> Result<(), SceneError> {
    let Some(p) = scene.spec.family.params::<HideSeekParams>() else {
        return Ok(());
    };
    if p.door_dropout <= 0.0 {
        return Ok(());
    }
    let arena = super::HnsArena::from_scene(scene, p);
    let n = arena.droppable_doorways().len();
    if n < 2 {
        return Err(cx.value_at(
            &[FAM, Seg::Field("door_dropout")],
            rule(
                format!(
                    "door_dropout walls up one of the map's doorways, and it has {n} that \
                     may be (one-cell gaps in a wall line, with no box, ramp or spawn cell)"
                ),
                "a map with two doorways or more, or door_dropout: 0.0",
            ),
        ));
    }
    Ok(())
}

/// Hide-and-seek teams: every team's role is `hider` or `seeker`, and both sides exist.
pub(crate) fn check_teams(cx: &Ctx<'_>, spec: &SceneSpec) -> Result<(), SceneError> {
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

fn f(name: &'static str) -> [Seg<'static>; 2] {
    [FAM, Seg::Field(name)]
}

pub(crate) fn check_params(cx: &Ctx<'_>, h: &HideSeekParams) -> Result<(), SceneError> {
    check_range(
        cx,
        &f("prep_fraction"),
        "family.prep_fraction",
        h.prep_fraction,
        0.0,
        0.95,
    )?;
    check_int(
        cx,
        &f("vision_range"),
        "family.vision_range",
        h.vision_range.into(),
        1,
        15,
    )?;
    let c = h.vision_cone;
    if !(c.is_finite() && c > 0.0 && c <= 360.0) {
        return Err(cx.value_at(
            &f("vision_cone"),
            out_of_range("family.vision_cone", c, "an angle in degrees in (0, 360]"),
        ));
    }
    check_int(
        cx,
        &f("window"),
        "family.window",
        h.window.into(),
        0,
        h.vision_range.into(),
    )?;
    check_range(cx, &f("reward"), "family.reward", h.reward, -1e6, 1e6)?;
    check_range(
        cx,
        &f("door_dropout"),
        "family.door_dropout",
        h.door_dropout,
        0.0,
        1.0,
    )
}

/// At most 250 boxes and ramps an arena.
pub(crate) fn check_map(cx: &Ctx<'_>, cells: &[Thing]) -> Result<(), SceneError> {
    let objects = cells
        .iter()
        .filter(|t| matches!(t, Thing::Box | Thing::Ramp))
        .count();
    if objects > 250 {
        return Err(cx.field_at(
            &[Seg::Field("map")],
            out_of_range("boxes and ramps", objects, "at most 250"),
        ));
    }
    Ok(())
}
