//! Scenes: RON files that describe an environment (family and parameters), its map, its
//! teams and their policies, and the defaults of its training run (the `train:` block).
//! This module is data: it parses a scene and checks what the data alone can tell (syntax,
//! fields, ranges, the map's shape and legend, spawn cells), errors naming `path:line:col`,
//! what is wrong and what was expected. It imports nothing but `core`. The rules that need a
//! family's or a policy's knowledge are checked by `envs` and `policy`; `crate::load`
//! composes the three into `load_scene`, which the CLI, the runner and the asset loader use.

mod asset;
mod checks;
mod error;
pub mod family;
pub mod limits;
pub mod locate;
mod schema;
pub mod settings;
mod shipped;
mod validate;

pub use asset::{SceneAsset, SceneAssetLoader, SceneAssetPlugin, SceneCheck};
pub(crate) use checks::{FAM, check_int, check_range, out_of_range, rule};
pub use error::{SceneError, SceneErrorKind};
pub use family::{
    ArenaShape, FamilyParams, FamilyRules, Layout, ParamsParser, ShippedRules, parser_of,
};
pub use schema::*;
pub use shipped::shipped;
pub use validate::Ctx;

use std::path::{Path, PathBuf};

/// One agent of a scene, in slot order: teams in order, `count` agents each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpec {
    /// Index into `spec.teams`.
    pub team: u8,
    /// Index into [`Scene::roles`].
    pub role: u8,
    /// Policy name.
    pub policy: String,
}

/// A checked scene, ready to spawn.
#[derive(Debug, Clone, PartialEq)]
pub struct Scene {
    /// The file it came from.
    pub path: PathBuf,
    /// The scene as written (defaults filled in).
    pub spec: SceneSpec,
    /// Map width (0 for families without a map).
    pub width: usize,
    /// Map height.
    pub height: usize,
    /// The map's cells, row-major, as legend things.
    pub cells: Vec<Thing>,
    /// The agents of one arena, in slot order.
    pub agents: Vec<AgentSpec>,
    /// Distinct role names, in order of first appearance.
    pub roles: Vec<String>,
    /// Per team: its own spawn cells (row-major indices), empty if it uses the shared ones.
    pub spawn_cells: Vec<Vec<usize>>,
    /// Shared `Spawn` cells.
    pub shared_spawns: Vec<usize>,
}

impl Scene {
    /// Number of agents per arena.
    pub fn agent_count(&self) -> usize {
        self.agents.len()
    }
    /// The team names, in order.
    pub fn team_names(&self) -> Vec<&str> {
        self.spec.teams.iter().map(|t| t.name.as_str()).collect()
    }
}

/// The RON options scenes are read with: `Some` may be left out, and a newtype variant may
/// be written `CommonsHarvest(regrowth: ...)` instead of `CommonsHarvest((regrowth: ...))`.
pub fn ron_options() -> ron::Options {
    ron::Options::default().with_default_extension(
        ron::extensions::Extensions::IMPLICIT_SOME
            | ron::extensions::Extensions::UNWRAP_VARIANT_NEWTYPES,
    )
}

/// Parses a scene from its text and checks its data (not the family's or the policies'
/// rules: `crate::load::parse_scene` adds those); `path` is used in errors.
pub fn parse_data(src: &str, path: &Path) -> Result<Scene, SceneError> {
    parse_with(src, path, true)
}

/// [`parse_data`] for a training run's own scene copy: its `train:` block is ignored.
pub fn parse_run_data(src: &str, path: &Path) -> Result<Scene, SceneError> {
    parse_with(src, path, false)
}

/// The text a scene's offsets refer to: without a leading byte-order mark.
pub fn without_bom(src: &str) -> &str {
    src.strip_prefix('\u{feff}').unwrap_or(src)
}

/// Reads a file as UTF-8 text for a RON parser (the same checks as a scene file's).
pub fn read_text(path: &Path) -> Result<String, SceneError> {
    read_source(path)
}

/// [`parse_scene`], ignoring the `train:` block unless `train` (a resumed run takes its
/// settings from its `config.json`, not from its scene copy).
fn parse_with(src: &str, path: &Path, train: bool) -> Result<Scene, SceneError> {
    // A byte-order mark, which some editors write at the start of a UTF-8 file, is not RON.
    let src = without_bom(src);
    let mut spec: SceneSpec = ron_options()
        .from_str(src)
        .map_err(|e| SceneError::Invalid {
            path: path.to_path_buf(),
            line: e.span.start.line.max(1),
            col: e.span.start.col.max(1),
            kind: SceneErrorKind::Syntax(e.code.to_string()),
        })?;
    if !train {
        spec.train = TrainSettings::default();
    }
    validate::validate(spec, path, src)
}

/// A scene file's text.
fn read_source(path: &Path) -> Result<String, SceneError> {
    let bytes = std::fs::read(path).map_err(|source| SceneError::Io {
        path: path.to_path_buf(),
        io: source,
    })?;
    let src = String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let text = String::from_utf8_lossy(good);
        let line = text.matches('\n').count() + 1;
        let col = text.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        SceneError::Invalid {
            path: path.to_path_buf(),
            line,
            col,
            kind: SceneErrorKind::Rule {
                what: "the file is not valid UTF-8 text".into(),
                expected: "a UTF-8 RON file".into(),
            },
        }
    })?;
    Ok(src)
}

/// The shipped scenes: every `*.scene.ron` under `dir`, sorted by path.
pub fn find_scenes(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(".scene.ron") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
