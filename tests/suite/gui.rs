//! The window (feature `gui`), run off-screen under a virtual display:
//! `xvfb-run -a -s "-screen 0 1920x1080x24" cargo test --features gui --test suite gui::`.
//!
//! - One scene of every family: the screenshot shows each agent's team colour at the cell
//!   where the replay (recorded by the window itself) says it stands, and the egui panel is
//!   drawn; the window's per-step state hashes and replay lines equal a headless run's with
//!   the same seed.
//! - A replay plays in the window with its agents where the replay puts them.
//! - `train --gui` draws arena 0 while the training run goes on to its end.
#![cfg(feature = "gui")]

use std::path::{Path, PathBuf};
use std::process::Command;

use emergence::frames::{Frame, Layout, PANEL_FILL, PANEL_WIDTH, Replay, team_colour};

const SIZE: [u32; 2] = [1280, 800];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn emergence() -> Command {
    assert!(
        std::env::var_os("DISPLAY").is_some(),
        "the window tests need a display: run them under \
         xvfb-run -a -s \"-screen 0 1920x1080x24\" cargo test --features gui --test suite gui::"
    );
    let mut c = Command::new(env!("CARGO_BIN_EXE_emergence"));
    c.current_dir(root());
    c
}

fn ok(c: &mut Command) -> String {
    let out = c.output().expect("run emergence");
    assert!(
        out.status.success(),
        "{c:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn close(a: [u8; 3], b: [u8; 3], tol: i32) -> bool {
    (0..3).all(|i| (i32::from(a[i]) - i32::from(b[i])).abs() <= tol)
}

/// Checks a screenshot against the frame it shows: every agent's team colour at its cell's
/// centre, and the side panel drawn by egui (its fill colour and some text).
fn check_picture(png: &Path, frame: &Frame, what: &str) {
    let img = image::open(png)
        .unwrap_or_else(|e| panic!("{what}: {}: {e}", png.display()))
        .to_rgb8();
    assert_eq!(
        img.dimensions(),
        (SIZE[0], SIZE[1]),
        "{what}: screenshot size"
    );
    let (w, h) = frame.board_size();
    let layout = Layout::new([SIZE[0] as f32, SIZE[1] as f32], w, h);
    let mut checked = 0;
    for a in &frame.agents {
        let Some(p) = frame.board_pos(a) else {
            continue;
        };
        let [x, y] = layout.centre(p[0], p[1]);
        let px = img.get_pixel(x as u32, y as u32).0;
        assert!(
            close(px, team_colour(a.team), 12),
            "{what}: agent {} of team {} at cell {:?} (pixel {x},{y}) is drawn {px:?}, \
             expected its team colour {:?}",
            a.slot,
            a.team,
            p,
            team_colour(a.team)
        );
        checked += 1;
    }
    assert!(checked > 0, "{what}: no agent on the board to check");
    check_panel(&img, what);
}

/// The egui side panel: mostly its fill colour, with text on it.
fn check_panel(img: &image::RgbImage, what: &str) {
    let x0 = SIZE[0] - PANEL_WIDTH as u32 + 8;
    let (mut fill, mut bright, mut all) = (0u32, 0u32, 0u32);
    for y in 8..SIZE[1] - 8 {
        for x in x0..SIZE[0] - 8 {
            let p = img.get_pixel(x, y).0;
            all += 1;
            if close(p, PANEL_FILL, 3) {
                fill += 1;
            }
            if p.iter().map(|&c| u32::from(c)).sum::<u32>() > 450 {
                bright += 1;
            }
        }
    }
    assert!(
        fill * 3 > all,
        "{what}: the side panel's fill colour covers {fill} of {all} pixels"
    );
    assert!(
        bright * 500 > all,
        "{what}: the side panel shows no text ({bright} bright pixels of {all})"
    );
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn every_family_is_drawn_in_team_colours_and_steps_like_headless() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The Prisoner's Dilemma runs 10 rounds an episode: 25 steps cross two episode ends.
    for (scene, family, frames) in [
        ("scenes/dilemma/prisoners_dilemma.scene.ron", "matrix", 25),
        (
            "scenes/dilemma/commons_harvest_open.scene.ron",
            "commons",
            6,
        ),
        ("scenes/dilemma/clean_up.scene.ron", "cleanup", 6),
        (
            "scenes/hide_and_seek/quadrant.scene.ron",
            "hide_and_seek",
            6,
        ),
        ("scenes/maze/split_view.scene.ron", "maze", 6),
    ] {
        let d = dir.path();
        let png = d.join(format!("{family}.png"));
        let replay = d.join(format!("{family}.jsonl"));
        let hashes = d.join(format!("{family}.hash"));
        ok(emergence()
            .args([
                "view", scene, "--seed", "7", "--agent", "0", "--size", "1280x800",
            ])
            .args(["--frames", &frames.to_string()])
            .arg("--screenshot")
            .arg(&png)
            .arg("--record")
            .arg(&replay)
            .arg("--hash-log")
            .arg(&hashes));
        // The same seed headless.
        let h_replay = d.join(format!("{family}-headless.jsonl"));
        let h_hashes = d.join(format!("{family}-headless.hash"));
        ok(emergence()
            .args([
                "run",
                scene,
                "--seed",
                "7",
                "--arenas",
                "1",
                "--episodes",
                "3",
                "--quiet",
            ])
            .arg("--record")
            .arg(&h_replay)
            .arg("--hash-log")
            .arg(&h_hashes));
        let (gui, headless) = (lines(&hashes), lines(&h_hashes));
        assert_eq!(gui.len(), frames, "{family}: one hash per step");
        assert_eq!(
            gui[..],
            headless[..frames],
            "{family}: the window's state hashes differ from the headless run's"
        );
        let (gui, headless) = (lines(&replay), lines(&h_replay));
        assert_eq!(
            gui[..],
            headless[..gui.len()],
            "{family}: the window's replay differs from the headless run's"
        );
        let r = Replay::load(&replay).expect("the window's replay");
        assert_eq!(r.frames.len(), frames, "{family}: one replay line per step");
        let last = r.frames.last().expect("a recorded step");
        check_picture(&png, last, family);
    }
}

#[test]
fn a_replay_plays_in_the_window_with_its_agents_where_it_puts_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let replay = dir.path().join("hns.jsonl");
    ok(emergence()
        .args([
            "run",
            "scenes/hide_and_seek/quadrant.scene.ron",
            "--seed",
            "3",
        ])
        .args([
            "--arenas",
            "2",
            "--episodes",
            "1",
            "--max-steps",
            "12",
            "--quiet",
        ])
        .arg("--record")
        .arg(&replay));
    let png = dir.path().join("replay.png");
    ok(emergence()
        .arg("view")
        .arg("--replay")
        .arg(&replay)
        .args(["--frames", "5", "--agent", "1"])
        .arg("--screenshot")
        .arg(&png));
    // The cursor starts at the first frame and moves one frame per drawn frame.
    let r = Replay::load(&replay).expect("replay");
    let shown = r.arena_frames(0)[5].clone();
    check_picture(&png, &shown, "replay");
    // A replay file with a broken line is refused with its line and column.
    let broken = dir.path().join("broken.jsonl");
    let mut text = std::fs::read_to_string(&replay).expect("replay");
    text.push_str("{\"arena\": 0, \"episode\": oops}\n");
    std::fs::write(&broken, text).expect("write");
    let out = emergence()
        .arg("view")
        .arg("--replay")
        .arg(&broken)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let line = std::fs::read_to_string(&broken)
        .expect("read")
        .lines()
        .count();
    assert!(
        err.contains(&format!("broken.jsonl:{line}:")) && err.contains("expected a step line"),
        "{err}"
    );
}

