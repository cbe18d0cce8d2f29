//! The sessions this node ended lately (docs/sessions.md, "What the holder
//! learns"; the bookkeeping is `redis_lock_rules::session_gone`): kept
//! after the table forgot them, so that `SESSION.INFO` still tells their
//! holder how each ended (`expired`, `revoked`) for the session's TTL
//! after its end (at least a minute), not merely that it is unknown.
//! Noted wherever a session ends: a revoke, the timer's expiry, and a
//! replicated or replayed `SESSION.APPLY END` (so a promoted replica
//! remembers too). Not persisted: after a restart an ended session is
//! unknown. Forgotten by `FLUSHALL`, as the sessions are.

use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::session::{Ended, Id, Reason, Sessions};
use redis_lock_rules::session_gone::{Gone, GoneSessions};

static GONE: LazyLock<Mutex<GoneSessions>> = LazyLock::new(|| Mutex::new(GoneSessions::default()));

fn gone() -> MutexGuard<'static, GoneSessions> {
    GONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes that `id`, a session of `t`, ended at `at` for `reason` (with
/// `why`, a revoke's REASON), at `now`.
pub fn note(t: &Sessions, id: Id, (at, reason, why): (i64, Reason, Option<&str>), now: i64) {
    let Some(info) = t.info(id, 0) else { return };
    let why = why.map(Box::from);
    let g = Gone { ended: Ended { at, reason }, ttl: info.ttl, lock_delay: info.lock_delay, why };
    gone().note(id, g, now);
}

/// How `id` ended, if it ended here lately (while its locks are released,
/// and after).
pub fn get(id: Id, now: i64) -> Option<Gone> {
    gone().get(id, now)
}

/// `FLUSHALL`: every session is forgotten, its end too.
pub fn clear() {
    gone().clear();
}
