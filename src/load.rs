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
    // The run's text style when it was given apart from the scene (`train --text`): its
    // settings in config.json beside the copy (absent in runs from before the setting).
    let settings = path
        .parent()
        .and_then(|run| std::fs::read_to_string(run.join("config.json")).ok())
        .and_then(|c| serde_json::from_str::<serde_json::Value>(&c).ok())
        .map(|v| v["settings"].clone());
    if let Some(text) = settings
        .as_ref()
        .and_then(|v| serde_json::from_value(v["text"].clone()).ok())
    {
        s.spec.text = text;
    }
    // The same for the turns its language models remembered (`train --memory`).
    if let Some(memory) = settings
        .as_ref()
        .and_then(|v| serde_json::from_value(v["memory"].clone()).ok())
    {
        s.spec.memory = memory;
    }
    Ok(s)
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