#[test]
fn training_with_the_window_draws_arena_0_and_finishes_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let png = dir.path().join("train.png");
    ok(emergence()
        .args([
            "train",
            "scenes/dilemma/coordination.scene.ron",
            "--algo",
            "reinforce",
        ])
        .args([
            "--iterations",
            "2",
            "--arenas",
            "2",
            "--seed",
            "3",
            "--quiet",
        ])
        .arg("--out")
        .arg(&out)
        .args(["--gui", "--frames", "20"])
        .arg("--screenshot")
        .arg(&png));
    assert!(png.is_file(), "no screenshot");
    let rows = std::fs::read_to_string(out.join("metrics.jsonl")).expect("metrics");
    assert_eq!(rows.lines().count(), 2, "both iterations ran");
    let img = image::open(&png).expect("png").to_rgb8();
    assert_eq!(img.dimensions(), (SIZE[0], SIZE[1]));
    check_panel(&img, "train --gui");
}

#[test]
fn editing_the_scene_reloads_it_and_a_broken_edit_is_shown_with_its_place() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().expect("tempdir");
    let scene = dir.path().join("pd.scene.ron");
    let good = std::fs::read_to_string(root().join("scenes/dilemma/prisoners_dilemma.scene.ron"))
        .expect("scene");
    std::fs::write(&scene, &good).expect("write");
    let mut child = emergence()
        .arg("view")
        .arg(&scene)
        .args(["--frames", "1000000", "--speed", "30"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Writes `text` and waits for a line holding `what`, writing the file again every 5 s
    // until one comes (at most 60 s): under a loaded machine the window may start watching
    // the file only after a first write.
    let wait_for = |text: &str, what: &str| -> Option<String> {
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end {
            std::fs::write(&scene, text).expect("write");
            let again = Instant::now() + Duration::from_secs(5);
            while Instant::now() < again.min(end) {
                if let Ok(l) = rx.recv_timeout(Duration::from_millis(200))
                    && l.contains(what)
                {
                    return Some(l);
                }
            }
        }
        None
    };
    // Let the window start, then break the file: a field name the schema does not know.
    std::thread::sleep(Duration::from_secs(3));
    let broken = good.replacen("name:", "nmae:", 1);
    let line = broken
        .lines()
        .position(|l| l.contains("nmae:"))
        .expect("the edit")
        + 1;
    let err = wait_for(&broken, "scene error");
    // Then mend it: the scene reloads.
    let reloaded = wait_for(&good, "scene reloaded");
    let _ = child.kill();
    let _ = child.wait();
    let err = err.expect("no scene error was reported for the broken edit");
    assert!(
        err.contains(&format!("pd.scene.ron:{line}:")),
        "the error does not name the file and line {line}: {err}"
    );
    assert!(reloaded.is_some(), "the mended scene was not reloaded");
}

/// A family from outside the crate (`examples/coin_game/`) opens in the window: the example
/// program registers it and shows its scene; the screenshot has both players in their team
/// colours on the board and the side panel.
#[test]
fn a_family_from_outside_the_crate_opens_in_the_window() {
    assert!(
        std::env::var_os("DISPLAY").is_some(),
        "the window tests need a display (xvfb-run)"
    );
    let bin = crate::common::example_binary("coin_game");
    let dir = tempfile::tempdir().expect("tempdir");
    let png = dir.path().join("coin.png");
    ok(Command::new(&bin).arg("--screenshot").arg(&png));
    let img = image::open(&png).expect("screenshot").to_rgb8();
    assert_eq!(img.dimensions(), (SIZE[0], SIZE[1]));
    let board = SIZE[0] - PANEL_WIDTH as u32;
    for team in 0..2u8 {
        let n = (0..SIZE[1])
            .flat_map(|y| (0..board).map(move |x| (x, y)))
            .filter(|&(x, y)| close(img.get_pixel(x, y).0, team_colour(team), 12))
            .count();
        assert!(n > 1000, "team {team}'s player is not drawn ({n} pixels)");
    }
    check_panel(&img, "coin game");
}
