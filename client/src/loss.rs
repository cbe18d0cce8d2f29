//! [`LossReason`]: why a lock stopped being held without being released.

use std::fmt;

use crate::revocation::text_field;

/// Why a lock stopped being held without being released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal (or release) found the key gone or owned by another token:
    /// it expired, was deleted, or was taken over.
    NotOwner,
    /// No renewal succeeded within the TTL (the server was unreachable, or
    /// nothing renewed it), so the key may have expired. A session's lock
    /// whose keepalives did not succeed within the session's TTL is lost
    /// so too.
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
    /// [`ClientOptions::sessions`](crate::ClientOptions::sessions)), a
    /// keepalive heard that the session ended, and the server could not
    /// say how (its `SESSION.INFO` went unanswered or was unreadable).
    /// The precise ends are [`LossReason::SessionExpired`],
    /// [`LossReason::SessionRevoked`] and [`LossReason::SessionUnknown`].
    /// Every lock of the session is lost with the same reason at once.
    SessionEnded,
    /// The lock's session expired on the server: its deadline passed
    /// without a keepalive, while this client still counted it valid (the
    /// server's clock ran ahead, e.g. a jump after a restart). A session
    /// whose keepalives failed here is lost as [`LossReason::Expired`]
    /// first, when its validity runs out.
    SessionExpired,
    /// The lock's session was revoked on the server (`SESSION.REVOKE`): a
    /// voluntary end, its locks released at once, without lock-delay.
    SessionRevoked,
    /// The lock's session is unknown to the server: it never had it or
    /// forgot it (`FLUSHALL`, a restart without persistence, a failover to
    /// a node that never had it), or it ended longer ago than the server
    /// remembers (its TTL, at least a minute).
    SessionUnknown,
}

impl LossReason {
    /// Its name in traces (`trace::REASON`), a stable code.
    pub(crate) fn trace_name(self) -> &'static str {
        match self {
            LossReason::NotOwner => "not_owner",
            LossReason::Expired => "expired",
            LossReason::MaxLifetime => "max_lifetime",
            LossReason::MaxHold => "max_hold",
            LossReason::Evicted => "evicted",
            LossReason::Revoked => "revoked",
            LossReason::SessionEnded => "session_ended",
            LossReason::SessionExpired => "session_expired",
            LossReason::SessionRevoked => "session_revoked",
            LossReason::SessionUnknown => "session_unknown",
        }
    }

    /// Whether the lock was lost with its session's end (any of them).
    pub fn is_session_end(self) -> bool {
        matches!(
            self,
            LossReason::SessionEnded
                | LossReason::SessionExpired
                | LossReason::SessionRevoked
                | LossReason::SessionUnknown
        )
    }
}

/// How a session ended, from the server's `SESSION.INFO id` after a
/// keepalive answered `0` (`None`: that call failed): its `state`
/// (`expired`, `revoked`), or nil when the server does not know it.
pub(crate) fn session_end(info: Option<redis::Value>) -> LossReason {
    match info {
        Some(redis::Value::Nil) => LossReason::SessionUnknown,
        Some(v) => match text_field(v, "state").as_deref() {
            Some("expired") => LossReason::SessionExpired,
            Some("revoked") => LossReason::SessionRevoked,
            _ => LossReason::SessionEnded,
        },
        None => LossReason::SessionEnded,
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
            LossReason::SessionEnded => "the session that held it ended (the server did not say how)",
            LossReason::SessionExpired => "the session that held it expired on the server (no keepalive by its deadline)",
            LossReason::SessionRevoked => "the session that held it was revoked (SESSION.REVOKE)",
            LossReason::SessionUnknown => {
                "the server no longer knows the session that held it (FLUSHALL, a restart without persistence, a failover)"
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value::{Array, BulkString, Int, Nil};

    fn info(state: &str) -> redis::Value {
        let b = |s: &str| BulkString(s.as_bytes().to_vec());
        Array(vec![b("id"), b("x"), b("state"), b(state), b("holds"), Int(0)])
    }

    #[test]
    fn a_sessions_end_is_read_from_its_info() {
        assert_eq!(session_end(Some(info("expired"))), LossReason::SessionExpired);
        assert_eq!(session_end(Some(info("revoked"))), LossReason::SessionRevoked);
        assert_eq!(session_end(Some(Nil)), LossReason::SessionUnknown);
        assert_eq!(session_end(Some(info("alive"))), LossReason::SessionEnded, "not an end: not told one");
        assert_eq!(session_end(Some(Int(3))), LossReason::SessionEnded);
        assert_eq!(session_end(None), LossReason::SessionEnded);
        let map = redis::Value::Map(vec![(BulkString(b"state".to_vec()), BulkString(b"revoked".to_vec()))]);
        assert_eq!(session_end(Some(map)), LossReason::SessionRevoked);
        let names: Vec<_> = [
            LossReason::SessionEnded,
            LossReason::SessionExpired,
            LossReason::SessionRevoked,
            LossReason::SessionUnknown,
        ]
        .iter()
        .map(|r| (r.trace_name(), r.is_session_end()))
        .collect();
        assert_eq!(
            names,
            [("session_ended", true), ("session_expired", true), ("session_revoked", true), ("session_unknown", true)]
        );
        assert!(!LossReason::Expired.is_session_end());
    }
}
