//! Hide-and-seek rules on hand-built maps: vision, pushing, pulling, locking, ramps, the
//! preparation phase and the reward.

use crate::common;

use bevy::math::IVec2;
use common::*;
use emergence::core::*;
use emergence::envs::hide_and_seek::{HnsArena, act};

/// A scene with `map` (legend: # wall, = low wall, b box, r ramp, h hider, s seeker),
/// puppet-driven agents, no randomness at spawn.
fn scene_src(map: &[&str], prep: f32, range: u8) -> String {
    let rows: Vec<String> = map.iter().map(|r| format!("\"{r}\"")).collect();
    let hiders = map.iter().map(|r| r.matches('h').count()).sum::<usize>();
    let seekers = map.iter().map(|r| r.matches('s').count()).sum::<usize>();
    format!(
        r#"(
    name: "test",
    family: HideAndSeek(prep_fraction: {prep}, vision_range: {range}, vision_cone: 135.0),
    map: [{}],
    legend: {{'#': Wall, '.': Floor, '=': LowWall, 'b': Box, 'r': Ramp,
              'h': TeamSpawn("hiders"), 's': TeamSpawn("seekers")}},
    teams: [
        (name: "hiders", role: "hider", count: {hiders}, policy: "random"),
        (name: "seekers", role: "seeker", count: {seekers}, policy: "random"),
    ],
    episode: (max_steps: 20),
    randomize: (shuffle_spawns: false, random_facing: false),
)"#,
        rows.join(", ")
    )
}

fn hns(app: &bevy::app::App) -> &HnsArena {
    app.world().get::<HnsArena>(arena(app, 0)).expect("arena")
}

fn pos(app: &bevy::app::App, slot: usize) -> IVec2 {
    app.world()
        .get::<GridPos>(agents(app, 0)[slot])
        .expect("pos")
        .0
}

fn face(app: &mut bevy::app::App, slot: usize, d: Dir4) {
    let e = agents(app, 0)[slot];
    app.world_mut().get_mut::<Facing>(e).expect("facing").0 = d;
}

fn mask(app: &bevy::app::App, slot: usize) -> ActionMask {
    *app.world()
        .get::<ActionMask>(agents(app, 0)[slot])
        .expect("mask")
}

/// An app on `map` whose agents all play the returned puppet actions; one step run (the
/// reset, everyone idle).
fn puppet_app(map: &[&str], prep: f32, range: u8) -> (bevy::app::App, PuppetActs) {
    let mut app = test_app(&scene_src(map, prep, range), 1, 1, 0);
    let acts = puppet(&mut app, "random");
    step(&mut app, 1);
    (app, acts)
}

type PuppetActs = std::sync::Arc<std::sync::Mutex<Vec<u8>>>;

fn play(app: &mut bevy::app::App, acts: &PuppetActs, a: &[u8]) {
    set_actions(acts, a);
    step(app, 1);
}

const VISION_MAP: [&str; 10] = [
    "###############",
    "#.............#",
    "#.............#",
    "#######.#######",
    "#.............#",
    "#........b....#",
    "#......s......#",
    "#.............#",
    "#............h#",
    "###############",
];

#[test]
fn vision_cone_range_occlusion_and_doorways() {
    let (app, _) = puppet_app(&VISION_MAP, 0.0, 5);
    let a = hns(&app);
    let me = IVec2::new(7, 6);
    let n = Dir4::North;
    // Inside the cone and range, nothing between: seen.
    assert!(a.sees(me, n, IVec2::new(3, 4)));
    assert!(a.sees(me, n, IVec2::new(7, 4)));
    // The mirror image of (3, 4) lies behind the box at (9, 5): unseen.
    assert!(!a.sees(me, n, IVec2::new(11, 4)));
    // Through the doorway at (7, 3): seen; behind the wall beside it: unseen.
    assert!(a.sees(me, n, IVec2::new(7, 1)));
    assert!(!a.sees(me, n, IVec2::new(4, 2)));
    // Outside the cone: beside and behind.
    assert!(!a.sees(me, n, IVec2::new(11, 6)));
    assert!(!a.sees(me, n, IVec2::new(7, 8)));
    // Range 5: five cells east seen, six not.
    assert!(a.sees(me, Dir4::East, IVec2::new(12, 6)));
    assert!(!a.sees(me, Dir4::East, IVec2::new(13, 6)));
}

