//! Module timers that own their data: the waits' and the observers'
//! timeouts and check timers. A timer never asks Redis for more than
//! [`MAX_TIMER_MS`]; callers cut longer delays into pieces.

use std::ffi::{c_int, c_void};

use redis_lock_rules::blocked::MAX_TIMER_MS;
use redis_module::raw::{self, RedisModuleCtx, RedisModuleTimerID};

use crate::boundary::api::rm;
use crate::boundary::ctx::Ctx;

/// Starts a timer of at most [`MAX_TIMER_MS`] that hands `data` to `callback`.
pub fn start<T>(
    ctx: Ctx,
    delay_ms: i64,
    callback: unsafe extern "C" fn(*mut RedisModuleCtx, *mut c_void),
    data: T,
) -> RedisModuleTimerID {
    let data = Box::into_raw(Box::new(data));
    unsafe { rm!(RedisModule_CreateTimer)(ctx.0, delay_ms.clamp(0, MAX_TIMER_MS), Some(callback), data.cast()) }
}

/// Stops a timer started with data of type `T`, and frees that data. Not
/// from the timer's own callback (Redis frees a fired timer itself).
pub fn stop<T>(ctx: Ctx, id: RedisModuleTimerID) {
    let mut data: *mut c_void = std::ptr::null_mut();
    unsafe {
        if rm!(RedisModule_StopTimer)(ctx.0, id, &mut data) == raw::REDISMODULE_OK as c_int && !data.is_null() {
            drop(Box::from_raw(data.cast::<T>()));
        }
    }
}
