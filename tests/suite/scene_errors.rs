//! One test per class of scene error, asserting the line, the column and the message.

use emergence::load::parse_scene;
use emergence::scene::{SceneError, SceneErrorKind};
use std::path::Path;

fn err(src: &str) -> SceneError {
    match parse_scene(src, Path::new("bad.scene.ron")) {
        Ok(_) => panic!("scene was accepted"),
        Err(e) => e,
    }
}

/// A valid grid scene; tests break one thing at a time.
const GOOD: &str = r#"(
    name: "ok",
    family: CommonsHarvest(regrowth_radius: 2.0),
    map: [
        "WWWWW",
        "WPA.W",
        "WWWWW",
    ],
    legend: { 'W': Wall, '.': Floor, 'A': Apple, 'P': Spawn },
    teams: [(name: "h", policy: "random")],
)"#;

fn assert_at(e: &SceneError, line: usize, col: usize, needle: &str) {
    let text = e.to_string();
    assert_eq!(e.line_col(), Some((line, col)), "{text}");
    assert!(
        text.starts_with(&format!("bad.scene.ron:{line}:{col}: ")),
        "{text}"
    );
    assert!(text.contains(needle), "{text:?} lacks {needle:?}");
}

#[test]
fn good_scene_is_accepted() {
    let s = parse_scene(GOOD, Path::new("ok.scene.ron")).expect("valid");
    assert_eq!((s.width, s.height, s.agent_count()), (5, 3, 1));
}

#[test]
fn malformed_ron() {
    let e = err("(\n    name: \"x\",\n    family: Matrix(rounds: 3\n");
    assert!(matches!(e.kind(), Some(SceneErrorKind::Syntax(_))), "{e}");
    assert_eq!(e.line_col(), Some((3, 29)), "{e}");
    assert!(e.to_string().contains("Expected comma"), "{e}");
}

#[test]
fn unknown_field_lists_the_allowed_ones() {
    let e = err(&GOOD.replace("    name: \"ok\",", "    name: \"ok\",\n    colour: 3,"));
    assert_at(&e, 3, 5, "Unexpected field named `colour`");
    assert!(
        e.to_string().contains("`description`") && e.to_string().contains("`teams`"),
        "{e}"
    );
}

#[test]
fn wrong_type() {
    let e = err(&GOOD.replace("regrowth_radius: 2.0", "regrowth_radius: \"far\""));
    assert!(
        matches!(e.kind(), Some(SceneErrorKind::Syntax(m)) if m.contains("Expected") || m.contains("expected")),
        "{e}"
    );
    assert_eq!(e.line_col().map(|l| l.0), Some(3), "{e}");
}

#[test]
fn unknown_legend_character_names_row_and_column() {
    let e = err(&GOOD.replace("\"WPA.W\"", "\"WPAxW\""));
    // Line 6 of the file; the x is the 4th map character, after the opening quote at col 9.
    assert_at(
        &e,
        6,
        13,
        "map row 2, column 4: character 'x' is not in the legend; expected one of",
    );
}

#[test]
fn ragged_map_rows() {
    let e = err(&GOOD.replace("\"WPA.W\"", "\"WPA.WW\""));
    assert_at(
        &e,
        6,
        9,
        "map row 2 has 6 characters; expected 5, like row 1",
    );
}

#[test]
fn team_without_spawn_cell() {
    let src = GOOD.replace("'P': Spawn", "'P': Floor");
    let e = err(&src);
    assert_at(&e, 10, 13, "team \"h\" has no spawn cell; expected");
}

#[test]
fn too_many_agents_for_the_spawn_cells() {
    let e = err(&GOOD.replace(
        "(name: \"h\", policy: \"random\")",
        "(name: \"h\", count: 3, policy: \"random\")",
    ));
    assert!(
        matches!(
            e.kind(),
            Some(SceneErrorKind::TooFewSpawnCells {
                needed: 3,
                available: 1,
                ..
            })
        ),
        "{e}"
    );
}

