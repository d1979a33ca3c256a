//! What a family writes of an observation as text (the language model's prompt, the viewer's
//! inspector): the [`FamilyText`] a family's descriptor builds for a scene
//! ([`crate::envs::family::Family::text`]), and the pieces every grid family writes alike
//! ([`rows`], [`reward_words`], ...). `observe::text::TextFormat` puts a prompt together:
//! the compact style's [`FamilyText::preamble`], the family's lines, the legal actions.
//!
//! The text is plain ASCII words separated by spaces, one fact per line (map cells too are
//! separate characters), so that a word-level tokenizer covers it; numbers are split into
//! digits by the tokenizer.

use std::fmt::Write;

use crate::core::{Dir4, Observation};
use crate::envs::senses::Senses;
use crate::scene::TextStyle;

/// What a family's text is written from: one agent's observation and what the scene names.
#[derive(Debug, Clone, Copy)]
pub struct TextInput<'a> {
    /// The agent's observation (its family filled it in `SimSystems::Observe`).
    pub obs: &'a Observation,
    /// The family parts of it (`envs::senses`).
    pub senses: Senses<'a>,
    /// The agent's role's name.
    pub role: &'a str,
    /// The agent's team's name.
    pub team: &'a str,
    /// The reward of the previous step.
    pub last_reward: f32,
    /// The scene's episode length.
    pub max_steps: u32,
    /// Full or compact.
    pub style: TextStyle,
    /// The action words, by index.
    pub actions: &'a [String],
}

impl TextInput<'_> {
    /// Whether the style is the compact one.
    pub fn compact(&self) -> bool {
        self.style == TextStyle::Compact
    }
}

/// A family's text for one scene, built once per scene by its descriptor.
pub trait FamilyText: Send + Sync {
    /// The lines every prompt starts with in the compact style (the legend, the view's
    /// title, the episode's length): the same for every agent and step, so every prompt of
    /// a batch begins with them and computes them once.
    fn preamble(&self, max_steps: u32) -> String;
    /// An agent's own lines, after the preamble (compact) and before the line of legal
    /// actions.
    fn write(&self, t: &TextInput<'_>, out: &mut String);
    /// Lines after the legal actions, in the full style only (the maze's words).
    fn after_actions(&self, _t: &TextInput<'_>, _out: &mut String) {}
}

/// The text of a family that writes none of its own: role, team and step, and the view's
/// codes as digits.
pub struct PlainText;

impl FamilyText for PlainText {
    fn preamble(&self, _max_steps: u32) -> String {
        String::new()
    }
    fn write(&self, t: &TextInput<'_>, s: &mut String) {
        let _ = writeln!(s, "{} {} step {}", t.role, t.team, t.obs.step);
        rows(
            s,
            t.obs,
            &['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'],
        );
    }
}

/// The egocentric window under a title, one row per line.
pub fn grid(s: &mut String, obs: &Observation, chars: &[char], title: &str) {
    s.push_str(title);
    s.push('\n');
    rows(s, obs, chars);
}

/// The view of `obs`, one row per line, each cell the character `chars` gives its code
/// (`?` past the end), separated by spaces: how every grid family writes its view.
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

/// `last reward` and the reward `r`, on a line (the full style's).
pub fn reward_line(s: &mut String, r: f32) {
    reward_words(s, "last reward", r);
}

/// `words` and the reward `r`, on a line.
pub fn reward_words(s: &mut String, words: &str, r: f32) {
    // Whole rewards (most steps: 0) as integers, which is how `{r}` writes them (not -0,
    // which `{r}` writes with its sign); others through the float formatter.
    if r.fract() == 0.0 && r.abs() < 1e6 && !(r == 0.0 && r.is_sign_negative()) {
        let _ = writeln!(s, "{words} {}", r as i32);
    } else {
        let _ = writeln!(s, "{words} {r}");
    }
}

/// The word of a direction.
pub fn dir_word(d: Dir4) -> &'static str {
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
