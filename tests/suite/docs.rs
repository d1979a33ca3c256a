//! docs/scenes.md is a tested artefact: every `ron` block in it is a whole scene that loads
//! and runs an episode; its lists of families and policies are the code's; the error
//! messages that list what the code knows (policies, families, legend things) are produced
//! here and compared with the page.

use emergence::headless::{RunConfig, run};
use emergence::load::parse_scene;
use std::path::Path;

fn page() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/scenes.md");
    std::fs::read_to_string(p).expect("docs/scenes.md")
}

/// The `ron` code blocks of the page, in order.
fn ron_blocks(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in md.lines() {
        match (&mut cur, line.trim_end()) {
            (None, "```ron") => cur = Some(String::new()),
            (Some(_), "```") => out.push(cur.take().unwrap()),
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            _ => {}
        }
    }
    out
}

/// The lines of the section that starts with `heading` (up to the next heading of its
/// level or above).
fn section<'a>(md: &'a str, heading: &str) -> Vec<&'a str> {
    let level = heading.chars().take_while(|&c| c == '#').count();
    let mut lines = md.lines().skip_while(|l| !l.starts_with(heading));
    let mut out = vec![lines.next().expect("heading")];
    for l in lines {
        let h = l.chars().take_while(|&c| c == '#').count();
        if h > 0 && h <= level && l.chars().nth(h) == Some(' ') {
            break;
        }
        out.push(l);
    }
    out
}

#[test]
fn every_scene_on_the_page_loads_and_runs_an_episode() {
    let md = page();
    let blocks = ron_blocks(&md);
    assert!(blocks.len() >= 5, "{} ron blocks", blocks.len());
    let mut families = Vec::new();
    for (i, text) in blocks.iter().enumerate() {
        let name = format!("docs-example-{i}.scene.ron");
        let scene = parse_scene(text, Path::new(&name)).unwrap_or_else(|e| panic!("{e}"));
        families.push(scene.spec.family.name());
        let mut cfg = RunConfig::new(scene);
        cfg.threads = Some(1);
        let report = run(&cfg, |_| {}).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(report.episodes, 1, "{name}");
    }
    for f in emergence::envs::family::names() {
        assert!(
            families.contains(&f),
            "no complete example of {f} on the page"
        );
    }
}

#[test]
fn the_page_lists_the_families_and_policies_the_code_has() {
    let md = page();
    let headings: Vec<String> = section(&md, "## Families")
        .iter()
        .filter_map(|l| l.strip_prefix("### `"))
        .map(|l| l.split('`').next().unwrap().to_string())
        .collect();
    // In the page's own order (simplest first); the code lists them by name.
    let mut sorted = headings.clone();
    sorted.sort();
    let shipped: Vec<&str> = emergence::envs::family::shipped()
        .iter()
        .map(|f| f.name())
        .collect();
    assert_eq!(sorted, shipped);
    // The top-level `family` field names every family's constructor.
    let family_row = md
        .lines()
        .find(|l| l.starts_with("| `family` |"))
        .expect("the family field's row");
    for f in shipped {
        assert!(
            family_row.contains(&format!("`{f}(...)`")),
            "the `family` field's row omits {f}: {family_row}"
        );
    }

    // The policy table's rows: | `name` | families | behaviour |, the behaviour word for word
    // what `emergence list` prints.
    let rows: Vec<(String, String, String)> = section(&md, "## Teams and policies")
        .iter()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells.len() == 5 && !cells[2].contains("string")).then(|| {
                (
                    cells[1].trim_matches('`').to_string(),
                    cells[2].to_string(),
                    cells[3].to_string(),
                )
            })
        })
        .collect();
    let catalogue = emergence::policy::catalogue();
    let expected: Vec<(String, String, String)> = catalogue
        .iter()
        .map(|p| {
            let fams = if p.plays_every_family() {
                "every family".to_string()
            } else {
                p.families.join(", ")
            };
            (p.name.to_string(), fams, p.doc.to_string())
        })
        .collect();
    let mut got = rows.clone();
    got.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(got, want, "the policy table of docs/scenes.md");
}

/// The page's example of an error: the line that starts with `small.scene.ron:` and holds
/// `needle`, without its position.
fn documented(md: &str, needle: &str) -> String {
    let line = md
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("small.scene.ron:") && l.contains(needle))
        .unwrap_or_else(|| panic!("no documented error holds {needle:?}"));
    line.splitn(4, ':').nth(3).unwrap().trim().to_string()
}

