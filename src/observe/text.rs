//! Observations as text: what a language-model policy reads, and what the viewer shows.
//! Each family writes its own lines (`envs::<family>/text.rs`, through
//! [`crate::envs::family::Family::text`]); [`TextFormat`] puts a prompt together:
//!
//! 1. in the compact style, the scene's constant lines (legend, titles, the episode's length,
//!    the talk vocabulary), the same in every prompt, so that a batch computes them once;
//! 2. the family's lines: a header (role, team, step or round, the phase), the agent's view as
//!    an ASCII window (one character per cell), recent events (the last reward, payoffs of
//!    the last round, a zap cooldown, the agents in sight, the words teammates said);
//! 3. the legal actions (and in the full style, where agents talk, the words they may say).
//!
//! The text is plain ASCII words separated by spaces, one fact per line (map cells too are
//! separate characters), so that a word-level tokenizer built from the encoders' vocabulary
//! covers it; numbers are split into digits by the tokenizer. Golden tests pin it for every
//! family (`tests/suite/observation_text.rs`).

use std::sync::Arc;

use crate::core::{ActionMask, Observation};
use crate::envs::family;
use crate::envs::senses::Senses;
use crate::envs::text::{FamilyText, PlainText, TextInput};
use crate::scene::{Scene, TextStyle};

/// The words every family's text may write ([`crate::envs::text`]'s shared lines, the
/// prompt's `actions` line, numbers digit by digit, signs and points), for the default
/// tokenizer; each family's own are [`crate::envs::family::Family::words`].
pub const WORDS: &str = "role team step of last reward north east south west actions - . ? \
    0 1 2 3 4 5 6 7 8 9";

/// What the text of a scene's observations needs besides the observation itself: the
/// family's text for the scene ([`crate::envs::family::Family::text`]), the names the scene
/// gives, the style.
#[derive(Clone)]
pub struct TextFormat {
    family: Arc<dyn FamilyText>,
    actions: Vec<String>,
    teams: Vec<String>,
    roles: Vec<String>,
    max_steps: u32,
    style: TextStyle,
    /// The compact style's first lines ([`FamilyText::preamble`]), the same for every agent
    /// and step.
    preamble: String,
}

impl std::fmt::Debug for TextFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextFormat")
            .field("actions", &self.actions)
            .field("teams", &self.teams)
            .field("roles", &self.roles)
            .field("max_steps", &self.max_steps)
            .field("style", &self.style)
            .finish_non_exhaustive()
    }
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
        let family = family::of(scene)
            .text(scene)
            .unwrap_or_else(|| Arc::new(PlainText));
        let max_steps = scene.spec.episode.max_steps;
        Self {
            preamble: family.preamble(max_steps),
            family,
            actions: actions.to_vec(),
            teams: scene.team_names().iter().map(|s| s.to_string()).collect(),
            roles: scene.roles.clone(),
            max_steps,
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

    /// The text of `obs` (with its family's `senses`) for `who`, whose legal actions are
    /// `mask` and whose reward on the previous step was `last_reward`: in the compact style
    /// ([`TextStyle::Compact`]) the family's preamble first; then the family's lines; the
    /// legal actions; in the full style, the family's lines after them.
    pub fn render(
        &self,
        who: Speaker,
        obs: &Observation,
        senses: Senses<'_>,
        mask: ActionMask,
        last_reward: f32,
    ) -> String {
        let (role, team) = self.names(who);
        let input = TextInput {
            obs,
            senses,
            role,
            team,
            last_reward,
            max_steps: self.max_steps,
            style: self.style,
            actions: &self.actions,
        };
        let mut s = match self.style {
            TextStyle::Compact => self.preamble.clone(),
            TextStyle::Full => String::with_capacity(512),
        };
        self.family.write(&input, &mut s);
        actions_line(&mut s, &self.actions, mask);
        if self.style == TextStyle::Full {
            self.family.after_actions(&input, &mut s);
        }
        s
    }

    /// The scene's constant lines: what [`TextFormat::render`] begins with in the compact
    /// style, the same for every agent and step (empty in the full style). An agent with
    /// memory reads them once, at the front of its context.
    pub fn constant_lines(&self) -> &str {
        match self.style {
            TextStyle::Compact => &self.preamble,
            TextStyle::Full => "",
        }
    }

    /// [`TextFormat::render`] without the [constant lines](TextFormat::constant_lines): one
    /// turn's observation in an agent's context with memory.
    pub fn render_turn(
        &self,
        who: Speaker,
        obs: &Observation,
        senses: Senses<'_>,
        mask: ActionMask,
        last_reward: f32,
    ) -> String {
        let text = self.render(who, obs, senses, mask, last_reward);
        match text.strip_prefix(self.constant_lines()) {
            Some(rest) => rest.to_string(),
            None => text,
        }
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
