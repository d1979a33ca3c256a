//! Every family's part of an agent's observation, gathered for the layers above.
//!
//! The core's [`Observation`] holds what every family shares (a window, the map the agent
//! knows, its own place, the others it perceives). What only one family has is that
//! family's own component, written beside the observation in `SimSystems::Observe`:
//! [`MatrixSenses`] (the rounds played), [`GridSenses`] (the beam's cooldown),
//! [`HnsSenses`] (the preparation phase, holding) and [`MazeSenses`] (keys, words heard).
//! [`Senses`] borrows whichever of them an agent carries, [`SensesQuery`] fetches them in
//! a system, and [`encode`] turns the lot into a network's input.
//!
//! The one place outside their folders that names the five shipped families: their numbers
//! sit at fixed places of every feature row's header, which every trained `mlp` and `gru`
//! checkpoint reads (moving them into the families would change those networks' inputs). A
//! newer family, shipped or registered from outside the crate, writes its numbers into the
//! agent's [`ExtraFeatures`] instead, which [`encode`] appends to every row, and reads its own
//! component directly.

use bevy::ecs::query::QueryData;
use bevy::ecs::world::EntityRef;

use super::dilemma::gridworld::GridSenses;
use super::dilemma::matrix::MatrixSenses;
use super::hide_and_seek::HnsSenses;
use super::maze::{Heard, MazeSenses};
use bevy::prelude::{Query, Without};

use crate::core::{Encoded, Features, Idle, MAX_WORDS, Observation, push_one_hot};

/// Numbers a family registered from outside the crate adds to its agents' feature rows,
/// after every field [`encode`] writes (the family inserts it on its agents and writes it
/// in `SimSystems::Observe`; its length must depend only on the scene).
#[derive(bevy::prelude::Component, Debug, Clone, Default, PartialEq)]
pub struct ExtraFeatures(pub Vec<f32>);

/// The family parts of one agent's observation (`None` for the families it is not in).
#[derive(Debug, Clone, Copy, Default)]
pub struct Senses<'a> {
    /// Repeated matrix games.
    pub matrix: Option<&'a MatrixSenses>,
    /// Commons Harvest and Clean Up.
    pub grid: Option<&'a GridSenses>,
    /// Hide-and-seek.
    pub hide_and_seek: Option<&'a HnsSenses>,
    /// The maze.
    pub maze: Option<&'a MazeSenses>,
    /// A family from outside the crate.
    pub extra: Option<&'a ExtraFeatures>,
}

impl<'a> Senses<'a> {
    /// The senses `entity` carries.
    pub fn of(entity: EntityRef<'a>) -> Self {
        Self {
            matrix: entity.get(),
            grid: entity.get(),
            hide_and_seek: entity.get(),
            maze: entity.get(),
            extra: entity.get(),
        }
    }
    /// The rounds seen, oldest first (empty outside matrix games).
    pub fn history(&self) -> &'a [[u8; 2]] {
        self.matrix.map_or(&[], |m| m.history.as_slice())
    }
    /// How often the other player chose each action (zeros outside matrix games).
    pub fn other_counts(&self) -> [u32; 2] {
        self.matrix.map_or([0; 2], |m| m.other_counts)
    }
    /// Steps before the beam may fire again (0 outside the grid dilemmas).
    pub fn cooldown(&self) -> u16 {
        self.grid.map_or(0, |g| g.cooldown)
    }
    /// Steps of hide-and-seek's preparation phase left (0 elsewhere).
    pub fn prep_left(&self) -> u32 {
        self.hide_and_seek.map_or(0, |h| h.prep_left)
    }
    /// Whether the agent holds an object (hide-and-seek).
    pub fn holding(&self) -> bool {
        self.hide_and_seek.is_some_and(|h| h.holding)
    }
    /// Hide-and-seek's entity list as numbers (empty unless the scene asks for it).
    pub fn entities(&self) -> &'a [f32] {
        self.hide_and_seek.map_or(&[], |h| h.entities.as_slice())
    }
    /// Keys carried, one bit per colour (maze).
    pub fn keys(&self) -> u32 {
        self.maze.map_or(0, |m| m.keys)
    }
    /// Words heard from teammates (maze).
    pub fn heard(&self) -> &'a [Heard] {
        self.maze.map_or(&[], |m| m.heard.as_slice())
    }
}

