//! The rollout buffer: every decision of the trained policy's agents, across all arenas,
//! filed by (arena, episode, agent), collected in `RecordSystems::Summarize` from what the
//! Decide and Reward steps left on the agents; finished episodes are noted from
//! [`EpisodeEnded`]. An iteration's batch is episode `k` of every arena.

use bevy::prelude::*;
use std::collections::BTreeMap;

use crate::core::{Action, Arena, Encoded, Features, GlobalView};
use crate::core::{
    ActionMask, Agent, ArenaAgents, ArenaPhase, DecisionTrace, Done, EpisodeClock, EpisodeEnded,
    Idle, PolicyHandle, Reward, Role, Team,
};
use crate::core::{RecordSystems, SimSchedule, SimSystems};

/// One decision.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Step {
    /// The prompt's token ids (a language model's decision).
    pub tokens: Vec<u32>,
    /// The observation as an `mlp` reads it (empty for a language model's decision).
    pub encoded: crate::policy::mlp::Encoded,
    /// With [`Rollouts::global`]: the family's true global state from this agent's side when
    /// it decided ([`crate::core::GlobalView`]) followed by its own observation: MAPPO's
    /// agent-specific state, which its critic reads.
    pub global: Encoded,
    /// Which actions were legal.
    pub legal: Vec<bool>,
    /// The chosen action.
    pub action: u8,
    /// Its log-probability when chosen.
    pub logprob: f32,
    /// Families with talk: the word choice that went with the action (0 silence, `k + 1`
    /// word `k`; [`crate::core::DecisionTrace::said`]), part of the decision.
    pub said: Option<u8>,
    /// Its log-probability when chosen.
    pub said_logprob: f32,
    /// The value estimate when chosen (0 without a value head).
    pub value: f32,
    /// The reward that followed.
    pub reward: f32,
    /// A policy with memory (`gru`): the state it decided from
    /// ([`crate::core::DecisionTrace::memory`]); empty for the others.
    #[serde(default)]
    pub memory: Vec<f32>,
    /// A language model with memory: how its context was read
    /// ([`crate::core::DecisionTrace::read`]).
    #[serde(default)]
    pub read: Option<crate::core::ContextRead>,
}

/// One agent's steps through one episode.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
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
    /// With [`Rollouts::global`], a truncated episode: the global state after its last step
    /// (MAPPO's critic bootstraps from its value).
    pub final_global: Option<Encoded>,
}

/// What a training run adds to the simulation: the rollout buffer of the learner's
/// decisions ([`Rollouts`], made when the app is finished, for the policy called `learner`
/// and the scene's actions) and the systems that fill it ([`collect_steps`] in
/// `RecordSystems::Summarize`, [`collect_episodes`] after the records are written); with
/// `global` (MAPPO) the families write each agent's true state for the critic
/// ([`crate::core::CentralState`]); with `global` or `features` (an `mlp` or `gru` learner)
/// each step's observations are encoded once ([`crate::core::EncodeFeatures`]).
pub struct TrainPlugin {
    /// The trained policy's name.
    pub learner: String,
    /// Keep every decision's global state (MAPPO's centralised critic).
    pub global: bool,
    /// Keep every decision's feature row (the learner reads features, not text).
    pub features: bool,
}

impl Plugin for TrainPlugin {
    fn build(&self, app: &mut App) {
        if self.global {
            app.insert_resource(crate::core::CentralState);
        }
        if self.features || self.global {
            app.insert_resource(crate::core::EncodeFeatures);
        }
        app.add_systems(
            SimSchedule,
            (
                collect_steps.in_set(RecordSystems::Summarize),
                collect_episodes
                    .in_set(SimSystems::Record)
                    .after(RecordSystems::Write),
            ),
        );
    }

    fn finish(&self, app: &mut App) {
        let world = app.world_mut();
        let actions = world
            .get_resource::<crate::envs::ActionNames>()
            .map_or(0, |a| a.0.len());
        let policy = world
            .get_resource_mut::<crate::policy::PolicyRegistry>()
            .and_then(|mut r| r.handle(&self.learner));
        world.insert_resource(Rollouts {
            policy,
            actions,
            global: self.global,
            features: self.features,
            ..Default::default()
        });
    }
}

