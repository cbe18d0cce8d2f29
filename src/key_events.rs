//! The module's keyspace-event subscriptions, one per class of events,
//! each handing an event to every part that listens to that class: the
//! waits' queues (`crate::wait`), the observers (`crate::observe`) and
//! hold timing (`crate::timings`).
//!
//! Redis calls every subscriber on every event of its classes, the native
//! commands' events included, and builds a context with a temporary
//! client for each call (about 600 instructions, measured by callgrind on
//! redis 7.0.15). Three parts each subscribed on their own cost every
//! `DEL`, `EXPIRE`, `RENAME` or expiry of the server three such calls once
//! all three were in use; here it is one. The classes only some parts need
//! (`ZSET`: the waits, a holder removed by hand; `STRING`: the observers, a
//! `SET` by anyone) have a subscription of their own, taken by the first
//! part that needs it, so no part makes the server call the module on
//! events it does not read. Nothing is subscribed before a part needs it
//! (the first WAIT, OBSERVE, or hold timed), and a subscription cannot be
//! dropped (Redis 7.0 has no call for it); each part returns at its first
//! load while it has nothing to check.

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use crate::api::rm;
use crate::key::Ctx;

/// The classes every part reads: a key deleted, renamed, moved, given a
/// TTL (GENERIC), expired or evicted.
const CORE: c_int = raw::REDISMODULE_NOTIFY_GENERIC | raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED;

/// What a part listens to besides [`CORE`].
#[derive(Clone, Copy)]
pub enum Also {
    Nothing,
    /// Sorted-set events (the waits: `ZREM` of a holder frees a place).
    Zset,
    /// String events (the observers: a `SET` changes a leader's value).
    String,
}

static CORE_TAKEN: AtomicBool = AtomicBool::new(false);
static ZSET_TAKEN: AtomicBool = AtomicBool::new(false);
static STRING_TAKEN: AtomicBool = AtomicBool::new(false);

/// Subscribes the module to [`CORE`] and to `also`, each once. Main thread only.
pub fn subscribe(ctx: Ctx, also: Also) {
    let take = |taken: &AtomicBool, types: c_int, callback: Callback| {
        if !taken.swap(true, Ordering::Relaxed) {
            unsafe { rm!(RedisModule_SubscribeToKeyspaceEvents)(ctx.0, types, Some(callback)) };
        }
    };
    take(&CORE_TAKEN, CORE, on_core);
    match also {
        Also::Nothing => {}
        Also::Zset => take(&ZSET_TAKEN, raw::REDISMODULE_NOTIFY_ZSET, on_zset),
        Also::String => take(&STRING_TAKEN, raw::REDISMODULE_NOTIFY_STRING, on_string),
    }
}

type Callback = unsafe extern "C" fn(*mut RedisModuleCtx, c_int, *const c_char, *mut RedisModuleString) -> c_int;

/// The event's name (`del`, `expired`, …), empty if Redis sent none.
unsafe fn name<'a>(event: *const c_char) -> &'a [u8] {
    if event.is_null() {
        b""
    } else {
        CStr::from_ptr(event).to_bytes()
    }
}

unsafe extern "C" fn on_core(
    ctx: *mut RedisModuleCtx,
    type_: c_int,
    event: *const c_char,
    key: *mut RedisModuleString,
) -> c_int {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (ctx, event) = (Ctx(ctx), name(event));
        crate::wait::on_key_event(ctx, type_, key);
        crate::observe::on_key_event(ctx, key);
        crate::timings::on_key_event(ctx, type_, event, key);
    }));
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_zset(
    ctx: *mut RedisModuleCtx,
    type_: c_int,
    _event: *const c_char,
    key: *mut RedisModuleString,
) -> c_int {
    let _ = std::panic::catch_unwind(|| crate::wait::on_key_event(Ctx(ctx), type_, key));
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_string(
    ctx: *mut RedisModuleCtx,
    _type: c_int,
    _event: *const c_char,
    key: *mut RedisModuleString,
) -> c_int {
    let _ = std::panic::catch_unwind(|| crate::observe::on_key_event(Ctx(ctx), key));
    raw::REDISMODULE_OK as c_int
}
