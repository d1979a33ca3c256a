//! The scene rules of hide-and-seek: every team is a side, and both sides play.

use crate::scene::locate::Seg;
use crate::scene::{Ctx, SceneError, SceneSpec, rule};

/// Hide-and-seek teams: every team's role is `hider` or `seeker`, and both sides exist.
pub(crate) fn check_teams(cx: &Ctx<'_>, spec: &SceneSpec) -> Result<(), SceneError> {
    let mut sides = [false; 2];
    for (i, t) in spec.teams.iter().enumerate() {
        let role = t.role.as_deref().unwrap_or(&t.name);
        match role {
            "hider" | "hiders" => sides[0] = true,
            "seeker" | "seekers" => sides[1] = true,
            other => {
                let at = if t.role.is_some() { "role" } else { "name" };
                return Err(cx.value_at(
                    &[Seg::Field("teams"), Seg::Index(i), Seg::Field(at)],
                    rule(
                        format!("team {:?} has role {other:?}", t.name),
                        "role \"hider\" or \"seeker\" (the role defaults to the team name)",
                    ),
                ));
            }
        }
    }
    if !sides[0] || !sides[1] {
        let missing = if sides[0] { "seeker" } else { "hider" };
        return Err(cx.field_at(
            &[Seg::Field("teams")],
            rule(
                format!("hide-and-seek needs a {missing} team"),
                "at least one team with role \"hider\" and one with role \"seeker\"",
            ),
        ));
    }
    Ok(())
}
