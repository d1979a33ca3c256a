//! The social dilemmas as text: a matrix game's rounds, a grid dilemma's window and beam.
//! Golden tests pin every line (`tests/suite/observation_text.rs`).

use std::fmt::Write;

use super::view;
use crate::envs::text::{FamilyText, TextInput, grid, reward_line, reward_words, rows};

/// A repeated matrix game: the round, the rounds remembered and the other's counts.
pub struct MatrixText {
    /// Rounds an episode.
    pub rounds: u32,
    /// `payoffs[mine][theirs]`.
    pub payoffs: Vec<Vec<f32>>,
}

impl FamilyText for MatrixText {
    fn preamble(&self, _max_steps: u32) -> String {
        format!("rounds {} legend you other you got\n", self.rounds)
    }

    fn write(&self, t: &TextInput<'_>, s: &mut String) {
        let (role, team, round) = (t.role, t.team, t.obs.step + 1);
        if t.compact() {
            let _ = writeln!(s, "{role} {team} round {round}");
        } else {
            let _ = writeln!(
                s,
                "role {role} team {team} round {round} of {}",
                self.rounds
            );
        }
        self.events(t, s);
    }
}

impl MatrixText {
    /// The rounds remembered and the other's counts; in the compact style without the words
    /// the preamble's legend stands for (`cooperate defect 0` for `you cooperate other
    /// defect you got 0`).
    fn events(&self, t: &TextInput<'_>, s: &mut String) {
        let word = |a: u8| t.actions.get(usize::from(a)).map_or("?", String::as_str);
        let full = !t.compact();
        let history = t.senses.history();
        if full && history.is_empty() {
            s.push_str("no rounds played yet\n");
        }
        for h in history {
            let (mine, theirs) = (usize::from(h[0].min(1)), usize::from(h[1].min(1)));
            let pay = self.payoffs[mine][theirs];
            if full {
                let _ = writeln!(s, "you {} other {} you got {pay}", word(h[0]), word(h[1]));
            } else {
                let _ = writeln!(s, "{} {} {pay}", word(h[0]), word(h[1]));
            }
        }
        let counts = t.senses.other_counts();
        let _ = writeln!(
            s,
            "other {}{} {} {} {}",
            if full { "so far " } else { "" },
            word(0),
            counts[0],
            word(1),
            counts[1]
        );
    }
}

/// The legend of the grid dilemmas' view (the same line in both styles).
const HARVEST_LEGEND: &str =
    "legend @ you T teammate O other W wall A apple , empty apple cell ~ river # dirt ? outside\n";

/// Commons Harvest and Clean Up: the window ahead, the reward, the beam.
pub struct GridText;

impl FamilyText for GridText {
    fn preamble(&self, max_steps: u32) -> String {
        format!("{HARVEST_LEGEND}view ahead is up {max_steps} steps\n")
    }

    fn write(&self, t: &TextInput<'_>, s: &mut String) {
        let (obs, role, team) = (t.obs, t.role, t.team);
        let cooldown = t.senses.cooldown();
        if t.compact() {
            let _ = writeln!(s, "{role} {team} step {}", obs.step);
            rows(s, obs, &view::CHARS);
            reward_words(s, "reward", t.last_reward);
            if obs.removed {
                s.push_str("zapped out\n");
            } else if cooldown > 0 {
                let _ = writeln!(s, "zap in {cooldown}");
            }
            return;
        }
        let _ = writeln!(
            s,
            "role {role} team {team} step {} of {}",
            obs.step, t.max_steps
        );
        grid(s, obs, &view::CHARS, "view ahead is up");
        s.push_str(HARVEST_LEGEND);
        reward_line(s, t.last_reward);
        if obs.removed {
            s.push_str("you are zapped out of play\n");
        } else if cooldown > 0 {
            let _ = writeln!(s, "zap ready in {cooldown} steps");
        } else {
            s.push_str("zap ready\n");
        }
    }
}
