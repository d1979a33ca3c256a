//! [`SimSchedule`]: the one schedule that advances every arena by one step.
//!
//! Its sets run chained, in this order, headless or in a window:
//!
//! | set | job |
//! |---|---|
//! | [`SimSystems::Reset`] | arenas whose episode ended start the next one (fresh seeds, fresh map) |
//! | [`SimSystems::Observe`] | each family writes every agent's [`Observation`](crate::core::Observation) |
//! | [`SimSystems::Encode`] | observations become model inputs (token ids, feature rows) |
//! | [`SimSystems::Decide`] | every policy answers all its agents, across all arenas, at once |
//! | [`SimSystems::Act`] | actions change the world: moves, turns, beams |
//! | [`SimSystems::Rules`] | the world's own dynamics: regrowth, pollution, timeouts |
//! | [`SimSystems::Reward`] | rewards of the step, episode statistics |
//! | [`SimSystems::Record`] | clocks advance, episodes end, metrics and replays are written |
//!
//! The schedule uses the single-threaded executor: the order of systems is fixed and cheap to
//! run. Parallelism comes from inside systems, over independent arenas (`par_iter_mut`), so
//! a seed gives the same trajectory on any number of threads.
//!
//! Ambiguity detection is on, as an error: two systems that touch the same data must be
//! ordered (or declared independent, as the families are of each other: each acts only on
//! the arenas that carry its components), so a new system cannot quietly depend on the
//! executor's choice of order. The schedule runs from a parent schedule of the app's choice
//! (`Update` by default; a game may prefer `FixedUpdate`).

use bevy::app::{App, Plugin, Update};
use bevy::ecs::component::Component;
use bevy::ecs::schedule::common_conditions::any_with_component;
use bevy::ecs::schedule::{
    InternedScheduleLabel, IntoScheduleConfigs, LogLevel, Schedule, ScheduleBuildSettings,
    ScheduleLabel, SingleThreadedExecutor, SystemSet,
};
use bevy::ecs::system::ScheduleSystem;
use bevy::ecs::world::World;
use bevy::prelude::{Res, Resource};

/// The schedule that advances the simulation by one step.
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct SimSchedule;

/// The families' global-state systems alone: running it writes every agent's
/// [`GlobalView`](super::GlobalView) for the current step. For a controller that reads the
/// global state now and then (the Python parallel env's `state()`) instead of every step:
/// while [`CentralState`](super::CentralState) is present the same systems run in
/// [`SimSystems::Encode`] of every step. A family adds its state system to both.
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct GlobalStateSchedule;

/// The chained phases of one simulation step; see the module docs.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimSystems {
    /// Arenas whose episode ended start the next one.
    Reset,
    /// Families write observations.
    Observe,
    /// Observations become model inputs.
    Encode,
    /// Policies choose actions.
    Decide,
    /// Actions are applied.
    Act,
    /// The world's own dynamics.
    Rules,
    /// Rewards and statistics.
    Reward,
    /// Clocks, episode ends, metrics and replays.
    Record,
}

/// The systems of one environment family (by name). A family acts only on the arenas and
/// agents that carry its components, so two families' systems never touch the same
/// entities: [`add_family_systems`] declares each family's set independent of the others'.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FamilySystems(pub &'static str);

/// The families whose sets are declared so far.
#[derive(Resource, Default)]
struct FamilySets(Vec<&'static str>);

/// Adds `systems` to [`SimSchedule`] in `family`'s [`FamilySystems`] set, independent of
/// every other family's set (their relative order is free; within the family and against
/// the core, ambiguity detection still holds).
pub fn add_family_systems<M>(
    app: &mut App,
    family: &'static str,
    systems: impl IntoScheduleConfigs<ScheduleSystem, M>,
) {
    app.add_systems(SimSchedule, systems.in_set(FamilySystems(family)));
    let known = app
        .world_mut()
        .get_resource_or_init::<FamilySets>()
        .0
        .clone();
    if !known.contains(&family) {
        for other in known {
            app.configure_sets(
                SimSchedule,
                FamilySystems(family).ambiguous_with(FamilySystems(other)),
            );
        }
        app.world_mut().resource_mut::<FamilySets>().0.push(family);
    }
}

/// Runs `family`'s set (declared with [`add_family_systems`]) only while some entity
/// carries `C`, the family's arena component. A world without the family's arenas then
/// skips its systems for one check per step instead of running each (to find nothing):
/// every family's plugin is in [`SimPlugins`](crate::SimPlugins), so a world of one scene
/// would otherwise run the other families' systems too, the larger part of a one-arena
/// step's schedule cost. For a family of several systems; a lone system is as cheap as the
/// check.
pub fn run_family_while<C: Component>(app: &mut App, family: &'static str) {
    assert!(
        app.world()
            .get_resource::<FamilySets>()
            .is_some_and(|known| known.0.contains(&family)),
        "run_family_while: no family set {family:?} (add its systems with add_family_systems first)"
    );
    app.configure_sets(
        SimSchedule,
        FamilySystems(family).run_if(any_with_component::<C>),
    );
}

/// Which part of a step [`SimSchedule`] runs. A run inside the app runs whole steps; a
/// controller outside it that must read the observations before it acts (the Python
/// bindings) runs a step in two calls: the part that applies the actions and ends the step
/// (`Decide` to `Record`), then the part that starts the next one (`Reset` to `Encode`),
/// and reads the observations in between. The systems and their order are the same.
#[derive(Resource, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepPart {
    /// Every set (also the meaning when the resource is absent).
    #[default]
    Whole,
    /// `Reset`, `Observe`, `Encode`: up to the observations.
    Observe,
    /// `Decide` to `Record`: from the decisions to the end of the step.
    Act,
}

