//! Range checks of scene parameters, each error located at the offending value.

use super::error::{SceneError, SceneErrorKind};
use super::locate::Seg;
use super::schema::*;
use super::validate::Ctx;

pub(crate) fn out_of_range(field: &str, value: impl ToString, expected: &str) -> SceneErrorKind {
    SceneErrorKind::OutOfRange {
        field: field.into(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

pub(crate) fn rule(what: impl Into<String>, expected: impl Into<String>) -> SceneErrorKind {
    SceneErrorKind::Rule {
        what: what.into(),
        expected: expected.into(),
    }
}

/// Checks a probability-like value in `[lo, hi]`.
pub(crate) fn check_range(
    cx: &Ctx<'_>,
    path: &[Seg<'_>],
    name: &str,
    v: f32,
    lo: f32,
    hi: f32,
) -> Result<(), SceneError> {
    if v.is_finite() && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(cx.value_at(
            path,
            out_of_range(name, v, &format!("a number in [{lo}, {hi}]")),
        ))
    }
}

pub(crate) fn check_int(
    cx: &Ctx<'_>,
    path: &[Seg<'_>],
    name: &str,
    v: u64,
    lo: u64,
    hi: u64,
) -> Result<(), SceneError> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(cx.value_at(
            path,
            out_of_range(name, v, &format!("an integer in [{lo}, {hi}]")),
        ))
    }
}

pub(crate) const FAM: Seg<'static> = Seg::Field("family");

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

pub(crate) fn check_family(cx: &Ctx<'_>, family: &FamilySpec) -> Result<(), SceneError> {
    match family {
        FamilySpec::Matrix(m) => {
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
        FamilySpec::CommonsHarvest(h) => {
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
        FamilySpec::CleanUp(c) => {
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
        FamilySpec::HideAndSeek(h) => check_hide_seek(cx, h),
        FamilySpec::Maze(m) => check_maze(cx, m),
        // A registered family checks its own parameters (`envs::Family::check`).
        FamilySpec::Custom(_) => Ok(()),
    }
}

fn f(name: &'static str) -> [Seg<'static>; 2] {
    [FAM, Seg::Field(name)]
}

fn check_hide_seek(cx: &Ctx<'_>, h: &HideSeekParams) -> Result<(), SceneError> {
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

fn check_maze(cx: &Ctx<'_>, m: &MazeParams) -> Result<(), SceneError> {
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

/// The `train:` block's settings, against the limits the command's flags have.
pub(crate) fn check_train(cx: &Ctx<'_>, t: &TrainSettings) -> Result<(), SceneError> {
    if let Err(bad) = super::limits::check_settings(t) {
        return Err(cx.value_at(
            &[Seg::Field("train"), Seg::Field(bad.name)],
            out_of_range(&format!("train.{}", bad.name), bad.value, &bad.expected),
        ));
    }
    if let (Some(g), Some(a)) = (t.group_size, t.arenas)
        && !a.is_multiple_of(g)
    {
        return Err(cx.value_at(
            &[Seg::Field("train"), Seg::Field("group_size")],
            rule(
                format!("train.group_size {g} does not divide train.arenas {a}"),
                "a group size that divides the arenas",
            ),
        ));
    }
    Ok(())
}
