//! Repeated two-player matrix games.
//!
//! | | |
//! |---|---|
//! | agents | exactly 2 (slot 0 is the row player, slot 1 the column player; the game is symmetric) |
//! | actions | 2 words from the scene (`actions`), the cooperative one first |
//! | observation | the last `history` rounds as (own, other) pairs, oldest first, and how often the other chose each action |
//! | reward | `payoffs[mine][theirs]` every round |
//! | termination | after `rounds` rounds; truncation at `episode.max_steps` if smaller |
//! | metrics | `cooperation_rate`, `mutual_cooperation`, `mutual_defection`, `payoff_per_round`; the strategy: `first_cooperation` (share of players cooperating in round 1), `coop_after_coop` (P(cooperate \| the other cooperated last round)), `coop_after_defect` (P(cooperate \| the other defected last round)), pooled over both players and left out of an episode where the condition never held; plus the social outcomes |

use bevy::prelude::*;

use super::params::MatrixParams;
use crate::core::*;
use crate::envs::senses::{SensesQuery, encode};
use crate::metrics::social_outcomes;

/// Per-arena state of a repeated matrix game.
#[derive(Component, Debug, Clone)]
pub struct MatrixGame {
    /// `payoffs[mine][theirs]` for the row player (symmetric game).
    pub payoffs: [[f32; 2]; 2],
    /// Rounds per episode.
    pub rounds: u32,
    /// Rounds shown in observations.
    pub history_len: usize,
    /// Every round of this episode: (slot 0's action, slot 1's action).
    pub history: Vec<[u8; 2]>,
    /// How often each slot played each action this episode.
    pub counts: [[u32; 2]; 2],
}

impl MatrixGame {
    /// State for a fresh arena.
    pub fn new(p: &MatrixParams) -> Self {
        let g = |i: usize, j: usize| {
            p.payoffs
                .get(i)
                .and_then(|r| r.get(j))
                .copied()
                .unwrap_or(0.0)
        };
        Self {
            payoffs: [[g(0, 0), g(0, 1)], [g(1, 0), g(1, 1)]],
            rounds: p.rounds,
            history_len: p.history as usize,
            history: Vec::with_capacity(p.rounds as usize),
            counts: [[0; 2]; 2],
        }
    }
    /// Payoffs of (slot 0, slot 1) for one round.
    pub fn payoff(&self, a0: u8, a1: u8) -> (f32, f32) {
        let (a0, a1) = (usize::from(a0.min(1)), usize::from(a1.min(1)));
        (self.payoffs[a0][a1], self.payoffs[a1][a0])
    }
}

/// A matrix-game player's part of its observation, written beside its
/// [`Observation`] in `SimSystems::Observe`.
#[derive(Component, Debug, Clone, Default, PartialEq)]
pub struct MatrixSenses {
    /// The most recent rounds as (own action, other's action), oldest first.
    pub history: Vec<[u8; 2]>,
    /// How often the other player chose each action so far this episode.
    pub other_counts: [u32; 2],
}

/// How one player answered the other over an episode: the counts behind the strategy
/// metrics (reciprocity is a high `coop_after_coop` with a low `coop_after_defect`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StrategyCounts {
    /// Episodes with a first round.
    pub first: u32,
    /// Of which the player cooperated in the first round.
    pub first_coop: u32,
    /// Rounds after one where the other cooperated.
    pub after_coop: u32,
    /// Of which the player cooperated.
    pub coop_after_coop: u32,
    /// Rounds after one where the other defected.
    pub after_defect: u32,
    /// Of which the player cooperated.
    pub coop_after_defect: u32,
}

impl StrategyCounts {
    /// The counts of `slot` (0 or 1) over `history` (action 0 cooperates).
    pub fn of(history: &[[u8; 2]], slot: usize) -> Self {
        let slot = slot.min(1);
        let other = 1 - slot;
        let mut c = Self::default();
        if let Some(h) = history.first() {
            c.first = 1;
            c.first_coop = u32::from(h[slot] == 0);
        }
        for w in history.windows(2) {
            let mine = u32::from(w[1][slot] == 0);
            if w[0][other] == 0 {
                c.after_coop += 1;
                c.coop_after_coop += mine;
            } else {
                c.after_defect += 1;
                c.coop_after_defect += mine;
            }
        }
        c
    }

