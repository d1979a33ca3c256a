//! # emergence
//!
//! Language-model agents as entities in Bevy ECS multi-agent environments, improved by
//! multi-agent reinforcement fine-tuning. This crate holds the simulation core
//! ([`core`]), RON scenes ([`scene`]), environment families ([`envs`]), policies
//! ([`policy`]), metrics ([`metrics`]), replays ([`replay`]), the frames the viewer draws
//! ([`inspect`]), the headless runner ([`headless`]) and, with the `gui` feature, the
//! window (`gui`).
//!
//! [`SimPlugins`] is everything a simulation needs, headless or in a window; swap any piece
//! with Bevy's `PluginGroupBuilder` API.

pub mod alloc;
pub mod core;
pub mod envs;
pub mod experiment;
#[cfg(feature = "gui")]
pub mod gui;
pub mod headless;
pub mod inspect;
pub mod metrics;
pub mod outputs;
pub mod policy;
pub mod replay;
pub mod scene;
pub mod train;

use bevy::app::{App, Plugin, PluginGroup, PluginGroupBuilder};
use bevy::ecs::schedule::IntoScheduleConfigs;

/// Episode logs and replays, written in `RecordSystems::Write`.
#[derive(Default)]
pub struct RecordPlugin;

impl Plugin for RecordPlugin {
    fn build(&self, app: &mut App) {
        use bevy::ecs::schedule::common_conditions::resource_exists;
        app.init_resource::<metrics::EpisodeLog>().add_systems(
            core::SimSchedule,
            (
                metrics::log_episodes.before(core::hash_state),
                replay::record_replay
                    .run_if(resource_exists::<replay::Recorder>)
                    .after(core::hash_state),
                inspect::tap_frames
                    .run_if(resource_exists::<inspect::TapSink>)
                    .after(core::hash_state),
            )
                .in_set(core::RecordSystems::Write),
        );
    }
}

/// The simulation: core schedule, policies, every environment family, records.
pub struct SimPlugins;

impl PluginGroup for SimPlugins {
    fn build(self) -> PluginGroupBuilder {
        PluginGroupBuilder::start::<Self>()
            .add(core::CorePlugin)
            .add(policy::PolicyPlugin)
            .add(envs::dilemma::DilemmaPlugin)
            .add(envs::hide_and_seek::HideAndSeekPlugin)
            .add(envs::maze::MazePlugin)
            .add(RecordPlugin)
    }
}

/// The names most users need.
pub mod prelude {
    pub use crate::SimPlugins;
    pub use crate::core::*;
    pub use crate::envs::{ActionNames, spawn_arenas};
    pub use crate::headless::{RunConfig, RunReport, run};
    pub use crate::policy::{Decision, Policy, PolicyRegistry};
    pub use crate::scene::{Scene, SceneError, load_scene, parse_scene};
}
