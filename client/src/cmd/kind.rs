//! [`LockKind`]: what a lock grants, and so which module commands serve it.

use crate::cmd::reply::is_unknown_command;
use crate::error::Error;

/// What a lock grants its holder, and so which module commands serve it.
///
/// Every kind has the same lifecycle (acquire, renew, release, a watchdog
/// through the client's renewal engine, a loss signal, a fence per grant),
/// so one [`Lock`](crate::Lock) handle serves them all; only the commands
/// differ. Only the exclusive lock has a script fallback: the scripts are
/// the reference of the exclusive lock alone (see docs/semaphores.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// The key alone: `LOCK.ACQUIRE` (a string key), with the scripts as
    /// fallback.
    Exclusive,
    /// One of `limit` permits of a counting semaphore: `SEM.*`.
    Permit {
        /// The most holders at a time; every acquirer of the key names the
        /// same one (the server refuses another while permits are held).
        limit: u64,
    },
    /// A read-write lock's shared side: beside other readers, never a
    /// writer (`RWLOCK.ACQUIRE … READ`).
    Read,
    /// A read-write lock's exclusive side: no other reader or writer
    /// (`RWLOCK.ACQUIRE … WRITE`).
    Write,
}

impl LockKind {
    /// The module's acquire, renew, release and info commands for this kind.
    pub(crate) fn commands(self) -> [&'static str; 4] {
        match self {
            LockKind::Exclusive => ["LOCK.ACQUIRE", "LOCK.RENEW", "LOCK.RELEASE", "LOCK.INFO"],
            LockKind::Permit { .. } => ["SEM.ACQUIRE", "SEM.RENEW", "SEM.RELEASE", "SEM.INFO"],
            LockKind::Read | LockKind::Write => ["RWLOCK.ACQUIRE", "RWLOCK.RENEW", "RWLOCK.RELEASE", "RWLOCK.INFO"],
        }
    }

    /// Its name in traces (`trace::KIND`).
    pub(crate) fn trace_name(self) -> &'static str {
        match self {
            LockKind::Exclusive => "exclusive",
            LockKind::Permit { .. } => "semaphore",
            LockKind::Read => "read",
            LockKind::Write => "write",
        }
    }

    /// The info command of this kind's family.
    pub(crate) fn info_command(self) -> &'static str {
        self.commands()[3]
    }

    /// Whether a server without the module can serve it (by the scripts).
    pub(crate) fn has_fallback(self) -> bool {
        self == LockKind::Exclusive
    }

    /// A `command` error that says "no such command" as
    /// [`Error::Unsupported`] for a kind without a fallback; any other
    /// error unchanged.
    pub(crate) fn explain(self, command: &'static str, e: Error) -> Error {
        match e {
            Error::Redis(r) if !self.has_fallback() && is_unknown_command(&r) => Error::Unsupported { command },
            e => e,
        }
    }
}
