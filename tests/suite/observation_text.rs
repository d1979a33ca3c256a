//! Golden texts: the observation text of each family on hand-built states, pinned exactly.

use crate::common;

use common::*;
use emergence::core::*;
use emergence::envs::{ActionNames, ActiveScene};
use emergence::observe::text::{Speaker, TextFormat};

/// The texts arena 0's agents read on the last step, captured in the Encode step (after
/// Observe, before Decide: where language-model policies read them).
#[derive(bevy::prelude::Resource, Default)]
struct Texts(Vec<String>);

fn capture_texts(
    mut texts: bevy::prelude::ResMut<Texts>,
    scene: bevy::prelude::Res<ActiveScene>,
    names: bevy::prelude::Res<ActionNames>,
    arenas: bevy::prelude::Res<Arenas>,
    members: bevy::prelude::Query<&ArenaAgents>,
    agents: bevy::prelude::Query<(
        &Team,
        &Role,
        &Observation,
        &ActionMask,
        &Reward,
        emergence::envs::senses::SensesQuery,
    )>,
) {
    let fmt = TextFormat::new(&scene.0, &names.0);
    let Ok(m) = members.get(arenas.entities[0]) else {
        return;
    };
    texts.0 = m
        .entities()
        .iter()
        .filter_map(|&e| agents.get(e).ok())
        .map(|(team, role, obs, mask, reward, senses)| {
            let who = Speaker {
                team: team.0,
                role: role.0,
            };
            fmt.render(who, obs, senses.get(), *mask, reward.0)
        })
        .collect();
}

/// An app of `src` whose agents are puppets, capturing arena 0's texts every step.
fn app(src: &str) -> (bevy::app::App, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use bevy::prelude::IntoScheduleConfigs;
    let mut app = test_app(src, 1, 1, 0);
    let acts = puppet(&mut app, "random");
    app.init_resource::<Texts>()
        .add_systems(SimSchedule, capture_texts.in_set(SimSystems::Encode));
    (app, acts)
}

fn text(app: &bevy::app::App, slot: usize) -> String {
    app.world().resource::<Texts>().0[slot].clone()
}

/// `src` with `text: Compact` (the scene's observations in the compact style).
fn compact(src: &str) -> String {
    let at = src.find('(').expect("a scene") + 1;
    format!("{}text: Compact, {}", &src[..at], &src[at..])
}

#[test]
fn matrix_game_text() {
    let src = r#"(name: "pd", family: Matrix(rounds: 10, history: 2),
        teams: [(name: "me", role: "player", policy: "random"), (name: "you", role: "player", policy: "random")])"#;
    let play = |src: &str| {
        let (mut app, acts) = app(src);
        set_actions(&acts, &[0, 1]);
        step(&mut app, 1);
        set_actions(&acts, &[1, 1]);
        step(&mut app, 2);
        app
    };
    let app = play(src);
    assert_eq!(
        text(&play(&compact(src)), 0),
        [
            "rounds 10 legend you other you got",
            "player me round 3",
            "cooperate defect 0",
            "defect defect 1",
            "other cooperate 0 defect 2",
            "actions cooperate defect",
            "",
        ]
        .join("\n")
    );
    assert_eq!(
        text(&app, 0),
        [
            "role player team me round 3 of 10",
            "you cooperate other defect you got 0",
            "you defect other defect you got 1",
            "other so far cooperate 0 defect 2",
            "actions cooperate defect",
            "",
        ]
        .join("\n")
    );
}

