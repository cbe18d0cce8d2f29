//! Which databases a server event changed wholesale (FLUSHDB, FLUSHALL,
//! SWAPDB): no key event names the keys that went, so the waits' queues
//! and the observers check every key of theirs in those databases.
//!
//! A module has one callback per server event: a second
//! `RM_SubscribeToServerEvent` for the same event replaces the first
//! (`module.c`). So the module subscribes to these two once, here, and
//! hands each event to every part that needs it (the waits, the
//! observers, the hold timings); each returns at once when it has nothing
//! to check. (Subscribed by each part itself, the last one to subscribe
//! got every flush and the others none: an observer was not woken by a
//! FLUSHALL once a WAIT had blocked.)

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw::{self, RedisModuleCtx};

use crate::api::rm;
use crate::key::Ctx;

static SUBSCRIBED: AtomicBool = AtomicBool::new(false);

/// Subscribes the module to FLUSHDB and SWAPDB, once.
pub fn subscribe(ctx: Ctx) {
    if SUBSCRIBED.swap(true, Ordering::Relaxed) {
        return;
    }
    // Version 1 of both events' data is what Redis 6.0 and later send.
    let flush = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_FLUSHDB, dataver: 1 };
    let swap = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_SWAPDB, dataver: 1 };
    unsafe {
        rm!(RedisModule_SubscribeToServerEvent)(ctx.0, flush, Some(on_event));
        rm!(RedisModule_SubscribeToServerEvent)(ctx.0, swap, Some(on_event));
    }
}

unsafe extern "C" fn on_event(
    ctx: *mut RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    crate::wait::on_db_event(ctx, event, subevent, data);
    crate::observe::on_db_event(ctx, event, subevent, data);
    crate::timings::on_db_event(ctx, event, subevent, data);
}

/// The databases an event changed: these two, or all.
#[derive(Clone, Copy)]
pub enum Changed {
    Dbs(c_int, c_int),
    All,
}

impl Changed {
    pub fn includes(self, db: c_int) -> bool {
        match self {
            Changed::Dbs(a, b) => db == a || db == b,
            Changed::All => true,
        }
    }
}

/// What the event changed; `None` when it is no news (FLUSHDB's START
/// fires while the keys are still there; only END is).
///
/// # Safety
/// `data` is the event's data as Redis passed it to the callback.
pub unsafe fn changed(event: raw::RedisModuleEvent, subevent: u64, data: *mut c_void) -> Option<Changed> {
    match event.id {
        raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END => {
            Some(match data.cast::<raw::RedisModuleFlushInfo>().as_ref() {
                Some(info) if info.dbnum >= 0 => Changed::Dbs(info.dbnum, info.dbnum),
                // -1 is FLUSHALL; without data, check everything.
                _ => Changed::All,
            })
        }
        raw::REDISMODULE_EVENT_SWAPDB => Some(
            data.cast::<raw::RedisModuleSwapDbInfo>()
                .as_ref()
                .map_or(Changed::All, |i| Changed::Dbs(i.dbnum_first, i.dbnum_second)),
        ),
        _ => None,
    }
}
