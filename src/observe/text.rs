//! Observations as text: what a language-model policy reads, and what the viewer shows.
//! One function per family turns an agent's [`Observation`] into a few short lines:
//!
//! 1. a header: role, team, step (or round) of the episode and, where there is one, the phase;
//! 2. the agent's view as an ASCII window, one character per cell, with its legend;
//! 3. recent events: the last reward, payoffs of the last round, a zap cooldown or removal,
//!    the agents in sight, the words teammates said;
//! 4. the legal actions (and, where agents talk, the words they may say).
//!
//! The text is plain ASCII words separated by spaces, one fact per line (map cells too are
//! separate characters), so that a word-level tokenizer built from the encoders' vocabulary
//! covers it; numbers are split into digits by the tokenizer. Golden tests pin it for every family (`tests/suite/observation_text.rs`).

use std::fmt::Write;

use crate::core::{ActionMask, Dir4, Observation};
use crate::envs::family::{self, Family, TextInput};
use crate::envs::senses::Senses;
use crate::envs::{dilemma, hide_and_seek, maze};
use crate::scene::{FamilySpec, Scene, TextStyle, Thing};

/// What the text of a scene's observations needs besides the observation itself.
#[derive(Debug, Clone)]
pub struct TextFormat {
    family: FamilySpec,
    actions: Vec<String>,
    teams: Vec<String>,
    roles: Vec<String>,
    max_steps: u32,
    /// Maze key colours, by index (sorted names of a fixed map; `key0`… when generated).
    key_names: Vec<String>,
    style: TextStyle,
    /// The compact style's first lines ([`preamble`]), the same for every agent and step.
    preamble: String,
    /// A family registered from outside the crate: its descriptor, which writes its text.
    custom: Option<&'static dyn Family>,
}

/// The agent an observation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Speaker {
    /// Index of its team in the scene.
    pub team: u8,
    /// Index of its role in the scene's roles.
    pub role: u8,
}

impl TextFormat {
    /// The format of `scene`'s observations, with its family's action words.
    pub fn new(scene: &Scene, actions: &[String]) -> Self {
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
        let max_steps = scene.spec.episode.max_steps;
        let custom = matches!(scene.spec.family, FamilySpec::Custom(_)).then(|| family::of(scene));
        Self {
            preamble: match custom {
                Some(f) => f.preamble(scene),
                None => preamble(&scene.spec.family, max_steps),
            },
            custom,
            family: scene.spec.family.clone(),
            actions: actions.to_vec(),
            teams: scene.team_names().iter().map(|s| s.to_string()).collect(),
            roles: scene.roles.clone(),
            max_steps,
            key_names,
            style: scene.spec.text,
        }
    }

    /// The role's and the team's names of `who` (`?` for an index the scene lacks).
    fn names(&self, who: Speaker) -> (&str, &str) {
        fn name(v: &[String], i: u8) -> &str {
            v.get(usize::from(i)).map_or("?", String::as_str)
        }
        (name(&self.roles, who.role), name(&self.teams, who.team))
    }

    /// The action words, by index.
    pub fn actions(&self) -> &[String] {
        &self.actions
    }