#[test]
fn observation_shows_what_the_cone_lights() {
    // Seeker at (7, 6) facing north; the hider at (13, 8) is behind it: unseen.
    let (mut app, acts) = puppet_app(&VISION_MAP, 0.0, 5);
    let seeker = agents(&app, 0)[1];
    let obs = app.world().get::<Observation>(seeker).expect("obs").clone();
    assert!(obs.others.is_empty());
    assert_eq!(obs.view_width, 11);
    assert_eq!(obs.view_height, 6);
    // The box two rows ahead and two to the right is in view; the cell behind it is not.
    let w = usize::from(obs.view_width);
    let at = |right: i32, ahead: i32| {
        let (c, r) = (
            obs.view_self.0 as i32 + right,
            obs.view_self.1 as i32 - ahead,
        );
        obs.view[r as usize * w + c as usize]
    };
    use emergence::envs::hide_and_seek::view;
    assert_eq!(at(0, 0), view::SELF);
    assert_eq!(at(2, 1), view::BOX);
    assert_eq!(at(4, 2), view::UNSEEN);
    assert_eq!(at(0, 3), view::FLOOR); // the doorway
    assert_eq!(at(-1, 3), view::WALL);
    // Turn the seeker east and south: the hider (6 east, 2 south) is out of range east,
    // then in the cone facing south? (6, 2) from facing south is 71.6° off: unseen.
    face(&mut app, 1, Dir4::East);
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    let obs = app.world().get::<Observation>(seeker).expect("obs");
    assert!(obs.others.is_empty(), "{:?}", obs.others);
    // Walk the hider west twice (it faces north, so turn it first): now 4 east, 2 south of
    // the seeker facing east: 4.5 cells, 26.6° off the facing: seen.
    face(&mut app, 0, Dir4::West);
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    assert_eq!(pos(&app, 0), IVec2::new(11, 8));
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    let obs = app.world().get::<Observation>(seeker).expect("obs");
    assert_eq!(obs.others.len(), 1);
    assert_eq!(obs.others[0].pos, [11, 8]);
}

#[test]
fn the_entity_list_places_what_is_seen_around_the_agent_and_masks_the_rest() {
    use emergence::envs::hide_and_seek::{HnsSenses, view};
    let src = scene_src(&VISION_MAP, 0.0, 5).replace(
        "vision_cone: 135.0)",
        "vision_cone: 135.0, entities: true, window: 2)",
    );
    let mut app = test_app(&src, 1, 1, 0);
    let acts = puppet(&mut app, "random");
    step(&mut app, 1);
    let (hider, seeker) = (agents(&app, 0)[0], agents(&app, 0)[1]);
    let senses = |app: &bevy::app::App, e| {
        app.world()
            .get::<HnsSenses>(e)
            .expect("senses")
            .entities
            .clone()
    };
    let n = 15.0; // the map's larger side
    // The seeker at (7, 6) facing north: the hider behind it unseen (zeros), the box at
    // (9, 5) one ahead and two to the right, the doorway (7, 3) three ahead.
    let e = senses(&app, seeker);
    #[rustfmt::skip]
    let want = [
        7.0 / n, 6.0 / n,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        1.0, 0.0, 1.0 / n, 2.0 / n, 9.0 / n, 5.0 / n, 0.0, 0.0, 0.0,
        1.0, 3.0 / n, 0.0, 7.0 / n, 3.0 / n,
    ];
    assert_eq!(e, want);
    // The window is cut to range 2 (5 x 3); the cells in it are where the full window has
    // them.
    let obs = app.world().get::<Observation>(seeker).expect("obs").clone();
    assert_eq!(
        (obs.view_width, obs.view_height, obs.view_self),
        (5, 3, (2, 2))
    );
    assert_eq!(obs.view[2 * 5 + 2], view::SELF);
    assert_eq!(obs.view[5 + 4], view::BOX, "one ahead, two right");
    // The hider walks west to (11, 8): the seeker 4 ahead and 2 to its right, seen beyond
    // the window; the box 2 ahead and 3 to the right.
    face(&mut app, 0, Dir4::West);
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    let e = senses(&app, hider);
    assert_eq!(&e[..2], &[11.0 / n, 8.0 / n]);
    assert_eq!(&e[2..8], &[1.0, 0.0, 4.0 / n, 2.0 / n, 7.0 / n, 6.0 / n]);
    assert_eq!(&e[8..14], &[1.0, 0.0, 2.0 / n, 3.0 / n, 9.0 / n, 5.0 / n]);
    // Without `entities` the list is empty.
    let (app, _) = puppet_app(&VISION_MAP, 0.0, 5);
    assert!(senses(&app, agents(&app, 0)[1]).is_empty());
}

