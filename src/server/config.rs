//! Module configuration, set at load (`loadmodule ... ` lines in
//! redis.conf as `lock.max-waiters 10000`) or at run time
//! (`CONFIG SET lock.max-waiters 10000`); `CONFIG GET lock.*` shows it.

use std::ffi::{c_char, c_int, c_longlong, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use crate::boundary::api::rm;

/// Default of `lock.max-waiters`: no cap of its own (Redis's `maxclients`,
/// 10000 by default, still bounds how many clients can wait).
pub const DEFAULT_MAX_WAITERS: u64 = 0;

static MAX_WAITERS: AtomicU64 = AtomicU64::new(DEFAULT_MAX_WAITERS);

/// `lock.max-waiters`: how many clients may block in `WAIT` at once across
/// all keys (0: no cap). A WAIT beyond it is refused with an error instead
/// of blocking. Each waiter costs server memory (docs/commands.md, "WAIT limits and server states").
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

/// Default of `lock.orphan-grace`: a minute (docs/configuration.md).
pub const DEFAULT_ORPHAN_GRACE_MS: u64 = 60_000;

/// The longest `lock.orphan-grace`: a year, so that `now` plus it never
/// overflows a Unix time in ms.
const MAX_ORPHAN_GRACE_MS: c_longlong = 365 * 24 * 3600 * 1000;

static ORPHAN_GRACE: AtomicU64 = AtomicU64::new(DEFAULT_ORPHAN_GRACE_MS);

/// `lock.orphan-grace` (ms): how long a session-held lock whose session
/// this node does not know (its key moved here) is held once a command
/// finds it, unless its live holder adopts it (`SESSION.ADOPT`); 0: held
/// as it is (docs/sessions.md).
pub fn orphan_grace() -> i64 {
    i64::try_from(ORPHAN_GRACE.load(Ordering::Relaxed)).unwrap_or(0)
}

unsafe extern "C" fn get_orphan_grace(_name: *const c_char, _privdata: *mut c_void) -> c_longlong {
    c_longlong::try_from(ORPHAN_GRACE.load(Ordering::Relaxed)).unwrap_or(c_longlong::MAX)
}

unsafe extern "C" fn set_orphan_grace(
    _name: *const c_char,
    value: c_longlong,
    _privdata: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    // Redis enforces the bounds given at registration.
    ORPHAN_GRACE.store(u64::try_from(value).unwrap_or(0), Ordering::Relaxed);
    raw::REDISMODULE_OK as c_int
}

static HOLD_TIMING: AtomicBool = AtomicBool::new(false);

/// What turning `lock.hold-timing` off must do (forget the holds being
/// timed), registered at load by `lib.rs`: config imports no consumer.
static HOLD_TIMING_OFF: OnceLock<fn()> = OnceLock::new();

/// Registers the hook run when `lock.hold-timing` is turned off. Before
/// [`register`], which may apply a value from the server's config.
pub fn on_hold_timing_off(hook: fn()) {
    let _ = HOLD_TIMING_OFF.set(hook);
}

/// `lock.hold-timing`: whether the module times the holds it grants
/// (`INFO lock`'s `lock_hold_ms_*`; `crate::server::timings`). Off by default:
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
        if let Some(stop) = HOLD_TIMING_OFF.get() {
            stop();
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// `lock.eviction`: 0 refuse (the default), 1 allow.
const REFUSE: c_int = 0;
const ALLOW: c_int = 1;
static EVICTION_REFUSES: AtomicBool = AtomicBool::new(true);

/// What changing `lock.eviction` must do (recompute whether grants are
/// refused now), registered at load by `lib.rs`.
static EVICTION_CHANGED: OnceLock<fn()> = OnceLock::new();

/// Registers the hook run when `lock.eviction` changes. Before [`register`].
pub fn on_eviction_mode(hook: fn()) {
    let _ = EVICTION_CHANGED.set(hook);
}

/// `lock.eviction refuse`: grants are refused while the server may evict
/// lock keys (`crate::server::eviction`; docs/configuration.md says why
/// this is the default).
pub fn eviction_refuses() -> bool {
    EVICTION_REFUSES.load(Ordering::Relaxed)
}

unsafe extern "C" fn get_eviction(_name: *const c_char, _privdata: *mut c_void) -> c_int {
    if eviction_refuses() {
        REFUSE
    } else {
        ALLOW
    }
}

unsafe extern "C" fn set_eviction(
    _name: *const c_char,
    value: c_int,
    _privdata: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    EVICTION_REFUSES.store(value != ALLOW, Ordering::Relaxed);
    if let Some(changed) = EVICTION_CHANGED.get() {
        changed();
    }
    raw::REDISMODULE_OK as c_int
}

/// Registers `lock.eviction` (`refuse` | `allow`).
unsafe fn register_eviction(ctx: *mut RedisModuleCtx) -> bool {
    let mut names = [c"refuse".as_ptr(), c"allow".as_ptr()];
    let values = [REFUSE, ALLOW];
    rm!(RedisModule_RegisterEnumConfig)(
        ctx,
        c"eviction".as_ptr(),
        REFUSE,
        raw::REDISMODULE_CONFIG_DEFAULT,
        names.as_mut_ptr(),
        values.as_ptr(),
        2,
        Some(get_eviction),
        Some(set_eviction),
        None,
        std::ptr::null_mut(),
    ) == raw::REDISMODULE_OK as c_int
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
            && register_eviction(ctx)
            && rm!(RedisModule_RegisterNumericConfig)(
                ctx,
                c"orphan-grace".as_ptr(),
                DEFAULT_ORPHAN_GRACE_MS as c_longlong,
                raw::REDISMODULE_CONFIG_DEFAULT,
                0,
                MAX_ORPHAN_GRACE_MS,
                Some(get_orphan_grace),
                Some(set_orphan_grace),
                None,
                std::ptr::null_mut(),
            ) == ok
            && rm!(RedisModule_LoadConfigs)(ctx) == ok
    }
}
