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

use bevy::app::{App, Plugin, Update};
use bevy::ecs::schedule::{
    IntoScheduleConfigs, Schedule, ScheduleLabel, SingleThreadedExecutor, SystemSet,
};
use bevy::ecs::world::World;
use bevy::prelude::Resource;

/// The schedule that advances the simulation by one step.
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct SimSchedule;

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

/// Creates [`SimSchedule`] with its chained sets and runs it from `Update`.
#[derive(Default)]
pub struct SimSchedulePlugin;

impl Plugin for SimSchedulePlugin {
    fn build(&self, app: &mut App) {
        let mut schedule = Schedule::new(SimSchedule);
        schedule.set_executor(SingleThreadedExecutor::new());
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
        app.add_schedule(schedule)
            .init_resource::<SimSpeed>()
            .add_systems(Update, run_sim_schedule);
    }
}

/// Runs [`SimSchedule`] `SimSpeed::steps_per_update` times.
pub fn run_sim_schedule(world: &mut World) {
    let steps = world.resource::<SimSpeed>().steps_per_update;
    for _ in 0..steps {
        world.run_schedule(SimSchedule);
    }
}