#[test]
fn commons_harvest_text() {
    let src = r#"(name: "ch", family: CommonsHarvest(view: (ahead: 2, behind: 1, side: 2)),
        map: ["WWWWWW", "WA.AAW", "W.P.PW", "WWWWWW"],
        legend: {'W': Wall, '.': Floor, 'A': Apple, 'P': Spawn},
        teams: [(name: "g", role: "harvester", count: 2, policy: "random")],
        randomize: (shuffle_spawns: false, random_facing: false))"#;
    let play = |src: &str| {
        let (mut app, acts) = app(src);
        set_actions(&acts, &[1, 7]);
        step(&mut app, 2);
        app
    };
    let app = play(src);
    let small = play(&compact(src));
    assert_eq!(text(&small, 0), [
        "legend @ you T teammate O other W wall A apple , empty apple cell ~ river # dirt ? outside",
        "view ahead is up 1000 steps",
        "harvester g step 1",
        "? ? ? ? ?",
        "W W W W W",
        "W A @ A A",
        "W . . . T",
        "reward 0",
        "actions noop forward backward step_left step_right turn_left turn_right zap",
        "",
    ]
    .join("\n"));
    assert_eq!(text(&small, 1).lines().nth(8), Some("zap in 4"));
    assert_eq!(text(&app, 0), [
        "role harvester team g step 1 of 1000",
        "view ahead is up",
        "? ? ? ? ?",
        "W W W W W",
        "W A @ A A",
        "W . . . T",
        "legend @ you T teammate O other W wall A apple , empty apple cell ~ river # dirt ? outside",
        "last reward 0",
        "zap ready",
        "actions noop forward backward step_left step_right turn_left turn_right zap",
        "",
    ]
    .join("\n"));
    assert_eq!(text(&app, 1), [
        "role harvester team g step 1 of 1000",
        "view ahead is up",
        "W W W W ?",
        "T A A W ?",
        ". . @ W ?",
        "W W W W ?",
        "legend @ you T teammate O other W wall A apple , empty apple cell ~ river # dirt ? outside",
        "last reward 0",
        "zap ready in 4 steps",
        "actions noop forward backward step_left step_right turn_left turn_right",
        "",
    ]
    .join("\n"));
}

/// A hide-and-seek scene of a hider and a seeker on `map` (`h`, `s`; `b` a box), preparation
/// half of 20 steps, vision range 3, fixed spawns and facings; `more` adds family parameters.
fn hs_scene(more: &str, map: &[&str]) -> String {
    let rows: Vec<String> = map.iter().map(|r| format!("{r:?}")).collect();
    format!(
        r#"(name: "hs", family: HideAndSeek(prep_fraction: 0.5, vision_range: 3{more}),
        map: [{}],
        legend: {{'W': Wall, '.': Floor, 'b': Box, 'h': TeamSpawn("hiders"), 's': TeamSpawn("seekers")}},
        teams: [(name: "hiders", role: "hider", policy: "random"), (name: "seekers", role: "seeker", policy: "random")],
        episode: (max_steps: 20),
        randomize: (shuffle_spawns: false, random_facing: false))"#,
        rows.join(", ")
    )
}