#[test]
fn unknown_policy() {
    let e = err(&GOOD.replace("\"random\"", "\"genius\""));
    assert_at(
        &e,
        10,
        33,
        "unknown policy \"genius\"; expected one of: random,",
    );
}

#[test]
fn policy_of_another_family() {
    let e = err(&GOOD.replace("\"random\"", "\"tit_for_tat\""));
    assert_at(
        &e,
        10,
        33,
        "policy \"tit_for_tat\" does not play CommonsHarvest; expected one of: random, greedy_harvester",
    );
}

#[test]
fn out_of_range_parameter() {
    let e = err(&GOOD.replace("regrowth_radius: 2.0", "regrowth_radius: -1.0"));
    assert_at(
        &e,
        3,
        45,
        "family.regrowth_radius is -1; expected a number in (0, 10]",
    );
    let e = err(&GOOD.replace("regrowth_radius: 2.0", "regrowth: [0.0, 0.1, 0.2, 1.5]"));
    assert_at(
        &e,
        3,
        54,
        "family.regrowth[3] is 1.5; expected a number in [0, 1]",
    );
}

#[test]
fn training_defaults_out_of_range_are_scene_errors() {
    let with = |train: &str| {
        err(&GOOD.replace(
            "    name: \"ok\",\n",
            &format!("    name: \"ok\",\n    train: ({train}),\n"),
        ))
    };
    let e = with("lr: NaN, iterations: 5");
    assert_at(
        &e,
        3,
        17,
        "train.lr is NaN; expected a finite number in [0, 1]",
    );
    let e = with("iterations: 0");
    assert_at(
        &e,
        3,
        25,
        "train.iterations is 0; expected an integer in [1, 1000000]",
    );
    let e = with("arenas: 100000000");
    assert_at(&e, 3, 21, "train.arenas is 100000000");
    let e = with("arenas: 6, group_size: 4");
    assert_at(
        &e,
        3,
        36,
        "train.group_size 4 does not divide train.arenas 6",
    );
    let e = with("gamma: 1.5");
    assert_at(
        &e,
        3,
        20,
        "train.gamma is 1.5; expected a finite number in [0, 1]",
    );
    let ok = GOOD.replace(
        "    name: \"ok\",\n",
        "    name: \"ok\",\n    train: (lr: 0.5, arenas: 8, group_size: 4, gamma: 1.0),\n",
    );
    parse_scene(&ok, Path::new("ok.scene.ron")).expect("in range");
    // A training run's own scene copy is read without its train block (the run's settings
    // are in its config.json), so a copy saved before these checks still loads.
    let dir = tempfile::tempdir().expect("tmp");
    let copy = dir.path().join("scene.ron");
    std::fs::write(
        &copy,
        GOOD.replace(
            "    name: \"ok\",\n",
            "    name: \"ok\",\n    train: (checkpoint_every: 0),\n",
        ),
    )
    .expect("write");
    assert!(emergence::load::load_scene(&copy).is_err());
    emergence::load::load_run_scene(&copy).expect("a run's copy");
}

#[test]
fn a_legend_key_given_twice_and_a_team_name_with_a_line_break() {
    let e = err(&GOOD.replace("'P': Spawn }", "'P': Spawn, 'W': Floor }"));
    assert_at(&e, 9, 62, "legend key 'W' is given twice");
    let e = err(&GOOD.replace("name: \"h\"", "name: \"h\\nx\""));
    assert_at(&e, 10, 20, "team name \"h\\nx\" holds a control character");
}

#[test]
fn legend_thing_the_family_does_not_use() {
    let e = err(&GOOD.replace("'.': Floor", "'.': River"));
    assert!(
        e.to_string().contains("which CommonsHarvest does not use"),
        "{e}"
    );
}

#[test]
fn matrix_game_needs_two_players() {
    let src = "(name: \"pd\", family: Matrix(rounds: 5), teams: [(name: \"a\", count: 3, policy: \"random\")])";
    let e = err(src);
    assert_at(
        &e,
        1,
        41,
        "the teams have 3 agents in all; expected exactly 2 agents",
    );
}

