//! The simulation as plugins: [`SimPlugins`] is everything a simulation needs, headless or
//! in a window (the core schedule, the policies, every environment family, the records);
//! swap any piece with Bevy's `PluginGroupBuilder` API.

use bevy::app::{App, Plugin, PluginGroup, PluginGroupBuilder};
use bevy::ecs::schedule::IntoScheduleConfigs;

/// Episode logs and replays, written in `RecordSystems::Write`.
#[derive(Default)]
pub struct RecordPlugin;

impl Plugin for RecordPlugin {
    fn build(&self, app: &mut App) {
        use bevy::ecs::schedule::common_conditions::resource_exists;
        app.init_resource::<crate::metrics::EpisodeLog>()
            .add_systems(
                crate::core::SimSchedule,
                (
                    crate::metrics::log_episodes.before(crate::core::hash_state),
                    crate::frames::record_replay
                        .run_if(resource_exists::<crate::frames::Recorder>)
                        .after(crate::core::hash_state),
                    crate::frames::tap_frames
                        .run_if(resource_exists::<crate::frames::TapSink>)
                        .after(crate::frames::record_replay),
                )
                    .in_set(crate::core::RecordSystems::Write),
            );
    }
}

/// The systems of every family, shipped ([`crate::envs::family::shipped`]) and registered from
/// outside the crate by the time the app is built ([`crate::envs::family::register`]): each
/// family's [`crate::envs::family::Family::build`], in the order of
/// [`crate::envs::family::all`].
#[derive(Default)]
pub struct FamiliesPlugin;

impl Plugin for FamiliesPlugin {
    fn build(&self, app: &mut App) {
        for family in crate::envs::family::all() {
            family.build(app);
        }
    }
}

/// The simulation: core schedule, policies, every environment family (those registered from
/// outside the crate too: [`FamiliesPlugin`]), records.
pub struct SimPlugins;

impl PluginGroup for SimPlugins {
    fn build(self) -> PluginGroupBuilder {
        PluginGroupBuilder::start::<Self>()
            .add(crate::core::CorePlugin::default())
            .add(crate::policy::PolicyPlugin)
            .add(FamiliesPlugin)
            .add(RecordPlugin)
    }
}
