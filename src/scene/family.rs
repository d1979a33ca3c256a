//! A scene's family as data: its name and its parameters, read by the parser the family
//! gives, and what the scene reader must ask of the family ([`FamilyRules`]).
//!
//! A scene names its family as an enum variant (`family: Maze(view: 2)`). This layer knows no
//! family by name: each one gives its [`FamilyRules`] (the shipped ones from their own
//! folders under `envs/`, listed at link time through [`ShippedRules`]; one from another
//! crate by `emergence::envs::family::register`), and the variant's parameters are read by
//! that family's parser in the same serde pass as the rest of the scene, so that an error in
//! them keeps its `path:line:col`. The family's code gets its own type back with
//! [`FamilySpec::params`].

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, VariantAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

use super::error::SceneError;
use super::schema::{SceneSpec, Thing};
use super::validate::Ctx;

/// A family's parameters: any serde type that is also `Clone`, `PartialEq` and `Debug` (a
/// blanket implementation covers them all).
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

/// How a family's parameters are read from a scene.
pub type ParamsParser = fn(
    &mut dyn erased_serde::Deserializer<'_>,
) -> Result<Arc<dyn FamilyParams>, erased_serde::Error>;

/// The [`ParamsParser`] of parameters of type `P` (`#[serde(deny_unknown_fields, default)]`
/// on `P`, as the shipped families have it: a typo is an error listing the fields, a field
/// left out takes its default).
pub fn parser_of<P>(
    d: &mut dyn erased_serde::Deserializer<'_>,
) -> Result<Arc<dyn FamilyParams>, erased_serde::Error>
where
    P: FamilyParams + for<'de> Deserialize<'de>,
{
    Ok(Arc::new(erased_serde::deserialize::<P>(d)?))
}

/// The legend things every grid family takes.
pub const COMMON_LEGEND: &str = "Floor, Wall, Spawn or TeamSpawn(\"team\")";

/// Where an arena's cells come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The scene's `map`, through its `legend`.
    Map,
    /// No cells at all (a matrix game): the agents are the teams' counts.
    NoMap,
    /// The family draws the map itself, `width` × `height` cells (a generated maze).
    Generated {
        /// Columns.
        width: usize,
        /// Rows.
        height: usize,
    },
}

/// One arena of a scene as the reader has it once the map is read: what a family's own
/// rules about its arena look at ([`FamilyRules::check_arena`]).
#[derive(Debug, Clone, Copy)]
pub struct ArenaShape<'a> {
    /// The map's cells, row-major (empty without a map).
    pub cells: &'a [Thing],
    /// Agents per arena.
    pub agents: usize,
}

/// What the scene reader asks of a family: the name scenes give it, how its parameters are
/// read and checked, which legend things its maps may hold and what its arena needs. The
/// rest of what a family is (its systems, spawner, text, words) is `envs::family::Family`,
/// which has this trait as its supertrait, so one type in the family's folder gives both.
pub trait FamilyRules: Send + Sync + 'static {
    /// The name a scene gives (`family: Maze(...)`).
    fn name(&self) -> &'static str;
    /// How its parameters are read from a scene (usually [`parser_of::<MyParams>`](parser_of)).
    fn params(&self) -> ParamsParser;
    /// Whether its maps may hold `thing` besides Floor, Wall, Spawn and TeamSpawn.
    fn allows(&self, _thing: &Thing) -> bool {
        false
    }
    /// The legend things it takes, as an error lists them.
    fn legend(&self) -> &'static str {
        COMMON_LEGEND
    }
    /// Where its arenas' cells come from.
    fn layout(&self, _spec: &SceneSpec) -> Layout {
        Layout::Map
    }
    /// Whether its maps may be mirrored (`randomize.mirror`).
    fn mirrors(&self) -> bool {
        false
    }
    /// Checks the ranges of its parameters (each error at its `family.FIELD`:
    /// [`Ctx::param_error`]), before anything else of the scene's structure.
    fn check_params(&self, _cx: &Ctx<'_>, _spec: &SceneSpec) -> Result<(), SceneError> {
        Ok(())
    }
    /// Checks what its map needs once its cells are read, before the spawn cells are (a
    /// river, apples, a number of objects).
    fn check_map(
        &self,
        _cx: &Ctx<'_>,
        _spec: &SceneSpec,
        _cells: &[Thing],
    ) -> Result<(), SceneError> {
        Ok(())
    }
    /// Checks what its arena needs once the agents are known too (an agent count; without a
    /// map of the scene's own, `arena.cells` is empty and this is the only check).
    fn check_arena(
        &self,
        _cx: &Ctx<'_>,
        _spec: &SceneSpec,
        _arena: ArenaShape<'_>,
    ) -> Result<(), SceneError> {
        Ok(())
    }
}

