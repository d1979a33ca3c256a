//! Frames: one arena at one step, as the viewer draws it and replays store it.
//!
//! A [`Frame`] holds the arena's map as one character per cell (the families' own drawing,
//! [`draw_map`](crate::core::draw_map)), and for every agent what the viewer's inspector shows: where it stands and
//! faces, what it did and said, its reward and return, the observation text exactly as its
//! policy reads it, the action distribution it sampled from, its value estimate, and the
//! cells it lights (vision cones, beams, catches: the families' [`CellMarkers`](crate::core::CellMarkers) hooks).
//! Frames come from a live world ([`Frame::capture`], [`frame`]), from a replay file
//! ([`Replay::load`], written by [`Recorder`]: [`replay`]) or from a run on another thread
//! ([`FrameTap`]: [`tap`]); the window draws all three the same way. The colours and the
//! screen layout are in [`palette`]; [`image`] draws a frame without the window (an RGB
//! array, plain text).

pub mod frame;
pub mod image;
pub mod palette;
pub mod replay;
pub mod tap;

pub use frame::{AgentFrame, Frame, FrameContext, said};
pub use palette::{BOTTOM_HEIGHT, Layout, PANEL_FILL, PANEL_WIDTH, team_colour, tile_colour};
pub use replay::{Recorder, Replay, ReplayError, ReplayHeader, record_replay, replay_header};
pub use tap::{FrameTap, TapFeed, TapSink, tap_frames};