#[test]
fn io_error_names_the_file() {
    let e =
        emergence::load::load_scene(Path::new("/nonexistent/x.scene.ron")).expect_err("missing");
    assert!(
        e.to_string()
            .starts_with("/nonexistent/x.scene.ron: cannot read"),
        "{e}"
    );
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A crude fuzz over truncations and byte flips of a valid scene.
    let base = GOOD.as_bytes();
    for cut in 0..base.len() {
        let s = String::from_utf8_lossy(&base[..cut]);
        let _ = parse_scene(&s, Path::new("f.scene.ron"));
    }
    for i in 0..base.len() {
        for b in [
            b'(', b')', b'[', b'"', b'\'', b':', b',', b'/', b'*', b'#', b'r', b'0',
        ] {
            let mut v = base.to_vec();
            v[i] = b;
            let s = String::from_utf8_lossy(&v);
            let _ = parse_scene(&s, Path::new("f.scene.ron"));
        }
    }
}

#[test]
fn every_shipped_scene_is_valid() {
    let scenes = emergence::scene::find_scenes(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenes")
            .as_path(),
    );
    assert!(scenes.len() >= 5, "{scenes:?}");
    for p in scenes {
        emergence::load::load_scene(&p).unwrap_or_else(|e| panic!("{e}"));
    }
}

const HNS: &str = r#"(
    name: "hns",
    family: HideAndSeek(prep_fraction: 0.4),
    map: [
        "WWWWW",
        "Wh.sW",
        "WWWWW",
    ],
    legend: { 'W': Wall, '.': Floor, 'h': TeamSpawn("hiders"), 's': TeamSpawn("seekers") },
    teams: [
        (name: "hiders", role: "hider", policy: "hider"),
        (name: "seekers", role: "seeker", policy: "seeker"),
    ],
)"#;

#[test]
fn hide_and_seek_roles_and_parameters() {
    parse_scene(HNS, Path::new("ok.scene.ron")).expect("valid");
    let e = err(&HNS.replace("role: \"seeker\"", "role: \"chaser\""));
    assert_at(&e, 12, 33, "team \"seekers\" has role \"chaser\"");
    let e = err(&HNS.replace("role: \"seeker\"", "role: \"hider\""));
    assert_at(&e, 10, 5, "hide-and-seek needs a seeker team");
    let e = err(&HNS.replace("prep_fraction: 0.4", "prep_fraction: 1.5"));
    assert_at(&e, 3, 40, "family.prep_fraction");
    let e = err(&HNS.replace("'.': Floor", "'.': Apple"));
    assert_at(&e, 9, 26, "which HideAndSeek does not use");
    assert!(e.to_string().contains("LowWall, Box, Ramp"), "{e}");
    // A policy of another family.
    let e = err(&HNS.replace("policy: \"hider\"", "policy: \"greedy_harvester\""));
    assert_at(&e, 11, 49, "greedy_harvester");
}

const MAZE: &str = r#"(
    name: "maze",
    family: Maze(),
    map: [
        "WWWWWWW",
        "WS.p.DW",
        "WS.k.LE",
        "WWWWWWW",
    ],
    legend: { 'W': Wall, '.': Floor, 'S': Spawn, 'p': Plate("a"), 'D': Door("a"),
              'k': Key("red"), 'L': LockedDoor("red"), 'E': Exit },
    teams: [(name: "pair", count: 2, policy: "random")],
)"#;

