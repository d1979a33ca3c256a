//! The Coin Game (Lerer & Peysakhovich 2017; Foerster et al., LOLA, 2018; JaxMARL's
//! `coin_game`) as an emergence family defined outside the emergence crate: only its public
//! API is used. Two players, red (slot 0) and blue (slot 1), walk a small grid with one red
//! and one blue coin on it. Whoever steps on a coin gets `pick_reward`; a coin of the other
//! player's colour also costs that player `penalty`. A taken coin reappears at once on a free
//! cell. Taking only your own coins is the cooperative strategy; taking every coin, the
//! selfish one (everyone then loses: 1 - 2 per coin taken from you).
//!
//! | | |
//! |---|---|
//! | agents | exactly 2 (slot 0 red, slot 1 blue) |
//! | actions | `stay`, `north`, `east`, `south`, `west` (into a wall: stay) |
//! | observation | the whole map, allocentric: floor, wall, me, the other, my coin, the other's coin; for networks also where my coin, the other's coin and the other player lie from me (`ExtraFeatures`: x and y offsets over the map's size) |
//! | reward | `pick_reward` for any coin taken; `-penalty` to the owner of a coin the other took |
//! | termination | none: `episode.max_steps` truncates |
//! | metrics | `coins` (taken per episode), `own_coin_rate` (share taken by their owner), `stolen` (coins taken from the other) |
//!
//! The moves of a step are applied in an order drawn from the arena's stream, so a seed
//! gives the same game on any thread count.

use bevy::prelude::*;
use emergence::core::*;
use emergence::envs::family::{Family, Spawner};
use emergence::envs::senses::ExtraFeatures;
use emergence::envs::text::{FamilyText, TextInput, reward_words, rows};
use emergence::scene::{
    Ctx, FamilyRules, ParamsParser, Scene, SceneError, SceneSpec, Thing, parser_of,
};
use rand::Rng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::sync::Arc;

/// The family's parameters: `family: CoinGame(pick_reward: 1.0, penalty: 2.0)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoinParams {
    /// Paid to whoever takes a coin, of either colour.
    pub pick_reward: f32,
    /// Charged to a coin's owner when the other player takes it.
    pub penalty: f32,
}

impl Default for CoinParams {
    fn default() -> Self {
        Self {
            pick_reward: 1.0,
            penalty: 2.0,
        }
    }
}

/// The action words.
pub const ACTIONS: [&str; 5] = ["stay", "north", "east", "south", "west"];

/// Cell codes of the observation (and the characters its text writes for them).
pub mod code {
    /// Floor.
    pub const FLOOR: u8 = 0;
    /// Wall.
    pub const WALL: u8 = 1;
    /// The observer.
    pub const ME: u8 = 2;
    /// The other player.
    pub const OTHER: u8 = 3;
    /// A coin of the observer's colour.
    pub const MY_COIN: u8 = 4;
    /// A coin of the other's colour.
    pub const THEIR_COIN: u8 = 5;
    /// One character per code.
    pub const CHARS: [char; 6] = ['.', '#', '@', 'O', 'm', 't'];
}

/// The family's descriptor: registered once with `emergence::envs::family::register`.
pub struct CoinGame;

/// What the scene reader asks of the family: its name, its parameters and their ranges.
impl FamilyRules for CoinGame {
    fn name(&self) -> &'static str {
        "CoinGame"
    }
    fn params(&self) -> ParamsParser {
        parser_of::<CoinParams>
    }
    fn check_params(&self, cx: &Ctx<'_>, spec: &SceneSpec) -> Result<(), SceneError> {
        let p = spec
            .family
            .params::<CoinParams>()
            .cloned()
            .unwrap_or_default();
        for (field, v) in [("pick_reward", p.pick_reward), ("penalty", p.penalty)] {
            if !(v.is_finite() && (0.0..=100.0).contains(&v)) {
                return Err(cx.param_error(field, format!("{field} is {v}"), "0 to 100"));
            }
        }
        Ok(())
    }
}

