//! Action indices and cell codes of hide-and-seek.

/// Action words, by index.
pub const ACTIONS: [&str; 9] = [
    "noop",
    "forward",
    "backward",
    "turn_left",
    "turn_right",
    "grab",
    "release",
    "lock",
    "unlock",
];

/// Action indices into [`ACTIONS`].
pub mod act {
    /// Do nothing.
    pub const NOOP: u8 = 0;
    /// One cell ahead: push the object in front, or climb a ramp.
    pub const FORWARD: u8 = 1;
    /// One cell back, facing kept, pulling a held object.
    pub const BACKWARD: u8 = 2;
    /// Quarter turn anticlockwise (lets go of a held object).
    pub const TURN_LEFT: u8 = 3;
    /// Quarter turn clockwise (lets go of a held object).
    pub const TURN_RIGHT: u8 = 4;
    /// Hold the unlocked object in front.
    pub const GRAB: u8 = 5;
    /// Let go of the held object.
    pub const RELEASE: u8 = 6;
    /// Lock the object in front for your team.
    pub const LOCK: u8 = 7;
    /// Unlock the object in front (only if your team locked it).
    pub const UNLOCK: u8 = 8;
}

/// Cell codes of observations (egocentric view and the oracle's allocentric map).
pub mod view {
    /// Not visible (outside the cone, out of range or hidden behind a wall or box).
    pub const UNSEEN: u8 = 0;
    /// Open ground.
    pub const FLOOR: u8 = 1;
    /// Wall: blocks movement and sight.
    pub const WALL: u8 = 2;
    /// Low wall: blocks movement, not sight; a ramp lets agents over it.
    pub const LOW_WALL: u8 = 3;
    /// An unlocked box.
    pub const BOX: u8 = 4;
    /// A box locked by the observer's team.
    pub const BOX_LOCKED_OURS: u8 = 5;
    /// A box locked by the other team.
    pub const BOX_LOCKED_THEIRS: u8 = 6;
    /// An unlocked ramp.
    pub const RAMP: u8 = 7;
    /// A ramp locked by the observer's team.
    pub const RAMP_LOCKED_OURS: u8 = 8;
    /// A ramp locked by the other team.
    pub const RAMP_LOCKED_THEIRS: u8 = 9;
    /// The observer.
    pub const SELF: u8 = 10;
    /// An agent of the observer's side.
    pub const TEAMMATE: u8 = 11;
    /// An agent of the other side.
    pub const OPPONENT: u8 = 12;
    /// One character per code, for text, replays and the viewer.
    pub const CHARS: [char; 13] = [
        '?', '.', '#', '=', 'b', 'B', 'X', 'r', 'R', 'Y', '@', 'T', 'O',
    ];
}
