//! Social dilemmas: repeated matrix games ([`matrix`]), Commons Harvest ([`commons`]) and
//! Clean Up ([`cleanup`]), with the grid mechanics the last two share ([`gridworld`]).
//! Each module's header documents agents, actions, observation, rewards, termination and
//! parameters. [`DilemmaPlugin`] adds every system; each runs only on arenas that carry
//! its family's components.

mod check;
pub mod cleanup;
mod codes;
pub mod commons;
pub mod family;
pub mod gridworld;
pub mod matrix;
pub mod params;
pub mod text;

pub use codes::{GRID_ACTIONS, act, view};
pub use params::{CleanUpParams, HarvestParams, MatrixParams, ViewSpec, ZapSpec};

use bevy::prelude::*;

use crate::core::*;

/// The social-dilemma family.
#[derive(Default)]
pub struct DilemmaPlugin;

impl Plugin for DilemmaPlugin {
    fn build(&self, app: &mut App) {
        add_family_systems(
            app,
            "matrix",
            (
                matrix::reset_matrix_games
                    .in_set(SimSystems::Reset)
                    .after(reset_arenas),
                matrix::observe_matrix_games.in_set(SimSystems::Observe),
                matrix::state_matrix_games
                    .in_set(SimSystems::Encode)
                    .run_if(resource_exists::<CentralState>),
                matrix::play_matrix_rounds.in_set(ActSystems::Apply),
                matrix::summarize_matrix_games.in_set(RecordSystems::Summarize),
            ),
        );
        // Commons Harvest and Clean Up share the grid's systems and differ in their rules.
        add_family_systems(
            app,
            "grid_dilemma",
            (
                gridworld::reset_grid_dilemmas
                    .in_set(SimSystems::Reset)
                    .after(reset_arenas),
                gridworld::observe_grid_dilemmas.in_set(SimSystems::Observe),
                gridworld::state_grid_dilemmas
                    .in_set(SimSystems::Encode)
                    .run_if(resource_exists::<CentralState>),
                gridworld::apply_grid_actions.in_set(ActSystems::Apply),
                gridworld::summarize_grid_dilemmas.in_set(RecordSystems::Summarize),
            ),
        );
        run_family_while::<matrix::MatrixGame>(app, "matrix");
        run_family_while::<gridworld::DilemmaMap>(app, "grid_dilemma");
        add_family_systems(
            app,
            "commons_harvest",
            commons::regrow_apples.in_set(SimSystems::Rules),
        );
        add_family_systems(
            app,
            "clean_up",
            cleanup::pollute_and_grow.in_set(SimSystems::Rules),
        );
        app.add_systems(
            GlobalStateSchedule,
            (matrix::state_matrix_games, gridworld::state_grid_dilemmas),
        );
        let mut hashers = app.world_mut().get_resource_or_init::<StateHashers>();
        hashers.0.push(matrix::hash_matrix_game);
        hashers.0.push(gridworld::hash_grid_dilemma);
        let mut drawers = app.world_mut().get_resource_or_init::<MapDrawers>();
        drawers.0.push(gridworld::draw_grid_dilemma);
        let mut markers = app.world_mut().get_resource_or_init::<CellMarkers>();
        markers.0.push(gridworld::beam_marks);
    }
}
