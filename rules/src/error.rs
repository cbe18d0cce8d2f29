//! The refusals every layer of the rules shares: a rejected argument
//! ([`ArgError`], with its exact error reply) and a key of the wrong type
//! ([`WrongType`]). At the bottom, importing nothing of the crate, so the
//! argument checks, the numbers and the decisions can all return them.

use std::ffi::CStr;
use std::fmt;

/// A rejected argument. `Display` gives the full error reply (with its code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// Empty key or token (the Go wrapper refuses these too).
    KeyOrTokenMissing,
    /// ttl-ms is not a positive integer in Redis's strict integer syntax.
    TtlNotPositive,
    /// now + ttl-ms does not fit the 64-bit millisecond clock.
    TtlTooLarge,
    /// A token or run-id that encoding/json cannot carry unchanged.
    NotUtf8,
    /// An option this command does not know.
    Syntax,
    /// The WAIT timeout is not 0 or a positive integer.
    TimeoutInvalid,
    /// The fence floor is not a non-negative integer.
    FenceNotInteger,
    /// A client's fence floor is more than [`crate::fence::HORIZON`] ahead
    /// of this server's clock floor.
    FloorTooFar,
    /// `WAIT timeout-ms` ends past the 64-bit millisecond clock (BLPOP's
    /// "timeout is out of range").
    TimeoutOutOfRange,
    /// A semaphore's limit is not a positive integer up to 2^53.
    LimitInvalid,
    /// A read-write lock's mode is neither READ nor WRITE.
    ModeInvalid,
    /// `INFO … COUNT n` with an `n` that is not a positive integer.
    CountInvalid,
    /// `LOCKDELAY ms` is not an integer from 0 to
    /// [`MAX_LOCK_DELAY_MS`](crate::args::MAX_LOCK_DELAY_MS).
    LockDelayInvalid,
    /// `MAXHOLD ms` is not a positive integer.
    MaxHoldInvalid,
    /// `MAXHOLD ms` is shorter than the grant's own ttl-ms.
    MaxHoldBelowTtl,
    /// now + `MAXHOLD` does not fit the 64-bit millisecond clock.
    MaxHoldTooLarge,
    /// An election's value (a JSON string) that is not UTF-8.
    ValueNotUtf8,
    /// LOCK.OBSERVE's `AFTER rev` is not a non-negative integer.
    RevInvalid,
    /// A semaphore's limit above 2^32 with a lock-delay (the tag's score
    /// could not carry both exactly, see `holders::Tag`).
    LimitTooLargeForDelay,
    /// LOCK.TOP's `COUNT n` is not an integer from 1 to 1000.
    TopCountInvalid,
    /// A semaphore's or read-write lock's token that starts with a NUL
    /// byte: that prefix names the holders' hold-limit members
    /// ([`HOLD_PREFIX`](crate::args::HOLD_PREFIX)), so such a token could forge one.
    TokenReserved,
    /// LOCK.ACQUIREALL's `numkeys` is not a positive integer.
    NumKeysInvalid,
    /// LOCK.ACQUIREALL names more than [`MAX_KEYS`](crate::multi::MAX_KEYS) keys.
    TooManyKeys,
    /// LOCK.ACQUIREALL names a key twice.
    DuplicateKey,
    /// LOCK.REVOKE's `GRACE ms` is not 0 or a positive integer.
    GraceInvalid,
    /// now + `GRACE` does not fit the 64-bit millisecond clock.
    GraceTooLarge,
    /// LOCK.REVOKE's `REASON` is not UTF-8 or longer than
    /// [`MAX_REASON`](crate::revoke::MAX_REASON) bytes.
    ReasonInvalid,
    /// LOCK.REVOKE without `TOKEN` on a key with several holders.
    TokenRequired,
    /// LOCK.REVOKE of an exclusive lock whose value the module cannot
    /// rewrite with a revocation (a bare token that is not UTF-8, or JSON
    /// it did not write): the holder could not hear it.
    NotRevocable,
    /// `SESSION id` that names no live session of this node (never
    /// granted here, ended, or not a session id).
    SessionUnknown,
    /// `LOCKDELAY` beside `SESSION`: a session-held lock gets its session's.
    SessionLockDelay,
}

