//! A live feed of one arena's frames from a run on another thread (`train --gui`): the run
//! pushes every step's frame ([`tap_frames`], in `RecordSystems::Write`), the window reads
//! the newest.

use bevy::prelude::{Mut, Resource, World};

use super::{Frame, FrameContext};

/// A live feed of one arena's frames from a run on another thread (`train --gui`): the run
/// pushes every step's frame, the window reads the newest.
#[derive(Clone, Default)]
pub struct FrameTap(pub std::sync::Arc<std::sync::Mutex<TapFeed>>);

impl std::fmt::Debug for FrameTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameTap")
    }
}

/// What a [`FrameTap`] holds.
#[derive(Debug, Default)]
pub struct TapFeed {
    /// The frames of the current episode of the tapped arena, in order.
    pub frames: Vec<Frame>,
    /// Bumped with every frame pushed.
    pub version: u64,
    /// Training iteration (episode) being run.
    pub episode: u32,
    /// The window is gone: the run stops capturing frames.
    pub closed: bool,
}

impl FrameTap {
    /// Locks the feed (a poisoned lock still gives its data: frames are plain values).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, TapFeed> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The run side of a [`FrameTap`]: a resource that [`tap_frames`] fills with arena 0.
#[derive(Resource)]
pub struct TapSink {
    tap: FrameTap,
    ctx: Option<FrameContext>,
}

impl TapSink {
    /// A sink feeding `tap`.
    pub fn new(tap: FrameTap) -> Self {
        Self { tap, ctx: None }
    }
}

/// Pushes arena 0's frame of this step into the [`TapSink`]'s feed.
pub fn tap_frames(world: &mut World) {
    world.resource_scope(|world, mut sink: Mut<TapSink>| {
        if sink.ctx.is_none() {
            sink.ctx = FrameContext::new(world);
        }
        if sink.tap.lock().closed {
            return;
        }
        let Some(ctx) = sink.ctx.as_ref() else {
            return;
        };
        let Some(frame) = Frame::capture(world, ctx, 0) else {
            return;
        };
        if frame.step == 0 {
            return;
        }
        let mut feed = sink.tap.lock();
        // An arena held between iterations shows the same step while the others finish.
        if let Some(l) = feed.frames.last() {
            if (l.episode, l.step) == (frame.episode, frame.step) {
                return;
            }
            if l.episode != frame.episode || l.step > frame.step {
                feed.frames.clear();
            }
        }
        feed.episode = frame.episode;
        feed.frames.push(frame);
        feed.version += 1;
    });
}