#[test]
fn reward_follows_who_is_seen_after_preparation() {
    // max_steps 20, prep 0.25: steps 0-4 are preparation.
    let (mut app, acts) = puppet_app(&VISION_MAP, 0.25, 5);
    let (h, s) = (agents(&app, 0)[0], agents(&app, 0)[1]);
    let reward = |app: &bevy::app::App, e| app.world().get::<Reward>(e).expect("r").0;
    // During preparation: the seeker is frozen (only noop is legal, and the rules ignore a
    // forward that reaches them) and rewards are zero.
    assert_eq!(mask(&app, 1), ActionMask::only(act::NOOP));
    force_actions(&mut app);
    app.world_mut().resource_mut::<Forced>().0 = vec![None, Some(act::FORWARD)];
    play(&mut app, &acts, &[act::NOOP, act::FORWARD]);
    assert_eq!(pos(&app, 1), IVec2::new(7, 6));
    app.world_mut().resource_mut::<Forced>().0.clear();
    assert_eq!((reward(&app, h), reward(&app, s)), (0.0, 0.0));
    step(&mut app, 3);
    assert_eq!(
        app.world()
            .get::<EpisodeClock>(arena(&app, 0))
            .expect("c")
            .step,
        5
    );
    // Step 5: preparation over, nobody seen: hiders +1, seekers -1.
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    assert_eq!((reward(&app, h), reward(&app, s)), (1.0, -1.0));
    // Turn the seeker east and walk the hider (6 east, 2 south of it) two cells west, into
    // its cone and range: hiders -1, seekers +1.
    face(&mut app, 1, Dir4::East);
    face(&mut app, 0, Dir4::West);
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    assert_eq!((reward(&app, h), reward(&app, s)), (-1.0, 1.0));
}

