//! The simulation core: the step schedule, arenas, agents, actions, rewards and seeded RNG.
//!
//! Everything here is family-agnostic. Environment families add their systems to the
//! [`SimSystems`] sets of [`SimSchedule`] and keep their per-arena state in components on
//! the arena entity.

mod agent;
mod arena;
mod episode;
mod features;
mod grid;
mod hash;
mod rng;
mod schedule;

pub use agent::*;
pub use arena::*;
pub use episode::*;
pub use features::*;
pub use grid::*;
pub use hash::*;
pub use rng::*;
pub use schedule::*;