    /// The text of `obs` (with its family's `senses`) for `who`, whose legal actions are `mask` and whose reward on the
    /// previous step was `last_reward`.
    pub fn render(
        &self,
        who: Speaker,
        obs: &Observation,
        senses: Senses<'_>,
        mask: ActionMask,
        last_reward: f32,
    ) -> String {
        if self.style == TextStyle::Compact {
            return self.compact(who, obs, senses, mask, last_reward);
        }
        let mut s = String::with_capacity(512);
        let (role, team) = self.names(who);
        match &self.family {
            FamilySpec::Matrix(m) => {
                let _ = writeln!(
                    s,
                    "role {role} team {team} round {} of {}",
                    obs.step + 1,
                    m.rounds
                );
                self.matrix_events(&mut s, senses, m);
            }
            FamilySpec::CommonsHarvest(_) | FamilySpec::CleanUp(_) => {
                let _ = writeln!(
                    s,
                    "role {role} team {team} step {} of {}",
                    obs.step, self.max_steps
                );
                grid(&mut s, obs, &dilemma::view::CHARS, "view ahead is up");
                s.push_str(HARVEST_LEGEND);
                reward_line(&mut s, last_reward);
                if obs.removed {
                    s.push_str("you are zapped out of play\n");
                } else if senses.cooldown() > 0 {
                    let _ = writeln!(s, "zap ready in {} steps", senses.cooldown());
                } else {
                    s.push_str("zap ready\n");
                }
            }
            FamilySpec::HideAndSeek(_) => {
                let phase = if senses.prep_left() > 0 {
                    format!("preparation {} steps left", senses.prep_left())
                } else {
                    "play".to_string()
                };
                let _ = writeln!(
                    s,
                    "role {role} team {team} step {} of {} phase {phase}",
                    obs.step, self.max_steps
                );
                let facing = Dir4::ALL[usize::from(obs.facing % 4)];
                let _ = writeln!(
                    s,
                    "you at {} {} facing {}{}",
                    obs.pos[0],
                    obs.pos[1],
                    dir_word(facing),
                    if senses.holding() {
                        " holding an object"
                    } else {
                        ""
                    }
                );
                grid(&mut s, obs, &hide_and_seek::view::CHARS, "view ahead is up");
                s.push_str(HIDE_AND_SEEK_LEGEND);
                reward_line(&mut s, last_reward);
                if obs.others.is_empty() {
                    s.push_str("you see nobody\n");
                }
                for o in &obs.others {
                    let side = if o.ally { "ally" } else { "opponent" };
                    let _ = writeln!(s, "you see {side} {} at {} {}", o.slot, o.pos[0], o.pos[1]);
                }
                hns_entities(&mut s, senses, false);
            }
            FamilySpec::Maze(m) => {
                let _ = writeln!(
                    s,
                    "role {role} team {team} step {} of {}",
                    obs.step, self.max_steps
                );
                let keys = self.keys_held(senses);
                let _ = writeln!(
                    s,
                    "you at {} {} keys {}",
                    obs.pos[0],
                    obs.pos[1],
                    if keys.is_empty() {
                        "none".to_string()
                    } else {
                        keys.join(" ")
                    }
                );
                self.maze_map(&mut s, obs);
                s.push_str(MAZE_LEGEND);
                reward_line(&mut s, last_reward);
                teammates(&mut s, obs, senses, &m.vocabulary);
            }
            FamilySpec::Custom(_) => self.custom_text(who, obs, last_reward, &mut s),
        }
        actions_line(&mut s, &self.actions, mask);
        if let FamilySpec::Maze(m) = &self.family
            && !m.vocabulary.is_empty()
        {
            let _ = writeln!(s, "say {}", m.vocabulary.join(" "));
        }
        s
    }

    /// The compact style ([`TextStyle::Compact`]): the scene's [`preamble`], then the agent's
    /// own lines with the words that say what a line is left out where its place says it
    /// (`hider hiders step 2 preparation 8` for `role hider team hiders step 2 of 20 phase
    /// preparation 8 steps left`), the legal actions last.
    fn compact(
        &self,
        who: Speaker,
        obs: &Observation,
        senses: Senses<'_>,
        mask: ActionMask,
        last_reward: f32,
    ) -> String {
        let mut s = self.preamble.clone();
        let (role, team) = self.names(who);
        match &self.family {
            FamilySpec::Matrix(m) => {
                let _ = writeln!(s, "{role} {team} round {}", obs.step + 1);
                self.matrix_events(&mut s, senses, m);
            }
            FamilySpec::CommonsHarvest(_) | FamilySpec::CleanUp(_) => {
                let _ = writeln!(s, "{role} {team} step {}", obs.step);
                rows(&mut s, obs, &dilemma::view::CHARS);
                reward_words(&mut s, "reward", last_reward);
                if obs.removed {
                    s.push_str("zapped out\n");
                } else if senses.cooldown() > 0 {
                    let _ = writeln!(s, "zap in {}", senses.cooldown());
                }
            }
            FamilySpec::HideAndSeek(_) => {
                let _ = write!(s, "{role} {team} step {}", obs.step);
                if senses.prep_left() > 0 {
                    let _ = writeln!(s, " preparation {}", senses.prep_left());
                } else {
                    s.push_str(" play\n");
                }
                let facing = Dir4::ALL[usize::from(obs.facing % 4)];
                let _ = writeln!(
                    s,
                    "at {} {} {}{}",
                    obs.pos[0],
                    obs.pos[1],
                    dir_word(facing),
                    if senses.holding() { " holding" } else { "" }
                );
                rows(&mut s, obs, &hide_and_seek::view::CHARS);
                reward_words(&mut s, "reward", last_reward);
                for o in &obs.others {
                    let side = if o.ally { "ally" } else { "opponent" };
                    let _ = writeln!(s, "{side} {} at {} {}", o.slot, o.pos[0], o.pos[1]);
                }
                hns_entities(&mut s, senses, true);
            }
            FamilySpec::Maze(m) => {
                let _ = writeln!(s, "{role} {team} step {}", obs.step);
                let _ = write!(s, "at {} {}", obs.pos[0], obs.pos[1]);
                let keys = self.keys_held(senses);
                if !keys.is_empty() {
                    let _ = write!(s, " keys {}", keys.join(" "));
                }
                s.push('\n');
                self.map_rows(&mut s, obs);
                reward_words(&mut s, "reward", last_reward);
                teammates(&mut s, obs, senses, &m.vocabulary);
            }
            FamilySpec::Custom(_) => self.custom_text(who, obs, last_reward, &mut s),
        }
        actions_line(&mut s, &self.actions, mask);
        s
    }

