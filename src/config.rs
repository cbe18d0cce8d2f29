//! Module configuration, set at load (`loadmodule ... ` lines in
//! redis.conf as `lock.max-waiters 10000`) or at run time
//! (`CONFIG SET lock.max-waiters 10000`); `CONFIG GET lock.*` shows it.

use std::ffi::{c_char, c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use crate::api::rm;

/// Default of `lock.max-waiters`: no cap of its own (Redis's `maxclients`,
/// 10000 by default, still bounds how many clients can wait).
pub const DEFAULT_MAX_WAITERS: u64 = 0;

static MAX_WAITERS: AtomicU64 = AtomicU64::new(DEFAULT_MAX_WAITERS);

/// `lock.max-waiters`: how many clients may block in `WAIT` at once across
/// all keys (0: no cap). A WAIT beyond it is refused with an error instead
/// of blocking. Each waiter costs server memory (README: WAIT limits).
pub fn max_waiters() -> u64 {
    MAX_WAITERS.load(Ordering::Relaxed)
}

unsafe extern "C" fn get_max_waiters(_name: *const c_char, _privdata: *mut c_void) -> c_longlong {
    c_longlong::try_from(max_waiters()).unwrap_or(c_longlong::MAX)
}

unsafe extern "C" fn set_max_waiters(
    _name: *const c_char,
    value: c_longlong,
    _privdata: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    // Redis enforces the bounds given at registration (0..=i64::MAX).
    MAX_WAITERS.store(u64::try_from(value).unwrap_or(0), Ordering::Relaxed);
    raw::REDISMODULE_OK as c_int
}

static HOLD_TIMING: AtomicBool = AtomicBool::new(false);

/// `lock.hold-timing`: whether the module times the holds it grants
/// (`INFO lock`'s `lock_hold_ms_*`; `crate::timings`). Off by default:
/// timing costs every grant a table insert and every expired, evicted or
/// generic keyspace event of the server a callback into the module
/// (docs/performance.md). Off, the hold table is empty.
pub fn hold_timing() -> bool {
    HOLD_TIMING.load(Ordering::Relaxed)
}

unsafe extern "C" fn get_hold_timing(_name: *const c_char, _privdata: *mut c_void) -> c_int {
    c_int::from(hold_timing())
}

unsafe extern "C" fn set_hold_timing(
    _name: *const c_char,
    value: c_int,
    _privdata: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    let on = value != 0;
    HOLD_TIMING.store(on, Ordering::Relaxed);
    if !on {
        crate::timings::stop_holds();
    }
    raw::REDISMODULE_OK as c_int
}

/// Registers the configs and applies the values given at load.
pub fn register(ctx: *mut RedisModuleCtx) -> bool {
    unsafe {
        let ok = raw::REDISMODULE_OK as c_int;
        rm!(RedisModule_RegisterNumericConfig)(
            ctx,
            c"max-waiters".as_ptr(),
            DEFAULT_MAX_WAITERS as c_longlong,
            raw::REDISMODULE_CONFIG_DEFAULT,
            0,
            c_longlong::MAX,
            Some(get_max_waiters),
            Some(set_max_waiters),
            None,
            std::ptr::null_mut(),
        ) == ok
            && rm!(RedisModule_RegisterBoolConfig)(
                ctx,
                c"hold-timing".as_ptr(),
                0,
                raw::REDISMODULE_CONFIG_DEFAULT,
                Some(get_hold_timing),
                Some(set_hold_timing),
                None,
                std::ptr::null_mut(),
            ) == ok
            && crate::eviction::register_config(ctx)
            && rm!(RedisModule_LoadConfigs)(ctx) == ok
    }
}
