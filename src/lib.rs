//! # emergence
//!
//! Language-model agents as entities in Bevy ECS multi-agent environments, improved by
//! multi-agent reinforcement fine-tuning. This crate holds the simulation core ([`core`]),
//! RON scenes as data ([`scene`]), environment families ([`envs`]), observations as text
//! ([`observe`]), policies ([`policy`]), loading a scene against them ([`load`]), metrics
//! ([`metrics`]), the frames the viewer draws and replays store ([`frames`]), the plugin
//! groups ([`sim`]), the headless runner ([`headless`]), training ([`train`]), experiments
//! ([`experiment`]) and, with the `gui` feature, the window (`gui`). `tests/suite/layering.rs`
//! holds the order of the layers: each module imports only those below it.
//!
//! [`SimPlugins`] is everything a simulation needs, headless or in a window; swap any piece
//! with Bevy's `PluginGroupBuilder` API.

pub mod core;
pub mod envs;
pub mod experiment;
pub mod frames;
#[cfg(feature = "gui")]
pub mod gui;
pub mod headless;
pub mod load;
pub mod metrics;
pub mod observe;
pub mod outputs;
pub mod policy;
pub mod scene;
pub mod sim;
pub mod train;

pub use sim::{RecordPlugin, SimPlugins};

/// The names most users need.
pub mod prelude {
    pub use crate::SimPlugins;
    pub use crate::core::*;
    pub use crate::envs::ActionNames;
    pub use crate::headless::{RunConfig, RunReport, run};
    pub use crate::load::{load_scene, parse_scene};
    pub use crate::policy::{Decision, Policy, PolicyRegistry, spawn_arenas};
    pub use crate::scene::{Scene, SceneError};
}
