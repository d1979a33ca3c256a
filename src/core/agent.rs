//! Agent components. An agent is an entity in one arena ([`InArena`]); whoever decides for it
//! (scripted bot, random, language model, keyboard) writes the same [`Action`].

use bevy::prelude::{Component, Entity};

use super::arena::ArenaAgents;

/// The arena an agent lives in. Bevy keeps [`ArenaAgents`] on the arena in spawn order.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq)]
#[relationship(relationship_target = ArenaAgents)]
pub struct InArena(#[entities] pub Entity);

/// The agent's fixed place in its arena: slot `i` is the `i`-th agent spawned there.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Agent {
    /// Index of the agent's arena in the run.
    pub arena: u32,
    /// Index of the agent within its arena (spawn order).
    pub slot: u16,
}

/// Index of the agent's team in the scene's `teams` list.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Team(pub u8);

/// Index of the agent's role in the scene's list of distinct roles.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Role(pub u8);

/// Which registered policy decides for this agent (an index into the policy registry).
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyHandle(pub u16);

/// The action chosen this step: an index into the family's action names.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Action(pub u8);

/// Which actions are legal this step: bit `i` set means action `i` may be chosen.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionMask(pub u32);

impl ActionMask {
    /// All of the first `n` actions legal.
    pub fn all(n: usize) -> Self {
        Self(if n >= 32 { u32::MAX } else { (1u32 << n) - 1 })
    }
    /// Only action `a` legal.
    pub fn only(a: u8) -> Self {
        Self(1u32 << a)
    }
    /// Whether action `a` is legal.
    pub fn allows(self, a: u8) -> bool {
        a < 32 && self.0 & (1u32 << a) != 0
    }
    /// Number of legal actions.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }
    /// The `k`-th legal action in increasing order, if there are that many.
    pub fn nth(self, k: u32) -> Option<u8> {
        let mut bits = self.0;
        for _ in 0..k {
            bits &= bits.wrapping_sub(1);
        }
        (bits != 0).then(|| bits.trailing_zeros() as u8)
    }
}

/// The reward received this step.
#[derive(Component, Debug, Clone, Copy, PartialEq, Default)]
pub struct Reward(pub f32);

/// The sum of rewards since the episode began.
#[derive(Component, Debug, Clone, Copy, PartialEq, Default)]
pub struct EpisodeReturn(pub f32);

/// Termination (the rules ended the agent's episode) and truncation (a time limit did) are
/// kept apart, as PettingZoo does: value bootstrapping later treats them differently.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Done {
    /// The rules ended the episode for this agent.
    pub terminated: bool,
    /// The episode limit ended it.
    pub truncated: bool,
}

/// Per-episode counters used by the social-outcome metrics.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AgentStats {
    /// Steps on which the agent's reward was positive.
    pub rewarded_steps: u32,
    /// Sum of the step indices of those steps (for sustainability).
    pub rewarded_time_sum: u64,
    /// Steps the agent spent removed from play (zapped, timed out).
    pub removed_steps: u32,
}

/// What the agent perceives this step, written by its family in `SimSystems::Observe`: the
/// part every family shares (a window, the map it knows, itself, the others it perceives).
/// What only one family has (a matrix game's rounds, a beam's cooldown, the preparation
/// phase, keys and words heard) is that family's own component beside it
/// (`envs::<family>`), gathered for policies by `envs::Senses`.
#[derive(Component, Debug, Clone, Default, PartialEq)]
pub struct Observation {
    /// Step of the episode.
    pub step: u32,
    /// Egocentric view, row-major, `view_width * view_height` cell codes; row 0 is the
    /// farthest row ahead of the agent. Codes are the family's (see its `ViewCode`).
    pub view: Vec<u8>,
    /// Width of `view` in cells.
    pub view_width: u8,
    /// Height of `view` in cells.
    pub view_height: u8,
    /// Column and row of the agent itself inside `view`.
    pub view_self: (u8, u8),
    /// The agent is removed from play this step (zapped).
    pub removed: bool,
    /// Own map position, for families whose agents know it (hide-and-seek, maze).
    pub pos: [i32; 2],
    /// Own facing (0 north, 1 east, 2 south, 3 west), for families with facing.
    pub facing: u8,
    /// Own team (index into the scene's teams).
    pub team: u8,
    /// The map as the agent knows it, allocentric, row-major, `map_width * map_height` cell
    /// codes (maze: the known part of the maze; oracle bots: the whole map). Empty otherwise.
    pub map: Vec<u8>,
    /// Width of `map`.
    pub map_width: u16,
    /// Height of `map`.
    pub map_height: u16,
    /// Other agents the agent perceives this step (hide-and-seek: those in its vision
    /// cone; maze: its teammates), in slot order.
    pub others: Vec<Perceived>,
    /// A seat whose teacher is an oracle bot while a learner imitates it ([`OracleTeacher`],
    /// `emergence imitate`): the whole map as the oracle reads it (cells, width, height), for
    /// the teacher alone; `map` stays what the learner reads. Empty otherwise.
    pub oracle_map: (Vec<u8>, u16, u16),
}