impl ArgError {
    /// The error reply, NUL-terminated as `RedisModule_ReplyWithError` takes it.
    pub const fn reply_cstr(self) -> &'static CStr {
        match self {
            ArgError::KeyOrTokenMissing => c"ERR lock key and token are required",
            ArgError::TtlNotPositive => c"ERR ttl-ms must be a positive integer (milliseconds)",
            ArgError::TtlTooLarge => c"ERR ttl-ms is too large: the expiry time would overflow",
            ArgError::NotUtf8 => c"ERR token and run-id must be valid UTF-8",
            ArgError::Syntax => c"ERR syntax error",
            ArgError::TimeoutInvalid => {
                c"ERR WAIT timeout-ms must be 0 (no timeout) or a positive integer (milliseconds)"
            }
            ArgError::FenceNotInteger => c"ERR fence must be a non-negative integer",
            ArgError::FloorTooFar => c"ERR fence floor is more than 24 h ahead of this server's clock",
            ArgError::TimeoutOutOfRange => c"ERR timeout is out of range",
            ArgError::LimitInvalid => c"ERR limit must be a positive integer (at most 9007199254740992)",
            ArgError::ModeInvalid => c"ERR mode must be READ or WRITE",
            ArgError::CountInvalid => c"ERR COUNT must be a positive integer",
            ArgError::LockDelayInvalid => c"ERR LOCKDELAY must be an integer from 0 to 60000 (milliseconds)",
            ArgError::MaxHoldInvalid => c"ERR MAXHOLD must be a positive integer (milliseconds)",
            ArgError::MaxHoldBelowTtl => c"ERR MAXHOLD must be at least ttl-ms",
            ArgError::MaxHoldTooLarge => c"ERR MAXHOLD is too large: the hold limit would overflow",
            ArgError::ValueNotUtf8 => c"ERR token and value must be valid UTF-8",
            ArgError::RevInvalid => c"ERR AFTER rev must be a non-negative integer",
            ArgError::LimitTooLargeForDelay => c"ERR limit must be at most 4294967296 with LOCKDELAY",
            ArgError::TopCountInvalid => c"ERR COUNT must be an integer from 1 to 1000",
            ArgError::TokenReserved => {
                c"ERR token must not start with a NUL byte (reserved for the holders' hold limits)"
            }
            ArgError::NumKeysInvalid => c"ERR numkeys must be a positive integer",
            ArgError::TooManyKeys => c"ERR at most 64 keys per request (numkeys)",
            ArgError::DuplicateKey => c"ERR a key is named twice",
            ArgError::GraceInvalid => c"ERR GRACE must be 0 or a positive integer (milliseconds)",
            ArgError::GraceTooLarge => c"ERR GRACE is too large: the deadline would overflow",
            ArgError::ReasonInvalid => c"ERR REASON must be valid UTF-8 of at most 200 bytes",
            ArgError::TokenRequired => c"ERR TOKEN is required: the key has several holders",
            ArgError::NotRevocable => {
                c"ERR the lock's value cannot carry a revocation (not UTF-8, or JSON the module did not write)"
            }
            ArgError::SessionUnknown => c"ERR no such session (never granted on this node, or ended)",
            ArgError::SessionLockDelay => {
                c"ERR LOCKDELAY is the session's: a lock taken with SESSION cannot name its own"
            }
        }
    }

    /// The error reply as text.
    pub fn reply(self) -> &'static str {
        // Every reply above is ASCII.
        self.reply_cstr().to_str().unwrap_or("ERR")
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reply())
    }
}

impl std::error::Error for ArgError {}

/// The key holds a type the scripts' `GET` refuses: reply `WRONGTYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrongType;
