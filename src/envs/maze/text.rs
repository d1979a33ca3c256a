//! The maze as text: the agent's place and keys, the map as it knows it (in the compact
//! style, the window alone where it knows nothing beyond: `Local` knowledge), the teammates
//! and the words heard, and (talk) the words it may say. Golden tests pin every line
//! (`tests/suite/observation_text.rs`).

use std::fmt::Write;

use super::params::Knowledge;
use super::view;
use crate::core::Observation;
use crate::envs::text::{FamilyText, TextInput, reward_line, reward_words};
use crate::scene::{Scene, Thing};

/// The legend of the map (the same line in both styles).
const LEGEND: &str = "legend @ you T teammate # wall p plate D shut door / open door k key L locked door E exit ? unknown\n";

/// The maze's text for one scene.
pub struct MazeText {
    /// The words agents may say (empty: they cannot speak).
    vocabulary: Vec<String>,
    /// Key colours, by index (sorted names of a fixed map; `key0`… when generated).
    key_names: Vec<String>,
    /// The scene's knowledge is `Local`: agents know nothing beyond their windows.
    local: bool,
}

impl MazeText {
    /// The text of `scene`'s agents, who may say `vocabulary` and know `knowledge` of the
    /// map.
    pub fn new(scene: &Scene, vocabulary: Vec<String>, knowledge: Knowledge) -> Self {
        let mut key_names: Vec<String> = scene
            .cells
            .iter()
            .filter_map(|t| match t {
                Thing::Key(n) | Thing::LockedDoor(n) => Some(n.clone()),
                _ => None,
            })
            .collect();
        key_names.sort();
        key_names.dedup();
        Self {
            vocabulary,
            key_names,
            local: knowledge == Knowledge::Local,
        }
    }

    /// The names of the keys an agent holds.
    fn keys_held(&self, keys: u32) -> Vec<String> {
        (0..32)
            .filter(|k| keys & (1 << k) != 0)
            .map(|k| {
                self.key_names
                    .get(k)
                    .cloned()
                    .unwrap_or_else(|| format!("key{k}"))
            })
            .collect()
    }

    /// The teammates and the words heard, a line each.
    fn teammates(&self, t: &TextInput<'_>, s: &mut String) {
        for o in &t.obs.others {
            let _ = write!(s, "teammate {} at {} {}", o.slot, o.pos[0], o.pos[1]);
            write_under(s, t.obs, o.pos, t.compact());
            s.push('\n');
        }
        for h in t.senses.heard() {
            let word = self
                .vocabulary
                .get(usize::from(h.word))
                .map_or("?", String::as_str);
            let _ = writeln!(s, "teammate {} said {word}", h.from);
        }
    }
}

impl FamilyText for MazeText {
    fn preamble(&self, max_steps: u32) -> String {
        let mut s = format!("{LEGEND}map north is up {max_steps} steps\n");
        if !self.vocabulary.is_empty() {
            let _ = writeln!(s, "say {}", self.vocabulary.join(" "));
        }
        s
    }

    fn write(&self, t: &TextInput<'_>, s: &mut String) {
        let (obs, role, team) = (t.obs, t.role, t.team);
        let keys = self.keys_held(t.senses.keys());
        if t.compact() {
            let _ = writeln!(s, "{role} {team} step {}", obs.step);
            let _ = write!(s, "at {} {}", obs.pos[0], obs.pos[1]);
            write_under(s, obs, obs.pos, true);
            if !keys.is_empty() {
                let _ = write!(s, " keys {}", keys.join(" "));
            }
            s.push('\n');
            if self.local && knows_only_window(obs) {
                window_rows(s, obs);
            } else {
                map_rows(s, obs);
            }
            reward_words(s, "reward", t.last_reward);
            self.teammates(t, s);
            return;
        }
        let _ = writeln!(
            s,
            "role {role} team {team} step {} of {}",
            obs.step, t.max_steps
        );
        let keys = if keys.is_empty() {
            "none".to_string()
        } else {
            keys.join(" ")
        };
        let _ = write!(s, "you at {} {}", obs.pos[0], obs.pos[1]);
        write_under(s, obs, obs.pos, false);
        let _ = writeln!(s, " keys {keys}");
        s.push_str("map north is up\n");
        map_rows(s, obs);
        s.push_str(LEGEND);
        reward_line(s, t.last_reward);
        self.teammates(t, s);
    }

    fn after_actions(&self, _t: &TextInput<'_>, s: &mut String) {
        if !self.vocabulary.is_empty() {
            let _ = writeln!(s, "say {}", self.vocabulary.join(" "));
        }
    }
}

