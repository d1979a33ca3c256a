//! What agents read: an observation as text ([`text`], the language model's prompt and the
//! viewer's inspector). It sits between the families (whose view codes it spells out) and
//! the policies that read it. The feature rows the `mlp` and MAPPO's critic read are
//! `core::features` (the families write them in `SimSystems::Encode`).

pub mod text;
pub mod transcript;
