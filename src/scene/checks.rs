//! Range checks of scene parameters, each error located at the offending value.

use super::error::{SceneError, SceneErrorKind};
use super::locate::Seg;
use super::schema::TrainSettings;
use super::validate::Ctx;

pub(crate) fn out_of_range(field: &str, value: impl ToString, expected: &str) -> SceneErrorKind {
    SceneErrorKind::OutOfRange {
        field: field.into(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

pub(crate) fn rule(what: impl Into<String>, expected: impl Into<String>) -> SceneErrorKind {
    SceneErrorKind::Rule {
        what: what.into(),
        expected: expected.into(),
    }
}

/// Checks a probability-like value in `[lo, hi]`.
pub(crate) fn check_range(
    cx: &Ctx<'_>,
    path: &[Seg<'_>],
    name: &str,
    v: f32,
    lo: f32,
    hi: f32,
) -> Result<(), SceneError> {
    if v.is_finite() && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(cx.value_at(
            path,
            out_of_range(name, v, &format!("a number in [{lo}, {hi}]")),
        ))
    }
}

pub(crate) fn check_int(
    cx: &Ctx<'_>,
    path: &[Seg<'_>],
    name: &str,
    v: u64,
    lo: u64,
    hi: u64,
) -> Result<(), SceneError> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(cx.value_at(
            path,
            out_of_range(name, v, &format!("an integer in [{lo}, {hi}]")),
        ))
    }
}

pub(crate) const FAM: Seg<'static> = Seg::Field("family");

/// The `train:` block's settings, against the limits the command's flags have.
pub(crate) fn check_train(cx: &Ctx<'_>, t: &TrainSettings) -> Result<(), SceneError> {
    if let Err(bad) = super::limits::check_settings(t) {
        return Err(cx.value_at(
            &[Seg::Field("train"), Seg::Field(bad.name)],
            out_of_range(&format!("train.{}", bad.name), bad.value, &bad.expected),
        ));
    }
    if let (Some(g), Some(a)) = (t.group_size, t.arenas)
        && !a.is_multiple_of(g)
    {
        return Err(cx.value_at(
            &[Seg::Field("train"), Seg::Field("group_size")],
            rule(
                format!("train.group_size {g} does not divide train.arenas {a}"),
                "a group size that divides the arenas",
            ),
        ));
    }
    Ok(())
}
