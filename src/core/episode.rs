//! The episode cycle of every arena: reset with fresh seeds, advance the clock, end the
//! episode (termination or truncation), report it, go idle when the budget is spent.

use bevy::prelude::*;

use super::*;

/// Sub-phases of [`SimSystems::Record`], chained.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordSystems {
    /// Returns accumulate, clocks advance, episodes that ended are marked `Ending`.
    Clock,
    /// Families fill [`EpisodeMetrics`] for `Ending` arenas.
    Summarize,
    /// [`EpisodeEnded`] messages are sent; arenas go to `PendingReset` or idle.
    Finish,
    /// Replays, logs and state hashes are written.
    Write,
}

/// Marks an arena, and its agents, that has used its whole episode budget.
#[derive(Component, Debug, Clone, Copy, Default)]
pub struct Idle;

/// Keeps an arena whose episode ended waiting (`PendingReset`, its last state still
/// observed) instead of starting the next episode: a controller outside the app decides
/// when it goes on (the Python vector env's next-step autoreset) by removing it.
#[derive(Component, Debug, Clone, Copy, Default)]
pub struct Hold;

/// Family hooks that add an arena's own state to the per-step [`StateHash`].
#[derive(Resource, Default)]
pub struct StateHashers(pub Vec<fn(&World, Entity, &mut StateHash)>);

/// Family hooks that draw an arena's map (tiles and objects) as one character per cell,
/// row-major, with its width; replays and viewers use them. A hook returns `None` for
/// arenas of other families.
#[derive(Resource, Default)]
pub struct MapDrawers(pub Vec<fn(&World, Entity) -> Option<(usize, Vec<char>)>>);

/// Per-agent cell marks a family adds to frames (vision cones, beams); see [`CellMarkers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellMark {
    /// A cell the agent sees.
    Sight,
    /// A cell its beam crossed.
    Beam,
    /// The agent itself was caught this step (hide-and-seek: a seeker sees this hider).
    Caught,
}

/// Family hooks that list the cells an agent lights this step: `(world, arena, agent)`.
/// A hook returns nothing for agents of other families.
#[derive(Resource, Default)]
pub struct CellMarkers(pub Vec<fn(&World, Entity, Entity) -> Vec<(CellMark, IVec2)>>);

/// Draws `arena`'s map with the first hook that knows its family.
pub fn draw_map(world: &World, arena: Entity) -> Option<(usize, Vec<char>)> {
    let drawers = world.get_resource::<MapDrawers>()?;
    drawers.0.iter().find_map(|d| d(world, arena))
}

/// Starts the next episode of every arena that is waiting for it (and not held by
/// [`Arenas::gate`]): fresh arena and agent streams from (seed, arena or its group, episode,
/// slot), zeroed returns and statistics.
pub fn reset_arenas(
    arenas_res: Res<Arenas>,
    mut arenas: Query<
        (
            &Arena,
            &mut EpisodeClock,
            &mut ArenaRng,
            &ArenaAgents,
            &mut EpisodeMetrics,
        ),
        (Without<Idle>, Without<Hold>),
    >,
    mut agents: Query<(
        &Agent,
        &mut AgentRng,
        &mut Reward,
        &mut EpisodeReturn,
        &mut Done,
        &mut AgentStats,
        &mut Action,
    )>,
) {
    for (arena, mut clock, mut rng, members, mut metrics) in &mut arenas {
        if clock.phase != ArenaPhase::PendingReset
            || arenas_res.gate.is_some_and(|g| clock.episode >= g)
        {
            continue;
        }
        clock.step = 0;
        clock.terminated = false;
        clock.phase = ArenaPhase::JustReset;
        rng.0 = stream_rng(
            arenas_res.seed,
            arenas_res.env_stream(arena.index),
            clock.episode,
            None,
        );
        metrics.0.clear();
        for &e in members.entities() {
            if let Ok((agent, mut arng, mut reward, mut ret, mut done, mut stats, mut action)) =
                agents.get_mut(e)
            {
                arng.0 = stream_rng(
                    arenas_res.seed,
                    arena.index,
                    clock.episode,
                    Some(u32::from(agent.slot)),
                );
                *reward = Reward::default();
                *ret = EpisodeReturn::default();
                *done = Done::default();
                *stats = AgentStats::default();
                *action = Action::default();
            }
        }
    }
}

