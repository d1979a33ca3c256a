//! Action indices, cell codes and talk words of the cooperative maze.
//!
//! A cell code packs a kind (low nibble, [`view::kind`]) and a link (high nibble,
//! [`view::link`]): the index of a plate/door name or of a key colour, so that a policy can
//! tell which plate opens which door and which key opens which lock.

/// Action words of the maze, by index (allocentric moves).
pub const ACTIONS: [&str; 5] = ["noop", "north", "east", "south", "west"];

/// Action indices into [`ACTIONS`].
pub mod act {
    /// Stay.
    pub const NOOP: u8 = 0;
    /// One cell up the map (towards row 0).
    pub const NORTH: u8 = 1;
    /// One cell right.
    pub const EAST: u8 = 2;
    /// One cell down.
    pub const SOUTH: u8 = 3;
    /// One cell left.
    pub const WEST: u8 = 4;
    /// The four moves with their map offsets (dx, dy), in action order.
    pub const MOVES: [(u8, i32, i32); 4] =
        [(NORTH, 0, -1), (EAST, 1, 0), (SOUTH, 0, 1), (WEST, -1, 0)];
}

/// Cell codes of the maze's tiles, the known map and the local window.
pub mod view {
    /// Not known to the agent (and, in the window, off the map is shown as [`WALL`]).
    pub const UNKNOWN: u8 = 0;
    /// Open ground.
    pub const FLOOR: u8 = 1;
    /// Wall.
    pub const WALL: u8 = 2;
    /// A pressure plate (link: its name).
    pub const PLATE: u8 = 3;
    /// A closed door (link: its name).
    pub const DOOR_CLOSED: u8 = 4;
    /// An open door (link: its name).
    pub const DOOR_OPEN: u8 = 5;
    /// A key lying on the ground (link: its colour).
    pub const KEY: u8 = 6;
    /// A locked door (link: its colour).
    pub const LOCKED: u8 = 7;
    /// An exit cell.
    pub const EXIT: u8 = 8;
    /// The observing agent (window only).
    pub const SELF: u8 = 9;
    /// A teammate (window only).
    pub const TEAMMATE: u8 = 10;
    /// One character per kind, for text and replays.
    pub const CHARS: [char; 11] = ['?', '.', '#', 'p', 'D', '/', 'k', 'L', 'E', '@', 'T'];
    /// Most plate/door names and key colours a code can tell apart.
    pub const MAX_LINKS: usize = 16;

    /// The kind of a code (one of the constants above).
    #[inline]
    pub fn kind(code: u8) -> u8 {
        code & 0x0F
    }
    /// The link of a code: plate/door name index or key colour index.
    #[inline]
    pub fn link(code: u8) -> u8 {
        code >> 4
    }
    /// A code of `kind` with `link`.
    #[inline]
    pub fn with_link(kind: u8, link: u8) -> u8 {
        (kind & 0x0F) | ((link & 0x0F) << 4)
    }
    /// The character of a code.
    pub fn char_of(code: u8) -> char {
        CHARS.get(usize::from(kind(code))).copied().unwrap_or('?')
    }
    /// Whether an agent may stand on a cell of this code (a locked door needs its key).
    #[inline]
    pub fn walkable(code: u8, keys: u32) -> bool {
        match kind(code) {
            FLOOR | PLATE | DOOR_OPEN | KEY | EXIT | SELF | TEAMMATE => true,
            LOCKED => keys & (1 << link(code)) != 0,
            _ => false,
        }
    }
}

/// The words the talking bots use, at these indices of the vocabulary (the default
/// vocabulary's order); scenes with talking bots must start their vocabulary with them.
pub mod talk {
    /// The words, by index.
    pub const WORDS: [&str; 10] = [
        "north", "south", "east", "west", "plate", "door", "key", "here", "wait", "exit",
    ];
    /// Policies that rely on [`WORDS`] being the first words of the vocabulary.
    pub const TALKING_POLICIES: [&str; 2] = ["maze_talker", "maze_follower"];
    /// "north".
    pub const NORTH: u8 = 0;
    /// "south".
    pub const SOUTH: u8 = 1;
    /// "east".
    pub const EAST: u8 = 2;
    /// "west".
    pub const WEST: u8 = 3;
    /// "here": you are at the exit, stay.
    pub const HERE: u8 = 7;
    /// "wait".
    pub const WAIT: u8 = 8;

    /// The word for a move action, if it is one.
    pub fn word_of_move(action: u8) -> Option<u8> {
        match action {
            super::act::NORTH => Some(NORTH),
            super::act::EAST => Some(EAST),
            super::act::SOUTH => Some(SOUTH),
            super::act::WEST => Some(WEST),
            _ => None,
        }
    }
    /// The move action a word asks for, if it is a direction.
    pub fn move_of_word(word: u8) -> Option<u8> {
        match word {
            NORTH => Some(super::act::NORTH),
            EAST => Some(super::act::EAST),
            SOUTH => Some(super::act::SOUTH),
            WEST => Some(super::act::WEST),
            _ => None,
        }
    }
}
