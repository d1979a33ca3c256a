//! Every integration test in one binary: the modules below were eighteen test binaries, each
//! compiled and linked against the whole crate and its dependencies (bevy, candle, and with
//! `gui` wgpu and egui); one binary compiles their shared code once and links once.
//! `scripts/test.sh` runs it under cargo-nextest, one process per test, so the tests stay as
//! isolated as they were (nothing global is shared: rayon's pool, mimalloc, environment).
//!
//! One module: `cargo test --test suite learning::` (or `cargo nextest run -E
//! 'test(/^learning::/)'`); one test: `cargo test --test suite maze::some_test -- --exact`.

mod common;

mod cli;
mod coin_game;
mod determinism;
mod dilemma_rules;
mod docs;
mod fuzz_scenes;
mod gui;
mod hide_and_seek;
mod imitate;
mod layering;
mod learning;
mod lm;
mod lm_memory;
mod lm_policy;
mod maze;
mod mpi;
mod observation_text;
mod scene_asset;
mod scene_errors;
mod train;
