//! Hide-and-seek as text: the phase, the agent's place and facing, the window, the agents
//! seen and, where the scene asks, the entity list. Golden tests pin every line
//! (`tests/suite/observation_text.rs`).

use std::fmt::Write;

use super::{ObjectKind, view};
use crate::core::Dir4;
use crate::envs::senses::Senses;
use crate::envs::text::{FamilyText, TextInput, dir_word, grid, reward_line, reward_words, rows};

/// The legend of the view (the same line in both styles).
const LEGEND: &str = "legend @ you T your side O other side # wall = low wall b box B box locked by your side X box locked by them r ramp R ramp locked by your side Y ramp locked by them ? unseen\n";

/// Hide-and-seek's text.
pub struct HideAndSeekText;

impl FamilyText for HideAndSeekText {
    fn preamble(&self, max_steps: u32) -> String {
        format!("{LEGEND}view ahead is up {max_steps} steps\n")
    }

    fn write(&self, t: &TextInput<'_>, s: &mut String) {
        let (obs, role, team, senses) = (t.obs, t.role, t.team, t.senses);
        let facing = dir_word(Dir4::ALL[usize::from(obs.facing % 4)]);
        if t.compact() {
            let _ = write!(s, "{role} {team} step {}", obs.step);
            if senses.prep_left() > 0 {
                let _ = writeln!(s, " preparation {}", senses.prep_left());
            } else {
                s.push_str(" play\n");
            }
            let holding = if senses.holding() { " holding" } else { "" };
            let _ = writeln!(s, "at {} {} {facing}{holding}", obs.pos[0], obs.pos[1]);
            rows(s, obs, &view::CHARS);
            reward_words(s, "reward", t.last_reward);
            for o in &obs.others {
                let side = if o.ally { "ally" } else { "opponent" };
                let _ = writeln!(s, "{side} {} at {} {}", o.slot, o.pos[0], o.pos[1]);
            }
            entities(s, senses, true);
            return;
        }
        let phase = if senses.prep_left() > 0 {
            format!("preparation {} steps left", senses.prep_left())
        } else {
            "play".to_string()
        };
        let _ = writeln!(
            s,
            "role {role} team {team} step {} of {} phase {phase}",
            obs.step, t.max_steps
        );
        let holding = if senses.holding() {
            " holding an object"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "you at {} {} facing {facing}{holding}",
            obs.pos[0], obs.pos[1]
        );
        grid(s, obs, &view::CHARS, "view ahead is up");
        s.push_str(LEGEND);
        reward_line(s, t.last_reward);
        if obs.others.is_empty() {
            s.push_str("you see nobody\n");
        }
        for o in &obs.others {
            let side = if o.ally { "ally" } else { "opponent" };
            let _ = writeln!(s, "you see {side} {} at {} {}", o.slot, o.pos[0], o.pos[1]);
        }
        entities(s, senses, false);
    }
}

/// The entity list where the scene asks for it (`entities`): a line per box or ramp seen,
/// beyond the window too (`you see box 0 at 8 8 locked by your side`; compact, the legend's
/// letter: `B 0 at 8 8`), and the doorways open this episode (`open door at 9 6, 6 9`;
/// compact `door 9 6, 6 9`). Every word is one the default tokenizer already has.
fn entities(s: &mut String, senses: Senses<'_>, compact: bool) {
    let Some(h) = senses.hide_and_seek else {
        return;
    };
    for o in &h.objects {
        let ramp = o.kind == ObjectKind::Ramp;
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
