//! [`LossReason`]: why a lock stopped being held without being released.

use std::fmt;

/// Why a lock stopped being held without being released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal (or release) found the key gone or owned by another token:
    /// it expired, was deleted, or was taken over.
    NotOwner,
    /// No renewal succeeded within the TTL (the server was unreachable, or
    /// nothing renewed it), so the key may have expired.
    Expired,
    /// The watchdog reached its maximum lifetime, stopped renewing, and the
    /// lock then ran out its TTL.
    MaxLifetime,
    /// The server's hold limit ([`LockOptions::max_hold`](crate::LockOptions::max_hold))
    /// cut the last renewal short, and the lease then ended at that limit.
    MaxHold,
    /// The server evicted the key while it was held (its `maxmemory`
    /// policy; see docs/eviction.md): the next caller could take it at
    /// once. Told by the module (`LOCK.EVICTED`) when a renewal or release
    /// found the lock gone; without the module, or on a quorum, such a
    /// loss reads [`LossReason::NotOwner`].
    Evicted,
    /// The hold was revoked (`LOCK.REVOKE`; [`LostSignal::revoked`](crate::LostSignal::revoked)) and
    /// its deadline came before it was released.
    Revoked,
    /// The lock was held by the client's session on its node (see
    /// [`ClientOptions::sessions`](crate::ClientOptions::sessions)), and a
    /// keepalive heard that the session ended: it expired on the server
    /// (no keepalive reached it within its TTL), was revoked
    /// (`SESSION.REVOKE`), or the server forgot it (`FLUSHALL`). Every lock
    /// of the session is lost with this reason at once.
    SessionEnded,
}

impl LossReason {
    /// Its name in traces (`trace::REASON`).
    pub(crate) fn trace_name(self) -> &'static str {
        match self {
            LossReason::NotOwner => "not_owner",
            LossReason::Expired => "expired",
            LossReason::MaxLifetime => "max_lifetime",
            LossReason::MaxHold => "max_hold",
            LossReason::Evicted => "evicted",
            LossReason::Revoked => "revoked",
            LossReason::SessionEnded => "session_ended",
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::NotOwner => "the key was deleted, expired or taken by another owner",
            LossReason::Expired => "no renewal succeeded within the TTL",
            LossReason::MaxLifetime => "the watchdog reached its maximum lifetime and the TTL ran out",
            LossReason::MaxHold => "the server's hold limit (max-hold) ended the lease",
            LossReason::Evicted => "the server evicted the key (maxmemory-policy) while it was held",
            LossReason::Revoked => "the hold was revoked and its deadline passed",
            LossReason::SessionEnded => "the session that held it ended (expired, revoked or forgotten by the server)",
        })
    }
}