fn observe_part(part: Option<Res<StepPart>>) -> bool {
    part.is_none_or(|p| *p != StepPart::Act)
}

fn act_part(part: Option<Res<StepPart>>) -> bool {
    part.is_none_or(|p| *p != StepPart::Observe)
}

/// How many simulation steps each frame of the [`App`] runs (`Update` drives the schedule).
#[derive(Resource, Debug, Clone, Copy)]
pub struct SimSpeed {
    /// Steps per `App::update`; 0 pauses the simulation.
    pub steps_per_update: u32,
}

impl Default for SimSpeed {
    fn default() -> Self {
        Self {
            steps_per_update: 1,
        }
    }
}

/// Creates [`SimSchedule`] with its chained sets and runs it from `parent`.
pub struct SimSchedulePlugin {
    /// The schedule that runs [`SimSchedule`] `SimSpeed::steps_per_update` times.
    pub parent: InternedScheduleLabel,
}

impl Default for SimSchedulePlugin {
    fn default() -> Self {
        Self {
            parent: Update.intern(),
        }
    }
}

impl Plugin for SimSchedulePlugin {
    fn build(&self, app: &mut App) {
        let mut schedule = Schedule::new(SimSchedule);
        schedule.set_executor(SingleThreadedExecutor::new());
        schedule.set_build_settings(ScheduleBuildSettings {
            ambiguity_detection: LogLevel::Error,
            ..Default::default()
        });
        schedule.configure_sets(
            (
                SimSystems::Reset,
                SimSystems::Observe,
                SimSystems::Encode,
                SimSystems::Decide,
                SimSystems::Act,
                SimSystems::Rules,
                SimSystems::Reward,
                SimSystems::Record,
            )
                .chain(),
        );
        schedule.configure_sets(
            (SimSystems::Reset, SimSystems::Observe, SimSystems::Encode).run_if(observe_part),
        );
        schedule.configure_sets(
            (
                SimSystems::Decide,
                SimSystems::Act,
                SimSystems::Rules,
                SimSystems::Reward,
                SimSystems::Record,
            )
                .run_if(act_part),
        );
        let mut state = Schedule::new(GlobalStateSchedule);
        state.set_executor(SingleThreadedExecutor::new());
        app.add_schedule(schedule)
            .add_schedule(state)
            .init_resource::<SimSpeed>()
            .add_systems(self.parent, run_sim_schedule);
    }
}

/// Runs [`SimSchedule`] `SimSpeed::steps_per_update` times.
pub fn run_sim_schedule(world: &mut World) {
    let steps = world.resource::<SimSpeed>().steps_per_update;
    for _ in 0..steps {
        world.run_schedule(SimSchedule);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bevy::prelude::ResMut;

    #[derive(Component)]
    struct Marker;

    #[derive(Resource, Default)]
    struct Runs(u32);

    fn count(mut runs: ResMut<Runs>) {
        runs.0 += 1;
    }

    #[test]
    fn a_family_runs_only_while_an_entity_carries_its_component() {
        let mut app = App::new();
        app.add_plugins(SimSchedulePlugin::default())
            .init_resource::<Runs>();
        add_family_systems(&mut app, "marked", count.in_set(SimSystems::Rules));
        add_family_systems(&mut app, "always", count.in_set(SimSystems::Reward));
        run_family_while::<Marker>(&mut app, "marked");
        let world = app.world_mut();
        world.run_schedule(SimSchedule);
        assert_eq!(
            world.resource::<Runs>().0,
            1,
            "only the unconditioned family ran"
        );
        let e = world.spawn(Marker).id();
        world.run_schedule(SimSchedule);
        assert_eq!(world.resource::<Runs>().0, 3, "both families ran");
        world.despawn(e);
        world.run_schedule(SimSchedule);
        assert_eq!(world.resource::<Runs>().0, 4, "the marked family stopped");
    }

    #[test]
    #[should_panic(expected = "no family set \"unknown\"")]
    fn a_condition_on_a_family_never_declared_is_refused() {
        let mut app = App::new();
        app.add_plugins(SimSchedulePlugin::default());
        run_family_while::<Marker>(&mut app, "unknown");
    }
}
