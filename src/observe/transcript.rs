//! An agent's episode as text, for readers that hold the text alone (the Python env's
//! `obs[agent]["text"]`): the scene's constant lines once, then its turns (each step's
//! observation followed by what it chose), the last `memory` of them, as
//! a language-model agent with memory reads them ([`crate::policy::lm::policy::memory`], which also
//! holds the tokens and keys and values).

use super::text::TextFormat;

/// What an agent's turn says it chose: its action word, and where it talks `say` and its
/// word (`<eos>` for silence); the turn's text ends with it and a new line.
pub fn chosen_text(action: &str, word: Option<&str>) -> String {
    match word {
        Some(w) => format!("{action} say {w}"),
        None => action.to_string(),
    }
}

/// How many of `past` turns an agent with `memory` keeps before its next observation: the
/// last `memory` of them.
pub fn turns_kept(past: usize, memory: usize) -> usize {
    past.min(memory)
}

/// One agent's episode as text.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    /// The kept turns, each its observation's text and what was chosen after it.
    turns: Vec<String>,
    /// The step of the last turn.
    step: Option<u32>,
}

impl Transcript {
    /// The context an agent with `memory` reads at `step` before observation `obs` (the
    /// text of [`TextFormat::render_turn`]): the constant lines, the kept turns, then `obs`.
    /// A step no later than the last turn's starts a new episode.
    pub fn context(&self, format: &TextFormat, memory: usize, step: u32, obs: &str) -> String {
        let mut s = format.constant_lines().to_string();
        if self.step.is_some_and(|last| step > last) {
            let keep = turns_kept(self.turns.len(), memory);
            for t in &self.turns[self.turns.len() - keep..] {
                s.push_str(t);
            }
        }
        s.push_str(obs);
        s
    }

    /// Ends the turn of `step`: `obs` read, then `chosen` ([`chosen_text`]).
    pub fn push(&mut self, memory: usize, step: u32, obs: &str, chosen: &str) {
        if self.step.is_none_or(|last| step <= last) {
            self.turns.clear();
        }
        let keep = turns_kept(self.turns.len(), memory);
        self.turns.drain(..self.turns.len() - keep);
        self.turns.push(format!("{obs}{chosen}\n"));
        self.step = Some(step);
    }
}

#[cfg(test)]
mod tests {
    use super::turns_kept;

    #[test]
    fn the_last_memory_turns_stay() {
        // Up to the memory, every turn stays; one more drops the oldest.
        assert_eq!(turns_kept(0, 8), 0);
        assert_eq!(turns_kept(8, 8), 8);
        assert_eq!(turns_kept(9, 8), 8);
        assert_eq!(turns_kept(2, 1), 1);
        assert_eq!(turns_kept(1, 1), 1);
        assert_eq!(turns_kept(4, 3), 3);
        assert_eq!(turns_kept(3, 0), 0);
    }
}