/// Zeroes every live agent's step reward before actions are applied.
pub fn clear_rewards(mut agents: Query<&mut Reward, Without<Idle>>) {
    for mut r in &mut agents {
        r.0 = 0.0;
    }
}

/// Adds the step's rewards to returns and statistics, advances clocks, and marks arenas
/// whose episode ended (rules: `terminated`; limit: truncated) as `Ending`.
pub fn advance_clocks(
    mut progress: ResMut<RunProgress>,
    mut arenas: Query<(&mut EpisodeClock, &ArenaAgents), Without<Idle>>,
    mut agents: Query<(&Reward, &mut EpisodeReturn, &mut AgentStats, &mut Done)>,
) {
    progress.steps += 1;
    for (mut clock, members) in &mut arenas {
        if !clock.is_live() {
            continue;
        }
        let t = clock.step;
        clock.step += 1;
        let truncated = clock.step >= clock.max_steps && !clock.terminated;
        let ended = clock.terminated || truncated;
        progress.agent_steps += members.entities().len() as u64;
        for &e in members.entities() {
            if let Ok((reward, mut ret, mut stats, mut done)) = agents.get_mut(e) {
                ret.0 += reward.0;
                if reward.0 > 0.0 {
                    stats.rewarded_steps += 1;
                    stats.rewarded_time_sum += u64::from(t);
                }
                if ended {
                    done.terminated = clock.terminated;
                    done.truncated = truncated;
                }
            }
        }
        clock.phase = if ended {
            ArenaPhase::Ending
        } else {
            ArenaPhase::Running
        };
    }
}

/// Reports every `Ending` arena's episode and sends it to `PendingReset`, or to [`Idle`]
/// when its episode budget is spent.
pub fn finish_episodes(
    mut commands: Commands,
    scene: Res<SceneTeams>,
    arenas_res: Res<Arenas>,
    mut progress: ResMut<RunProgress>,
    mut ended: MessageWriter<EpisodeEnded>,
    mut arenas: Query<
        (
            Entity,
            &Arena,
            &mut EpisodeClock,
            &ArenaAgents,
            &EpisodeMetrics,
        ),
        Without<Idle>,
    >,
    agents: Query<(&Team, &EpisodeReturn)>,
) {
    for (entity, arena, mut clock, members, metrics) in &mut arenas {
        if clock.phase != ArenaPhase::Ending {
            continue;
        }
        let mut agent_returns = Vec::with_capacity(members.entities().len());
        let mut sums = vec![(0.0f64, 0u32); scene.0.len()];
        for &e in members.entities() {
            if let Ok((team, ret)) = agents.get(e) {
                agent_returns.push(ret.0);
                if let Some(s) = sums.get_mut(team.0 as usize) {
                    s.0 += f64::from(ret.0);
                    s.1 += 1;
                }
            }
        }
        let team_returns = sums
            .iter()
            .map(|&(s, n)| if n > 0 { s / f64::from(n) } else { 0.0 })
            .collect();
        ended.write(EpisodeEnded {
            arena: arena.index,
            episode: clock.episode,
            steps: clock.step,
            terminated: clock.terminated,
            agent_returns,
            team_returns,
            metrics: metrics.0.clone(),
        });
        progress.episodes += 1;
        clock.episode += 1;
        if arenas_res
            .episode_budget
            .is_some_and(|b| clock.episode >= b)
        {
            clock.phase = ArenaPhase::Idle;
            progress.idle_arenas += 1;
            commands.entity(entity).insert(Idle);
            for &e in members.entities() {
                commands.entity(e).insert(Idle);
            }
        } else {
            clock.phase = ArenaPhase::PendingReset;
        }
    }
}