#[test]
fn the_errors_that_list_what_the_code_knows_are_the_pages() {
    let md = page();
    let small = ron_blocks(&md).remove(0);
    let error = |edited: String| -> String {
        let e = parse_scene(&edited, Path::new("small.scene.ron")).expect_err("an error");
        let text = e.to_string();
        text.splitn(4, ':').nth(3).unwrap().trim().to_string()
    };
    let greedy = small.replacen("policy: \"greedy_harvester\"", "policy: \"greedy\"", 1);
    assert_eq!(error(greedy), documented(&md, "unknown policy \"greedy\""));
    let tft = small.replacen("policy: \"greedy_harvester\"", "policy: \"tit_for_tat\"", 1);
    assert_eq!(error(tft), documented(&md, "does not play CommonsHarvest"));
    let apples = small.replacen("'A': Apple,", "'A': Apples,", 1);
    assert_eq!(error(apples), documented(&md, "`Apples`"));
    let family = small.replacen("family: CommonsHarvest(", "family: Commons(", 1);
    let e = parse_scene(&family, Path::new("small.scene.ron")).expect_err("an error");
    let text = e.to_string();
    let said = text.splitn(4, ':').nth(3).unwrap().trim();
    assert!(md.contains(said), "docs/scenes.md does not say {said:?}");
}

/// Every file of the repository that README.md and docs/*.md name in backquotes (`src/...`,
/// `tests/...`, `scenes/...`, ...) is there (placeholders in capitals, like
/// `experiments/NAME.experiment.ron`, aside); and the README's count of environment families
/// is the code's.
#[test]
fn the_files_the_docs_name_exist_and_the_family_count_is_the_codes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).expect("docs") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    let dirs = [
        "src/",
        "tests/",
        "python/",
        "scripts/",
        "benches/",
        "experiments/",
        "scenes/",
        "docs/",
        "examples/",
    ];
    let mut missing = Vec::new();
    let mut named = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        for quoted in text.split('`').skip(1).step_by(2) {
            // A file path: under a top folder, with an extension, no spaces, no wildcard,
            // no placeholder (`NAME`, `DIR`: capitals).
            let is_path = dirs.iter().any(|d| quoted.starts_with(d))
                && quoted.contains('.')
                && !quoted.contains([' ', '*'])
                && !quoted.chars().any(|c| c.is_ascii_uppercase());
            if !is_path {
                continue;
            }
            named += 1;
            if !root.join(quoted.trim_end_matches([':', ','])).exists() {
                missing.push(format!(
                    "{}: `{quoted}`",
                    page.strip_prefix(root).unwrap_or(page).display()
                ));
            }
        }
    }
    assert!(named > 20, "only {named} paths found: the scan is broken");
    assert!(missing.is_empty(), "named but missing: {missing:#?}");
    let families = emergence::envs::family::names().len();
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
    ];
    let readme = std::fs::read_to_string(root.join("README.md")).expect("readme");
    let said = format!("{} environment families", words[families]);
    assert!(
        readme.contains(&said),
        "README.md should say \"{said}\" (`emergence list` prints {families})"
    );
}

/// Every metric a family reports is named in its section of the page (the social outcomes in
/// their own paragraph): a run of a shipped scene of each family, its metrics' names against
/// the page.
#[test]
fn every_metric_a_family_reports_is_on_the_page() {
    let md = page();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let social = ["efficiency", "equality", "sustainability", "peace"];
    for s in social {
        assert!(
            md.contains(&format!("`{s}`")),
            "the social outcome {s} is not explained"
        );
    }
    for (family, scene) in [
        ("Matrix", "scenes/dilemma/prisoners_dilemma.scene.ron"),
        (
            "CommonsHarvest",
            "scenes/dilemma/commons_harvest_open.scene.ron",
        ),
        ("CleanUp", "scenes/dilemma/clean_up.scene.ron"),
        (
            "HideAndSeek",
            "scenes/hide_and_seek/quadrant_game.scene.ron",
        ),
        ("Maze", "scenes/maze/corridor_pair.scene.ron"),
    ] {
        let start = md
            .find(&format!("### `{family}`"))
            .unwrap_or_else(|| panic!("no section for {family}"));
        let rest = &md[start + 4..];
        let end = rest
            .find("\n### ")
            .or_else(|| rest.find("\n## "))
            .unwrap_or(rest.len());
        let section = &rest[..end];
        let mut cfg =
            RunConfig::new(emergence::load::load_scene(&root.join(scene)).expect("scene"));
        cfg.arenas = 2;
        cfg.episodes = 1;
        let report = run(&cfg, |_| {}).expect("run");
        assert!(!report.metrics.is_empty(), "{family}: no metrics");
        for name in report.metrics.keys() {
            if social.contains(&name.as_str()) {
                continue;
            }
            assert!(
                section.contains(name.as_str()),
                "{family} reports `{name}`, which its section of docs/scenes.md does not name"
            );
        }
    }
}

