//! The Bevy asset loader reads scenes through the same parser as the CLI.

use bevy::app::{App, TaskPoolPlugin};
use bevy::asset::{AssetPlugin, AssetServer, Assets, LoadState};
use emergence::load::load_scene;
use emergence::scene::SceneAsset;
use std::path::Path;

#[test]
fn asset_loader_gives_the_same_scene_as_the_cli() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenes");
    let mut app = App::new();
    app.add_plugins((
        TaskPoolPlugin::default(),
        AssetPlugin {
            file_path: dir.to_string_lossy().into_owned(),
            ..Default::default()
        },
        emergence::load::asset_plugin(),
    ));
    app.finish();
    app.cleanup();
    let handle = app
        .world()
        .resource::<AssetServer>()
        .load::<SceneAsset>("dilemma/stag_hunt.scene.ron");
    for _ in 0..2000 {
        app.update();
        let state = app.world().resource::<AssetServer>().load_state(&handle);
        if matches!(state, LoadState::Loaded | LoadState::Failed(_)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let assets = app.world().resource::<Assets<SceneAsset>>();
    let loaded = assets.get(&handle).expect("scene asset loaded");
    let cli = load_scene(&dir.join("dilemma/stag_hunt.scene.ron")).expect("cli");
    assert_eq!(loaded.0.spec, cli.spec);
    assert_eq!(loaded.0.agents, cli.agents);
}
