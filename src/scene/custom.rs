//! Families defined outside this crate: their parameters in a scene.
//!
//! A scene names its family as an enum variant (`family: Maze(view: 2)`). The shipped
//! families are [`FamilySpec`]'s own variants; a family a plugin registers
//! (`emergence::envs::family::register`) is [`FamilySpec::Custom`], its parameters parsed by
//! the parser it registered here, in the same serde pass as the rest of the scene, so that an
//! error in them keeps its `path:line:col`. This module is data: it knows a family only by
//! its name and its parser; the family itself lives in `envs`.

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, VariantAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::fmt;
use std::sync::{Arc, RwLock};

use super::schema::{
    CleanUpParams, FamilySpec, HarvestParams, HideSeekParams, MatrixParams, MazeParams,
};

/// The parameters of a family defined outside this crate: any serde type that is also
/// `Clone`, `PartialEq` and `Debug` (a blanket implementation covers them all). The family's
/// code gets its own type back with [`CustomSpec::params`].
pub trait FamilyParams: Any + fmt::Debug + Send + Sync + erased_serde::Serialize {
    /// `self` as [`Any`], to get the concrete type back.
    fn as_any(&self) -> &dyn Any;
    /// Whether `other` holds the same type and value.
    fn same(&self, other: &dyn FamilyParams) -> bool;
}

impl<T> FamilyParams for T
where
    T: Any + fmt::Debug + Clone + PartialEq + Send + Sync + Serialize,
{
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn same(&self, other: &dyn FamilyParams) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
}

/// How a registered family's parameters are read from a scene.
pub type ParamsParser = fn(
    &mut dyn erased_serde::Deserializer<'_>,
) -> Result<Arc<dyn FamilyParams>, erased_serde::Error>;

/// The [`ParamsParser`] of parameters of type `P` (`#[serde(deny_unknown_fields, default)]`
/// on `P` gives the shipped families' behaviour: a typo is an error listing the fields, a
/// field left out takes its default).
pub fn parser_of<P>(
    d: &mut dyn erased_serde::Deserializer<'_>,
) -> Result<Arc<dyn FamilyParams>, erased_serde::Error>
where
    P: FamilyParams + for<'de> Deserialize<'de>,
{
    Ok(Arc::new(erased_serde::deserialize::<P>(d)?))
}

/// A family defined outside this crate, as a scene names it.
#[derive(Clone)]
pub struct CustomSpec {
    /// The family's name (the variant the scene writes).
    pub name: &'static str,
    /// Its parameters.
    pub params: Arc<dyn FamilyParams>,
}

impl CustomSpec {
    /// The parameters as the family's own type (`None` if they are of another type).
    pub fn params<P: 'static>(&self) -> Option<&P> {
        self.params.as_any().downcast_ref()
    }
}

impl fmt::Debug for CustomSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:?})", self.name, self.params)
    }
}

impl PartialEq for CustomSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.params.same(other.params.as_ref())
    }
}

/// The shipped families' names, in [`FamilySpec`]'s order.
pub const SHIPPED: [&str; 5] = ["Matrix", "CommonsHarvest", "CleanUp", "HideAndSeek", "Maze"];

/// Families registered from outside: name and parser, in registration order.
static REGISTERED: RwLock<Vec<(&'static str, ParamsParser)>> = RwLock::new(Vec::new());

/// Lets scenes name the family `name` (`family: Name(...)`), its parameters read by `parse`.
/// Registering a name again replaces its parser; a shipped family's name is refused.
pub fn register_params(name: &'static str, parse: ParamsParser) -> Result<(), String> {
    if SHIPPED.contains(&name) {
        return Err(format!("{name} is a shipped family's name"));
    }
    let mut reg = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    match reg.iter_mut().find(|(n, _)| *n == name) {
        Some(entry) => entry.1 = parse,
        None => reg.push((name, parse)),
    }
    Ok(())
}

/// Every name a scene may give its family: the shipped ones, then those registered.
pub fn family_names() -> Vec<&'static str> {
    let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    SHIPPED
        .iter()
        .copied()
        .chain(reg.iter().map(|(n, _)| *n))
        .collect()
}

fn registered(name: &str) -> Option<(&'static str, ParamsParser)> {
    let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    reg.iter().find(|(n, _)| *n == name).copied()
}

impl<'de> Deserialize<'de> for FamilySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_enum("FamilySpec", &SHIPPED, FamilyVisitor)
    }
}

struct FamilyVisitor;

impl<'de> Visitor<'de> for FamilyVisitor {
    type Value = FamilySpec;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a family, as Name(parameters)")
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<FamilySpec, A::Error> {
        let (VariantName(name), v) = data.variant()?;
        Ok(match name.as_str() {
            "Matrix" => FamilySpec::Matrix(v.newtype_variant::<MatrixParams>()?),
            "CommonsHarvest" => FamilySpec::CommonsHarvest(v.newtype_variant::<HarvestParams>()?),
            "CleanUp" => FamilySpec::CleanUp(v.newtype_variant::<CleanUpParams>()?),
            "HideAndSeek" => FamilySpec::HideAndSeek(v.newtype_variant::<HideSeekParams>()?),
            "Maze" => FamilySpec::Maze(v.newtype_variant::<MazeParams>()?),
            other => match registered(other) {
                Some((name, parse)) => FamilySpec::Custom(CustomSpec {
                    name,
                    params: v.newtype_variant_seed(Seed(parse))?,
                }),
                None => {
                    // serde's own wording, with every name a scene may give (the list is
                    // leaked, once per refused scene, only when families are registered).
                    let names: &'static [&'static str] = match family_names() {
                        n if n.len() == SHIPPED.len() => &SHIPPED,
                        n => n.leak(),
                    };
                    return Err(de::Error::unknown_variant(other, names));
                }
            },
        })
    }
}

/// A variant's name, read as the identifier it is (not as a quoted string).
struct VariantName(String);

impl<'de> Deserialize<'de> for VariantName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = VariantName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a family's name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<VariantName, E> {
                Ok(VariantName(v.to_string()))
            }
        }
        d.deserialize_identifier(Name)
    }
}

/// A registered family's parameters, read by its parser from the scene's deserializer.
struct Seed(ParamsParser);

impl<'de> DeserializeSeed<'de> for Seed {
    type Value = Arc<dyn FamilyParams>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let mut erased = <dyn erased_serde::Deserializer<'_>>::erase(d);
        (self.0)(&mut erased).map_err(de::Error::custom)
    }
}

impl Serialize for FamilySpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const NAME: &str = "FamilySpec";
        match self {
            FamilySpec::Matrix(p) => s.serialize_newtype_variant(NAME, 0, "Matrix", p),
            FamilySpec::CommonsHarvest(p) => {
                s.serialize_newtype_variant(NAME, 1, "CommonsHarvest", p)
            }
            FamilySpec::CleanUp(p) => s.serialize_newtype_variant(NAME, 2, "CleanUp", p),
            FamilySpec::HideAndSeek(p) => s.serialize_newtype_variant(NAME, 3, "HideAndSeek", p),
            FamilySpec::Maze(p) => s.serialize_newtype_variant(NAME, 4, "Maze", p),
            FamilySpec::Custom(c) => {
                s.serialize_newtype_variant(NAME, 5, c.name, &Erased(c.params.as_ref()))
            }
        }
    }
}

struct Erased<'a>(&'a dyn FamilyParams);

impl Serialize for Erased<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        erased_serde::serialize(self.0, s)
    }
}
