//! Start cells of grid scenes: each team's own `TeamSpawn` cells, or the shared `Spawn` pool.

use rand::Rng;
use rand::seq::SliceRandom;

/// Where each team's agents may start.
#[derive(Debug, Clone, Default)]
pub struct SpawnCells {
    /// Per team: its own cells, row-major indices (empty: it uses `shared`).
    pub team_cells: Vec<Vec<u32>>,
    /// The shared `Spawn` cells.
    pub shared: Vec<u32>,
}

impl SpawnCells {
    /// The start cells of `scene`.
    pub fn from_scene(scene: &crate::scene::Scene) -> Self {
        Self {
            team_cells: scene
                .spawn_cells
                .iter()
                .map(|c| c.iter().map(|&i| i as u32).collect())
                .collect(),
            shared: scene.shared_spawns.iter().map(|&i| i as u32).collect(),
        }
    }

    /// The cells `team` may start on.
    pub fn candidates(&self, team: u8) -> &[u32] {
        match self.team_cells.get(usize::from(team)) {
            Some(own) if !own.is_empty() => own,
            _ => &self.shared,
        }
    }

    /// One start cell per slot (`slot_team[slot]` is its team), in slot order, distinct
    /// while the pool lasts; each pool is shuffled first with `rng` when `shuffle` is set.
    /// When a pool runs out, `wrap` starts it again from its first cell (families where
    /// agents may share cells); otherwise the slot gets `None` (validation prevents it).
    pub fn assign(
        &self,
        slot_team: &[u8],
        shuffle: bool,
        wrap: bool,
        rng: &mut impl Rng,
    ) -> Vec<Option<u32>> {
        let mut pools = self.team_cells.clone();
        let mut shared = self.shared.clone();
        if shuffle {
            pools.iter_mut().for_each(|p| p.shuffle(rng));
            shared.shuffle(rng);
        }
        let mut next = vec![0usize; pools.len()];
        let mut next_shared = 0usize;
        slot_team
            .iter()
            .map(|&team| {
                let team = usize::from(team);
                match pools.get(team) {
                    Some(own) if !own.is_empty() => {
                        next[team] += 1;
                        pick(own, next[team] - 1, wrap)
                    }
                    _ => {
                        next_shared += 1;
                        pick(&shared, next_shared - 1, wrap)
                    }
                }
            })
            .collect()
    }
}

fn pick(pool: &[u32], k: usize, wrap: bool) -> Option<u32> {
    if wrap && !pool.is_empty() {
        Some(pool[k % pool.len()])
    } else {
        pool.get(k).copied()
    }
}
