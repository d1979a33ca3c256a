//! The rollout buffer: every decision of the trained policy's agents, across all arenas,
//! filed by (arena, episode, agent), collected in `RecordSystems::Summarize` from what the
//! Decide and Reward steps left on the agents; finished episodes are noted from
//! [`EpisodeEnded`]. An iteration's batch is episode `k` of every arena.

use bevy::prelude::*;
use std::collections::BTreeMap;

use crate::core::{Action, Arena, Observation};
use crate::core::{
    ActionMask, Agent, ArenaAgents, ArenaPhase, DecisionTrace, Done, EpisodeClock, EpisodeEnded,
    Idle, PolicyHandle, Reward, Role, Team,
};

/// One decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The prompt's token ids (a language model's decision).
    pub tokens: Vec<u32>,
    /// The observation as an `mlp` reads it (empty for a language model's decision).
    pub encoded: crate::policy::mlp::Encoded,
    /// Which actions were legal.
    pub legal: Vec<bool>,
    /// The chosen action.
    pub action: u8,
    /// Its log-probability when chosen.
    pub logprob: f32,
    /// The value estimate when chosen (0 without a value head).
    pub value: f32,
    /// The reward that followed.
    pub reward: f32,
}

/// One agent's steps through one episode.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Trajectory {
    /// Arena index.
    pub arena: u32,
    /// Episode index.
    pub episode: u32,
    /// Slot in the arena.
    pub slot: u16,
    /// Team index.
    pub team: u8,
    /// Role index (in the scene's role order).
    pub role: u8,
    /// The decisions, in order.
    pub steps: Vec<Step>,
    /// The rules ended the episode (no value to bootstrap from).
    pub terminated: bool,
    /// A truncated episode: the value of the state after its last step, where the rollout
    /// recorded it (GAE bootstraps from it; see [`crate::train::algo::ippo`]).
    pub bootstrap: Option<f32>,
}

/// The buffer, a resource.
#[derive(Resource, Debug, Default)]
pub struct Rollouts {
    /// The policy whose agents are collected.
    pub policy: Option<PolicyHandle>,
    /// Number of actions (the width of `legal`).
    pub actions: usize,
    /// Also keep the global state of every step (MAPPO's centralised critic reads it).
    pub global: bool,
    /// Keep each decision's observation as an `mlp` reads it (the collected policy is one).
    pub features: bool,
    /// Agents per arena.
    pub slots: usize,
    open: BTreeMap<(u32, u32, u16), Trajectory>,
    /// Global states by (episode, arena), one row per step: every agent's feature row in
    /// slot order.
    states: BTreeMap<(u32, u32), Vec<Vec<f32>>>,
    /// The global state after the last step of a truncated episode, by (episode, arena).
    final_states: BTreeMap<(u32, u32), Vec<f32>>,
    /// Finished episodes, by (episode, arena).
    ended: BTreeMap<(u32, u32), EpisodeEnded>,
}

/// The batch of one iteration.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// Every trained agent's trajectory, ordered by arena then slot.
    pub trajectories: Vec<Trajectory>,
    /// The episode reports, by arena.
    pub episodes: Vec<EpisodeEnded>,
    /// With [`Rollouts::global`]: each arena's global state per step.
    pub states: BTreeMap<u32, Vec<Vec<f32>>>,
    /// With [`Rollouts::global`]: the global state after the last step of each arena whose
    /// episode was truncated (MAPPO's critic bootstraps from it).
    pub final_states: BTreeMap<u32, Vec<f32>>,
    /// Agents per arena.
    pub slots: usize,
}

impl Rollouts {
    /// Collects `policy`'s agents, whose actions number `actions`.
    pub fn new(policy: PolicyHandle, actions: usize) -> Self {
        Self {
            policy: Some(policy),
            actions,
            ..Default::default()
        }
    }

    /// Whether every one of `arenas` has finished `episode`.
    pub fn complete(&self, episode: u32, arenas: u32) -> bool {
        (0..arenas).all(|a| self.ended.contains_key(&(episode, a)))
    }

    /// Takes episode `episode` of every arena out of the buffer.
    pub fn take(&mut self, episode: u32) -> Batch {
        Batch {
            trajectories: drain(&mut self.open, |k| k.1 == episode)
                .map(|(_, t)| t)
                .collect(),
            episodes: drain(&mut self.ended, |k| k.0 == episode)
                .map(|(_, e)| e)
                .collect(),
            states: drain(&mut self.states, |k| k.0 == episode)
                .map(|(k, s)| (k.1, s))
                .collect(),
            final_states: drain(&mut self.final_states, |k| k.0 == episode)
                .map(|(k, s)| (k.1, s))
                .collect(),
            slots: self.slots,
        }
    }

    /// Whether a truncated trajectory of `episode` still waits for the value of the state
    /// after its last step (recorded the step after its arena ended: [`collect_steps`]).
    pub fn missing_bootstrap(&self, episode: u32) -> bool {
        self.open
            .iter()
            .any(|(k, t)| k.1 == episode && !t.terminated && t.bootstrap.is_none())
    }
}