impl Family for CoinGame {
    fn about(&self) -> &'static str {
        "the Coin Game (LOLA): take your own coin, or the other's at their cost"
    }
    fn actions(&self, _scene: &Scene) -> Vec<String> {
        ACTIONS.iter().map(|s| s.to_string()).collect()
    }
    fn check(&self, cx: &Ctx<'_>, scene: &Scene) -> Result<(), SceneError> {
        if scene.agent_count() != 2 {
            return Err(cx.param_error(
                "",
                format!("the Coin Game has {} players", scene.agent_count()),
                "exactly 2 agents (red and blue)",
            ));
        }
        let free = scene
            .cells
            .iter()
            .filter(|t| !matches!(t, Thing::Wall))
            .count();
        if free < 4 {
            return Err(cx.param_error(
                "",
                format!("the map has {free} free cells"),
                "at least 4 (two players, two coins)",
            ));
        }
        Ok(())
    }
    fn spawner(&self, scene: &Scene) -> Box<dyn Spawner> {
        Box::new(CoinSpawner(CoinArena::new(scene)))
    }
    fn tile_colour(&self, c: char) -> Option<[u8; 3]> {
        match c {
            'r' => Some([120, 45, 45]),
            'b' => Some([45, 60, 125]),
            _ => None,
        }
    }
    fn build(&self, app: &mut App) {
        add_family_systems(
            app,
            "coin_game",
            (
                reset_coins.in_set(SimSystems::Reset).after(reset_arenas),
                observe_coins.in_set(SimSystems::Observe),
                move_and_collect.in_set(ActSystems::Apply),
                summarize_coins.in_set(RecordSystems::Summarize),
            ),
        );
        run_family_while::<CoinArena>(app, "coin_game");
        app.world_mut()
            .get_resource_or_init::<StateHashers>()
            .0
            .push(hash_coins);
        app.world_mut()
            .get_resource_or_init::<MapDrawers>()
            .0
            .push(draw_coins);
    }
    fn text(&self, _scene: &Scene) -> Option<Arc<dyn FamilyText>> {
        Some(Arc::new(CoinText))
    }
    fn words(&self, _scene: Option<&Scene>) -> Vec<String> {
        [
            "coin", "their", "m", "t", "O", "legend", "steps", "#", "@", ".",
        ]
        .map(String::from)
        .to_vec()
    }
}

/// What a player reads: its role and step, the map, the last reward; in the compact style
/// the legend and the episode's length come first, once for a whole batch.
struct CoinText;

impl FamilyText for CoinText {
    fn preamble(&self, max_steps: u32) -> String {
        format!("{LEGEND}\nsteps {max_steps}\n")
    }
    fn write(&self, t: &TextInput<'_>, s: &mut String) {
        if t.compact() {
            let _ = writeln!(s, "{} step {}", t.role, t.obs.step);
        } else {
            let _ = writeln!(
                s,
                "role {} step {} of {}\n{LEGEND}",
                t.role, t.obs.step, t.max_steps
            );
        }
        rows(s, t.obs, &code::CHARS);
        let words = if t.compact() { "reward" } else { "last reward" };
        reward_words(s, words, t.last_reward);
    }
}

const LEGEND: &str = "legend @ you O other # wall m your coin t their coin";

/// The scene's parameters (the defaults for a scene of another family, which never reaches
/// this family's code).
fn params(scene: &Scene) -> CoinParams {
    scene.spec.family.params_or_default()
}

/// One arena of the game.
#[derive(Component, Debug, Clone)]
pub struct CoinArena {
    width: usize,
    height: usize,
    /// Walls, row-major.
    walls: Vec<bool>,
    /// Start cells (the scene's spawns; every free cell when it has none).
    spawns: Vec<usize>,
    rules: CoinParams,
    /// The players' cells, by slot.
    pos: [usize; 2],
    /// The red and the blue coin's cells.
    coins: [usize; 2],
    /// This episode: coins taken by (taker, colour).
    taken: [[u32; 2]; 2],
}

