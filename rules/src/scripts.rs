//! The reference Lua scripts of seed 000, byte-for-byte (leading newline
//! included, so their SHA1s match what the Go services load). They are the
//! behavioural reference for the module and the client's fallback when the
//! module is not loaded.

/// KEYS[1] = key, ARGV[1] = token, ARGV[2] = ttl-ms. Returns 1 or 0.
pub const RENEW: &str = include_str!("../reference/renew.lua");
/// KEYS[1] = key, ARGV[1] = token. Returns 1 or 0.
pub const RELEASE: &str = include_str!("../reference/release.lua");
/// KEYS[1] = key, ARGV[1] = structured value, ARGV[2] = ttl-ms. Returns 1 or 0.
pub const TAKEOVER: &str = include_str!("../reference/takeover.lua");