#[test]
fn locks_hold_against_the_other_side() {
    // Box at (2, 2); the seeker above it faces south (the cell beyond, (2, 3), is free);
    // the hider beside it faces west.
    let map = ["#######", "#.s...#", "#.bh..#", "#.....#", "#######"];
    let (mut app, acts) = puppet_app(&map, 0.0, 5);
    force_actions(&mut app);
    face(&mut app, 0, Dir4::West);
    face(&mut app, 1, Dir4::South);
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    assert!(mask(&app, 0).allows(act::LOCK));
    play(&mut app, &acts, &[act::LOCK, act::NOOP]);
    assert_eq!(hns(&app).objects[0].locked_by, Some(0));
    // (Masks are written at the start of a step: one more step shows the lock.)
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    // The seeker may not unlock, grab or push it...
    assert!(!mask(&app, 1).allows(act::UNLOCK));
    assert!(!mask(&app, 1).allows(act::GRAB));
    assert!(!mask(&app, 1).allows(act::FORWARD));
    // ...and the rules refuse even when the action reaches them.
    app.world_mut().resource_mut::<Forced>().0 = vec![None, Some(act::UNLOCK)];
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    assert_eq!(hns(&app).objects[0].locked_by, Some(0));
    app.world_mut().resource_mut::<Forced>().0 = vec![None, Some(act::FORWARD)];
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    assert_eq!(hns(&app).objects[0].pos, IVec2::new(2, 2));
    assert_eq!(pos(&app, 1), IVec2::new(2, 1));
    app.world_mut().resource_mut::<Forced>().0.clear();
    // The hider's side may unlock; then the seeker's push goes through.
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    assert!(mask(&app, 0).allows(act::UNLOCK));
    play(&mut app, &acts, &[act::UNLOCK, act::NOOP]);
    assert_eq!(hns(&app).objects[0].locked_by, None);
    play(&mut app, &acts, &[act::NOOP, act::FORWARD]);
    assert_eq!(hns(&app).objects[0].pos, IVec2::new(2, 3));
    assert_eq!(pos(&app, 1), IVec2::new(2, 2));
}

#[test]
fn pushing_is_blocked_by_walls_and_pulling_drags_the_box() {
    let map = ["#####", "#.b.#", "#...#", "#.h.#", "#..s#", "#####"];
    let (mut app, acts) = puppet_app(&map, 0.0, 5);
    // Hider at (2, 3) facing north; box at (2, 1) against the wall.
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    assert_eq!(pos(&app, 0), IVec2::new(2, 2));
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    assert!(!mask(&app, 0).allows(act::FORWARD));
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    assert_eq!(
        (pos(&app, 0), hns(&app).objects[0].pos),
        (IVec2::new(2, 2), IVec2::new(2, 1))
    );
    // Grab and walk backwards twice: the box follows.
    play(&mut app, &acts, &[act::GRAB, act::NOOP]);
    assert_eq!(hns(&app).objects[0].held_by, Some(0));
    play(&mut app, &acts, &[act::BACKWARD, act::NOOP]);
    play(&mut app, &acts, &[act::BACKWARD, act::NOOP]);
    assert_eq!(pos(&app, 0), IVec2::new(2, 4));
    assert_eq!(hns(&app).objects[0].pos, IVec2::new(2, 3));
    // Now push it back north one cell.
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    assert_eq!(hns(&app).objects[0].pos, IVec2::new(2, 2));
    assert_eq!(pos(&app, 0), IVec2::new(2, 3));
    // Turning lets go.
    play(&mut app, &acts, &[act::TURN_LEFT, act::NOOP]);
    assert_eq!(hns(&app).objects[0].held_by, None);
    play(&mut app, &acts, &[act::NOOP, act::NOOP]);
    assert!(
        !app.world()
            .get::<emergence::envs::hide_and_seek::HnsSenses>(agents(&app, 0)[0])
            .expect("o")
            .holding
    );
}

#[test]
fn ramps_lift_over_one_box_or_low_wall() {
    // Hider at (1, 5) facing north: ramp (1, 4), box (1, 3), free (1, 2): lands on (1, 2).
    // Seeker at (3, 5): ramp (3, 4), low wall (3, 3), free (3, 2).
    // Third column: ramp with free floor behind it is pushed instead.
    let map = [
        "#######", "#.....#", "#.....#", "#b#=#.#", "#r#r#r#", "#h#s#h#", "#######",
    ];
    let (mut app, acts) = puppet_app(&map, 0.0, 5);
    play(&mut app, &acts, &[act::FORWARD, act::FORWARD, act::FORWARD]);
    assert_eq!(pos(&app, 0), IVec2::new(1, 2), "over the box");
    assert_eq!(pos(&app, 2), IVec2::new(3, 2), "over the low wall");
    assert_eq!(pos(&app, 1), IVec2::new(5, 4), "pushed the ramp");
    let a = hns(&app);
    assert_eq!(
        a.objects.iter().map(|o| o.pos).collect::<Vec<_>>()[..3],
        [IVec2::new(1, 3), IVec2::new(1, 4), IVec2::new(3, 4)]
    );
    assert!(a.objects.iter().any(|o| o.pos == IVec2::new(5, 3)));
    assert_eq!(a.stats.climbs, 2);
}

