//! Scenes as Bevy assets: the same parser behind an `AssetLoader`, so a window can load and
//! hot-reload `.scene.ron` files. The scene layer checks the data; the rules of the families
//! and policies come in as a [`SceneCheck`] (`crate::load::asset_plugin` gives the one the
//! CLI uses), so this module imports nothing above it.

use bevy::app::{App, Plugin};
use bevy::asset::io::Reader;
use bevy::asset::{Asset, AssetApp, AssetLoader, LoadContext};
use bevy::reflect::TypePath;
use std::path::PathBuf;

use super::{Scene, SceneError, SceneErrorKind, parse_data, without_bom};

/// The checks a loaded scene passes after its data's: `(scene, its text)`.
pub type SceneCheck = fn(&Scene, &str) -> Result<(), SceneError>;

/// A loaded scene.
#[derive(Asset, TypePath, Debug, Clone)]
pub struct SceneAsset(pub Scene);

/// Loads `*.scene.ron` files.
#[derive(Default, TypePath)]
pub struct SceneAssetLoader {
    /// Checked after the data, if set.
    pub check: Option<SceneCheck>,
}

impl AssetLoader for SceneAssetLoader {
    type Asset = SceneAsset;
    type Settings = ();
    type Error = SceneError;

    async fn load(
        &self,
        reader: &mut dyn Reader,
        _settings: &(),
        load_context: &mut LoadContext<'_>,
    ) -> Result<SceneAsset, SceneError> {
        let path = PathBuf::from(load_context.path().to_string());
        let mut bytes = Vec::new();
        reader
            .read_to_end(&mut bytes)
            .await
            .map_err(|source| SceneError::Io {
                path: path.clone(),
                io: source,
            })?;
        let src = String::from_utf8(bytes).map_err(|_| SceneError::Invalid {
            path: path.clone(),
            line: 1,
            col: 1,
            kind: SceneErrorKind::Rule {
                what: "the file is not valid UTF-8 text".into(),
                expected: "a UTF-8 RON file".into(),
            },
        })?;
        let src = without_bom(&src);
        let scene = parse_data(src, &path)?;
        if let Some(check) = self.check {
            check(&scene, src)?;
        }
        Ok(SceneAsset(scene))
    }

    fn extensions(&self) -> &[&str] {
        &["scene.ron"]
    }
}

/// Registers [`SceneAsset`] and its loader (needs Bevy's `AssetPlugin`).
/// Without a check it loads any scene whose data holds together.
#[derive(Default)]
pub struct SceneAssetPlugin {
    /// The families' and policies' rules, checked after the data.
    pub check: Option<SceneCheck>,
}

impl Plugin for SceneAssetPlugin {
    fn build(&self, app: &mut App) {
        app.init_asset::<SceneAsset>()
            .register_asset_loader(SceneAssetLoader { check: self.check });
    }
}