#[test]
fn maze_maps_and_generation() {
    parse_scene(MAZE, Path::new("ok.scene.ron")).expect("valid");
    let e = err(&MAZE.replace("'p': Plate(\"a\")", "'p': Plate(\"b\")"));
    assert_at(&e, 4, 5, "a door that no plate opens: Door(\"a\")");
    let e = err(&MAZE.replace("'k': Key(\"red\")", "'k': Floor"));
    assert_at(&e, 4, 5, "a locked door without its key");
    let e = err(&MAZE.replace("LE\"", "L.\""));
    assert_at(&e, 4, 5, "the maze has no exit");
    let g = MAZE.replace("family: Maze(),", "family: Maze(generate: (width: 8)),");
    let e = err(&g);
    assert_at(&e, 3, 36, "an odd number from 7 to 63");
    // A generated maze has no map (docs/scenes.md says `map` must be absent for it).
    let both = MAZE.replace("family: Maze(),", "family: Maze(generate: (width: 9)),");
    let e = err(&both);
    assert!(
        e.to_string().contains("both a map and family.generate"),
        "{e}"
    );
    let solo = r#"(name: "m", family: Maze(generate: (plate_doors: 1)), teams: [(name: "a", policy: "random")])"#;
    let e = err(solo);
    assert_at(&e, 1, 50, "plate doors need one agent on the plate");
    let crowded = r#"(name: "m", family: Maze(generate: (width: 7, height: 7, plate_doors: 8, key_doors: 8)), teams: [(name: "a", policy: "random"), (name: "b", policy: "random")])"#;
    let e = err(crowded);
    let text = e.to_string();
    assert!(
        text.starts_with("bad.scene.ron:1:")
            && text.contains("a 7×7 maze has room for")
            && text.contains("not the 8 and 8 asked"),
        "{text}"
    );
    let e = err(&MAZE.replace(
        "family: Maze(),",
        "family: Maze(vocabulary: [\"go\", \"go\"]),",
    ));
    assert_at(&e, 3, 37, "family.vocabulary[1]");
    // Mirroring is a maze rule: another family's scene that asks for it is refused there.
    let mirrored = GOOD.replace(
        "teams: [(name: \"h\", policy: \"random\")],",
        "teams: [(name: \"h\", policy: \"random\")],\n    randomize: (mirror: true),",
    );
    let e = err(&mirrored);
    assert_at(
        &e,
        11,
        25,
        "mirror is not a rule of the CommonsHarvest family",
    );
    parse_scene(
        &mirrored.replace("mirror: true", "mirror: false"),
        Path::new("ok.scene.ron"),
    )
    .expect("mirror: false is every family's");
}

/// What a family's map needs is checked as soon as its cells are read, before the spawn
/// cells: a Clean Up map without a river or apples, a hide-and-seek map of too many
/// objects, each reported even where the map has no spawn cell either.
#[test]
fn a_familys_map_rules_come_before_the_spawn_cells() {
    let scene = |family: &str, row: &str, legend: &str| {
        format!(
            "(\n    name: \"m\",\n    family: {family},\n    map: [\"{row}\"],\n    legend: {{{legend}}},\n    teams: [(name: \"a\", count: 1, policy: \"random\")],\n)"
        )
    };
    let no_river = err(&scene(
        "CleanUp(apple_prob: 0.1)",
        "WAAW",
        "'W': Wall, 'A': Apple",
    ));
    assert!(
        no_river
            .to_string()
            .contains("the Clean Up map has no river"),
        "{no_river}"
    );
    let no_apple = err(&scene(
        "CommonsHarvest(apple_reward: 1.0)",
        "WWWW",
        "'W': Wall",
    ));
    assert!(
        no_apple
            .to_string()
            .contains("the CommonsHarvest map has no apple cell"),
        "{no_apple}"
    );
    let boxes = "b".repeat(251);
    let crowded = err(&scene("HideAndSeek(reward: 1.0)", &boxes, "'b': Box"));
    assert!(crowded.to_string().contains("boxes and ramps"), "{crowded}");
    // With the family's rules met, the missing spawn cell is what is reported.
    let no_spawn = err(&scene(
        "CleanUp(apple_prob: 0.1)",
        "W~AW",
        "'W': Wall, 'A': Apple, '~': River",
    ));
    assert!(!no_spawn.to_string().contains("river"), "{no_spawn}");
}