/// Removes the entries whose key passes `keep`, in key order.
fn drain<K: Ord + Copy, V>(
    map: &mut BTreeMap<K, V>,
    keep: impl Fn(&K) -> bool,
) -> impl Iterator<Item = (K, V)> {
    let keys: Vec<K> = map.keys().filter(|k| keep(k)).copied().collect();
    keys.into_iter()
        .filter_map(|k| map.remove(&k).map(|v| (k, v)))
        .collect::<Vec<_>>()
        .into_iter()
}

impl Batch {
    /// Each arena's shared reward per step: the sum over its trajectories in the batch.
    pub fn shared_rewards(&self) -> BTreeMap<u32, Vec<f32>> {
        let mut summed: BTreeMap<u32, Vec<f32>> = BTreeMap::new();
        for tr in &self.trajectories {
            let r = summed.entry(tr.arena).or_default();
            if r.len() < tr.steps.len() {
                r.resize(tr.steps.len(), 0.0);
            }
            for (t, s) in tr.steps.iter().enumerate() {
                r[t] += s.reward;
            }
        }
        summed
    }
}

/// Files this step's decisions of the collected policy (`RecordSystems::Summarize`: after the
/// clocks have marked episode ends, before arenas move to their next episode).
pub fn collect_steps(
    mut rollouts: ResMut<Rollouts>,
    arenas: Query<(&Arena, &EpisodeClock, &ArenaAgents), Without<Idle>>,
    agents: Query<(
        &Agent,
        &Team,
        &PolicyHandle,
        &DecisionTrace,
        &Action,
        &ActionMask,
        &Reward,
        &Done,
        &Observation,
        &Role,
    )>,
) {
    let Some(policy) = rollouts.policy else {
        return;
    };
    let n = rollouts.actions;
    let mut row = Vec::new();
    for (arena, clock, members) in &arenas {
        if clock.phase == ArenaPhase::PendingReset && clock.episode > 0 {
            // An arena that ended its episode and waits for the update: this step observed
            // and valued the state after its last step. A truncated episode bootstraps from
            // that value (a terminated one from 0).
            let episode = clock.episode - 1;
            let mut state = Vec::new();
            for &e in members.entities() {
                let Ok((agent, _, handle, trace, _, _, _, _, obs, _)) = agents.get(e) else {
                    continue;
                };
                if rollouts.global {
                    crate::policy::mlp::features(obs, &mut row);
                    state.extend_from_slice(&row);
                }
                if *handle != policy {
                    continue;
                }
                if let Some(t) = rollouts.open.get_mut(&(arena.index, episode, agent.slot))
                    && !t.terminated
                    && t.bootstrap.is_none()
                {
                    t.bootstrap = Some(trace.value.unwrap_or(0.0));
                }
            }
            let truncated = rollouts
                .open
                .range((arena.index, episode, 0)..=(arena.index, episode, u16::MAX))
                .any(|(_, t)| !t.terminated);
            if rollouts.global && truncated {
                rollouts
                    .final_states
                    .entry((episode, arena.index))
                    .or_insert(state);
            }
            continue;
        }
        if !matches!(clock.phase, ArenaPhase::Running | ArenaPhase::Ending) {
            continue;
        }
        rollouts.slots = members.entities().len();
        if rollouts.global {
            let mut state = Vec::new();
            for &e in members.entities() {
                if let Ok(q) = agents.get(e) {
                    crate::policy::mlp::features(q.8, &mut row);
                    state.extend_from_slice(&row);
                }
            }
            rollouts
                .states
                .entry((clock.episode, arena.index))
                .or_default()
                .push(state);
        }
        let keep_features = rollouts.features;
        for &e in members.entities() {
            let Ok((agent, team, handle, trace, action, mask, reward, done, obs, role)) =
                agents.get(e)
            else {
                continue;
            };
            if *handle != policy {
                continue;
            }
            let mut encoded = crate::policy::mlp::Encoded::default();
            if keep_features {
                crate::policy::mlp::encode(obs, &mut encoded);
            }
            let traj = rollouts
                .open
                .entry((arena.index, clock.episode, agent.slot))
                .or_insert_with(|| Trajectory {
                    arena: arena.index,
                    episode: clock.episode,
                    slot: agent.slot,
                    team: team.0,
                    role: role.0,
                    ..Default::default()
                });
            traj.steps.push(Step {
                tokens: trace.tokens.clone(),
                encoded,
                legal: (0..n).map(|i| mask.allows(i as u8)).collect(),
                action: action.0,
                logprob: trace.logprob,
                value: trace.value.unwrap_or(0.0),
                reward: reward.0,
            });
            if clock.phase == ArenaPhase::Ending {
                traj.terminated = done.terminated;
            }
        }
    }
}

/// Notes every finished episode (after `RecordSystems::Finish`).
pub fn collect_episodes(mut rollouts: ResMut<Rollouts>, mut ended: MessageReader<EpisodeEnded>) {
    for e in ended.read() {
        rollouts.ended.insert((e.episode, e.arena), e.clone());
    }
}