    /// A registered family's own lines ([`Family::text`]); a family without text gets its
    /// role, team and step and the window's codes as digits.
    fn custom_text(&self, who: Speaker, obs: &Observation, last_reward: f32, s: &mut String) {
        let (role, team) = self.names(who);
        let input = TextInput {
            obs,
            role,
            team,
            last_reward,
            max_steps: self.max_steps,
            style: self.style,
        };
        if self.custom.and_then(|f| f.text(&input, s)).is_none() {
            let _ = writeln!(s, "{role} {team} step {}", obs.step);
            rows(s, obs, &['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
        }
    }

    /// The names of the keys an agent holds.
    fn keys_held(&self, senses: Senses<'_>) -> Vec<String> {
        (0..32)
            .filter(|k| senses.keys() & (1 << k) != 0)
            .map(|k| self.key_name(k))
            .collect()
    }

    fn key_name(&self, k: usize) -> String {
        self.key_names
            .get(k)
            .cloned()
            .unwrap_or_else(|| format!("key{k}"))
    }

    /// The rounds remembered and the other's counts; in the compact style without the words
    /// the preamble's legend stands for (`cooperate defect 0` for `you cooperate other
    /// defect you got 0`).
    fn matrix_events(&self, s: &mut String, senses: Senses<'_>, m: &crate::scene::MatrixParams) {
        let word = |a: u8| self.actions.get(usize::from(a)).map_or("?", String::as_str);
        let full = self.style == TextStyle::Full;
        if full && senses.history().is_empty() {
            s.push_str("no rounds played yet\n");
        }
        for h in senses.history() {
            let (mine, theirs) = (usize::from(h[0].min(1)), usize::from(h[1].min(1)));
            let pay = m.payoffs[mine][theirs];
            if full {
                let _ = writeln!(s, "you {} other {} you got {pay}", word(h[0]), word(h[1]));
            } else {
                let _ = writeln!(s, "{} {} {pay}", word(h[0]), word(h[1]));
            }
        }
        let _ = writeln!(
            s,
            "other {}{} {} {} {}",
            if full { "so far " } else { "" },
            word(0),
            senses.other_counts()[0],
            word(1),
            senses.other_counts()[1]
        );
    }

    fn maze_map(&self, s: &mut String, obs: &Observation) {
        s.push_str("map north is up\n");
        self.map_rows(s, obs);
    }

    /// The maze's known map, one row per line.
    fn map_rows(&self, s: &mut String, obs: &Observation) {
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
                    maze::view::CHARS
                        .get(usize::from(maze::view::kind(c)))
                        .copied()
                        .unwrap_or('?')
                });
            }
            s.push('\n');
        }
    }
}

/// The lines every observation of a scene of `family` starts with in the compact style: the
/// legend, the view's title, the episode's length and (talk) the words that may be said.
/// The same for every agent and step, so every prompt of a batch begins with them.
fn preamble(family: &FamilySpec, max_steps: u32) -> String {
    let mut s = String::with_capacity(256);
    match family {
        FamilySpec::Matrix(m) => {
            let _ = writeln!(s, "rounds {} legend you other you got", m.rounds);
        }
        FamilySpec::CommonsHarvest(_) | FamilySpec::CleanUp(_) => {
            s.push_str(HARVEST_LEGEND);
            let _ = writeln!(s, "view ahead is up {max_steps} steps");
        }
        FamilySpec::HideAndSeek(_) => {
            s.push_str(HIDE_AND_SEEK_LEGEND);
            let _ = writeln!(s, "view ahead is up {max_steps} steps");
        }
        FamilySpec::Maze(m) => {
            s.push_str(MAZE_LEGEND);
            let _ = writeln!(s, "map north is up {max_steps} steps");
            if !m.vocabulary.is_empty() {
                let _ = writeln!(s, "say {}", m.vocabulary.join(" "));
            }
        }
        // Written by the family's descriptor (`TextFormat::new`).
        FamilySpec::Custom(_) => {}
    }
    s
}

