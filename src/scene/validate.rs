//! Turns a [`SceneSpec`] into a [`Scene`] whose data holds together: map shape, legend, spawn
//! cells and parameter ranges, each error located in the source text. The rules that need a
//! family's or a policy's knowledge (a maze's doors, hide-and-seek's sides, which policies
//! exist) are checked by those layers (`envs::check_scene`, `policy::check_scene`) on the
//! scene this returns.

use std::path::Path;

use super::checks::{check_int, check_train, out_of_range, rule};
use super::error::{SceneError, SceneErrorKind};
use super::family::{ArenaShape, Layout};
use super::locate::{Seg, line_col, locate, locate_value};
use super::schema::*;
use super::{AgentSpec, Scene};

/// Builds errors located in one source text.
pub struct Ctx<'a> {
    /// The file, for errors.
    pub path: &'a Path,
    /// The text the offsets refer to.
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
    /// An error in the family's parameters: at the value of `family.FIELD` (at the family
    /// itself when `field` is empty or not written), saying `what` is wrong and what was
    /// `expected`. For families' own checks ([`crate::envs::family::Family::check`]).
    pub fn param_error(
        &self,
        field: &str,
        what: impl Into<String>,
        expected: impl Into<String>,
    ) -> SceneError {
        let path = [super::FAM, Seg::Field(field)];
        let path = if field.is_empty() {
            &path[..1]
        } else {
            &path[..]
        };
        self.value_at(path, super::rule(what, expected))
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

/// Validates `spec` (parsed from `src` at `path`) into a [`Scene`].
pub(crate) fn validate(spec: SceneSpec, path: &Path, src: &str) -> Result<Scene, SceneError> {
    let cx = Ctx { path, src };
    if spec.name.trim().is_empty() {
        return Err(cx.value_at(
            &[Seg::Field("name")],
            rule("the scene has an empty name", "a short title"),
        ));
    }
    let Some(rules) = spec.family.rules() else {
        let known = super::family::family_names().join(", ");
        return Err(cx.field_at(
            &[Seg::Field("family")],
            rule(
                format!("no family is called {}", spec.family.name()),
                format!("one of {known}"),
            ),
        ));
    };
    rules.check_params(&cx, &spec)?;
    if spec.randomize.mirror && !rules.mirrors() {
        return Err(cx.value_at(
            &[Seg::Field("randomize"), Seg::Field("mirror")],
            rule(
                format!("mirror is not a rule of the {} family", spec.family.name()),
                "mirror: false (maps are mirrored only in Maze scenes)",
            ),
        ));
    }
    check_train(&cx, &spec.train)?;
    let memory = super::limits::MEMORY;
    check_int(
        &cx,
        &[Seg::Field("memory")],
        "memory",
        spec.memory.into(),
        memory.lo,
        memory.hi,
    )?;
    check_int(
        &cx,
        &[Seg::Field("episode"), Seg::Field("max_steps")],
        "episode.max_steps",
        spec.episode.max_steps.into(),
        1,
        10_000_000,
    )?;

    // Teams: unique, printable names and counts in range (their policies: `policy::check_scene`).
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
        if t.name.chars().any(char::is_control) {
            return Err(cx.value_at(
                &tp("name"),
                rule(
                    format!("team name {:?} holds a control character", t.name),
                    "a name without line breaks, tabs or other control characters",
                ),
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
        if let Some(n) = t.count
            && !(1..=1024).contains(&n)
        {
            return Err(cx.value_at(
                &tp("count"),
                out_of_range(&format!("teams[{i}].count"), n, "1 to 1024 agents"),
            ));
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

    // Families without a map of the scene's own: a matrix game, a generated maze.
    let size = match rules.layout(&spec) {
        Layout::Map => None,
        Layout::NoMap => Some((0, 0)),
        Layout::Generated { width, height } => Some((width, height)),
    };
    if let Some((width, height)) = size {
        agents = agents_by_count(&spec.teams, &mut role_of);
        let arena = ArenaShape {
            cells: &[],
            agents: agents.len(),
        };
        rules.check_arena(&cx, &spec, arena)?;
        return Ok(Scene {
            path: path.to_path_buf(),
            spec,
            width,
            height,
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
    // A key written twice: the map kept one of the two, silently.
    let mut keys: Vec<char> = Vec::new();
    for k in 0.. {
        let Some(at) = locate(src, &[Seg::Field("legend"), Seg::Index(k)]) else {
            break;
        };
        if let Some(key) = char_literal(&src[at..]) {
            if keys.contains(&key) {
                return Err(cx.at(
                    at,
                    rule(
                        format!("legend key {key:?} is given twice"),
                        "each map character once in the legend",
                    ),
                ));
            }
            keys.push(key);
        }
    }
    for (ch, thing) in spec.legend.iter() {
        let common = matches!(
            thing,
            Thing::Floor | Thing::Wall | Thing::Spawn | Thing::TeamSpawn(_)
        );
        if !common && !rules.allows(thing) {
            return Err(cx.field_at(
                &legend_at(*ch),
                rule(
                    format!("legend {ch:?} is {thing:?}, which {family} does not use"),
                    rules.legend(),
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
    rules.check_map(&cx, &spec, &cells)?;

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
                policy: t.policy.key(),
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
    let arena = ArenaShape {
        cells: &cells,
        agents: agents.len(),
    };
    rules.check_arena(&cx, &spec, arena)?;
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

/// The RON char literal at the start of `text` (`'W'`, `'\\''`, `'\\u{41}'`), read as RON
/// reads it.
fn char_literal(text: &str) -> Option<char> {
    let mut escaped = false;
    let end = text.char_indices().skip(1).find_map(|(i, c)| {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '\'') => return Some(i),
            _ => {}
        }
        None
    })?;
    ron::from_str(&text[..=end]).ok()
}

/// The agents of families without spawn cells: `count` (default 1) per team, in order.
fn agents_by_count(
    teams: &[TeamSpec],
    role_of: &mut impl FnMut(&TeamSpec) -> u8,
) -> Vec<AgentSpec> {
    let mut agents = Vec::new();
    for (i, t) in teams.iter().enumerate() {
        let role = role_of(t);
        for _ in 0..t.count.unwrap_or(1) {
            agents.push(AgentSpec {
                team: i as u8,
                role,
                policy: t.policy.key(),
            });
        }
    }
    agents
}

#[cfg(test)]
mod tests {
    use super::char_literal;

    #[test]
    fn char_literals_are_read_as_ron_reads_them() {
        assert_eq!(char_literal("'W': Wall"), Some('W'));
        assert_eq!(char_literal("'\\\\': Wall, 'X'"), Some('\\'));
        assert_eq!(char_literal("'\\'': Wall"), Some('\''));
        assert_eq!(char_literal("'\\u{41}': Wall"), Some('A'));
        assert_eq!(char_literal("'é': Wall"), Some('é'));
        assert_eq!(char_literal("'W"), None);
    }
}
