//! Clean Up (Melting Pot; Hughes et al. 2018).
//!
//! | | |
//! |---|---|
//! | agents | any number, each facing N/E/S/W |
//! | actions | `noop forward backward step_left step_right turn_left turn_right zap clean` (moves egocentric) |
//! | observation | egocentric window as in Commons Harvest; river `~`, dirt `#` |
//! | reward | `apple_reward` (+1) per apple eaten; `zap.cost` for firing |
//! | dynamics | from step `pollution_start` (50) on, each step one clean river cell turns dirty with probability `pollution_prob` (0.5); each empty orchard cell grows an apple with probability `apple_prob · max(0, 1 − d / depletion_threshold)` (0.05, 0.4), d the dirty fraction of the river |
//! | beams | `clean` turns every dirty cell within `clean_length` (3) cells ahead clean; `zap` as in Commons Harvest |
//! | map | river cells are walkable; walls stop beams |
//! | termination | none; truncation at `episode.max_steps` |
//! | metrics | social outcomes; apples eaten and left, cleans, cells cleaned, final dirt fraction, zaps |

use bevy::prelude::*;
use rand::Rng;

use super::codes::view;
use super::gridworld::DilemmaMap;
use super::params::CleanUpParams;
use crate::core::*;

/// Clean Up's pollution and growth rule for one arena.
#[derive(Component, Debug, Clone, Copy)]
pub struct RiverPollution {
    /// Per-step probability that one clean river cell turns dirty.
    pub pollution_prob: f32,
    /// First step of pollution.
    pub pollution_start: u32,
    /// Growth probability of an empty orchard cell with a clean river.
    pub apple_prob: f32,
    /// Dirty fraction at which growth stops.
    pub depletion_threshold: f32,
}

impl RiverPollution {
    /// The rule from scene parameters.
    pub fn new(p: &CleanUpParams) -> Self {
        Self {
            pollution_prob: p.pollution_prob,
            pollution_start: p.pollution_start,
            apple_prob: p.apple_prob,
            depletion_threshold: p.depletion_threshold,
        }
    }
    /// Growth probability for dirty fraction `d`.
    pub fn growth_prob(&self, d: f32) -> f32 {
        self.apple_prob * (1.0 - d / self.depletion_threshold).max(0.0)
    }
}

/// Pollutes the river, then grows apples by how clean it is.
pub fn pollute_and_grow(
    mut arenas: Query<
        (
            &EpisodeClock,
            &mut DilemmaMap,
            &RiverPollution,
            &mut ArenaRng,
        ),
        Without<Idle>,
    >,
) {
    arenas
        .par_iter_mut()
        .for_each(|(clock, mut map, rule, mut rng)| {
            if !clock.is_live() {
                return;
            }
            let map = &mut *map;
            let river_len = map.river.len() as u32;
            if clock.step >= rule.pollution_start
                && map.dirty < river_len
                && rng.0.random::<f32>() < rule.pollution_prob
            {
                // The k-th clean river cell, k uniform over the clean ones.
                let mut k = rng.0.random_range(0..river_len - map.dirty);
                for &i in map.river.iter() {
                    let i = i as usize;
                    if map.tiles.cells()[i] == view::RIVER {
                        if k == 0 {
                            map.tiles.cells_mut()[i] = view::DIRT;
                            map.dirty += 1;
                            break;
                        }
                        k -= 1;
                    }
                }
            }
            let d = if river_len == 0 {
                0.0
            } else {
                map.dirty as f32 / river_len as f32
            };
            let p = rule.growth_prob(d);
            if p <= 0.0 {
                return;
            }
            let (tiles, occ) = (map.tiles.cells_mut(), map.occ.cells());
            for &i in map.apple_sites.iter() {
                let i = i as usize;
                if tiles[i] == view::APPLE_SITE && occ[i] == 0 && rng.0.random::<f32>() < p {
                    tiles[i] = view::APPLE;
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_falls_linearly_to_zero_at_the_threshold() {
        let r = RiverPollution::new(&CleanUpParams::default());
        assert!((r.growth_prob(0.0) - 0.05).abs() < 1e-7);
        assert!((r.growth_prob(0.2) - 0.025).abs() < 1e-7);
        assert_eq!(r.growth_prob(0.4), 0.0);
        assert_eq!(r.growth_prob(0.9), 0.0);
    }
}
