//! Rules of the social dilemmas, checked on hand-built scenes: payoffs, regrowth
//! frequencies against the stated probabilities, zapping and cooldowns, pollution and
//! growth, and the episode metrics.

use crate::common;

use bevy::prelude::*;
use common::*;
use emergence::core::*;
use emergence::envs::dilemma::gridworld::{Beams, DilemmaMap};
use emergence::envs::dilemma::{act, view};
use emergence::metrics::EpisodeLog;
use emergence::policy::{Decision, Policy, PolicyRegistry};

fn matrix(p0: &str, p1: &str) -> String {
    format!(
        "(name: \"pd\", family: Matrix(payoffs: [[3, 0], [5, 1]], rounds: 10), \
         teams: [(name: \"a\", policy: \"{p0}\"), (name: \"b\", policy: \"{p1}\")])"
    )
}

fn run_episode(src: &str) -> Vec<emergence::core::EpisodeEnded> {
    let mut app = test_app(src, 1, 1, 3);
    step(&mut app, 10);
    app.world().resource::<EpisodeLog>().episodes.clone()
}

#[test]
fn tit_for_tat_against_always_defect() {
    let eps = run_episode(&matrix("tit_for_tat", "always_defect"));
    assert_eq!(eps.len(), 1);
    let e = &eps[0];
    // TFT: S then 9 × P = 0 + 9; AD: T then 9 × P = 5 + 9.
    assert_eq!(e.agent_returns, vec![9.0, 14.0]);
    assert_eq!(e.steps, 10);
    assert!(e.terminated);
    assert!((e.metrics["cooperation_rate"] - 0.05).abs() < 1e-12);
    assert_eq!(e.metrics["mutual_defection"], 0.9);
    assert!((e.metrics["payoff_per_round"] - 23.0 / 20.0).abs() < 1e-12);
}

#[test]
fn grim_trigger_and_cooperator_cooperate_throughout() {
    let e = &run_episode(&matrix("grim_trigger", "always_cooperate"))[0];
    assert_eq!(e.agent_returns, vec![30.0, 30.0]);
    assert_eq!(e.metrics["mutual_cooperation"], 1.0);
    assert_eq!(e.metrics["equality"], 1.0);
}

#[test]
fn grim_trigger_never_forgives() {
    // Against a random player, once the other has defected the trigger defects every round.
    let mut app = test_app(&matrix("grim_trigger", "random"), 32, 1, 9);
    step(&mut app, 10);
    let mut triggered = 0;
    for a in 0..32 {
        let game = app
            .world()
            .get::<emergence::envs::dilemma::matrix::MatrixGame>(arena(&app, a))
            .unwrap();
        assert_eq!(game.history.len(), 10);
        let first_defection = game.history.iter().position(|h| h[1] == 1);
        for (round, h) in game.history.iter().enumerate() {
            let expected = if first_defection.is_some_and(|f| round > f) {
                1
            } else {
                0
            };
            assert_eq!(
                h[0], expected,
                "arena {a} round {round}: {:?}",
                game.history
            );
        }
        triggered += usize::from(first_defection.is_some());
    }
    assert!(
        triggered > 20,
        "the random player almost always defects once in 10 rounds"
    );
}

/// Regrowth probe: rows of isolated empty apple sites with exactly 0, 1, 2 and 3 live
/// apples within radius 2. The one agent is walled into a corner pocket.
const REGROW: &str = r#"(
    name: "regrowth probe",
    family: CommonsHarvest(regrowth: [0.0, 0.0025, 0.005, 0.025], regrowth_radius: 2.0),
    map: [
        "WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW",
        "W,....,....,....,....,....,....,....,...W",
        "W.......................................W",
        "W.......................................W",
        "W,A...,A...,A...,A...,A...,A...,A...,A..W",
        "W.......................................W",
        "W.......................................W",
        "WA,A..A,A..A,A..A,A..A,A..A,A..A,A..A,A.W",
        "W.......................................W",
        "W.......................................W",
        "WAA,A.AA,A.AA,A.AA,A.AA,A.AA,A.AA,A.AA,AW",
        "W.......................................W",
        "WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW",
        "WPWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW",
        "WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWW",
    ],
    legend: { 'W': Wall, '.': Floor, 'A': Apple, ',': AppleSite, 'P': Spawn },
    teams: [(name: "h", policy: "random")],
    episode: (max_steps: 1000),
)"#;

