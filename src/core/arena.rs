//! Arenas: independent copies of a scene, each an entity that owns its map state, its RNG
//! and (through [`ArenaAgents`]) its agents.

use bevy::prelude::{Component, Entity, Message, Resource};
use std::collections::BTreeMap;

use super::agent::InArena;

/// An arena entity. Arenas are numbered `0..n` in spawn order.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arena {
    /// Index of the arena in the run.
    pub index: u32,
}

/// The agents of an arena in spawn order (slot order); kept by Bevy from [`InArena`].
#[derive(Component, Debug, Default)]
#[relationship_target(relationship = InArena)]
pub struct ArenaAgents(Vec<Entity>);

impl ArenaAgents {
    /// The agents in slot order.
    pub fn entities(&self) -> &[Entity] {
        &self.0
    }
}

/// Where an arena is in its episode cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArenaPhase {
    /// Must be reset before the next step (set at spawn and after an episode ends).
    #[default]
    PendingReset,
    /// Reset this step: families lay out the map and place agents.
    JustReset,
    /// Stepping.
    Running,
    /// The episode ended this step; families summarise it.
    Ending,
    /// Done with its episode budget; every system skips it.
    Idle,
}

/// The arena's clock and phase.
#[derive(Component, Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpisodeClock {
    /// Episode index, counting from 0.
    pub episode: u32,
    /// Steps taken in the current episode.
    pub step: u32,
    /// Episode length limit (truncation).
    pub max_steps: u32,
    /// Phase of the cycle.
    pub phase: ArenaPhase,
    /// The rules ended the episode (termination), as opposed to the time limit.
    pub terminated: bool,
}

impl EpisodeClock {
    /// A clock that resets into episode 0 on the first step.
    pub fn new(max_steps: u32) -> Self {
        Self {
            episode: 0,
            step: 0,
            max_steps,
            phase: ArenaPhase::PendingReset,
            terminated: false,
        }
    }
    /// Whether the arena takes part in this step.
    pub fn is_live(&self) -> bool {
        matches!(self.phase, ArenaPhase::JustReset | ArenaPhase::Running)
    }
}

/// Family metrics of the episode that just ended, filled by the family when the arena's
/// phase is [`ArenaPhase::Ending`].
#[derive(Component, Debug, Clone, Default)]
pub struct EpisodeMetrics(pub BTreeMap<&'static str, f64>);

/// One finished episode of one arena.
#[derive(Message, Debug, Clone, PartialEq)]
pub struct EpisodeEnded {
    /// Arena index.
    pub arena: u32,
    /// Episode index within the arena.
    pub episode: u32,
    /// Steps the episode lasted.
    pub steps: u32,
    /// Ended by the rules (true) or by the step limit (false).
    pub terminated: bool,
    /// Return of every agent, in slot order.
    pub agent_returns: Vec<f32>,
    /// Mean return of each team's agents, in scene team order.
    pub team_returns: Vec<f64>,
    /// The family's and the social-outcome metrics, sorted by name.
    pub metrics: BTreeMap<&'static str, f64>,
}

/// Arena entities in index order, and how many episodes each should run.
#[derive(Resource, Debug, Clone, Default)]
pub struct Arenas {
    /// Arena entities, index `first + i` at position `i`.
    pub entities: Vec<Entity>,
    /// The first arena's index (0 but for a rank's share of a data-parallel run).
    pub first: u32,
    /// Episodes each arena runs before going idle (`None`: forever).
    pub episode_budget: Option<u32>,
    /// The run seed every stream derives from.
    pub seed: u64,
    /// Consecutive arenas that share their environment streams (group-relative training:
    /// `G` rollouts from the same start and the same world randomness, different agents'
    /// samples). 0 or 1: every arena its own.
    pub group_size: u32,
    /// Arenas wait before starting an episode whose index is at least this (training holds
    /// them between iterations so every episode of a batch acts with the same weights).
    pub gate: Option<u32>,
}

impl Arenas {
    /// The entity of arena `index`, if this world holds it.
    pub fn entity(&self, index: u32) -> Option<Entity> {
        let i = index.checked_sub(self.first)?;
        self.entities.get(i as usize).copied()
    }

    /// The index whose environment stream `arena` uses (its group's first arena's).
    pub fn env_stream(&self, arena: u32) -> u32 {
        arena / self.group_size.max(1)
    }
}

/// Counts that tell a runner how far the run is.
#[derive(Resource, Debug, Clone, Copy, Default)]
pub struct RunProgress {
    /// Simulation steps run (each advances every live arena once).
    pub steps: u64,
    /// Agent-steps run (sum over live arenas of their agents).
    pub agent_steps: u64,
    /// Episodes finished, over all arenas.
    pub episodes: u64,
    /// Arenas that have used their whole episode budget.
    pub idle_arenas: u32,
}
