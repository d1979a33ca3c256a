//! The scene rules that need the policies' knowledge: every team names a policy this build
//! has, that plays the scene's family.

use crate::scene::locate::Seg;
use crate::scene::{Ctx, Scene, SceneError, SceneErrorKind, rule};

use super::catalogue;

/// Checks that every team of `scene` (parsed from `src`) names a known policy that plays its
/// family; the error is located at the team's `policy` in `src`.
pub fn check_scene(scene: &Scene, src: &str) -> Result<(), SceneError> {
    let cx = Ctx {
        path: &scene.path,
        src,
    };
    let spec = &scene.spec;
    let family = spec.family.name();
    for (i, t) in spec.teams.iter().enumerate() {
        let tp = |f| [Seg::Field("teams"), Seg::Index(i), Seg::Field(f)];
        let key = t.policy.key();
        match catalogue().iter().find(|p| p.name == key) {
            None if key == "lm:" => {
                return Err(cx.value_at(
                    &[
                        Seg::Field("teams"),
                        Seg::Index(i),
                        Seg::Field("policy"),
                        Seg::Field("model"),
                    ],
                    rule(
                        "lm(model: \"\") names no folder",
                        "a model folder's path, or lm without a model for the embedded one",
                    ),
                ));
            }
            None if key.starts_with("lm:") || key.starts_with("mlp:") => {}
            None => {
                let known = catalogue()
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(cx.value_at(
                    &tp("policy"),
                    SceneErrorKind::UnknownPolicy {
                        name: key.clone(),
                        known,
                    },
                ));
            }
            Some(p) if !p.plays(family) => {
                let known = catalogue()
                    .iter()
                    .filter(|p| p.plays(family))
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(cx.value_at(
                    &tp("policy"),
                    SceneErrorKind::PolicyFamily {
                        name: key.clone(),
                        family: family.into(),
                        known,
                    },
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}