/// The buffer, a resource.
#[derive(Resource, Debug, Default)]
pub struct Rollouts {
    /// The policy whose agents are collected.
    pub policy: Option<PolicyHandle>,
    /// Number of actions (the width of `legal`).
    pub actions: usize,
    /// Also keep the family's global state of every decision (MAPPO's centralised critic
    /// reads it; the run must insert [`crate::core::CentralState`] so that families write it).
    pub global: bool,
    /// Keep each decision's observation as an `mlp` reads it (the collected policy is one).
    pub features: bool,
    /// Agents per arena.
    pub slots: usize,
    open: BTreeMap<(u32, u32, u16), Trajectory>,
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

    /// Whether every arena of `arenas` has finished `episode`.
    pub fn complete(&self, episode: u32, arenas: std::ops::Range<u32>) -> bool {
        arenas
            .into_iter()
            .all(|a| self.ended.contains_key(&(episode, a)))
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
        &Features,
        &Role,
        &GlobalView,
    )>,
) {
    let Some(policy) = rollouts.policy else {
        return;
    };
    let n = rollouts.actions;
    let global = rollouts.global;
    for (arena, clock, members) in &arenas {
        if clock.phase == ArenaPhase::PendingReset && clock.episode > 0 {
            // An arena that ended its episode and waits for the update: this step observed
            // and valued the state after its last step. A truncated episode bootstraps from
            // that value (a terminated one from 0).
            let episode = clock.episode - 1;
            for &e in members.entities() {
                let Ok((agent, _, handle, trace, _, _, _, _, features, _, view)) = agents.get(e)
                else {
                    continue;
                };
                if *handle != policy {
                    continue;
                }
                if let Some(t) = rollouts.open.get_mut(&(arena.index, episode, agent.slot))
                    && !t.terminated
                    && t.bootstrap.is_none()
                {
                    t.bootstrap = Some(trace.value.unwrap_or(0.0));
                    if global {
                        t.final_global = Some(agent_state(view, &features.0));
                    }
                }
            }
            continue;
        }
        if !matches!(clock.phase, ArenaPhase::Running | ArenaPhase::Ending) {
            continue;
        }
        rollouts.slots = members.entities().len();
        let keep_features = rollouts.features;
        for &e in members.entities() {
            let Ok((agent, team, handle, trace, action, mask, reward, done, features, role, view)) =
                agents.get(e)
            else {
                continue;
            };
            if *handle != policy {
                continue;
            }
            // The observation as a network reads it, as this step encoded it (the run
            // inserted `EncodeFeatures`).
            let global_row = if global {
                agent_state(view, &features.0)
            } else {
                Encoded::default()
            };
            let encoded = if keep_features {
                features.0.clone()
            } else {
                Encoded::default()
            };
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
                global: global_row,
                legal: (0..n).map(|i| mask.allows(i as u8)).collect(),
                // DAgger: the teacher's label where the learner acted.
                action: trace.label.unwrap_or(action.0),
                logprob: trace.logprob,
                said: trace.said,
                said_logprob: trace.said_logprob,
                value: trace.value.unwrap_or(0.0),
                reward: reward.0,
                memory: trace.memory.clone(),
                read: trace.read,
            });
            if clock.phase == ArenaPhase::Ending {
                traj.terminated = done.terminated;
            }
        }
    }
}

/// MAPPO's agent-specific global state (Yu et al. 2022, "AS"): the family's global state
/// from the agent's side followed by the agent's own observation (what it knows and sees,
/// which the state alone does not say).
fn agent_state(view: &GlobalView, own: &Encoded) -> Encoded {
    if view.0.cells.is_empty() && view.0.dense.is_empty() {
        // The family wrote no state: the trainer refuses the batch rather than let the
        // critic read the agent's own view alone.
        return Encoded::default();
    }
    let mut out = view.0.clone();
    out.cells.extend_from_slice(&own.cells);
    out.dense.extend_from_slice(&own.dense);
    out
}

/// Notes every finished episode (after `RecordSystems::Write`, the end of the step).
pub fn collect_episodes(mut rollouts: ResMut<Rollouts>, mut ended: MessageReader<EpisodeEnded>) {
    for e in ended.read() {
        rollouts.ended.insert((e.episode, e.arena), e.clone());
    }
}
