//! Loading a scene for use: its data ([`crate::scene`]), its family's rules
//! ([`crate::envs::check_scene`]) and its policies ([`crate::policy::check_scene`]), in that
//! order, each error at `path:line:col`. The CLI, the runner, the trainer, `reproduce` and
//! the window load scenes through here; the layers below stay ignorant of the ones above.

use std::path::Path;

use crate::scene::{self, Scene, SceneAssetPlugin, SceneError};

/// The rules above the data: the policies' (every team's policy exists and plays the
/// family), then the family's. `src` is the text `scene` was parsed from.
pub fn check_scene(scene: &Scene, src: &str) -> Result<(), SceneError> {
    crate::policy::check_scene(scene, src)?;
    crate::envs::check_scene(scene, src)
}

/// Parses and checks a scene from its text; `path` is used in errors.
pub fn parse_scene(src: &str, path: &Path) -> Result<Scene, SceneError> {
    checked(src, path, scene::parse_data)
}

/// Reads, parses and checks a scene file.
pub fn load_scene(path: &Path) -> Result<Scene, SceneError> {
    parse_scene(&scene::read_text(path)?, path)
}

/// [`load_scene`] for a training run's own scene copy: its `train:` block is ignored (the
/// run's settings are in its `config.json`; a copy saved before a range was checked still
/// loads), and the text style and memory the run was given (`settings.text` and
/// `settings.memory` in the `config.json` beside it, from `train --text` and `--memory`)
/// replace the scene's.
pub fn load_run_scene(path: &Path) -> Result<Scene, SceneError> {
    let mut s = checked(&scene::read_text(path)?, path, scene::parse_run_data)?;
    if let Some(run) = path.parent() {
        let (text, memory) = run_text(run);
        s.spec.text = text.unwrap_or(s.spec.text);
        s.spec.memory = memory.unwrap_or(s.spec.memory);
    }
    Ok(s)
}

/// The text style and memory a training run's language models read with, as its
/// `config.json` records them (`settings.text` and `settings.memory`, from `train --text`
/// and `--memory` or the scene's `train:` block); `None` for what it does not record (runs
/// from before the setting, or a folder that is not a run).
pub fn run_text(run: &Path) -> (Option<crate::scene::TextStyle>, Option<u32>) {
    let settings = std::fs::read_to_string(run.join("config.json"))
        .ok()
        .and_then(|c| serde_json::from_str::<serde_json::Value>(&c).ok())
        .map(|v| v["settings"].clone());
    let field = |name: &str| settings.as_ref().map(|v| v[name].clone());
    (
        field("text").and_then(|v| serde_json::from_value(v).ok()),
        field("memory").and_then(|v| serde_json::from_value(v).ok()),
    )
}

/// `text` (without a byte-order mark, which the offsets must not count) through the scene
/// layer's `parse`, then [`check_scene`].
fn checked(
    text: &str,
    path: &Path,
    parse: fn(&str, &Path) -> Result<Scene, SceneError>,
) -> Result<Scene, SceneError> {
    let src = scene::without_bom(text);
    let s = parse(src, path)?;
    check_scene(&s, src)?;
    Ok(s)
}

/// Scenes as Bevy assets, checked as [`load_scene`] checks them.
pub fn asset_plugin() -> SceneAssetPlugin {
    SceneAssetPlugin {
        check: Some(check_scene),
    }
}