/// The scene's team names, in order (for per-team reports).
#[derive(Resource, Debug, Clone, Default)]
pub struct SceneTeams(pub Vec<String>);

/// Hashes the whole simulated state at the end of the step: every arena in index order,
/// its clock, its agents in slot order, then the families' own state.
pub fn hash_state(world: &mut World) {
    let Some(mut hash) = world.remove_resource::<StateHash>() else {
        return;
    };
    hash.begin();
    let hashers = world
        .get_resource::<StateHashers>()
        .map(|h| h.0.clone())
        .unwrap_or_default();
    let arenas = world.resource::<Arenas>().entities.clone();
    for &a in &arenas {
        let Some(clock) = world.get::<EpisodeClock>(a) else {
            continue;
        };
        hash.write(&clock.episode.to_le_bytes());
        hash.write(&clock.step.to_le_bytes());
        hash.write(&[clock.phase as u8, u8::from(clock.terminated)]);
        if let Some(members) = world.get::<ArenaAgents>(a) {
            for &e in members.entities() {
                if let Some(action) = world.get::<Action>(e) {
                    hash.write(&[action.0]);
                }
                if let Some(r) = world.get::<Reward>(e) {
                    hash.write(&r.0.to_bits().to_le_bytes());
                }
                if let Some(r) = world.get::<EpisodeReturn>(e) {
                    hash.write(&r.0.to_bits().to_le_bytes());
                }
                if let Some(p) = world.get::<GridPos>(e) {
                    hash.write(&p.0.x.to_le_bytes());
                    hash.write(&p.0.y.to_le_bytes());
                }
                if let Some(f) = world.get::<Facing>(e) {
                    hash.write(&[f.0 as u8]);
                }
            }
        }
        for h in &hashers {
            h(world, a, &mut hash);
        }
    }
    hash.finish();
    world.insert_resource(hash);
}

/// Adds the core's systems and resources to [`SimSchedule`].
#[derive(Default)]
pub struct CorePlugin {
    /// Where the simulation runs from (see [`SimSchedulePlugin`]).
    pub schedule: SimSchedulePlugin,
}

impl Plugin for CorePlugin {
    fn build(&self, app: &mut App) {
        app.add_plugins(SimSchedulePlugin {
            parent: self.schedule.parent,
        })
        .add_message::<EpisodeEnded>()
        .init_resource::<Arenas>()
        .init_resource::<RunProgress>()
        .init_resource::<StateHashers>()
        .init_resource::<MapDrawers>()
        .init_resource::<CellMarkers>()
        .init_resource::<SceneTeams>()
        .configure_sets(
            SimSchedule,
            (
                RecordSystems::Clock,
                RecordSystems::Summarize,
                RecordSystems::Finish,
                RecordSystems::Write,
            )
                .chain()
                .in_set(SimSystems::Record),
        )
        .add_systems(SimSchedule, reset_arenas.in_set(SimSystems::Reset))
        .add_systems(
            SimSchedule,
            clear_rewards
                .in_set(SimSystems::Act)
                .before(ActSystems::Apply),
        )
        .configure_sets(SimSchedule, ActSystems::Apply.in_set(SimSystems::Act))
        .add_systems(SimSchedule, advance_clocks.in_set(RecordSystems::Clock))
        .add_systems(SimSchedule, finish_episodes.in_set(RecordSystems::Finish))
        .add_systems(
            SimSchedule,
            hash_state
                .in_set(RecordSystems::Write)
                .run_if(resource_exists::<StateHash>),
        );
    }
}

/// The set families put their action-applying systems in (after rewards are cleared).
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActSystems {
    /// Actions are applied.
    Apply,
}
