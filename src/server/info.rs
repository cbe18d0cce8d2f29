//! The `INFO lock` section: the counters (`crate::server::counters`), then
//! the wait and hold distributions (`crate::server::timings`). Registered
//! by `lib.rs`.

use std::ffi::{c_int, CStr};

use redis_module::raw::RedisModuleInfoCtx;

use crate::boundary::api::rm;
use crate::server::{counters, eviction, timings};

/// The `INFO lock` section (fields appear as `lock_<name>`).
pub unsafe extern "C" fn render(ctx: *mut RedisModuleInfoCtx, _for_crash_report: c_int) {
    let fields: [(&CStr, u64); 53] = [
        (c"grants", counters::GRANTS.get()),
        (c"refusals", counters::REFUSALS.get()),
        (c"renewals", counters::RENEWALS.get()),
        (c"releases", counters::RELEASES.get()),
        (c"takeovers_same_run", counters::TAKEOVERS_SAME_RUN.get()),
        (c"takeovers_stale_legacy", counters::TAKEOVERS_STALE_LEGACY.get()),
        (c"waits_started", counters::WAITS_STARTED.get()),
        (c"waits_granted", counters::WAITS_GRANTED.get()),
        (c"waits_timed_out", counters::WAITS_TIMED_OUT.get()),
        (c"waits_cancelled", counters::WAITS_CANCELLED.get()),
        (c"waiting", counters::waiting()),
        (c"guarded", counters::GUARDED.get()),
        (c"guard_refusals", counters::GUARD_REFUSALS.get()),
        (c"delayed_acquires", counters::DELAYED_ACQUIRES.get()),
        (c"capped_renewals", counters::CAPPED_RENEWALS.get()),
        (c"delays_started", counters::DELAYS_STARTED.get()),
        (c"revokes", counters::REVOKES.get()),
        (c"revoked_ends", counters::REVOKED_ENDS.get()),
        (c"sem_grants", counters::SEM_GRANTS.get()),
        (c"sem_refusals", counters::SEM_REFUSALS.get()),
        (c"sem_renewals", counters::SEM_RENEWALS.get()),
        (c"sem_releases", counters::SEM_RELEASES.get()),
        (c"sem_expired", counters::SEM_EXPIRED.get()),
        (c"sem_delayed_acquires", counters::SEM_DELAYED_ACQUIRES.get()),
        (c"sem_capped_renewals", counters::SEM_CAPPED_RENEWALS.get()),
        (c"rw_read_grants", counters::RW_READ_GRANTS.get()),
        (c"rw_write_grants", counters::RW_WRITE_GRANTS.get()),
        (c"rw_refusals", counters::RW_REFUSALS.get()),
        (c"rw_renewals", counters::RW_RENEWALS.get()),
        (c"rw_releases", counters::RW_RELEASES.get()),
        (c"rw_expired", counters::RW_EXPIRED.get()),
        (c"rw_delayed_acquires", counters::RW_DELAYED_ACQUIRES.get()),
        (c"rw_capped_renewals", counters::RW_CAPPED_RENEWALS.get()),
        (c"elections", counters::ELECTIONS.get()),
        (c"proclaims", counters::PROCLAIMS.get()),
        (c"observes_started", counters::OBSERVES_STARTED.get()),
        (c"observer_wakes", counters::OBSERVER_WAKES.get()),
        (c"observer_timeouts", counters::OBSERVER_TIMEOUTS.get()),
        (c"observers_cancelled", counters::OBSERVERS_CANCELLED.get()),
        (c"observer_slot_checks", counters::OBSERVER_SLOT_CHECKS.get()),
        (c"observing", counters::observing()),
        (c"sessions", counters::SESSIONS.load(std::sync::atomic::Ordering::Relaxed)),
        (c"sessions_granted", counters::SESSIONS_GRANTED.get()),
        (c"session_keepalives", counters::SESSION_KEEPALIVES.get()),
        (c"sessions_expired", counters::SESSIONS_EXPIRED.get()),
        (c"sessions_revoked", counters::SESSIONS_REVOKED.get()),
        (c"session_holds_ended", counters::SESSION_HOLDS_ENDED.get()),
        (c"session_holds_evicted", counters::SESSION_HOLDS_EVICTED.get()),
        (c"orphans_leased", counters::ORPHANS_LEASED.get()),
        (c"orphans_adopted", counters::ORPHANS_ADOPTED.get()),
        (c"session_tick_max_us", counters::SESSION_TICK_MAX_US.load(std::sync::atomic::Ordering::Relaxed)),
        (c"aof_walks", counters::AOF_WALKS.get()),
        (c"aof_walking", counters::AOF_WALKING.load(std::sync::atomic::Ordering::Relaxed)),
    ];
    rm!(RedisModule_InfoAddSection)(ctx, std::ptr::null());
    for (name, value) in fields {
        rm!(RedisModule_InfoAddFieldULongLong)(ctx, name.as_ptr(), value);
    }
    eviction::render(ctx);
    timings::render(ctx);
}
