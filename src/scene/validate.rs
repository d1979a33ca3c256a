//! Turns a [`SceneSpec`] into a checked [`Scene`]: map shape, legend, spawn cells, policies
//! and parameter ranges, each error located in the source text.

use std::path::Path;

use super::error::{SceneError, SceneErrorKind};
use super::locate::{Seg, line_col, locate, locate_value};
use super::schema::*;
use super::{AgentSpec, Scene};
use crate::policy::catalogue;

/// Builds errors located in one source text.
pub(crate) struct Ctx<'a> {
    pub path: &'a Path,
    pub src: &'a str,
}

impl Ctx<'_> {
    /// An error at byte offset `at`.
    pub fn at(&self, at: usize, kind: SceneErrorKind) -> SceneError {
        let (line, col) = line_col(self.src, at);
        SceneError::Invalid {
            path: self.path.to_path_buf(),
            line,
            col,
            kind,
        }
    }
    /// An error at the value of `path`, or at the nearest ancestor that is written.
    pub fn value_at(&self, path: &[Seg<'_>], kind: SceneErrorKind) -> SceneError {
        for n in (0..=path.len()).rev() {
            if let Some(at) = locate_value(self.src, &path[..n]) {
                return self.at(at, kind);
            }
        }
        self.at(0, kind)
    }
    /// An error at the name of the field at `path` (or its nearest written ancestor).
    pub fn field_at(&self, path: &[Seg<'_>], kind: SceneErrorKind) -> SceneError {
        for n in (0..=path.len()).rev() {
            if let Some(at) = locate(self.src, &path[..n]) {
                return self.at(at, kind);
            }
        }
        self.at(0, kind)
    }
}

fn out_of_range(field: &str, value: impl ToString, expected: &str) -> SceneErrorKind {
    SceneErrorKind::OutOfRange {
        field: field.into(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

fn rule(what: impl Into<String>, expected: impl Into<String>) -> SceneErrorKind {
    SceneErrorKind::Rule {
        what: what.into(),
        expected: expected.into(),
    }
}

/// Checks a probability-like value in `[lo, hi]`.
fn check_range(
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

fn check_int(
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

const FAM: Seg<'static> = Seg::Field("family");

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

fn check_family(cx: &Ctx<'_>, family: &FamilySpec) -> Result<(), SceneError> {
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
    }
}

/// Which legend things a family accepts.
fn family_allows(family: &FamilySpec, thing: &Thing) -> bool {
    match family {
        FamilySpec::Matrix(_) => false,
        FamilySpec::CommonsHarvest(_) => !matches!(thing, Thing::River | Thing::Dirt),
        FamilySpec::CleanUp(_) => true,
    }
}

/// Validates `spec` (parsed from `src` at `path`) into a [`Scene`].
pub(crate) fn validate(spec: SceneSpec, path: &Path, src: &str) -> Result<Scene, SceneError> {
    let cx = Ctx { path, src };
    if spec.name.trim().is_empty() {
        return Err(cx.value_at(
            &[Seg::Field("name")],
            rule("the scene has an empty name", "a short title"),
        ));
    }
    check_family(&cx, &spec.family)?;
    check_int(
        &cx,
        &[Seg::Field("episode"), Seg::Field("max_steps")],
        "episode.max_steps",
        spec.episode.max_steps.into(),
        1,
        10_000_000,
    )?;

    // Teams: unique names, known policies that play this family.
    if spec.teams.is_empty() {
        return Err(cx.field_at(
            &[Seg::Field("teams")],
            rule("the scene has no teams", "at least one team"),
        ));
    }
    let family = spec.family.name();
    for (i, t) in spec.teams.iter().enumerate() {
        let tp = |f| [Seg::Field("teams"), Seg::Index(i), Seg::Field(f)];
        if t.name.trim().is_empty() {
            return Err(cx.value_at(
                &tp("name"),
                rule("a team has an empty name", "a unique team name"),
            ));
        }
        if spec.teams[..i].iter().any(|o| o.name == t.name) {
            return Err(cx.value_at(
                &tp("name"),
                rule(
                    format!("team name {:?} is used twice", t.name),
                    "unique team names",
                ),
            ));
        }
        if t.count == Some(0) {
            return Err(cx.value_at(
                &tp("count"),
                out_of_range(&format!("teams[{i}].count"), 0, "at least 1 agent"),
            ));
        }
        match catalogue().iter().find(|p| p.name == t.policy) {
            None => {
                let known = catalogue()
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(cx.value_at(
                    &tp("policy"),
                    SceneErrorKind::UnknownPolicy {
                        name: t.policy.clone(),
                        known,
                    },
                ));
            }
            Some(p) if !p.plays(family) => {
                let known = catalogue()
                    .iter()
                    .filter(|p| p.plays(family))
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(cx.value_at(
                    &tp("policy"),
                    SceneErrorKind::PolicyFamily {
                        name: t.policy.clone(),
                        family: family.into(),
                        known,
                    },
                ));
            }
            Some(_) => {}
        }
    }

    let mut roles: Vec<String> = Vec::new();
    let mut agents = Vec::new();
    let mut role_of = |t: &TeamSpec| -> u8 {
        let r = t.role.clone().unwrap_or_else(|| t.name.clone());
        match roles.iter().position(|x| *x == r) {
            Some(i) => i as u8,
            None => {
                roles.push(r);
                (roles.len() - 1) as u8
            }
        }
    };

    if let FamilySpec::Matrix(_) = spec.family {
        for (i, t) in spec.teams.iter().enumerate() {
            let role = role_of(t);
            for _ in 0..t.count.unwrap_or(1) {
                agents.push(AgentSpec {
                    team: i as u8,
                    role,
                    policy: t.policy.clone(),
                });
            }
        }
        if agents.len() != 2 {
            return Err(cx.field_at(
                &[Seg::Field("teams")],
                rule(
                    format!("the teams have {} agents in all", agents.len()),
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
        return Ok(Scene {
            path: path.to_path_buf(),
            spec,
            width: 0,
            height: 0,
            cells: Vec::new(),
            agents,
            roles,
            spawn_cells: Vec::new(),
            shared_spawns: Vec::new(),
        });
    }

    // Grid families: map shape and legend.
    if spec.map.is_empty() {
        return Err(cx.field_at(
            &[Seg::Field("map")],
            rule(
                format!("{family} needs a map"),
                "map: [\"WWW\", \"W.W\", ...] with at least one row",
            ),
        ));
    }
    let width = spec.map[0].chars().count();
    if width == 0 || width > 512 {
        return Err(cx.value_at(
            &[Seg::Field("map"), Seg::Index(0)],
            out_of_range("map row 1 length", width, "1 to 512 characters"),
        ));
    }
    if spec.map.len() > 512 {
        return Err(cx.field_at(
            &[Seg::Field("map")],
            out_of_range("map height", spec.map.len(), "1 to 512 rows"),
        ));
    }
    for (r, row) in spec.map.iter().enumerate() {
        let len = row.chars().count();
        if len != width {
            return Err(cx.value_at(
                &[Seg::Field("map"), Seg::Index(r)],
                SceneErrorKind::RaggedRow {
                    row: r + 1,
                    len,
                    expected: width,
                },
            ));
        }
    }
    // The legend entry of `ch` as written (the map is sorted, the file need not be).
    let legend_at = |ch: char| -> Vec<Seg<'static>> {
        let key = format!("'{ch}'");
        (0..spec.legend.len())
            .find(|&k| {
                locate(src, &[Seg::Field("legend"), Seg::Index(k)])
                    .is_some_and(|at| src[at..].starts_with(&key))
            })
            .map_or_else(
                || vec![Seg::Field("legend")],
                |k| vec![Seg::Field("legend"), Seg::Index(k)],
            )
    };
    for (ch, thing) in spec.legend.iter() {
        if !family_allows(&spec.family, thing) {
            return Err(cx.field_at(
                &legend_at(*ch),
                rule(
                    format!("legend {ch:?} is {thing:?}, which {family} does not use"),
                    "Floor, Wall, Apple, AppleSite, Spawn or TeamSpawn(\"team\")",
                ),
            ));
        }
        if let Thing::TeamSpawn(team) = thing
            && !spec.teams.iter().any(|t| &t.name == team)
        {
            let known = spec
                .teams
                .iter()
                .map(|t| format!("{:?}", t.name))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(cx.field_at(
                &legend_at(*ch),
                rule(
                    format!("legend {ch:?} names team {team:?}, which the scene does not have"),
                    format!("one of {known}"),
                ),
            ));
        }
    }
    let known = spec
        .legend
        .keys()
        .map(|c| format!("{c:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut cells = Vec::with_capacity(width * spec.map.len());
    for (r, row) in spec.map.iter().enumerate() {
        for (c, ch) in row.chars().enumerate() {
            match spec.legend.get(&ch) {
                Some(t) => cells.push(t.clone()),
                None => {
                    let row_at = locate(src, &[Seg::Field("map"), Seg::Index(r)]).unwrap_or(0);
                    // Column of the character: after the opening quote, `c` characters in.
                    let at = src[row_at..]
                        .char_indices()
                        .nth(c + 1)
                        .map_or(row_at, |(i, _)| row_at + i);
                    return Err(cx.at(
                        at,
                        SceneErrorKind::UnknownLegendChar {
                            row: r + 1,
                            col: c + 1,
                            ch,
                            known,
                        },
                    ));
                }
            }
        }
    }
    if let FamilySpec::CleanUp(_) = spec.family {
        if !cells
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

    // Spawn cells: a team's own, or the shared pool.
    let shared: Vec<usize> = cells
        .iter()
        .enumerate()
        .filter(|(_, t)| matches!(t, Thing::Spawn))
        .map(|(i, _)| i)
        .collect();
    let mut spawn_cells = Vec::new();
    let mut shared_needed = 0usize;
    for (i, t) in spec.teams.iter().enumerate() {
        let own: Vec<usize> = cells
            .iter()
            .enumerate()
            .filter(|(_, c)| matches!(c, Thing::TeamSpawn(n) if *n == t.name))
            .map(|(i, _)| i)
            .collect();
        let count = match (t.count, own.is_empty()) {
            (Some(n), _) => n as usize,
            (None, false) => own.len(),
            (None, true) => 1,
        };
        if own.is_empty() {
            if shared.is_empty() {
                return Err(cx.field_at(
                    &[Seg::Field("teams"), Seg::Index(i)],
                    SceneErrorKind::NoSpawnCell {
                        team: t.name.clone(),
                    },
                ));
            }
            shared_needed += count;
        } else if count > own.len() {
            return Err(cx.value_at(
                &[Seg::Field("teams"), Seg::Index(i), Seg::Field("count")],
                SceneErrorKind::TooFewSpawnCells {
                    what: format!("team {:?}", t.name),
                    needed: count,
                    available: own.len(),
                },
            ));
        }
        let role = role_of(t);
        for _ in 0..count {
            agents.push(AgentSpec {
                team: i as u8,
                role,
                policy: t.policy.clone(),
            });
        }
        spawn_cells.push(own);
    }
    if shared_needed > shared.len() {
        return Err(cx.field_at(
            &[Seg::Field("teams")],
            SceneErrorKind::TooFewSpawnCells {
                what: "the teams without spawn cells of their own".into(),
                needed: shared_needed,
                available: shared.len(),
            },
        ));
    }
    if agents.len() > 1024 {
        return Err(cx.field_at(
            &[Seg::Field("teams")],
            out_of_range("agents per arena", agents.len(), "at most 1024"),
        ));
    }
    let height = spec.map.len();
    Ok(Scene {
        path: path.to_path_buf(),
        spec,
        width,
        height,
        cells,
        agents,
        roles,
        spawn_cells,
        shared_spawns: shared,
    })
}
