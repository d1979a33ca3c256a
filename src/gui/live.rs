//! Live arenas in the window: the headless runner's world, stepped by the window, and the
//! human's hand on one agent.

use bevy::prelude::*;

use crate::core::{SimSchedule, SimSystems};
use crate::frames::Recorder;
use crate::frames::{Frame, FrameContext};
use crate::headless::{RunConfig, build_app, error_chain};

/// A human's action for one agent, applied after the policies decided
/// ([`apply_manual_control`]): it goes through the same [`Action`](crate::core::Action).
#[derive(Resource, Default, Debug, Clone, Copy)]
pub struct ManualControl {
    /// The controlled agent: (arena, slot).
    pub agent: Option<(u32, u16)>,
    /// The action to take this step.
    pub action: Option<u8>,
    /// The last requested action was not legal.
    pub refused: bool,
}

/// Overrides the controlled agent's action with the human's choice, when it is legal.
pub fn apply_manual_control(
    mut control: ResMut<ManualControl>,
    mut agents: Query<(
        &crate::core::Agent,
        &crate::core::ActionMask,
        &mut crate::core::Action,
    )>,
) {
    let (Some((arena, slot)), Some(action)) = (control.agent, control.action) else {
        return;
    };
    for (agent, mask, mut a) in &mut agents {
        if agent.arena == arena && agent.slot == slot {
            if mask.allows(action) {
                a.0 = action;
                control.refused = false;
            } else {
                control.refused = true;
            }
        }
    }
}

/// Live arenas: a world built by the headless runner, stepped by the window.
pub(crate) struct LiveSim {
    pub(crate) world: World,
    ctx: FrameContext,
}

impl LiveSim {
    pub(crate) fn build(cfg: &RunConfig) -> Result<Self, String> {
        let mut app = build_app(cfg).map_err(|e| error_chain(&e))?;
        app.init_resource::<ManualControl>();
        app.add_systems(
            SimSchedule,
            apply_manual_control
                .in_set(SimSystems::Decide)
                .after(crate::policy::decide_actions),
        );
        let world = std::mem::take(app.world_mut());
        let ctx = FrameContext::new(&world).ok_or("the scene has no text format")?;
        Ok(Self { world, ctx })
    }

    /// One step of every arena, like one `App::update` of a headless run.
    pub(crate) fn step(&mut self) {
        self.world.run_schedule(bevy::app::Main);
        self.world.clear_trackers();
    }

    pub(crate) fn frame(&self, arena: u32) -> Option<Frame> {
        Frame::capture(&self.world, &self.ctx, arena)
    }

    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        match self.world.get_resource_mut::<Recorder>() {
            Some(mut r) => r.flush(),
            None => Ok(()),
        }
    }
}