fn shipped(name: &str, arenas: u32) -> emergence::headless::RunReport {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenes/hide_and_seek")
        .join(name);
    let mut cfg =
        emergence::headless::RunConfig::new(emergence::load::load_scene(&path).expect("scene"));
    cfg.arenas = arenas;
    cfg.seed = 3;
    emergence::headless::run(&cfg, |_| {}).expect("run")
}

#[test]
fn fort_builders_shut_the_doorways_and_stay_hidden() {
    let fort = shipped("quadrant.scene.ron", 16);
    let m = |r: &emergence::headless::RunReport, k: &str| r.metrics.get(k).copied().unwrap_or(-1.0);
    // Two doorways: the builders push a box into each and lock it during preparation.
    assert!(
        m(&fort, "boxes_locked_prep_end") >= 1.5,
        "{:?}",
        fort.metrics
    );
    assert!(m(&fort, "max_box_displacement") >= 1.0);
    assert!(m(&fort, "hider_success") >= 0.9, "{:?}", fort.metrics);
    // In the open field, fleeing hiders are seen far more often.
    let open = shipped("open_field.scene.ron", 16);
    assert_eq!(m(&open, "boxes_locked_prep_end"), 0.0);
    assert!(
        m(&open, "hider_success") < m(&fort, "hider_success") - 0.2,
        "{:?}",
        open.metrics
    );
}

#[test]
fn hiders_of_another_team_are_not_fled() {
    // Two hider teams: "a" at (4, 4) facing north sees "b" at (4, 2), an ally. Preparation is
    // over from the start and no seeker is in its cone, so the fleeing hider stays put.
    let src = r#"(
    name: "allies",
    family: HideAndSeek(prep_fraction: 0.0),
    map: ["WWWWWWWWW", "W.......W", "W...b...W", "W.......W", "W...a...W", "W.......W",
          "Ws......W", "WWWWWWWWW"],
    legend: {'W': Wall, '.': Floor, 'a': TeamSpawn("a"), 'b': TeamSpawn("b"),
             's': TeamSpawn("seekers")},
    teams: [
        (name: "a", role: "hider", policy: "hider"),
        (name: "b", role: "hider", policy: "hider"),
        (name: "seekers", role: "seeker", policy: "random"),
    ],
    randomize: (shuffle_spawns: false, random_facing: false),
)"#;
    let mut app = test_app(src, 1, 1, 0);
    step(&mut app, 2);
    let seen = &app
        .world()
        .get::<Observation>(agents(&app, 0)[0])
        .expect("obs")
        .others;
    assert_eq!(seen.len(), 1);
    assert!(seen[0].ally);
    assert_eq!(pos(&app, 0), IVec2::new(4, 4));
}