/// A shipped family's [`FamilyRules`], submitted from its folder (by
/// `envs::family::shipped_family!`) and collected at link time.
pub struct ShippedRules(pub &'static dyn FamilyRules);

inventory::collect!(ShippedRules);

/// The shipped families' rules, in the order of their names.
pub fn shipped() -> &'static [&'static dyn FamilyRules] {
    static SHIPPED: OnceLock<Vec<&'static dyn FamilyRules>> = OnceLock::new();
    SHIPPED.get_or_init(|| {
        let mut v: Vec<_> = inventory::iter::<ShippedRules>().map(|s| s.0).collect();
        v.sort_by_key(|r| r.name());
        v
    })
}

/// The shipped families' names, in order.
pub fn shipped_names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| shipped().iter().map(|r| r.name()).collect())
}

/// Families registered from outside this crate, in registration order.
static REGISTERED: RwLock<Vec<&'static dyn FamilyRules>> = RwLock::new(Vec::new());

/// Lets scenes name the family `rules` describes. Registering a name again replaces it; a
/// shipped family's name is refused.
pub fn register_rules(rules: &'static dyn FamilyRules) -> Result<(), String> {
    let name = rules.name();
    if shipped_names().contains(&name) {
        return Err(format!("{name} is a shipped family's name"));
    }
    let mut reg = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    reg.retain(|r| r.name() != name);
    reg.push(rules);
    Ok(())
}

/// The rules of the family called `name`, shipped or registered.
pub fn rules_named(name: &str) -> Option<&'static dyn FamilyRules> {
    let shipped = shipped().iter().copied().find(|r| r.name() == name);
    shipped.or_else(|| {
        let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
        reg.iter().copied().find(|r| r.name() == name)
    })
}

/// Every name a scene may give its family: the shipped ones, then those registered.
pub fn family_names() -> Vec<&'static str> {
    let reg = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    shipped_names()
        .iter()
        .copied()
        .chain(reg.iter().map(|r| r.name()))
        .collect()
}

/// The environment family of a scene, with its parameters. Serde reads and writes it as an
/// enum variant (`Maze(view: 2)`) whose name is a family's ([`family_names`]).
#[derive(Clone)]
pub struct FamilySpec {
    name: &'static str,
    params: Arc<dyn FamilyParams>,
}

impl FamilySpec {
    /// The family `name` with `params` (as a scene would give them).
    pub fn new<P: FamilyParams>(name: &'static str, params: P) -> FamilySpec {
        FamilySpec {
            name,
            params: Arc::new(params),
        }
    }
    /// The family's name as written in scenes.
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// The parameters as the family's own type (`None` if they are of another type).
    pub fn params<P: 'static>(&self) -> Option<&P> {
        self.params.as_any().downcast_ref()
    }
    /// The parameters as the family's own type, or its defaults for a scene of another
    /// family (which never reaches the family's code: `envs::family::of` picks it by name).
    pub fn params_or_default<P: Clone + Default + 'static>(&self) -> P {
        self.params::<P>().cloned().unwrap_or_default()
    }
    /// The parameters, whatever their type (for printing them).
    pub fn any_params(&self) -> &dyn FamilyParams {
        self.params.as_ref()
    }
    /// The family's rules (`None` for a name no family has: a scene built in code).
    pub fn rules(&self) -> Option<&'static dyn FamilyRules> {
        rules_named(self.name)
    }
}

impl fmt::Debug for FamilySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:?})", self.name, self.params)
    }
}

impl PartialEq for FamilySpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.params.same(other.params.as_ref())
    }
}

impl<'de> Deserialize<'de> for FamilySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_enum("FamilySpec", shipped_names(), FamilyVisitor)
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
        match rules_named(&name) {
            Some(rules) => Ok(FamilySpec {
                name: rules.name(),
                params: v.newtype_variant_seed(Seed(rules.params()))?,
            }),
            None => {
                // serde's own wording, with every name a scene may give (the list is leaked,
                // once per refused scene, only when families are registered).
                let names: &'static [&'static str] = match family_names() {
                    n if n.len() == shipped_names().len() => shipped_names(),
                    n => n.leak(),
                };
                Err(de::Error::unknown_variant(&name, names))
            }
        }
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

/// A family's parameters, read by its parser from the scene's deserializer.
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
        let index = family_names().iter().position(|n| *n == self.name);
        let index = index.unwrap_or(0) as u32;
        s.serialize_newtype_variant(
            "FamilySpec",
            index,
            self.name,
            &Erased(self.params.as_ref()),
        )
    }
}

struct Erased<'a>(&'a dyn FamilyParams);

impl Serialize for Erased<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        erased_serde::serialize(self.0, s)
    }
}