/// The command reference (docs/cli.md, and the window's page for `view`) gives every flag each
/// command's `--help` lists, and none it does not: a row's synopsis (`emergence CMD ...`) and the `... --flag` rows under it.
#[test]
fn the_command_reference_synopses_are_the_commands_flags() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = command_reference(root);
    let flags = |text: &str| -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        let b = text.as_bytes();
        let mut i = 0;
        while let Some(k) = text[i..].find("--") {
            let at = i + k;
            let end = text[at + 2..]
                .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
                .map_or(text.len(), |e| at + 2 + e);
            let before = if at == 0 { b' ' } else { b[at - 1] };
            if end > at + 2 && matches!(before, b' ' | b'[' | b'`' | b'(') {
                out.insert(text[at..end].to_string());
            }
            i = end.max(at + 2);
        }
        out
    };
    // The synopsis cell of a table row: the text before the first unescaped `|` after the
    // row's opening one.
    let first_cell = |row: &str| -> String {
        let body = &row[1..];
        let mut end = body.len();
        let bytes = body.as_bytes();
        for (i, &c) in bytes.iter().enumerate() {
            if c == b'|' && (i == 0 || bytes[i - 1] != b'\\') {
                end = i;
                break;
            }
        }
        body[..end].to_string()
    };
    let mut documented: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    let mut last: Option<String> = None;
    for row in readme.lines() {
        let cell = if row.starts_with("| `emergence ") {
            let cell = first_cell(row);
            let words: Vec<&str> = cell.trim().trim_matches('`').split_whitespace().collect();
            let cmd = if words[1] == "model" {
                format!("model {}", words[2])
            } else {
                words[1].to_string()
            };
            last = Some(cmd);
            cell
        } else if row.starts_with("| `... ") && last.is_some() {
            first_cell(row)
        } else {
            continue;
        };
        let cmd = last.clone().expect("a command");
        documented.entry(cmd).or_default().extend(flags(&cell));
    }
    assert!(documented.len() >= 10, "{:?}", documented.keys());
    for (cmd, given) in &documented {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_emergence"))
            .args(cmd.split(' '))
            .arg("--help")
            .output()
            .expect("the binary runs");
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        let listed: std::collections::BTreeSet<String> = help
            .lines()
            .filter_map(|l| {
                let t = l.trim_start();
                let t = t.strip_prefix("-h, ").unwrap_or(t);
                let t = if t.len() > 4 && t.as_bytes()[0] == b'-' && t.as_bytes()[2] == b',' {
                    &t[4..]
                } else {
                    t
                };
                t.starts_with("--")
                    .then(|| t.split([' ', '<']).next().unwrap_or("").to_string())
            })
            .filter(|f| f != "--help")
            .collect();
        assert_eq!(
            given, &listed,
            "docs/cli.md's `emergence {cmd}` rows against `emergence {cmd} --help`"
        );
    }
}

/// The defaults the command reference gives for `train` are the ones a run without flags takes.
#[test]
fn the_command_reference_gives_trains_defaults() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("scenes/dilemma/coordination.scene.ron");
    let scene = emergence::load::load_scene(&path).expect("scene");
    let cfg = emergence::train::TrainConfig::from_settings(
        scene,
        path,
        &emergence::train::TrainSettings::default(),
        root.join("unused"),
    )
    .expect("config");
    let said = format!(
        "(defaults: {}, {} iterations of {} arenas, seed {}, the {} model, learner {})",
        cfg.algo.name(),
        cfg.iterations,
        cfg.arenas,
        cfg.seed,
        cfg.model.name(),
        cfg.learner.policy()
    );
    let readme = command_reference(root);
    assert!(readme.contains(&said), "docs/cli.md should say {said}");
}

/// The defaults the command reference gives as `(defaults: --flag value, ...)` are the
/// ones each command's `--help` states, for `run`, `eval` and `view`.
#[test]
fn the_command_reference_gives_each_commands_defaults_as_help_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = command_reference(root);
    for cmd in ["run", "eval", "view"] {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `emergence {cmd} ")) && l.contains("(defaults: "))
            .unwrap_or_else(|| panic!("no row of `emergence {cmd}` gives its defaults"));
        let given = row
            .split("(defaults: ")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_emergence"))
            .args([cmd, "--help"])
            .output()
            .expect("the binary runs");
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut pairs = 0;
        for pair in given.split(", ") {
            let (flag, value) = pair.split_once(' ').expect("--flag value");
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{flag} ")))
                .unwrap_or_else(|| panic!("`emergence {cmd}` has no {flag}"));
            assert!(
                line.contains(&format!("[default: {value}]")),
                "docs/cli.md gives `emergence {cmd} {flag}` the default {value}; --help: {line}"
            );
            pairs += 1;
        }
        assert!(pairs >= 2, "{cmd}: {given}");
    }
}

/// The command reference: docs/cli.md, then the window's page (its `view` rows).
fn command_reference(root: &Path) -> String {
    ["docs/cli.md", "docs/window.md"]
        .map(|p| std::fs::read_to_string(root.join(p)).expect("the command reference"))
        .join("\n")
}