/// The quadrant game starts where Baker et al.'s does: untrained (random) hiders against
/// random seekers are seen most of the time, while fort builders against the scripted
/// seeker stay hidden (the scene header's balance table; means over run seeds 1-3, 64
/// arenas x 2 episodes each); and the fort is what the geometry says it is: the builders
/// shut most doorways with a locked box by the end of preparation, random hiders none.
#[test]
fn the_quadrant_game_favours_the_seekers_untrained_and_a_fort_wins() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenes/hide_and_seek/quadrant_game.scene.ron");
    let scene = emergence::load::load_scene(&path).expect("scene");
    let mean = |hiders: &str, seekers: &str, metric: &str| -> f64 {
        let mut total = 0.0;
        for seed in 1..=3 {
            let mut sc = scene.clone();
            for a in &mut sc.agents {
                a.policy = if a.team == 0 { hiders } else { seekers }.into();
            }
            let mut cfg = emergence::headless::RunConfig::new(sc);
            cfg.arenas = 64;
            cfg.episodes = 2;
            cfg.seed = seed;
            let r = emergence::headless::run(&cfg, |_| {}).expect("run");
            total += r.metrics[metric];
        }
        total / 3.0
    };
    let untrained = mean("random", "random", "hider_success");
    let fort = mean("fort_builder", "seeker", "hider_success");
    assert!(untrained <= 0.4, "random hiders stay hidden: {untrained}");
    assert!(fort >= 0.9, "fort builders are found: {fort}");
    let shut = mean("fort_builder", "seeker", "fort_prep_end");
    let by_chance = mean("random", "random", "fort_prep_end");
    assert!(shut >= 0.8, "the builders' doorways: {shut}");
    assert!(by_chance <= 0.05, "random hiders build forts: {by_chance}");
}

/// The fort's measure from the geometry: the room is shut when no way leads in from the
/// outside except through a box the hiders locked, in the doorway or just inside it; an
/// unlocked box, or a box the seekers locked, leaves it open.
#[test]
fn a_room_is_shut_by_a_locked_box_in_its_doorway_or_just_inside_it() {
    // A room (right, 3 x 3) with one doorway at (4, 2); the box starts inside the doorway's
    // inner cell (5, 2), the hider behind it at (6, 2) facing west.
    let map = [
        "########", "#...#..#", "#s.....#", "#...#bh#", "#...#..#", "########",
    ];
    let (mut app, acts) = puppet_app(&map, 0.5, 4);
    let shut = |app: &bevy::app::App| hns(app).rooms_shut();
    assert_eq!(hns(&app).regions.rooms.len(), 1);
    assert_eq!(shut(&app), (0, 1), "nothing locked: open");
    // Hider at (6, 3) facing north: the box at (5, 3) is beside it. Walk it round to push
    // the box north onto (5, 2), the cell just inside the doorway, and lock it.
    face(&mut app, 0, Dir4::West);
    play(&mut app, &acts, &[act::LOCK, act::NOOP]);
    assert_eq!(
        shut(&app),
        (0, 1),
        "a locked box away from the doorway leaves it open"
    );
    play(&mut app, &acts, &[act::UNLOCK, act::NOOP]);
    face(&mut app, 0, Dir4::South);
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    face(&mut app, 0, Dir4::West);
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    face(&mut app, 0, Dir4::North);
    play(&mut app, &acts, &[act::FORWARD, act::NOOP]);
    assert_eq!(hns(&app).objects[0].pos, IVec2::new(5, 2));
    assert_eq!(
        shut(&app),
        (0, 1),
        "an unlocked box can be pushed aside: open"
    );
    play(&mut app, &acts, &[act::LOCK, act::NOOP]);
    assert_eq!(hns(&app).objects[0].locked_by, Some(0));
    assert_eq!(shut(&app), (1, 1), "locked just inside the doorway: shut");
}