impl CoinArena {
    fn new(scene: &Scene) -> Self {
        let walls: Vec<bool> = scene
            .cells
            .iter()
            .map(|t| matches!(t, Thing::Wall))
            .collect();
        let mut spawns: Vec<usize> = scene.shared_spawns.clone();
        spawns.extend(scene.spawn_cells.iter().flatten());
        if spawns.is_empty() {
            spawns = (0..walls.len()).filter(|&i| !walls[i]).collect();
        }
        Self {
            width: scene.width,
            height: scene.height,
            walls,
            spawns,
            rules: params(scene),
            pos: [0; 2],
            coins: [0; 2],
            taken: [[0; 2]; 2],
        }
    }

    /// A free cell (no wall, player or coin) drawn from `rng`.
    fn free_cell(&self, rng: &mut impl Rng) -> usize {
        let free: Vec<usize> = (0..self.walls.len())
            .filter(|&i| !self.walls[i] && !self.pos.contains(&i) && !self.coins.contains(&i))
            .collect();
        free[rng.random_range(0..free.len())]
    }

    /// Writes the players' cells into their `GridPos`.
    fn show(&self, members: &ArenaAgents, places: &mut Query<&mut GridPos>) {
        for (&e, &p) in members.entities().iter().zip(&self.pos) {
            if let Ok(mut place) = places.get_mut(e) {
                place.0 = IVec2::new((p % self.width) as i32, (p / self.width) as i32);
            }
        }
    }

    fn step(&self, from: usize, action: u8) -> usize {
        let (x, y) = ((from % self.width) as i32, (from / self.width) as i32);
        let (dx, dy) = match action {
            1 => (0, -1),
            2 => (1, 0),
            3 => (0, 1),
            4 => (-1, 0),
            _ => (0, 0),
        };
        let (nx, ny) = (x + dx, y + dy);
        if nx < 0 || ny < 0 || nx >= self.width as i32 || ny >= self.height as i32 {
            return from;
        }
        let to = ny as usize * self.width + nx as usize;
        if self.walls[to] { from } else { to }
    }
}

struct CoinSpawner(CoinArena);

impl Spawner for CoinSpawner {
    fn arena(&self, arena: &mut EntityWorldMut<'_>) {
        arena.insert(self.0.clone());
    }
    /// Every player carries the core's `GridPos` (replays and the viewer draw agents there).
    fn agent(&self, agent: &mut EntityWorldMut<'_>) {
        agent.insert((GridPos::default(), ExtraFeatures(vec![0.0; 6])));
    }
}

/// Places the players (two different start cells) and the coins of arenas starting an episode.
pub fn reset_coins(
    mut arenas: Query<(&EpisodeClock, &mut CoinArena, &mut ArenaRng, &ArenaAgents)>,
    mut places: Query<&mut GridPos>,
) {
    for (clock, mut game, mut rng, members) in &mut arenas {
        if clock.phase != ArenaPhase::JustReset {
            continue;
        }
        let mut starts = game.spawns.clone();
        starts.shuffle(&mut rng.0);
        game.pos = [starts[0], starts[1 % starts.len()]];
        game.coins = [usize::MAX; 2];
        let red = game.free_cell(&mut rng.0);
        game.coins[0] = red;
        let blue = game.free_cell(&mut rng.0);
        game.coins[1] = blue;
        game.taken = [[0; 2]; 2];
        game.show(members, &mut places);
    }
}