impl Observation {
    /// The observation as an oracle teacher reads it: `map` replaced by
    /// [`Observation::oracle_map`] (`None` when there is none).
    pub fn as_oracle(&self) -> Option<Observation> {
        let (cells, w, h) = &self.oracle_map;
        if cells.is_empty() {
            return None;
        }
        let mut o = self.clone();
        o.map.clone_from(cells);
        o.map_width = *w;
        o.map_height = *h;
        o.oracle_map = Default::default();
        Some(o)
    }
}

/// Another agent as perceived by the observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Perceived {
    /// Its slot in the arena.
    pub slot: u16,
    /// Its team.
    pub team: u8,
    /// Whether it is on the observer's side (hide-and-seek: hiders or seekers, whatever
    /// the team; maze: always).
    pub ally: bool,
    /// Its map position.
    pub pos: [i32; 2],
}

/// What the agent says this step (families with talk): an index into the scene's
/// vocabulary, or `None` for silence. Written by policies next to [`Action`].
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Utterance(pub Option<u8>);

/// Marks an agent whose policy is an oracle (an upper-bound bot): families that hide parts
/// of the map show it the whole map.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Oracle;

/// Marks an agent whose teacher is an oracle while a learner imitates it (`emergence
/// imitate`): families that hide parts of the map write the whole map into
/// [`Observation::oracle_map`] for the teacher, and the learner's own view into `map`.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OracleTeacher;

/// What a learned policy recorded about its last decision (the training plugin reads it;
/// scripted bots leave it empty).
#[derive(Component, Debug, Clone, Default, PartialEq)]
pub struct DecisionTrace {
    /// Token ids of the prompt the model read.
    pub tokens: Vec<u32>,
    /// The prompt's text (language-model policies), exactly as encoded.
    pub text: String,
    /// Log-probability of the chosen action under the masked distribution.
    pub logprob: f32,
    /// Entropy of the masked action distribution.
    pub entropy: f32,
    /// Probability of every action (0 for illegal ones), by action index.
    pub probs: Vec<f32>,
    /// The value estimate, when the policy has a value head.
    pub value: Option<f32>,
    /// Families with talk, a policy that learns what to say: its choice (0 for silence,
    /// `k + 1` for vocabulary word `k`), sampled after the action; `None` when the policy
    /// chose no word this way (scripted talkers, families without talk).
    pub said: Option<u8>,
    /// The log-probability of `said` when chosen (part of the decision's log-probability
    /// in training).
    pub said_logprob: f32,
    /// The reward of the previous step, as the observation text reported it (written for
    /// every agent by the Decide step, so the viewer can show the text the policy read).
    pub last_reward: f32,
    /// A policy with memory (the `gru`): the state it decided from (zeros at an episode's
    /// first step); the trainer starts its sequences from it. Empty for the others.
    pub memory: Vec<f32>,
    /// Imitation's DAgger rounds (`emergence imitate --dagger`): the teacher's choice at a
    /// state where the learner acted, which the rollout records as the decision's action in
    /// place of the one played (the learner is trained on it). `None` elsewhere.
    pub label: Option<u8>,
    /// A language model with memory: how this context was read from the agent's kept keys
    /// and values (the trainer rebuilds the passes from it). `None` elsewhere.
    pub read: Option<ContextRead>,
}

/// How a language model with memory read a decision's context (`tokens`): its first
/// `header` tokens are the scene's constant lines; the tokens from `new_from` on were not in
/// the previous decision's context (the previous choice and this observation); those from
/// `computed_from` on were computed at this step, the others read from kept keys and values
/// (`computed_from` 0: the whole context read afresh from position 0, a new window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContextRead {
    /// The constant lines' tokens, first in every context.
    pub header: u32,
    /// Where the tokens the previous decision did not read begin.
    pub new_from: u32,
    /// Where the tokens computed at this step begin.
    pub computed_from: u32,
}