#[test]
fn hide_and_seek_text() {
    let src = &hs_scene(
        "",
        &[
            "WWWWWWW", "W..b..W", "W.....W", "W..h..W", "Ws....W", "WWWWWWW",
        ],
    );
    let play = |src: &str| {
        let (mut app, acts) = app(src);
        // The hider steps up to the box and locks it; the seekers wait out the preparation.
        set_actions(&acts, &[1, 0]);
        step(&mut app, 1);
        set_actions(&acts, &[7, 0]);
        step(&mut app, 1);
        set_actions(&acts, &[0, 0]);
        step(&mut app, 1);
        app
    };
    let app = play(src);
    let small = play(&compact(src));
    let preamble = [
        "legend @ you T your side O other side # wall = low wall b box B box locked by your side X box locked by them r ramp R ramp locked by your side Y ramp locked by them ? unseen",
        "view ahead is up 20 steps",
    ];
    assert_eq!(
        text(&small, 0),
        preamble
            .iter()
            .copied()
            .chain([
                "hider hiders step 2 preparation 8",
                "at 3 2 north",
                "? ? ? ? ? ? ?",
                "? # # ? # # ?",
                "? . . B . . ?",
                "? ? ? @ ? ? ?",
                "reward 0",
                "actions noop backward turn_left turn_right unlock",
                "",
            ])
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        text(&small, 1),
        preamble
            .iter()
            .copied()
            .chain([
                "seeker seekers step 2 preparation 8",
                "at 1 4 north",
                "? ? ? . ? ? ?",
                "? ? ? . . O ?",
                "? ? # . . . ?",
                "? ? ? @ ? ? ?",
                "reward 0",
                "opponent 0 at 3 2",
                "actions noop",
                "",
            ])
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(text(&app, 0), [
        "role hider team hiders step 2 of 20 phase preparation 8 steps left",
        "you at 3 2 facing north",
        "view ahead is up",
        "? ? ? ? ? ? ?",
        "? # # ? # # ?",
        "? . . B . . ?",
        "? ? ? @ ? ? ?",
        "legend @ you T your side O other side # wall = low wall b box B box locked by your side X box locked by them r ramp R ramp locked by your side Y ramp locked by them ? unseen",
        "last reward 0",
        "you see nobody",
        "actions noop backward turn_left turn_right unlock",
        "",
    ]
    .join("\n"));
    assert_eq!(text(&app, 1), [
        "role seeker team seekers step 2 of 20 phase preparation 8 steps left",
        "you at 1 4 facing north",
        "view ahead is up",
        "? ? ? . ? ? ?",
        "? ? ? . . O ?",
        "? ? # . . . ?",
        "? ? ? @ ? ? ?",
        "legend @ you T your side O other side # wall = low wall b box B box locked by your side X box locked by them r ramp R ramp locked by your side Y ramp locked by them ? unseen",
        "last reward 0",
        "you see opponent 0 at 3 2",
        "actions noop",
        "",
    ]
    .join("\n"));
}

#[test]
fn hide_and_seek_text_with_the_entity_list() {
    // The scene of `hide_and_seek_text` with the entity list and a window of range 1, and
    // a wall across row 3 with a doorway at (4, 3).
    let src = &hs_scene(
        ", entities: true, window: 1",
        &[
            "WWWWWWW", "W.b...W", "W.....W", "WWWW.WW", "W..h..W", "Ws....W", "WWWWWWW",
        ],
    );
    let play = |src: &str| {
        let (mut app, acts) = app(src);
        // The hider steps east, turns north and walks through the doorway: the box is in
        // sight, beyond the window's range.
        for a in [4, 1, 3, 1, 1, 0] {
            set_actions(&acts, &[a, 0]);
            step(&mut app, 1);
        }
        app
    };
    let app = play(src);
    let small = play(&compact(src));
    assert_eq!(
        text(&small, 0).lines().skip(2).collect::<Vec<_>>(),
        [
            "hider hiders step 5 preparation 5",
            "at 4 2 north",
            ". . .",
            "? @ ?",
            "reward 0",
            "b 0 at 2 1",
            "door 4 3",
            "actions noop forward backward turn_left turn_right",
        ]
    );
    let full = text(&app, 0);
    assert!(
        full.contains("you see box 0 at 2 1\nopen door at 4 3\n"),
        "{full}"
    );
    // The seeker at (1, 5) facing north sees the wall row and nothing behind it: no box,
    // and the doorway listed all the same.
    let seeker = text(&small, 1);
    assert!(
        seeker.contains("reward 0\ndoor 4 3\nactions noop"),
        "{seeker}"
    );
}

#[test]
fn maze_text() {
    let src = r#"(name: "mz", family: Maze(view: 1, knowledge: Strips, vocabulary: ["north", "south", "east", "west", "plate", "door", "key", "here", "wait", "exit"]),
        map: ["WWWWWWW", "WS.k.LW", "WS...EW", "WWWWWWW"],
        legend: {'W': Wall, '.': Floor, 'S': Spawn, 'k': Key("red"), 'L': LockedDoor("red"), 'E': Exit},
        teams: [(name: "pair", count: 2, policy: "random")],
        randomize: (shuffle_spawns: false, random_facing: false))"#;
    let play = |src: &str| {
        let (mut app, acts) = app(src);
        // Agent 0 walks east twice and picks up the red key; agent 1 says "west" on the
        // second step, which agent 0 hears on the third.
        set_actions(&acts, &[2, 0]);
        step(&mut app, 1);
        force_words(&mut app);
        app.world_mut().resource_mut::<ForcedWords>().0 = vec![None, Some(3)];
        step(&mut app, 1);
        app.world_mut().resource_mut::<ForcedWords>().0.clear();
        set_actions(&acts, &[0, 0]);
        step(&mut app, 1);
        app
    };
    let app = play(src);
    assert_eq!(text(&play(&compact(src)), 0), [
        "legend @ you T teammate # wall p plate D shut door / open door k key L locked door E exit ? unknown",
        "map north is up 1000 steps",
        "say north south east west plate door key here wait exit",
        "pair pair step 2",
        "at 3 1 keys red",
        "# # # # # ? ?",
        "# . . @ . ? ?",
        "# T . . . ? ?",
        "# # # # ? ? ?",
        "reward -0.01",
        "teammate 1 at 1 2",
        "teammate 1 said west",
        "actions noop east south west",
        "",
    ]
    .join("\n"));
    assert_eq!(text(&app, 0), [
        "role pair team pair step 2 of 1000",
        "you at 3 1 keys red",
        "map north is up",
        "# # # # # ? ?",
        "# . . @ . ? ?",
        "# T . . . ? ?",
        "# # # # ? ? ?",
        "legend @ you T teammate # wall p plate D shut door / open door k key L locked door E exit ? unknown",
        "last reward -0.01",
        "teammate 1 at 1 2",
        "teammate 1 said west",
        "actions noop east south west",
        "say north south east west plate door key here wait exit",
        "",
    ]
    .join("\n"));
    // With `Local` knowledge the agent knows nothing beyond its window: the compact style
    // writes the window (3 x 3 here) instead of a map of `?`; the teammate, outside it, is
    // in its own line. The full style keeps the whole map.
    let local = src.replace("knowledge: Strips", "knowledge: Local");
    let small = text(&play(&compact(&local)), 0);
    assert_eq!(
        small.lines().skip(3).collect::<Vec<_>>(),
        [
            "pair pair step 2",
            "at 3 1 keys red",
            "# # #",
            ". @ .",
            ". . .",
            "reward -0.01",
            "teammate 1 at 1 2",
            "teammate 1 said west",
            "actions noop east south west",
        ]
    );
    let full = text(&play(&local), 0);
    assert!(full.contains("? ? . @ . ? ?\n"), "{full}");
    // A window of 7 x 7 is more cells than this 7 x 4 map: the map it is, all in sight.
    let wide = local.replace("view: 1", "view: 3");
    let small = text(&play(&compact(&wide)), 0);
    assert!(
        small.contains("at 3 1 keys red\n# # # # # # #\n# . . @ . L #\n# T . . . E #\n"),
        "{small}"
    );
    // The map draws `@` and `T` over the cells agents stand on: the line that places an
    // agent says what it stands on, so one waiting on the exit does not hide it. Both walk
    // east: agent 1 onto the exit, agent 0 (key in hand) far enough to see it.
    let on_exit = |src: &str| {
        let (mut app, acts) = self::app(src);
        set_actions(&acts, &[2, 2]);
        step(&mut app, 5);
        app
    };
    let seen = text(&on_exit(&compact(&wide)), 1);
    assert!(seen.contains("\nat 5 2 E\n"), "{seen}");
    assert!(seen.contains("\n? ? . . . @ #\n"), "{seen}");
    let mate = text(&on_exit(&compact(&wide)), 0);
    assert!(mate.contains("\nteammate 1 at 5 2 E\n"), "{mate}");
    let full = text(&on_exit(&wide), 1);
    assert!(full.contains("\nyou at 5 2 exit keys none\n"), "{full}");
    let mate = text(&on_exit(&wide), 0);
    assert!(mate.contains("\nteammate 1 at 5 2 exit\n"), "{mate}");
}
