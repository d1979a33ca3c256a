//! The scripted policies, one file per family (and the maze planner's search): partners and
//! opponents that do not learn, baselines, and upper bounds.

mod grid;
mod hide_and_seek;
mod matrix;
mod maze;
mod maze_joint;
mod maze_planner;
mod random;

pub use grid::{Cleaner, FreeRider, GreedyHarvester, SustainableHarvester};
pub use hide_and_seek::{FortBuilder, Hider, Seeker};
pub use matrix::{AlwaysCooperate, AlwaysDefect, GrimTrigger, TitForTat};
pub use maze::{MazeExplorer, MazeFollower, MazeTalker, MazeWallFollower};
pub use maze_planner::MazePlanner;
pub use random::RandomPolicy;
