//! Fuzzing the scene parser and validator with structure-aware mutations of the shipped
//! scenes (the corpus): map cells replaced, numbers set to edge values, policies swapped,
//! lines doubled or dropped, `train:` blocks added with random fields, spans cut out and
//! fragments inserted. Every mutant must load or be refused with an error at a line and
//! column, within a time limit: a panic, a hang or an error without a location fails the
//! test, which prints the mutant (proptest shrinks it first).
//!
//! `cargo test --test suite fuzz_scenes` runs 2,000 mutants (a few seconds); set
//! `EMERGENCE_FUZZ_CASES` for a longer run, e.g. `EMERGENCE_FUZZ_CASES=200000`.

use emergence::load::parse_scene;
use emergence::scene::find_scenes;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// One edit of a scene's text.
#[derive(Debug, Clone)]
enum Mutation {
    /// The `k`-th character inside a map row (a quoted string of the map) becomes `c`.
    Cell(usize, char),
    /// The `k`-th number becomes an edge value.
    Number(usize, &'static str),
    /// The `k`-th policy becomes another.
    Policy(usize, &'static str),
    /// Line `k` doubled.
    DupLine(usize),
    /// Line `k` removed.
    DropLine(usize),
    /// A `train:` block before `teams:`.
    Train(String),
    /// A span of `len` characters from position `k` removed.
    Cut(usize, usize),
    /// A fragment inserted at position `k`.
    Insert(usize, &'static str),
}

const EDGES: &[&str] = &[
    "0",
    "-1",
    "1",
    "255",
    "256",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "1e309",
    "-1e309",
    "NaN",
    "inf",
    "-0.0",
    "0.5",
    "99999999999999999999",
    "7",
    "63",
    "64",
];
const POLICIES: &[&str] = &[
    "\"random\"",
    "\"lm\"",
    "\"mlp\"",
    "\"maze_planner\"",
    "\"seeker\"",
    "\"tit_for_tat\"",
    "\"greedy_harvester\"",
    "\"no_such_bot\"",
    "lm(model: \"\")",
    "lm(model: \"/nonexistent\")",
    "\"\"",
];
const FRAGMENTS: &[&str] = &[
    ",",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "\"",
    "'",
    ":",
    "\n",
    "Wall",
    "Floor",
    "Some(3)",
    "None",
    "count: 40",
    "count: 0",
    "teams: []",
    "map: []",
    "\"WWW\",",
    "'x': Apple,",
    "\u{feff}",
    "é",
    "\u{0}",
    "//",
    "/*",
    "*/",
];
const TRAIN_FIELDS: &[&str] = &[
    "algo: magrpo",
    "algo: cory",
    "algo: advantage_alignment",
    "iterations: 0",
    "arenas: 3",
    "group_size: 2",
    "group_size: 0",
    "lr: 2.0",
    "lr: NaN",
    "gamma: 1.5",
    "epochs: 0",
    "minibatch: 0",
    "learner: mlp",
    "sharing: role_lora",
    "clip: -1.0",
    "max_grad_norm: 0.0",
    "group_std: maybe",
    "lora_rank: 5000",
    "model: \"small\"",
    "unknown_field: 1",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    let k = 0usize..4000;
    prop_oneof![
        (
            k.clone(),
            prop::sample::select(vec!['W', '.', 'A', 'P', 'x', ' ', '"', '\\', 'é', '1'])
        )
            .prop_map(|(k, c)| Mutation::Cell(k, c)),
        (k.clone(), prop::sample::select(EDGES)).prop_map(|(k, v)| Mutation::Number(k, v)),
        (k.clone(), prop::sample::select(POLICIES)).prop_map(|(k, p)| Mutation::Policy(k, p)),
        k.clone().prop_map(Mutation::DupLine),
        k.clone().prop_map(Mutation::DropLine),
        prop::collection::vec(prop::sample::select(TRAIN_FIELDS), 0..4)
            .prop_map(|f| Mutation::Train(f.join(", "))),
        (k.clone(), 1usize..40).prop_map(|(k, n)| Mutation::Cut(k, n)),
        (k, prop::sample::select(FRAGMENTS)).prop_map(|(k, f)| Mutation::Insert(k, f)),
    ]
}

/// The `k`-th item of `items`, counting round (`None` when there is none).
fn nth<T: Copy>(items: &[T], k: usize) -> Option<T> {
    (!items.is_empty()).then(|| items[k % items.len()])
}

/// Spans of numbers (optionally signed, with a fraction or exponent).
fn numbers(s: &str) -> Vec<(usize, usize)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = b[i].is_ascii_digit()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'));
        if starts {
            let mut j = i;
            while j < b.len() && (b[j].is_ascii_digit() || matches!(b[j], b'.' | b'e' | b'E')) {
                j += 1;
            }
            let from = if i > 0 && b[i - 1] == b'-' { i - 1 } else { i };
            out.push((from, j));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn apply(text: &str, m: &Mutation) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    match m {
        Mutation::Cell(k, c) => {
            // Characters inside the quoted rows between `map: [` and its `]`.
            let Some(start) = text.find("map: [") else {
                return text.to_string();
            };
            let end = text[start..].find(']').map_or(text.len(), |e| start + e);
            let mut inside = false;
            let spots: Vec<usize> = text[start..end]
                .char_indices()
                .filter_map(|(i, ch)| {
                    if ch == '"' {
                        inside = !inside;
                        return None;
                    }
                    inside.then_some(start + i)
                })
                .collect();
            match nth(&spots, *k) {
                Some(i) => {
                    let len = text[i..].chars().next().map_or(1, char::len_utf8);
                    format!("{}{c}{}", &text[..i], &text[i + len..])
                }
                None => text.to_string(),
            }
        }
        Mutation::Number(k, v) => match nth(&numbers(text), *k) {
            Some((a, b)) => format!("{}{v}{}", &text[..a], &text[b..]),
            None => text.to_string(),
        },
        Mutation::Policy(k, p) => {
            let spots: Vec<(usize, usize)> = text
                .match_indices("policy: ")
                .filter_map(|(i, _)| {
                    let from = i + "policy: ".len();
                    let rest = &text[from..];
                    let len = match rest.strip_prefix('"') {
                        Some(quoted) => quoted.find('"').map(|e| e + 2),
                        None => rest.find([',', ')']),
                    }?;
                    Some((from, from + len))
                })
                .collect();
            match nth(&spots, *k) {
                Some((a, b)) => format!("{}{p}{}", &text[..a], &text[b..]),
                None => text.to_string(),
            }
        }
        Mutation::DupLine(k) => {
            let i = k % lines.len().max(1);
            let mut out: Vec<&str> = lines.clone();
            if let Some(l) = lines.get(i) {
                out.insert(i, l);
            }
            out.concat()
        }
        Mutation::DropLine(k) => {
            let mut out = lines.clone();
            if !out.is_empty() {
                out.remove(k % out.len());
            }
            out.concat()
        }
        Mutation::Train(fields) => text.replacen(
            "    teams:",
            &format!("    train: ({fields}),\n    teams:"),
            1,
        ),
        Mutation::Cut(k, n) => {
            let chars: Vec<(usize, char)> = text.char_indices().collect();
            if chars.is_empty() {
                return String::new();
            }
            let a = k % chars.len();
            let b = (a + n).min(chars.len());
            let (from, to) = (chars[a].0, chars.get(b).map_or(text.len(), |c| c.0));
            format!("{}{}", &text[..from], &text[to..])
        }
        Mutation::Insert(k, f) => {
            let spots: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
            let i = nth(&spots, *k).unwrap_or(0);
            format!("{}{f}{}", &text[..i], &text[i..])
        }
    }
}

/// Mutants that loaded and that were refused (the harness is not vacuous when both occur).
static LOADED: AtomicUsize = AtomicUsize::new(0);
static REFUSED: AtomicUsize = AtomicUsize::new(0);

/// Loads `text` on another thread: `Err` for a panic, a hang (over 10 s) or an error
/// without a line and column.
fn loads_or_refuses_with_a_location(text: String) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    let t = text.clone();
    std::thread::spawn(move || {
        let r =
            std::panic::catch_unwind(|| parse_scene(&t, Path::new("fuzz.scene.ron")).map(|_| ()));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(Ok(()))) => {
            LOADED.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Ok(Ok(Err(e))) => match e.line_col() {
            Some(_) if e.to_string().starts_with("fuzz.scene.ron:") => {
                REFUSED.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            _ => Err(format!("an error without its location: {e}")),
        },
        Ok(Err(_)) => Err("a panic".into()),
        Err(_) => Err("a hang (no answer in 10 s)".into()),
    }
}

#[test]
fn mutated_scenes_load_or_are_refused_at_a_line_and_column() {
    let corpus: Vec<String> = find_scenes(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes"))
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("scene"))
        .collect();
    assert!(corpus.len() >= 10, "the corpus is the shipped scenes");
    let cases = std::env::var("EMERGENCE_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (0..corpus.len(), prop::collection::vec(mutation(), 1..5));
    let result = runner.run(&strategy, |(pick, edits)| {
        let mut text = corpus[pick].clone();
        for m in &edits {
            text = apply(&text, m);
        }
        loads_or_refuses_with_a_location(text.clone())
            .map_err(|why| TestCaseError::fail(format!("{why}\n--- the scene ---\n{text}")))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (loaded, refused) = (
        LOADED.load(Ordering::Relaxed),
        REFUSED.load(Ordering::Relaxed),
    );
    eprintln!("{cases} mutants: {loaded} loaded, {refused} refused at a line and column");
    assert!(
        loaded > cases as usize / 20 && refused > cases as usize / 20,
        "the mutations should both keep scenes valid and break them: {loaded} loaded, \
         {refused} refused"
    );
}