/// `door_dropout` (Baker et al.'s `p_door_dropout`): the quadrant game with 0.5 walls one of
/// its two doorways up in about half the episodes, a different one from episode to episode;
/// the episode's doorways (what `doorways_blocked_prep_end` counts) are the ones left open; with 0
/// nothing changes. A map without two doorways to drop is refused at the parameter.
#[test]
fn door_dropout_walls_one_doorway_in_about_half_the_episodes() {
    use emergence::envs::hide_and_seek::view;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenes/hide_and_seek/quadrant_game.scene.ron");
    let src = std::fs::read_to_string(&path).expect("scene");
    let doors = [IVec2::new(9, 6), IVec2::new(6, 9)];
    let walled = |p: f32| {
        let src = src.replace(
            "        door_dropout: 0.5,\n",
            &format!("        door_dropout: {p:?},\n"),
        );
        let arenas = 64;
        let mut app = test_app(&src, arenas, 1, 11);
        step(&mut app, 1);
        let mut which = [0usize; 2];
        for i in 0..arenas as usize {
            let a = app.world().get::<HnsArena>(arena(&app, i)).expect("arena");
            let shut: Vec<usize> = (0..2)
                .filter(|&k| a.tiles.get(doors[k]) == Some(view::WALL))
                .collect();
            assert!(shut.len() <= 1, "both doorways walled up");
            let open: Vec<IVec2> = doors
                .iter()
                .enumerate()
                .filter(|(k, _)| !shut.contains(k))
                .map(|(_, &d)| d)
                .collect();
            assert_eq!(
                *a.doorways, open,
                "the episode's doorways are the open ones"
            );
            for k in shut {
                which[k] += 1;
            }
        }
        which
    };
    let [a, b] = walled(0.5);
    assert!((16..=48).contains(&(a + b)), "{} of 64 walled up", a + b);
    assert!(a > 0 && b > 0, "always the same doorway: {a} / {b}");
    assert_eq!(walled(0.0), [0, 0]);
    // One doorway only: nothing to drop.
    let one = scene_src(
        &["#######", "#h.#..#", "#s....#", "#..#..#", "#######"],
        0.4,
        4,
    )
    .replace(
        "vision_cone: 135.0)",
        "vision_cone: 135.0, door_dropout: 0.5)",
    );
    let e = emergence::load::parse_scene(&one, std::path::Path::new("bad.scene.ron"))
        .expect_err("refused");
    let text = e.to_string();
    assert!(
        text.starts_with("bad.scene.ron:3:") && text.contains("door_dropout walls up one"),
        "{text}"
    );
}

/// `scatter_objects`: each episode the quadrant game's two boxes land on free cells of the
/// room they start in and its ramp outside, never on a doorway or an agent, in many different
/// places over the arenas; each object's start (what its displacement is measured from) is
/// where it landed. Without it every arena has the map's places.
#[test]
fn scattered_objects_stay_in_their_region_and_off_doorways_and_agents() {
    use emergence::envs::hide_and_seek::ObjectKind;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenes/hide_and_seek/quadrant_game.scene.ron");
    let src = std::fs::read_to_string(&path).expect("scene");
    let places = |scatter: bool| {
        let src = src
            .replace(
                "        reward: 1.0,\n",
                &format!("        reward: 1.0,\n        scatter_objects: {scatter},\n"),
            )
            .replace("policy: \"fort_builder\"", "policy: \"random\"")
            .replace("policy: \"seeker\"", "policy: \"random\"");
        let arenas = 64;
        let mut app = test_app(&src, arenas, 1, 5);
        // Everyone stands still, so the first step shows the places as laid out.
        puppet(&mut app, "random");
        step(&mut app, 1);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..arenas as usize {
            let a = app.world().get::<HnsArena>(arena(&app, i)).expect("arena");
            // The room: x and y in 7..=10 (walls at 6 and 11).
            let in_room = |p: IVec2| (7..=10).contains(&p.x) && (7..=10).contains(&p.y);
            let mut at = Vec::new();
            for o in &a.objects {
                assert_eq!(o.start, o.pos, "start is where it landed");
                assert!(!a.doorways.contains(&o.pos), "on a doorway");
                assert!(!a.seats.contains(&o.pos), "on an agent");
                match o.kind {
                    ObjectKind::Box => assert!(in_room(o.pos), "a box left the room"),
                    ObjectKind::Ramp => assert!(!in_room(o.pos), "the ramp in the room"),
                }
                at.push((o.pos.x, o.pos.y));
            }
            seen.insert(at);
        }
        seen.len()
    };
    assert!(places(true) >= 20, "scattered into few places");
    assert_eq!(places(false), 1, "placed without scatter_objects");
}