/// Writes each player's view: the whole map, its own cell `@`, the other `O`, its coin `m`,
/// the other's `t`.
pub fn observe_coins(
    arenas: Query<(&EpisodeClock, &CoinArena, &ArenaAgents), Without<Idle>>,
    mut agents: Query<(&Agent, &Team, &mut Observation, &mut ExtraFeatures)>,
) {
    for (clock, game, members) in &arenas {
        for &e in members.entities() {
            let Ok((agent, team, mut obs, mut extra)) = agents.get_mut(e) else {
                continue;
            };
            let me = usize::from(agent.slot).min(1);
            obs.step = clock.step;
            obs.team = team.0;
            obs.view.clear();
            obs.view.extend((0..game.walls.len()).map(|i| {
                if i == game.pos[me] {
                    code::ME
                } else if i == game.pos[1 - me] {
                    code::OTHER
                } else if i == game.coins[me] {
                    code::MY_COIN
                } else if i == game.coins[1 - me] {
                    code::THEIR_COIN
                } else if game.walls[i] {
                    code::WALL
                } else {
                    code::FLOOR
                }
            }));
            obs.view_width = game.width as u8;
            obs.view_height = game.height as u8;
            let p = game.pos[me];
            obs.view_self = ((p % game.width) as u8, (p / game.width) as u8);
            obs.pos = [(p % game.width) as i32, (p / game.width) as i32];
            // Where my coin, the other's coin and the other player are, from me.
            let scale = game.width.max(game.height) as f32;
            let offset = |to: usize| {
                [
                    ((to % game.width) as f32 - (p % game.width) as f32) / scale,
                    ((to / game.width) as f32 - (p / game.width) as f32) / scale,
                ]
            };
            extra.0.clear();
            for to in [game.coins[me], game.coins[1 - me], game.pos[1 - me]] {
                extra.0.extend(offset(to));
            }
        }
    }
}

/// Moves both players (in an order drawn from the arena's stream) and pays for the coins
/// they step on; a coin taken reappears on a free cell.
pub fn move_and_collect(
    mut arenas: Query<(&EpisodeClock, &mut CoinArena, &mut ArenaRng, &ArenaAgents), Without<Idle>>,
    mut agents: Query<(&Action, &mut Reward, &mut GridPos)>,
) {
    for (clock, mut game, mut rng, members) in &mut arenas {
        if !clock.is_live() {
            continue;
        }
        let [a, b] = members.entities() else {
            continue;
        };
        let players = [*a, *b];
        let mut order = [0usize, 1];
        order.shuffle(&mut rng.0);
        let mut pay = [0.0f32; 2];
        for who in order {
            let action = agents.get(players[who]).map_or(0, |(a, ..)| a.0);
            game.pos[who] = game.step(game.pos[who], action);
            for colour in 0..2 {
                if game.coins[colour] == game.pos[who] {
                    pay[who] += game.rules.pick_reward;
                    if colour != who {
                        pay[colour] -= game.rules.penalty;
                    }
                    game.taken[who][colour] += 1;
                    game.coins[colour] = usize::MAX;
                    let cell = game.free_cell(&mut rng.0);
                    game.coins[colour] = cell;
                }
            }
        }
        for (who, e) in players.into_iter().enumerate() {
            if let Ok((_, mut r, mut place)) = agents.get_mut(e) {
                r.0 += pay[who];
                let p = game.pos[who];
                place.0 = IVec2::new((p % game.width) as i32, (p / game.width) as i32);
            }
        }
    }
}

/// The episode's metrics, for arenas that just ended.
pub fn summarize_coins(mut arenas: Query<(&EpisodeClock, &CoinArena, &mut EpisodeMetrics)>) {
    for (clock, game, mut metrics) in &mut arenas {
        if clock.phase != ArenaPhase::Ending {
            continue;
        }
        let t = game.taken;
        let own = t[0][0] + t[1][1];
        let all = own + t[0][1] + t[1][0];
        metrics.0.insert("coins", f64::from(all));
        metrics.0.insert("stolen", f64::from(all - own));
        if all > 0 {
            metrics
                .0
                .insert("own_coin_rate", f64::from(own) / f64::from(all));
        }
    }
}

fn hash_coins(world: &World, arena: Entity, hash: &mut StateHash) {
    if let Some(g) = world.get::<CoinArena>(arena) {
        for v in g.pos.iter().chain(&g.coins) {
            hash.write(&(*v as u64).to_le_bytes());
        }
    }
}

/// The map for replays and the viewer: walls, floor, the coins `r` and `b`, the players.
fn draw_coins(world: &World, arena: Entity) -> Option<(usize, Vec<char>)> {
    let g = world.get::<CoinArena>(arena)?;
    let mut cells: Vec<char> = g.walls.iter().map(|&w| if w { '#' } else { '.' }).collect();
    cells[g.coins[0]] = 'r';
    cells[g.coins[1]] = 'b';
    Some((g.width, cells))
}