/// Writes the known cell under `pos` when it is anything but open ground, after the
/// coordinates that place an agent (`at 5 2 E`, `teammate 1 at 5 2 exit`): the map draws
/// `@` and `T` over the cells agents stand on, so without it an agent standing on the exit
/// (or a teammate waiting there) would hide it. The compact style writes the cell's
/// character, the full style its name; words of the default tokenizer only.
fn write_under(s: &mut String, obs: &Observation, pos: [i32; 2], compact: bool) {
    let (w, h) = (i64::from(obs.map_width), i64::from(obs.map_height));
    let (x, y) = (i64::from(pos[0]), i64::from(pos[1]));
    if !(0..w).contains(&x) || !(0..h).contains(&y) {
        return;
    }
    let Some(&c) = usize::try_from(y * w + x).ok().and_then(|i| obs.map.get(i)) else {
        return;
    };
    if matches!(view::kind(c), view::UNKNOWN | view::FLOOR) {
        return;
    }
    let _ = if compact {
        write!(s, " {}", view::char_of(c))
    } else {
        write!(s, " {}", name_of(c))
    };
}

/// The legend's name of a cell's kind (the full style's words).
fn name_of(code: u8) -> &'static str {
    match view::kind(code) {
        view::WALL => "wall",
        view::PLATE => "plate",
        view::DOOR_CLOSED => "shut door",
        view::DOOR_OPEN => "open door",
        view::KEY => "key",
        view::LOCKED => "locked door",
        view::EXIT => "exit",
        _ => "unknown",
    }
}

/// Whether the agent knows no cell beyond its window (with `Local` knowledge, all but
/// oracles) and the window has fewer cells than the map: then every other cell of the map is
/// `?`, and the compact style writes the window alone, in fewer tokens (a window of as many
/// cells as a small map or more would take as many or more).
fn knows_only_window(obs: &Observation) -> bool {
    let (w, h) = (usize::from(obs.map_width), usize::from(obs.map_height));
    let (vw, vh) = (usize::from(obs.view_width), usize::from(obs.view_height));
    if w == 0 || obs.map.len() != w * h || vw == 0 || obs.view.len() != vw * vh {
        return false;
    }
    if vw * vh >= w * h {
        return false;
    }
    let (sx, sy) = (usize::from(obs.view_self.0), usize::from(obs.view_self.1));
    let inside = |x: usize, y: usize| {
        let (dx, dy) = (
            x as i64 - i64::from(obs.pos[0]),
            y as i64 - i64::from(obs.pos[1]),
        );
        (-(sx as i64)..vw.saturating_sub(sx) as i64).contains(&dx)
            && (-(sy as i64)..vh.saturating_sub(sy) as i64).contains(&dy)
    };
    obs.map
        .iter()
        .enumerate()
        .all(|(i, &c)| view::kind(c) == view::UNKNOWN || inside(i % w, i / w))
}

/// The window around the agent, one row per line (`@` the agent at its centre, `T` a
/// teammate, off the map `#`): the compact style's map where the agent knows nothing beyond
/// it, `(2 view + 1)²` cells instead of the whole map's, the rest of which would be `?`.
fn window_rows(s: &mut String, obs: &Observation) {
    let w = usize::from(obs.view_width);
    for row in obs.view.chunks(w) {
        for (x, &c) in row.iter().enumerate() {
            if x > 0 {
                s.push(' ');
            }
            s.push(cell_char(c));
        }
        s.push('\n');
    }
}

/// The character of a cell code (`?` for an unknown kind).
fn cell_char(c: u8) -> char {
    view::CHARS
        .get(usize::from(view::kind(c)))
        .copied()
        .unwrap_or('?')
}

/// The known map, one row per line: `@` the agent, `T` a teammate.
fn map_rows(s: &mut String, obs: &Observation) {
    let (w, h) = (usize::from(obs.map_width), usize::from(obs.map_height));
    if w == 0 || obs.map.len() != w * h {
        return;
    }
    for y in 0..h {
        for x in 0..w {
            if x > 0 {
                s.push(' ');
            }
            let c = obs.map[y * w + x];
            let here = [x as i32, y as i32] == obs.pos;
            let mate = obs.others.iter().any(|o| o.pos == [x as i32, y as i32]);
            s.push(if here {
                '@'
            } else if mate {
                'T'
            } else {
                cell_char(c)
            });
        }
        s.push('\n');
    }
}