#[test]
fn regrowth_frequencies_match_the_stated_probabilities() {
    let arenas = 1000;
    let steps = 10;
    let mut app = test_app(REGROW, arenas, 1, 21);
    step(&mut app, steps);
    let probs = [0.0f64, 0.0025, 0.005, 0.025];
    let rows = [1i32, 4, 7, 10];
    for (k, (&row, &p)) in rows.iter().zip(&probs).enumerate() {
        let mut grown = 0u32;
        let mut trials = 0u32;
        for a in 0..arenas as usize {
            let map = app.world().get::<DilemmaMap>(arena(&app, a)).expect("map");
            let template_row: &str = REGROW
                .lines()
                .nth(4 + row as usize)
                .expect("row")
                .trim()
                .trim_matches(|c| c == '"' || c == ',');
            for (x, ch) in template_row.chars().enumerate() {
                if ch == ',' {
                    trials += 1;
                    if map.tiles.get(IVec2::new(x as i32, row)) == Some(view::APPLE) {
                        grown += 1;
                    }
                }
            }
        }
        // P(regrown within `steps` steps) = 1 − (1 − p)^steps; binomial tolerance 4.5 sd.
        let q = 1.0 - (1.0 - p).powi(steps as i32);
        let n = f64::from(trials);
        let mean = n * q;
        let sd = (n * q * (1.0 - q)).sqrt();
        let got = f64::from(grown);
        assert!(trials >= 8000, "row {row}: {trials} trials");
        if p == 0.0 {
            assert_eq!(grown, 0, "k = {k}: sites without apples nearby regrew");
        } else {
            assert!(
                (got - mean).abs() <= 4.5 * sd,
                "k = {k}: {grown} of {trials} regrew; expected {mean:.0} ± {sd:.1}"
            );
        }
    }
}

/// A policy that plays a fixed action whenever legal, NOOP otherwise.
struct Fixed(u8);

impl Policy for Fixed {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch {
            d.action.0 = if d.mask.allows(self.0) {
                self.0
            } else {
                act::NOOP
            };
        }
    }
}

const DUEL: &str = r#"(
    name: "duel",
    family: CommonsHarvest(zap: (length: 3, cooldown: 10, timeout: 3, cost: -0.5)),
    map: [
        "WWW",
        "WbW",
        "W.W",
        "WaW",
        "W,W",
        "WWW",
    ],
    legend: { 'W': Wall, '.': Floor, ',': AppleSite, 'a': TeamSpawn("a"), 'b': TeamSpawn("b") },
    teams: [(name: "a", policy: "random"), (name: "b", policy: "greedy_harvester")],
    randomize: (random_facing: false),
)"#;

