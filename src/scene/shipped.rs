//! The shipped scenes (`scenes/` of the source tree), embedded in the library so that
//! `emergence list` and `emergence model init` work from any folder.

use include_dir::{Dir, include_dir};
use std::path::PathBuf;

static SCENES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/scenes");

/// Every shipped `*.scene.ron`, as (path as shipped, e.g. `scenes/maze/generated.scene.ron`,
/// text), sorted by path.
pub fn shipped() -> Vec<(PathBuf, &'static str)> {
    fn walk(dir: &'static Dir<'static>, out: &mut Vec<(PathBuf, &'static str)>) {
        for f in dir.files() {
            if f.path().to_string_lossy().ends_with(".scene.ron")
                && let Some(text) = f.contents_utf8()
            {
                out.push((PathBuf::from("scenes").join(f.path()), text));
            }
        }
        for d in dir.dirs() {
            walk(d, out);
        }
    }
    let mut out = Vec::new();
    walk(&SCENES, &mut out);
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_scenes_are_the_files_of_scenes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let on_disk = super::super::find_scenes(&root.join("scenes"));
        let embedded = super::shipped();
        assert_eq!(embedded.len(), on_disk.len());
        for ((path, text), file) in embedded.iter().zip(&on_disk) {
            assert_eq!(root.join(path), *file);
            assert_eq!(*text, std::fs::read_to_string(file).unwrap());
        }
    }
}
