//! A session as its locks see it ([`SessionLease`]): the one validity that
//! every lock attached to the session shares, and whether the server said
//! it ended. The renewal engine (`session.rs`) moves the validity on with
//! each keepalive, once for all the session's locks; a lock's state
//! (`state.rs`) reads it instead of a validity of its own, so a keepalive
//! costs the client O(1) whatever the session holds.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::loss::LossReason;

/// One session granted on one node (`SESSION.GRANT`).
#[derive(Debug)]
pub(crate) struct SessionLease {
    /// The id the server issued.
    pub(crate) id: String,
    /// Its TTL as granted: each keepalive keeps it this long.
    pub(crate) ttl: Duration,
    /// When the last keepalive (or the grant) that the server answered was
    /// sent, plus the TTL: the server keeps the session at least that long.
    valid_until: Mutex<Instant>,
    /// A keepalive answered that the server no longer has it: how it
    /// ended (an index in [`ENDS`], 0: it has not), every lock attached to
    /// it lost so.
    ended: AtomicU8,
    /// Why it was revoked, if the server said (`SESSION.REVOKE … REASON`).
    why: Mutex<Option<String>>,
    /// Acquires under way with this session (an idle session is revoked
    /// only when none is).
    in_use: AtomicUsize,
    /// Its locks still held as far as this process knows: counted up when
    /// a lock is made on it, down on that lock's first change from held
    /// (released, dropped or lost).
    held: AtomicUsize,
}

impl SessionLease {
    /// A session granted by a command sent at `sent`.
    pub(crate) fn new(id: String, ttl: Duration, sent: Instant) -> SessionLease {
        SessionLease {
            id,
            ttl,
            valid_until: Mutex::new(sent + ttl),
            ended: AtomicU8::new(0),
            why: Mutex::new(None),
            in_use: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
        }
    }

    /// Until when the server surely keeps the session.
    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A keepalive sent at `sent` was answered: the session lives at least
    /// its TTL from then (never earlier than it already did).
    pub(crate) fn kept(&self, sent: Instant) {
        let mut g = self.valid_until.lock().unwrap_or_else(|p| p.into_inner());
        *g = (*g).max(sent + self.ttl);
    }

    /// The server said the session ended, as `how` (one of [`ENDS`]), for
    /// `why` (a revoke's reason, if told); the first end told stays.
    pub(crate) fn end(&self, how: LossReason, why: Option<String>) {
        let code = ENDS.iter().position(|&r| r == how).map_or(1, |i| i as u8 + 1);
        let mut w = self.why.lock().unwrap_or_else(|p| p.into_inner());
        if self.ended.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            *w = why;
        }
    }

    /// A revoke's reason, if the server told one.
    pub(crate) fn why(&self) -> Option<String> {
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire) != 0
    }

    /// How the session ended, if the server said it did.
    pub(crate) fn end_reason(&self) -> Option<LossReason> {
        ENDS.get(usize::from(self.ended.load(Ordering::Acquire)).checked_sub(1)?).copied()
    }

    /// Whether a lock can still be attached to it at `now`.
    pub(crate) fn usable(&self, now: Instant) -> bool {
        !self.ended() && now < self.valid_until()
    }

    /// A lock was made on it.
    pub(crate) fn hold(&self) {
        self.held.fetch_add(1, Ordering::AcqRel);
    }

    /// One of its locks stopped being held.
    pub(crate) fn let_go(&self) {
        self.held.fetch_sub(1, Ordering::AcqRel);
    }

    /// How many of its locks are held.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    pub(crate) fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Acquire)
    }

    /// Counts an acquire under way with this session until the returned
    /// guard is dropped.
    pub(crate) fn start_use(self: &std::sync::Arc<Self>) -> InUse {
        self.in_use.fetch_add(1, Ordering::AcqRel);
        InUse(self.clone())
    }
}

/// How a session can end, as its locks are lost ([`SessionLease::end`]).
const ENDS: [LossReason; 4] =
    [LossReason::SessionEnded, LossReason::SessionExpired, LossReason::SessionRevoked, LossReason::SessionUnknown];

/// An acquire under way with a session (see [`SessionLease::start_use`]).
#[derive(Debug)]
pub(crate) struct InUse(pub(crate) std::sync::Arc<SessionLease>);

impl Drop for InUse {
    fn drop(&mut self) {
        self.0.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalives_only_extend_and_an_end_is_final() {
        let t0 = Instant::now();
        let ttl = Duration::from_millis(300);
        let s = std::sync::Arc::new(SessionLease::new("id".into(), ttl, t0));
        assert_eq!(s.valid_until(), t0 + ttl);
        s.kept(t0 + Duration::from_millis(100));
        assert_eq!(s.valid_until(), t0 + Duration::from_millis(400));
        s.kept(t0 + Duration::from_millis(50));
        assert_eq!(s.valid_until(), t0 + Duration::from_millis(400), "a late answer never shortens it");
        assert!(s.usable(t0));
        assert!(!s.usable(t0 + Duration::from_millis(400)), "not past its validity");
        {
            let _a = s.start_use();
            let _b = s.start_use();
            assert_eq!(s.in_use(), 2);
        }
        assert_eq!(s.in_use(), 0);
        s.hold();
        s.hold();
        s.let_go();
        assert_eq!(s.held(), 1);
        assert_eq!(s.end_reason(), None);
        s.end(LossReason::SessionRevoked, Some("drain".into()));
        s.end(LossReason::SessionUnknown, None);
        assert_eq!(s.why().as_deref(), Some("drain"));
        assert!(s.ended() && !s.usable(t0));
        assert_eq!(s.end_reason(), Some(LossReason::SessionRevoked), "the first end told stays");
    }
}