/// Fetches an agent's [`Senses`] in a system's query.
#[derive(QueryData)]
pub struct SensesQuery {
    matrix: Option<&'static MatrixSenses>,
    grid: Option<&'static GridSenses>,
    hide_and_seek: Option<&'static HnsSenses>,
    maze: Option<&'static MazeSenses>,
    extra: Option<&'static ExtraFeatures>,
}

impl<'w> SensesQueryItem<'w, '_> {
    /// The senses fetched.
    pub fn get(&self) -> Senses<'w> {
        Senses {
            matrix: self.matrix,
            grid: self.grid,
            hide_and_seek: self.hide_and_seek,
            maze: self.maze,
            extra: self.extra,
        }
    }
}

/// Room for the header fields [`encode`] writes (69 of them today, before an entity list).
const DENSE_CAPACITY: usize = 80;

/// Fills `out` with the cells of `obs` and the header fields of `obs` and `senses`. The
/// lengths depend only on the scene.
pub fn encode(obs: &Observation, senses: Senses<'_>, out: &mut Encoded) {
    out.cells.clear();
    out.cells
        .extend(obs.view.iter().chain(&obs.map).map(|&c| c & 0x0f));
    let d = &mut out.dense;
    d.clear();
    // One allocation for a new row (the header's length is fixed), none for a reused one.
    d.reserve(DENSE_CAPACITY + senses.entities().len() + senses.extra.map_or(0, |e| e.0.len()));
    d.push(obs.step as f32 / 1000.0);
    d.push(f32::from(senses.cooldown()) / 10.0);
    d.push(f32::from(u8::from(obs.removed)));
    d.push(senses.prep_left() as f32 / 100.0);
    d.push(f32::from(u8::from(senses.holding())));
    push_one_hot(d, usize::from(obs.facing), 4);
    let keys = senses.keys();
    d.extend((0..8).map(|k| ((keys >> k) & 1) as f32));
    push_one_hot(d, usize::from(obs.team).min(3), 4);
    d.push(obs.others.len() as f32 / 4.0);
    let heard = senses.heard();
    d.push(heard.len() as f32 / 4.0);
    // Talk: which vocabulary words were heard this step (a scene has at most 32).
    d.extend(
        (0..MAX_WORDS).map(|k| f32::from(u8::from(heard.iter().any(|h| usize::from(h.word) == k)))),
    );
    // Repeated games: the last three rounds, one-hot, newest first, and the other's counts.
    let history = senses.history();
    for k in 0..3 {
        match history.iter().rev().nth(k) {
            Some(h) => d.extend(
                [h[0] == 0, h[0] == 1, h[1] == 0, h[1] == 1].map(|b| f32::from(u8::from(b))),
            ),
            None => d.extend([0.0; 4]),
        }
    }
    let counts = senses.other_counts();
    let total = (counts[0] + counts[1]).max(1) as f32;
    d.extend(counts.map(|c| c as f32 / total));
    // Hide-and-seek's entity list, where the scene asks for it.
    d.extend_from_slice(senses.entities());
    // A family from outside the crate: its own numbers.
    if let Some(extra) = senses.extra {
        d.extend_from_slice(&extra.0);
    }
}

/// Encodes every active agent's observation into its [`Features`], once per step
/// (`SimSystems::Encode`, while [`crate::core::EncodeFeatures`] is present). The buffers are
/// reused: after the first step no allocation.
pub fn encode_features(
    mut agents: Query<(&Observation, SensesQuery, &mut Features), Without<Idle>>,
) {
    for (obs, senses, mut features) in &mut agents {
        encode(obs, senses.get(), &mut features.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_familys_extra_features_end_every_row_and_change_nothing_before_them() {
        let obs = Observation {
            step: 7,
            view: vec![1, 2, 3],
            view_width: 3,
            view_height: 1,
            ..Default::default()
        };
        let (mut plain, mut extra) = (Encoded::default(), Encoded::default());
        encode(&obs, Senses::default(), &mut plain);
        let numbers = ExtraFeatures(vec![0.25, -1.0, 3.0]);
        let senses = Senses {
            extra: Some(&numbers),
            ..Default::default()
        };
        encode(&obs, senses, &mut extra);
        assert_eq!(extra.cells, plain.cells);
        assert_eq!(extra.dense.len(), plain.dense.len() + 3);
        assert_eq!(extra.dense[..plain.dense.len()], plain.dense[..]);
        assert_eq!(extra.dense[plain.dense.len()..], [0.25, -1.0, 3.0]);
    }
}
