//! Counters since the server started, shown by `INFO lock`
//! (`crate::server::info` renders them).
//!
//! Commands run on Redis's main thread, so relaxed atomics cost no more than
//! plain increments and keep the statics safe to touch from anywhere.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_lock_rules::holders::{Family, Want};

pub struct Counter(AtomicU64);

impl Counter {
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_n(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Locks granted: LOCK.ACQUIRE and LOCK.TAKEOVER replies of 1.
pub static GRANTS: Counter = Counter::new();
/// Replies of 0 from any command.
pub static REFUSALS: Counter = Counter::new();
pub static RENEWALS: Counter = Counter::new();
pub static RELEASES: Counter = Counter::new();
pub static TAKEOVERS_SAME_RUN: Counter = Counter::new();
pub static TAKEOVERS_STALE_LEGACY: Counter = Counter::new();
pub static WAITS_STARTED: Counter = Counter::new();
pub static WAITS_GRANTED: Counter = Counter::new();
pub static WAITS_TIMED_OUT: Counter = Counter::new();
/// Waits that ended neither granted nor timed out: the client disconnected,
/// or its grant could not be made (fences exhausted, expiry overflowing).
/// waits_started = granted + timed_out + cancelled + waiting.
pub static WAITS_CANCELLED: Counter = Counter::new();
/// LOCK.GUARD calls whose token held the lock: the inner command was handed
/// to Redis (its reply may still be an error: ACL, OOM, arity, its own).
pub static GUARDED: Counter = Counter::new();
/// LOCK.GUARD replies of NOTHELD: nothing ran.
pub static GUARD_REFUSALS: Counter = Counter::new();
/// LOCK.ACQUIRE, LOCK.TAKEOVER and LOCK.ELECT refused because the key is in a
/// lock-delay (holds a tombstone); also counted in `refusals`.
pub static DELAYED_ACQUIRES: Counter = Counter::new();
/// LOCK.RENEW replies of 2: MAXHOLD cut the new lease short (also counted
/// in `renewals`).
pub static CAPPED_RENEWALS: Counter = Counter::new();
/// Leases with a LOCKDELAY found ended and settled to their tombstone.
pub static DELAYS_STARTED: Counter = Counter::new();

/// LOCK.REVOKE calls that revoked a hold (of any family), and revoked
/// holds the server ended at their deadline (or at once, without GRACE):
/// an involuntary end, also counted where such an end always is (a lock's
/// `delays_started`, a holder's `*_expired`).
pub static REVOKES: Counter = Counter::new();
pub static REVOKED_ENDS: Counter = Counter::new();

/// Semaphores (SEM.*): permits granted (also to waiters), replies of
/// 0 or nil, renewals and releases that took effect, and holders removed at
/// the end of their lease (pruned by a command or the queue's timer).
pub static SEM_GRANTS: Counter = Counter::new();
pub static SEM_REFUSALS: Counter = Counter::new();
pub static SEM_RENEWALS: Counter = Counter::new();
pub static SEM_RELEASES: Counter = Counter::new();
pub static SEM_EXPIRED: Counter = Counter::new();
/// SEM.ACQUIRE refused or queued only because places in their lock-delay
/// fill the key (it would have been granted without them); SEM.RENEW
/// replies of 2 (MAXHOLD cut the renewal short; also in `sem_renewals`).
pub static SEM_DELAYED_ACQUIRES: Counter = Counter::new();
pub static SEM_CAPPED_RENEWALS: Counter = Counter::new();
/// Read-write locks (RWLOCK.*), as the semaphore's.
pub static RW_READ_GRANTS: Counter = Counter::new();
pub static RW_WRITE_GRANTS: Counter = Counter::new();
pub static RW_REFUSALS: Counter = Counter::new();
pub static RW_RENEWALS: Counter = Counter::new();
pub static RW_RELEASES: Counter = Counter::new();
pub static RW_EXPIRED: Counter = Counter::new();
pub static RW_DELAYED_ACQUIRES: Counter = Counter::new();
pub static RW_CAPPED_RENEWALS: Counter = Counter::new();

/// Elections: LOCK.ELECT grants (also to waiters), and LOCK.PROCLAIM
/// replies of 1 (a new value under the same term).
pub static ELECTIONS: Counter = Counter::new();
pub static PROCLAIMS: Counter = Counter::new();
/// LOCK.OBSERVE calls that blocked; blocked observers answered because the
/// leadership changed, and because their WAIT ran out (with the unchanged
/// state). observes_started = wakes + timeouts + cancelled + observing.
pub static OBSERVES_STARTED: Counter = Counter::new();
pub static OBSERVER_WAKES: Counter = Counter::new();
pub static OBSERVER_TIMEOUTS: Counter = Counter::new();
/// Observers that ended otherwise: disconnected, `CLIENT UNBLOCK … ERROR`,
/// or sent on (`MOVED`/`TRYAGAIN`) because the key's slot moved.
pub static OBSERVERS_CANCELLED: Counter = Counter::new();
/// `CLUSTER NODES` readings made for observers: one a second while any
/// observer blocks in cluster mode, plus one per check of an observed key
/// that finds no leader.
pub static OBSERVER_SLOT_CHECKS: Counter = Counter::new();

/// Sessions (docs/sessions.md): granted, kept alive (per id), ended by
/// their deadline, revoked; holds ended because their session ended (by
/// the ending slices, or settled by a command that reached them first).
pub static SESSIONS_GRANTED: Counter = Counter::new();
pub static SESSION_KEEPALIVES: Counter = Counter::new();
pub static SESSIONS_EXPIRED: Counter = Counter::new();
pub static SESSIONS_REVOKED: Counter = Counter::new();
pub static SESSION_HOLDS_ENDED: Counter = Counter::new();
/// Session-held holds lost to an eviction and noted for their sessions'
/// keepalives (`crate::store::session_evicted`).
pub static SESSION_HOLDS_EVICTED: Counter = Counter::new();
/// Orphans (docs/sessions.md, "A key moved to another node"): holds of a
/// session this node does not know given the `lock.orphan-grace` end by
/// a command that found them; and adopted by a live session
/// (`SESSION.ADOPT`).
pub static ORPHANS_LEASED: Counter = Counter::new();
pub static ORPHANS_ADOPTED: Counter = Counter::new();
/// Sessions on this node right now (ended ones still releasing included).
pub static SESSIONS: AtomicU64 = AtomicU64::new(0);
/// The longest run of the sessions' timer (ending sessions, releasing a
/// slice of their holds), in microseconds of the server thread's CPU time,
/// since the server started.
pub static SESSION_TICK_MAX_US: AtomicU64 = AtomicU64::new(0);

/// AOF rewrites without the RDB preamble after which this master restated
/// its sessions, revoked holds and fence mark (`crate::store::aof_walk`),
/// and 1 while it is doing so.
pub static AOF_WALKS: Counter = Counter::new();
pub static AOF_WALKING: AtomicU64 = AtomicU64::new(0);

/// Clients blocked in LOCK.OBSERVE right now (kept by `crate::blocked::observers`).
pub static OBSERVING: AtomicU64 = AtomicU64::new(0);

pub fn observing() -> u64 {
    OBSERVING.load(Ordering::Relaxed)
}

/// Clients blocked in WAIT right now (kept by `crate::blocked::queue`); lets every
/// command skip the wait state when it is 0.
pub static WAITING: AtomicU64 = AtomicU64::new(0);

/// Clients blocked in WAIT right now.
pub fn waiting() -> u64 {
    WAITING.load(Ordering::Relaxed)
}

/// The grant counter of an acquirer of a semaphore or read-write lock.
pub fn holder_grants(want: Want) -> &'static Counter {
    match want {
        Want::Permit { .. } => &SEM_GRANTS,
        Want::Read => &RW_READ_GRANTS,
        Want::Write => &RW_WRITE_GRANTS,
    }
}

/// A family's counters besides its grants.
pub struct FamilyCounters {
    pub refusals: &'static Counter,
    pub renewals: &'static Counter,
    pub releases: &'static Counter,
    pub expired: &'static Counter,
    pub delayed: &'static Counter,
    pub capped: &'static Counter,
}

pub fn holder_counters(family: Family) -> FamilyCounters {
    match family {
        Family::Semaphore => FamilyCounters {
            refusals: &SEM_REFUSALS,
            renewals: &SEM_RENEWALS,
            releases: &SEM_RELEASES,
            expired: &SEM_EXPIRED,
            delayed: &SEM_DELAYED_ACQUIRES,
            capped: &SEM_CAPPED_RENEWALS,
        },
        Family::ReadWrite => FamilyCounters {
            refusals: &RW_REFUSALS,
            renewals: &RW_RENEWALS,
            releases: &RW_RELEASES,
            expired: &RW_EXPIRED,
            delayed: &RW_DELAYED_ACQUIRES,
            capped: &RW_CAPPED_RENEWALS,
        },
    }
}
