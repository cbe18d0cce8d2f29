//! The one error type of the client.

use std::fmt;

/// Everything a lock operation can fail with.
///
/// | variant | when | what to do |
/// | --- | --- | --- |
/// | [`Error::NotAcquired`] | someone else holds the key (after the whole wait, for `acquire`) | retry later, or give up |
/// | [`Error::NotHeld`] | `renew`/`release`/`guard` found the key gone or owned by another token (`guard` then ran nothing) | stop the guarded work: the lock was lost |
/// | [`Error::Redis`] | connection, timeout or server error (e.g. `WRONGTYPE`) | the outcome is unknown; treat the lock as at risk |
/// | [`Error::InvalidArgument`] | empty key or token, zero or oversized TTL, API not available on this client | fix the call |
/// | [`Error::Unsupported`] | the server has no `lock` module, and the operation has no script fallback (guarded writes, semaphores, read-write locks) | load the module (see docs/install.md) |
/// | [`Error::NoQuorum`] | a quorum lock operation got no majority of answers (nodes down, slow, erroring) or ran out of validity | retry; for a held lock, treat it as at risk |
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The key is held by another owner, so the lock was not granted.
    NotAcquired {
        /// The contended key.
        key: String,
    },
    /// A renew, release or guarded write found that this token no longer
    /// owns the key (it expired, was deleted, or was taken over).
    NotHeld {
        /// The lost key.
        key: String,
    },
    /// The server or the connection failed; carries the `redis` error. A
    /// response timeout is an I/O error with `is_timeout()`.
    Redis(redis::RedisError),
    /// The call was rejected before anything was sent.
    InvalidArgument(String),
    /// A [`QuorumClient`](crate::QuorumClient) operation did not reach a
    /// majority of its servers in time: which ones answered what is in the
    /// [`QuorumFailure`](crate::QuorumFailure). (A majority that *refused*
    /// is [`Error::NotAcquired`] or [`Error::NotHeld`] instead.)
    NoQuorum(Box<crate::failure::QuorumFailure>),
    /// The server lacks the `lock` module (or a command of it), and the
    /// operation cannot be done with the reference scripts instead.
    Unsupported {
        /// The module command the server does not know, e.g. `LOCK.GUARD`.
        command: &'static str,
    },
    /// [`LockOptions::wait_for_replicas`](crate::LockOptions::wait_for_replicas):
    /// the grant reached fewer replicas than wanted in time, so the lock
    /// was released again.
    NotReplicated {
        /// The key that was granted and released.
        key: String,
        /// Replicas that acknowledged the grant.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },
}

impl Error {
    /// True for [`Error::NotAcquired`].
    pub fn is_not_acquired(&self) -> bool {
        matches!(self, Error::NotAcquired { .. })
    }

    /// True for [`Error::NotHeld`].
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotAcquired { key } => write!(f, "lock {key:?} is held by someone else"),
            Error::NotHeld { key } => write!(f, "lock {key:?} is no longer held by this token"),
            Error::NotReplicated { key, acked, wanted } => {
                write!(f, "lock {key:?} reached {acked} of the {wanted} replicas asked for in time, and was released")
            }
            Error::Redis(e) => write!(f, "redis error: {e}"),
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Error::Unsupported { command } => write!(f, "the server does not know {command}: load the lock module"),
            Error::NoQuorum(failure) => write!(f, "no quorum: {failure}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::Redis(e)
    }
}

/// A reply read as the wrong type (`redis::from_redis_value` on what
/// [`Lock::guard`](crate::Lock::guard) returned), as redis-rs reports it.
impl From<redis::ParsingError> for Error {
    fn from(e: redis::ParsingError) -> Self {
        Error::Redis(e.into())
    }
}

impl From<redis_lock_rules::ArgError> for Error {
    fn from(e: redis_lock_rules::ArgError) -> Self {
        // The module's own wording, minus the reply code, so both modes say the same.
        Error::InvalidArgument(e.reply().trim_start_matches("ERR ").to_string())
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
