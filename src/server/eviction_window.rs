//! Holds the module gave while the server could not evict, and so never
//! put in eviction's table (`crate::server::eviction`): one number, the
//! latest lease end given untracked ([`untracked`]: a load, a compare and
//! maybe a store on the lock paths). While an eviction comes before it,
//! an evicted key the table does not know may have been such a lock: it
//! is counted (`lock_evicted_unverified`), logged by eviction's listener,
//! and remembered so that `LOCK.EVICTED` answers 1 to its holder
//! (`redis_lock_rules::eviction_window`). Session-held holds: the
//! session's deadline, extended by each keepalive ([`session_lease`]).
//!
//! Everything here runs on Redis's main thread.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::eviction_window::{extend, open, Sessions, Unverified};

use crate::server::counters::Counter;

/// Keys evicted in the window remembered for `LOCK.EVICTED`, oldest first out.
pub const MAX_KEYS: usize = 10_000;

/// The latest lease end (Unix ms) given to a hold in no table; 0: none.
static UNTIL: AtomicI64 = AtomicI64::new(0);
/// Keys in the unverified table (eviction's writes watch while some are).
static KEYS: AtomicUsize = AtomicUsize::new(0);
/// Evicted keys, unknown to the table, while untracked holds may have been live.
pub static EVICTED: Counter = Counter::new();

struct Window {
    unverified: Unverified,
    sessions: Sessions,
}

static WINDOW: LazyLock<Mutex<Window>> =
    LazyLock::new(|| Mutex::new(Window { unverified: Unverified::new(MAX_KEYS), sessions: Sessions::default() }));

fn window() -> MutexGuard<'static, Window> {
    WINDOW.lock().unwrap_or_else(|e| e.into_inner())
}

/// A hold was given (granted, renewed) until `at` without being tracked.
#[inline(always)]
pub fn untracked(at: i64) {
    if let Some(until) = extend(UNTIL.load(Ordering::Relaxed), at) {
        UNTIL.store(until, Ordering::Relaxed);
    }
}

/// The window's end (Unix ms; 0: no hold was ever given untracked).
pub fn until() -> i64 {
    UNTIL.load(Ordering::Relaxed)
}

/// Whether keys evicted in the window are remembered.
#[inline(always)]
pub fn pending() -> bool {
    KEYS.load(Ordering::Relaxed) != 0
}

/// Forgets the remembered keys that are old news (so that the writes of
/// lock keys stop watching once none is left).
fn settle(w: &mut Window, now: i64) {
    w.unverified.prune(now);
    KEYS.store(w.unverified.len(), Ordering::Relaxed);
}

/// `token` (hash) was granted `key` (hash) at `now`: its later loss is not
/// an earlier eviction's. Only while [`pending`].
pub fn granted(key: u64, token: u64, now: i64) {
    let mut w = window();
    w.unverified.granted(key, token);
    settle(&mut w, now);
}

/// `key` (hash), unknown to the table, was evicted at `now`: whether an
/// untracked hold may have been live then (counted and remembered).
pub fn evicted(key: u64, now: i64) -> bool {
    let mut w = window();
    settle(&mut w, now);
    if !open(until(), now) {
        return false;
    }
    EVICTED.add();
    w.unverified.evicted(key, until());
    KEYS.store(w.unverified.len(), Ordering::Relaxed);
    true
}

/// Whether `token`'s hold of `key` may have been lost to an eviction in
/// the window (whose end at the eviction is not long past).
pub fn was_evicted(key: u64, token: u64, now: i64) -> bool {
    pending() && window().unverified.was_evicted(key, token, now)
}

/// Session `id` attached a hold or was kept alive at `now`: it holds
/// something (`holds`) until `deadline`. Extends the window when the
/// settings cannot evict (`evictable` false), or when the session held
/// something while they could not.
pub fn session_lease(id: u128, deadline: i64, holds: bool, evictable: bool, now: i64) {
    if window().sessions.lease(id, deadline, holds, evictable, now) && deadline > until() {
        UNTIL.store(deadline, Ordering::Relaxed);
    }
}

/// Holds loaded (from an RDB, an AOF's preamble, a master's full sync)
/// whose leases end by `until`: no table of this process has them, so
/// the window covers them as holds given untracked.
pub fn loaded(until: i64) {
    untracked(until);
}

/// A session loaded holding something until `deadline`: its holds are in
/// no table here, so its keepalives extend the window as those of a
/// session that held something while nothing could be evicted.
pub fn loaded_session(id: u128, deadline: i64, now: i64) {
    session_lease(id, deadline, true, false, now);
}