/// Hide-and-seek's entity list where the scene asks for it (`entities`): a line per box or
/// ramp seen, beyond the window too (`you see box 0 at 8 8 locked by your side`; compact, the
/// legend's letter: `B 0 at 8 8`), and the doorways open this episode (`open door at 9 6, 6
/// 9`; compact `door 9 6, 6 9`). Every word is one the default tokenizer already has.
fn hns_entities(s: &mut String, senses: Senses<'_>, compact: bool) {
    let Some(h) = senses.hide_and_seek else {
        return;
    };
    for o in &h.objects {
        let ramp = o.kind == hide_and_seek::ObjectKind::Ramp;
        if compact {
            let c = match (ramp, o.ours, o.theirs) {
                (false, true, _) => 'B',
                (false, _, true) => 'X',
                (false, ..) => 'b',
                (true, true, _) => 'R',
                (true, _, true) => 'Y',
                (true, ..) => 'r',
            };
            let _ = writeln!(s, "{c} {} at {} {}", o.index, o.pos[0], o.pos[1]);
        } else {
            let lock = if o.ours {
                " locked by your side"
            } else if o.theirs {
                " locked by them"
            } else {
                ""
            };
            let kind = if ramp { "ramp" } else { "box" };
            let _ = writeln!(
                s,
                "you see {kind} {} at {} {}{lock}",
                o.index, o.pos[0], o.pos[1]
            );
        }
    }
    let open: Vec<String> = h
        .doorways
        .iter()
        .filter(|d| d.1)
        .map(|(d, _)| format!("{} {}", d[0], d[1]))
        .collect();
    if !open.is_empty() {
        let head = if compact { "door" } else { "open door at" };
        let _ = writeln!(s, "{head} {}", open.join(", "));
    }
}

/// The legends, one per family kind (the same line in both styles).
const HARVEST_LEGEND: &str =
    "legend @ you T teammate O other W wall A apple , empty apple cell ~ river # dirt ? outside\n";
const HIDE_AND_SEEK_LEGEND: &str = "legend @ you T your side O other side # wall = low wall b box B box locked by your side X box locked by them r ramp R ramp locked by your side Y ramp locked by them ? unseen\n";
const MAZE_LEGEND: &str = "legend @ you T teammate # wall p plate D shut door / open door k key L locked door E exit ? unknown\n";

/// The maze's teammates in sight and the words heard, a line each.
fn teammates(s: &mut String, obs: &Observation, senses: Senses<'_>, vocabulary: &[String]) {
    for o in &obs.others {
        let _ = writeln!(s, "teammate {} at {} {}", o.slot, o.pos[0], o.pos[1]);
    }
    for h in senses.heard() {
        let word = vocabulary
            .get(usize::from(h.word))
            .map_or("?", String::as_str);
        let _ = writeln!(s, "teammate {} said {word}", h.from);
    }
}

/// `actions` and the legal action words.
fn actions_line(s: &mut String, actions: &[String], mask: ActionMask) {
    s.push_str("actions ");
    let mut sep = "";
    for (i, a) in actions.iter().enumerate() {
        if mask.allows(i as u8) {
            s.push_str(sep);
            s.push_str(a);
            sep = " ";
        }
    }
    s.push('\n');
}

/// The egocentric window, one row per line, under a title.
fn grid(s: &mut String, obs: &Observation, chars: &[char], title: &str) {
    s.push_str(title);
    s.push('\n');
    rows(s, obs, chars);
}

/// The egocentric window of `obs`, one row per line, each cell the character `chars` gives
/// its code (`?` past the end), separated by spaces: how every grid family writes its view.
pub fn rows(s: &mut String, obs: &Observation, chars: &[char]) {
    let w = usize::from(obs.view_width);
    if w == 0 {
        return;
    }
    s.reserve(obs.view.len() * 2);
    for row in obs.view.chunks(w) {
        let mut sep = "";
        for &c in row {
            s.push_str(sep);
            s.push(chars.get(usize::from(c)).copied().unwrap_or('?'));
            sep = " ";
        }
        s.push('\n');
    }
}

fn reward_line(s: &mut String, r: f32) {
    reward_words(s, "last reward", r);
}

/// `words` and the reward `r`, on a line (whole rewards as integers).
pub fn reward_words(s: &mut String, words: &str, r: f32) {
    // Whole rewards (most steps: 0) as integers, which is how `{r}` writes them (not -0,
    // which `{r}` writes with its sign); others through the float formatter.
    if r.fract() == 0.0 && r.abs() < 1e6 && !(r == 0.0 && r.is_sign_negative()) {
        let _ = writeln!(s, "{words} {}", r as i32);
    } else {
        let _ = writeln!(s, "{words} {r}");
    }
}

fn dir_word(d: Dir4) -> &'static str {
    match d {
        Dir4::North => "north",
        Dir4::East => "east",
        Dir4::South => "south",
        Dir4::West => "west",
    }
}

#[cfg(test)]
mod tests {
    use super::reward_line;

    #[test]
    fn the_reward_line_writes_every_reward_as_the_float_formatter_does() {
        let values = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            2.0,
            5.0,
            -3.0,
            0.5,
            -0.01,
            1.25,
            100.0,
            999_999.0,
            1_000_000.0,
            123_456_789.0,
            1e-7,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NAN,
        ];
        for r in values {
            let mut s = String::new();
            reward_line(&mut s, r);
            assert_eq!(s, format!("last reward {r}\n"), "{r}");
        }
    }
}
