//! Counters since the server started, shown by `INFO lock`.
//!
//! Commands run on Redis's main thread, so relaxed atomics cost no more than
//! plain increments and keep the statics safe to touch from anywhere.

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use redis_module::raw::RedisModuleInfoCtx;

use crate::api::rm;

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
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

/// Clients blocked in WAIT right now (kept by `crate::wait`); lets every
/// command skip the wait state when it is 0.
pub static WAITING: AtomicU64 = AtomicU64::new(0);

/// Clients blocked in WAIT right now.
pub fn waiting() -> u64 {
    WAITING.load(Ordering::Relaxed)
}

/// The `INFO lock` section (fields appear as `lock_<name>`).
pub unsafe extern "C" fn info(ctx: *mut RedisModuleInfoCtx, _for_crash_report: c_int) {
    let fields: [(&CStr, u64); 13] = [
        (c"grants", GRANTS.get()),
        (c"refusals", REFUSALS.get()),
        (c"renewals", RENEWALS.get()),
        (c"releases", RELEASES.get()),
        (c"takeovers_same_run", TAKEOVERS_SAME_RUN.get()),
        (c"takeovers_stale_legacy", TAKEOVERS_STALE_LEGACY.get()),
        (c"waits_started", WAITS_STARTED.get()),
        (c"waits_granted", WAITS_GRANTED.get()),
        (c"waits_timed_out", WAITS_TIMED_OUT.get()),
        (c"waits_cancelled", WAITS_CANCELLED.get()),
        (c"waiting", waiting()),
        (c"guarded", GUARDED.get()),
        (c"guard_refusals", GUARD_REFUSALS.get()),
    ];
    rm!(RedisModule_InfoAddSection)(ctx, std::ptr::null());
    for (name, value) in fields {
        rm!(RedisModule_InfoAddFieldULongLong)(ctx, name.as_ptr(), value);
    }
}