#[test]
fn zapping_removes_the_first_agent_in_the_beam_and_cooldown_holds() {
    let mut app = test_app(DUEL, 1, 1, 1);
    {
        let mut reg = app.world_mut().resource_mut::<PolicyRegistry>();
        reg.insert("random", Box::new(Fixed(act::ZAP)));
        reg.insert("greedy_harvester", Box::new(Fixed(act::NOOP)));
    }
    let ag = agents(&app, 0);
    step(&mut app, 1);
    let w = app.world();
    // Step 0: a (facing north) zaps b two cells ahead; b is removed until step 3.
    assert_eq!(w.get::<Beams>(ag[1]).unwrap().removed_until, Some(3));
    assert_eq!(w.get::<Beams>(ag[0]).unwrap().cooldown, 10);
    assert_eq!(w.get::<Reward>(ag[0]).unwrap().0, -0.5);
    let map = w.get::<DilemmaMap>(arena(&app, 0)).unwrap();
    assert_eq!(map.occ.get(IVec2::new(1, 1)), Some(0), "b left the map");
    assert_eq!(map.counters.zap_hits, 1);
    // Steps 1–2: b stays removed; a may not zap (cooldown).
    step(&mut app, 1);
    assert!(
        !app.world()
            .get::<ActionMask>(ag[0])
            .unwrap()
            .allows(act::ZAP)
    );
    assert!(app.world().get::<Observation>(ag[1]).unwrap().removed);
    step(&mut app, 2);
    // Step 3: b respawns on its cell.
    let w = app.world();
    assert_eq!(w.get::<Beams>(ag[1]).unwrap().removed_until, None);
    assert_eq!(w.get::<GridPos>(ag[1]).unwrap().0, IVec2::new(1, 1));
    // b spent steps removed: counted for the peace metric (2 or 3, by move order on step 0).
    let removed = w.get::<AgentStats>(ag[1]).unwrap().removed_steps;
    assert!((2..=3).contains(&removed), "{removed}");
    // Cooldown 10: the next zap is at step 11, not before.
    step(&mut app, 7);
    assert_eq!(
        app.world()
            .get::<DilemmaMap>(arena(&app, 0))
            .unwrap()
            .counters
            .zaps,
        1
    );
    step(&mut app, 1);
    let w = app.world();
    assert!(w.get::<ActionMask>(ag[0]).unwrap().allows(act::ZAP));
    assert_eq!(
        w.get::<DilemmaMap>(arena(&app, 0)).unwrap().counters.zaps,
        2
    );
}

#[test]
fn moving_onto_an_apple_eats_it_and_walls_block() {
    let src = DUEL.replace(
        "'W': Wall, '.': Floor, ',': AppleSite",
        "'W': Wall, '.': Floor, ',': Apple",
    );
    let mut app = test_app(&src, 1, 1, 1);
    {
        let mut reg = app.world_mut().resource_mut::<PolicyRegistry>();
        reg.insert("random", Box::new(Fixed(act::BACKWARD)));
        reg.insert("greedy_harvester", Box::new(Fixed(act::STEP_LEFT)));
    }
    let ag = agents(&app, 0);
    step(&mut app, 1);
    let w = app.world();
    assert_eq!(
        w.get::<GridPos>(ag[0]).unwrap().0,
        IVec2::new(1, 4),
        "a stepped back onto the apple"
    );
    assert_eq!(w.get::<Reward>(ag[0]).unwrap().0, 1.0);
    assert_eq!(
        w.get::<GridPos>(ag[1]).unwrap().0,
        IVec2::new(1, 1),
        "the wall stopped b"
    );
    let map = w.get::<DilemmaMap>(arena(&app, 0)).unwrap();
    assert_eq!(map.tiles.get(IVec2::new(1, 4)), Some(view::APPLE_SITE));
    step(&mut app, 1);
    assert_eq!(
        app.world().get::<GridPos>(ag[0]).unwrap().0,
        IVec2::new(1, 4),
        "the wall stopped a"
    );
}

const RIVER: &str = r#"(
    name: "river probe",
    family: CleanUp(pollution_prob: 0.5, pollution_start: 50, apple_prob: 0.05, depletion_threshold: 0.4),
    map: [
        "WWWWWWWWWWWWWWWWWWWWWW",
        "W~~~~~~~~~~~~~~~~~~~~W",
        "W~~~~~~~~~~~~~~~~~~~~W",
        "WWWWWWWWWWWWWWWWWWWWWW",
        "W,,,,,,,,,,,,,,,,,,,,W",
        "WWWWWWWWWWWWWWWWWWWWWW",
        "WPWWWWWWWWWWWWWWWWWWWW",
        "WWWWWWWWWWWWWWWWWWWWWW",
    ],
    legend: { 'W': Wall, '~': River, ',': AppleSite, 'P': Spawn },
    teams: [(name: "h", policy: "random")],
)"#;

