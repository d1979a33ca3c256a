//! Empty on purpose: it makes cargo resolve `[build-dependencies]`, which Cargo.toml uses only
//! to unify features between the tests' build and the Python wheel's (see the comment there).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
}