    /// Both counts together.
    pub fn add(&mut self, o: &Self) {
        self.first += o.first;
        self.first_coop += o.first_coop;
        self.after_coop += o.after_coop;
        self.coop_after_coop += o.coop_after_coop;
        self.after_defect += o.after_defect;
        self.coop_after_defect += o.coop_after_defect;
    }

    /// The three strategy metrics by name; each is left out when its condition never held.
    pub fn metrics(&self) -> Vec<(&'static str, f64)> {
        let ratio = |n: u32, d: u32| (d > 0).then(|| f64::from(n) / f64::from(d));
        [
            ("first_cooperation", ratio(self.first_coop, self.first)),
            (
                "coop_after_coop",
                ratio(self.coop_after_coop, self.after_coop),
            ),
            (
                "coop_after_defect",
                ratio(self.coop_after_defect, self.after_defect),
            ),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect()
    }
}

fn pair(members: &ArenaAgents) -> Option<[Entity; 2]> {
    match members.entities() {
        [a, b] => Some([*a, *b]),
        _ => None,
    }
}

/// Clears the history of arenas starting an episode.
pub fn reset_matrix_games(mut arenas: Query<(&EpisodeClock, &mut MatrixGame)>) {
    for (clock, mut game) in &mut arenas {
        if clock.phase == ArenaPhase::JustReset {
            game.history.clear();
            game.counts = [[0; 2]; 2];
        }
    }
}

/// Writes each player's view of the recent rounds.
pub fn observe_matrix_games(
    arenas: Query<(&EpisodeClock, &MatrixGame, &ArenaAgents), Without<Idle>>,
    mut agents: Query<(&mut Observation, &mut MatrixSenses)>,
) {
    for (clock, game, members) in &arenas {
        let Some(pair) = pair(members) else { continue };
        let start = game.history.len().saturating_sub(game.history_len);
        for (me, e) in pair.into_iter().enumerate() {
            let Ok((mut obs, mut senses)) = agents.get_mut(e) else {
                continue;
            };
            obs.step = clock.step;
            senses.history.clear();
            senses
                .history
                .extend(game.history[start..].iter().map(|h| [h[me], h[1 - me]]));
            senses.other_counts = game.counts[1 - me];
        }
    }
}

/// MAPPO's global state of a matrix game: the game is one of perfect information, so each
/// player's observation (both players' last rounds and the other's counts) is the state
/// from its side.
pub fn state_matrix_games(
    arenas: Query<(), With<MatrixGame>>,
    mut agents: Query<(&InArena, &Observation, SensesQuery, &mut GlobalView), Without<Idle>>,
) {
    for (in_arena, obs, senses, mut g) in &mut agents {
        if arenas.contains(in_arena.0) {
            encode(obs, senses.get(), &mut g.0);
        }
    }
}

/// Plays the round: both actions go into the history, both players are paid, and the game
/// terminates after its last round.
pub fn play_matrix_rounds(
    mut arenas: Query<(&mut EpisodeClock, &mut MatrixGame, &ArenaAgents), Without<Idle>>,
    mut agents: Query<(&Action, &mut Reward)>,
) {
    for (mut clock, mut game, members) in &mut arenas {
        let Some([e0, e1]) = pair(members) else {
            continue;
        };
        let (Ok((a0, _)), Ok((a1, _))) = (agents.get(e0), agents.get(e1)) else {
            continue;
        };
        let (a0, a1) = (a0.0.min(1), a1.0.min(1));
        let (r0, r1) = game.payoff(a0, a1);
        game.history.push([a0, a1]);
        game.counts[0][usize::from(a0)] += 1;
        game.counts[1][usize::from(a1)] += 1;
        if let Ok((_, mut r)) = agents.get_mut(e0) {
            r.0 += r0;
        }
        if let Ok((_, mut r)) = agents.get_mut(e1) {
            r.0 += r1;
        }
        if game.history.len() as u32 >= game.rounds {
            clock.terminated = true;
        }
    }
}

/// Fills the episode's metrics for arenas that just ended.
pub fn summarize_matrix_games(
    mut arenas: Query<(
        &EpisodeClock,
        &MatrixGame,
        &ArenaAgents,
        &mut EpisodeMetrics,
    )>,
    agents: Query<(&EpisodeReturn, &AgentStats)>,
) {
    for (clock, game, members, mut metrics) in &mut arenas {
        if clock.phase != ArenaPhase::Ending {
            continue;
        }
        let n = game.history.len().max(1) as f64;
        let coop = game
            .history
            .iter()
            .map(|h| (h[0] == 0) as u32 + (h[1] == 0) as u32)
            .sum::<u32>() as f64;
        let both_c = game
            .history
            .iter()
            .filter(|h| h[0] == 0 && h[1] == 0)
            .count() as f64;
        let both_d = game
            .history
            .iter()
            .filter(|h| h[0] == 1 && h[1] == 1)
            .count() as f64;
        let (returns, stats): (Vec<f32>, Vec<AgentStats>) = members
            .entities()
            .iter()
            .filter_map(|&e| agents.get(e).ok())
            .map(|(r, s)| (r.0, *s))
            .unzip();
        let total: f64 = returns.iter().map(|&r| f64::from(r)).sum();
        metrics.0 = social_outcomes(&returns, &stats, clock.step);
        metrics.0.insert("cooperation_rate", coop / (2.0 * n));
        metrics.0.insert("mutual_cooperation", both_c / n);
        metrics.0.insert("mutual_defection", both_d / n);
        metrics.0.insert(
            "payoff_per_round",
            total / (returns.len().max(1) as f64 * n),
        );
        let mut counts = StrategyCounts::of(&game.history, 0);
        counts.add(&StrategyCounts::of(&game.history, 1));
        for (k, v) in counts.metrics() {
            metrics.0.insert(k, v);
        }
    }
}

/// Adds a matrix game's state to the per-step hash.
pub fn hash_matrix_game(world: &World, arena: Entity, hash: &mut StateHash) {
    if let Some(g) = world.get::<MatrixGame>(arena) {
        for h in &g.history {
            hash.write(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prisoners_dilemma_payoffs() {
        let g = MatrixGame::new(&MatrixParams::default());
        assert_eq!(g.payoff(0, 0), (3.0, 3.0));
        assert_eq!(g.payoff(0, 1), (0.0, 5.0));
        assert_eq!(g.payoff(1, 0), (5.0, 0.0));
        assert_eq!(g.payoff(1, 1), (1.0, 1.0));
    }

    /// Slot 0 plays C C D C, slot 1 plays D C C D. Slot 0 after slot 1's D (round 2): C;
    /// after its C (rounds 3, 4): D, C. Slot 1 after slot 0's C (rounds 2, 3): C, C; after
    /// its D (round 4): D.
    #[test]
    fn strategy_counts_by_hand() {
        let h = [[0, 1], [0, 0], [1, 0], [0, 1]];
        let s0 = StrategyCounts::of(&h, 0);
        assert_eq!((s0.first, s0.first_coop), (1, 1));
        assert_eq!((s0.after_coop, s0.coop_after_coop), (2, 1));
        assert_eq!((s0.after_defect, s0.coop_after_defect), (1, 1));
        let s1 = StrategyCounts::of(&h, 1);
        assert_eq!(
            (s1.first_coop, s1.after_coop, s1.coop_after_coop),
            (0, 2, 2)
        );
        assert_eq!((s1.after_defect, s1.coop_after_defect), (1, 0));
        let mut both = s0;
        both.add(&s1);
        let m: std::collections::BTreeMap<_, _> = both.metrics().into_iter().collect();
        assert_eq!(m["first_cooperation"], 0.5);
        assert_eq!(m["coop_after_coop"], 0.75);
        assert_eq!(m["coop_after_defect"], 0.5);
        // One round: no round follows another, so only the first move is measured.
        assert_eq!(StrategyCounts::of(&[[0, 0]], 0).metrics().len(), 1);
    }

    #[test]
    fn stag_hunt_payoffs() {
        let p = MatrixParams {
            payoffs: vec![vec![4.0, 0.0], vec![2.0, 2.0]],
            ..MatrixParams::default()
        };
        let g = MatrixGame::new(&p);
        assert_eq!(g.payoff(0, 0), (4.0, 4.0));
        assert_eq!(g.payoff(0, 1), (0.0, 2.0));
        assert_eq!(g.payoff(1, 1), (2.0, 2.0));
    }
}
