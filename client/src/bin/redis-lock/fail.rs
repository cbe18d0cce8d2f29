//! How a command fails: an exit status and a message for stderr. The
//! statuses are documented in `args.rs` (`--help` shows them).

pub const EXIT_USAGE: u8 = 2;
pub const EXIT_REDIS: u8 = 69;
pub const EXIT_HELD: u8 = 75;
pub const EXIT_LOST: u8 = 79;
/// The lock was lost because the server evicted its key (sysexits'
/// EX_CONFIG: the server's memory configuration took it).
pub const EXIT_EVICTED: u8 = 78;

/// An exit code and what to tell the user on stderr.
pub struct Fail(pub u8, pub String);

/// A usage error found after parsing (a combination clap cannot check).
pub fn usage(msg: impl Into<String>) -> Fail {
    Fail(EXIT_USAGE, format!("{}\n\nFor more information, try '--help'.", msg.into()))
}

pub fn redis_fail(e: impl std::fmt::Display) -> Fail {
    Fail(EXIT_REDIS, e.to_string())
}