#[test]
fn pollution_starts_at_step_50_at_half_a_cell_per_step() {
    let arenas = 400;
    let mut app = test_app(RIVER, arenas, 1, 4);
    step(&mut app, 50);
    for a in 0..arenas as usize {
        assert_eq!(
            app.world().get::<DilemmaMap>(arena(&app, a)).unwrap().dirty,
            0,
            "dirt before step 50"
        );
    }
    step(&mut app, 20);
    let total: u32 = (0..arenas as usize)
        .map(|a| app.world().get::<DilemmaMap>(arena(&app, a)).unwrap().dirty)
        .sum();
    // Binomial(400 × 20, 0.5): mean 4000, sd ≈ 44.7.
    assert!((f64::from(total) - 4000.0).abs() < 4.5 * 44.72, "{total}");
}

#[test]
fn apples_grow_at_five_percent_on_a_clean_river_and_stop_when_dirty() {
    let arenas = 500;
    let mut app = test_app(RIVER, arenas, 1, 8);
    step(&mut app, 1);
    let sites = 20.0 * arenas as f64;
    let grown: usize = (0..arenas as usize)
        .map(|a| {
            app.world()
                .get::<DilemmaMap>(arena(&app, a))
                .unwrap()
                .apples()
        })
        .sum();
    let (mean, sd) = (sites * 0.05, (sites * 0.05 * 0.95).sqrt());
    assert!(
        (grown as f64 - mean).abs() < 4.5 * sd,
        "{grown} apples; expected {mean} ± {sd:.1}"
    );

    // Half the river dirty from the start (d = 0.5 ≥ 0.4): nothing ever grows.
    let dirty = RIVER
        .replacen(
            "\"W~~~~~~~~~~~~~~~~~~~~W\"",
            "\"W####################W\"",
            1,
        )
        .replace("'~': River", "'~': River, '#': Dirt");
    let mut app = test_app(&dirty, 50, 1, 8);
    step(&mut app, 40);
    for a in 0..50 {
        assert_eq!(
            app.world()
                .get::<DilemmaMap>(arena(&app, a))
                .unwrap()
                .apples(),
            0
        );
    }
}

#[test]
fn the_cleaning_beam_cleans_every_dirty_cell_in_reach() {
    let src = r#"(
        name: "clean",
        family: CleanUp(clean_length: 3, pollution_start: 100000),
        map: ["WWWWWW", "W###PW", "W,WWWW", "WWWWWW"],
        legend: { 'W': Wall, '#': Dirt, ',': AppleSite, 'P': Spawn },
        teams: [(name: "c", policy: "cleaner")],
        randomize: (random_facing: false),
    )"#;
    let mut app = test_app(src, 1, 1, 1);
    app.world_mut()
        .resource_mut::<PolicyRegistry>()
        .insert("cleaner", Box::new(Fixed(act::TURN_LEFT)));
    step(&mut app, 1); // now facing west
    app.world_mut()
        .resource_mut::<PolicyRegistry>()
        .insert("cleaner", Box::new(Fixed(act::CLEAN)));
    step(&mut app, 1);
    let map = app.world().get::<DilemmaMap>(arena(&app, 0)).unwrap();
    assert_eq!(map.dirty, 0);
    assert_eq!(map.counters.cells_cleaned, 3);
}

#[test]
fn episodes_end_by_truncation_and_arenas_reset_with_fresh_streams() {
    let src = REGROW.replace("max_steps: 1000", "max_steps: 5");
    let mut app = test_app(&src, 2, 3, 2);
    step(&mut app, 15);
    let log = &app.world().resource::<EpisodeLog>().episodes;
    assert_eq!(log.len(), 6);
    assert!(log.iter().all(|e| e.steps == 5 && !e.terminated));
    assert_eq!(app.world().resource::<RunProgress>().idle_arenas, 2);
    let ag = agents(&app, 0);
    let done = app.world().get::<Done>(ag[0]).unwrap();
    assert!(done.truncated && !done.terminated);
}
