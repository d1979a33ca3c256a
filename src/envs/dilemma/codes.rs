//! Action indices and view codes of the grid dilemmas (Commons Harvest, Clean Up).

/// Action words of the grid dilemmas, by index.
pub const GRID_ACTIONS: [&str; 9] = [
    "noop",
    "forward",
    "backward",
    "step_left",
    "step_right",
    "turn_left",
    "turn_right",
    "zap",
    "clean",
];

/// Action indices into [`GRID_ACTIONS`]; moves are egocentric (relative to facing).
pub mod act {
    /// Do nothing.
    pub const NOOP: u8 = 0;
    /// One cell ahead.
    pub const FORWARD: u8 = 1;
    /// One cell back (facing kept).
    pub const BACKWARD: u8 = 2;
    /// One cell to the left (facing kept).
    pub const STEP_LEFT: u8 = 3;
    /// One cell to the right (facing kept).
    pub const STEP_RIGHT: u8 = 4;
    /// Quarter turn anticlockwise.
    pub const TURN_LEFT: u8 = 5;
    /// Quarter turn clockwise.
    pub const TURN_RIGHT: u8 = 6;
    /// Fire the zapping beam ahead.
    pub const ZAP: u8 = 7;
    /// Fire the cleaning beam ahead (Clean Up only).
    pub const CLEAN: u8 = 8;
}

/// Cell codes of the egocentric view (and of the map's tiles, for the first six).
pub mod view {
    /// Off the map.
    pub const OUTSIDE: u8 = 0;
    /// Open ground.
    pub const FLOOR: u8 = 1;
    /// Wall.
    pub const WALL: u8 = 2;
    /// A live apple.
    pub const APPLE: u8 = 3;
    /// An apple cell without an apple.
    pub const APPLE_SITE: u8 = 4;
    /// Clean river.
    pub const RIVER: u8 = 5;
    /// Polluted river.
    pub const DIRT: u8 = 6;
    /// The observing agent.
    pub const SELF: u8 = 7;
    /// Another agent of the same team.
    pub const TEAMMATE: u8 = 8;
    /// An agent of another team.
    pub const OTHER: u8 = 9;
    /// One character per code, for text and replays.
    pub const CHARS: [char; 10] = ['?', '.', 'W', 'A', ',', '~', '#', '@', 'T', 'O'];
}
