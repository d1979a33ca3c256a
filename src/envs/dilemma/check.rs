//! The social dilemmas' parameter ranges and what their arenas need, each error located at
//! the offending value (the scene reader calls them through [`crate::scene::FamilyRules`]).

use super::params::{CleanUpParams, HarvestParams, MatrixParams, ViewSpec, ZapSpec};
use crate::scene::locate::Seg;
use crate::scene::{
    ArenaShape, Ctx, FAM, SceneError, SceneSpec, Thing, check_int, check_range, out_of_range, rule,
};

pub(super) fn check_matrix(cx: &Ctx<'_>, m: &MatrixParams) -> Result<(), SceneError> {
    let shape_ok = m.payoffs.len() == 2 && m.payoffs.iter().all(|r| r.len() == 2);
    if !shape_ok {
        return Err(cx.value_at(
            &[FAM, Seg::Field("payoffs")],
            rule(
                "family.payoffs is not 2×2",
                "[[R, S], [T, P]]: the row player's payoff for (mine, theirs)",
            ),
        ));
    }
    for (i, row) in m.payoffs.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            let p = [FAM, Seg::Field("payoffs"), Seg::Index(i), Seg::Index(j)];
            check_range(cx, &p, &format!("family.payoffs[{i}][{j}]"), v, -1e6, 1e6)?;
        }
    }
    if m.actions.len() != 2
        || m.actions
            .iter()
            .any(|a| a.trim().is_empty() || a.contains(char::is_whitespace))
        || m.actions[0] == m.actions[1]
    {
        return Err(cx.value_at(
            &[FAM, Seg::Field("actions")],
            rule(
                "family.actions must name two different one-word actions",
                "[\"cooperate\", \"defect\"] or similar",
            ),
        ));
    }
    check_int(
        cx,
        &[FAM, Seg::Field("rounds")],
        "family.rounds",
        m.rounds.into(),
        1,
        1_000_000,
    )?;
    check_int(
        cx,
        &[FAM, Seg::Field("history")],
        "family.history",
        m.history.into(),
        0,
        64,
    )
}

/// A matrix game's arena: two agents and no map.
pub(super) fn check_matrix_arena(
    cx: &Ctx<'_>,
    spec: &SceneSpec,
    arena: ArenaShape<'_>,
) -> Result<(), SceneError> {
    if arena.agents != 2 {
        return Err(cx.field_at(
            &[Seg::Field("teams")],
            rule(
                format!("the teams have {} agents in all", arena.agents),
                "exactly 2 agents for a two-player matrix game",
            ),
        ));
    }
    if !spec.map.is_empty() {
        return Err(cx.field_at(
            &[Seg::Field("map")],
            rule("a matrix game has a map", "no map for the Matrix family"),
        ));
    }
    Ok(())
}

pub(super) fn check_harvest(cx: &Ctx<'_>, h: &HarvestParams) -> Result<(), SceneError> {
    if h.regrowth.len() != 4 {
        return Err(cx.value_at(
            &[FAM, Seg::Field("regrowth")],
            rule(
                format!("family.regrowth has {} values", h.regrowth.len()),
                "4 probabilities, for 0, 1, 2 and ≥3 apples nearby",
            ),
        ));
    }
    for (i, &p) in h.regrowth.iter().enumerate() {
        let path = [FAM, Seg::Field("regrowth"), Seg::Index(i)];
        check_range(cx, &path, &format!("family.regrowth[{i}]"), p, 0.0, 1.0)?;
    }
    let r = h.regrowth_radius;
    if !(r.is_finite() && r > 0.0 && r <= 10.0) {
        return Err(cx.value_at(
            &[FAM, Seg::Field("regrowth_radius")],
            out_of_range("family.regrowth_radius", r, "a number in (0, 10]"),
        ));
    }
    check_range(
        cx,
        &[FAM, Seg::Field("apple_reward")],
        "family.apple_reward",
        h.apple_reward,
        -1e6,
        1e6,
    )?;
    check_view(cx, &h.view)?;
    check_zap(cx, &h.zap)
}

pub(super) fn check_cleanup(cx: &Ctx<'_>, c: &CleanUpParams) -> Result<(), SceneError> {
    check_range(
        cx,
        &[FAM, Seg::Field("pollution_prob")],
        "family.pollution_prob",
        c.pollution_prob,
        0.0,
        1.0,
    )?;
    check_range(
        cx,
        &[FAM, Seg::Field("apple_prob")],
        "family.apple_prob",
        c.apple_prob,
        0.0,
        1.0,
    )?;
    let d = c.depletion_threshold;
    if !(d.is_finite() && d > 0.0 && d <= 1.0) {
        return Err(cx.value_at(
            &[FAM, Seg::Field("depletion_threshold")],
            out_of_range("family.depletion_threshold", d, "a number in (0, 1]"),
        ));
    }
    check_int(
        cx,
        &[FAM, Seg::Field("clean_length")],
        "family.clean_length",
        c.clean_length.into(),
        1,
        20,
    )?;
    check_range(
        cx,
        &[FAM, Seg::Field("apple_reward")],
        "family.apple_reward",
        c.apple_reward,
        -1e6,
        1e6,
    )?;
    check_view(cx, &c.view)?;
    check_zap(cx, &c.zap)
}

/// A grid dilemma's map needs apple cells, and Clean Up's a river.
pub(super) fn check_orchard(
    cx: &Ctx<'_>,
    family: &str,
    cells: &[Thing],
    river: bool,
) -> Result<(), SceneError> {
    if river
        && !cells
            .iter()
            .any(|t| matches!(t, Thing::River | Thing::Dirt))
    {
        return Err(cx.field_at(
            &[Seg::Field("map")],
            rule(
                "the Clean Up map has no river",
                "at least one River or Dirt cell",
            ),
        ));
    }
    if !cells
        .iter()
        .any(|t| matches!(t, Thing::Apple | Thing::AppleSite))
    {
        return Err(cx.field_at(
            &[Seg::Field("map")],
            rule(
                format!("the {family} map has no apple cell"),
                "at least one Apple or AppleSite cell",
            ),
        ));
    }
    Ok(())
}

fn check_view(cx: &Ctx<'_>, v: &ViewSpec) -> Result<(), SceneError> {
    let p = |f| [FAM, Seg::Field("view"), Seg::Field(f)];
    check_int(cx, &p("ahead"), "family.view.ahead", v.ahead.into(), 0, 15)?;
    check_int(
        cx,
        &p("behind"),
        "family.view.behind",
        v.behind.into(),
        0,
        15,
    )?;
    check_int(cx, &p("side"), "family.view.side", v.side.into(), 0, 15)
}

fn check_zap(cx: &Ctx<'_>, z: &ZapSpec) -> Result<(), SceneError> {
    let p = |f| [FAM, Seg::Field("zap"), Seg::Field(f)];
    check_int(
        cx,
        &p("length"),
        "family.zap.length",
        z.length.into(),
        0,
        20,
    )?;
    check_int(
        cx,
        &p("cooldown"),
        "family.zap.cooldown",
        z.cooldown.into(),
        0,
        10_000,
    )?;
    check_int(
        cx,
        &p("timeout"),
        "family.zap.timeout",
        z.timeout.into(),
        0,
        10_000,
    )?;
    check_range(cx, &p("cost"), "family.zap.cost", z.cost, -1e6, 1e6)
}
