//! Which databases a server event changed wholesale (FLUSHDB, FLUSHALL,
//! SWAPDB): no key event names the keys that went, so the waits' queues
//! and the observers check every key of theirs in those databases.
//!
//! A module has one callback per server event: a second
//! `RM_SubscribeToServerEvent` for the same event replaces the first
//! (`module.c`). So the module subscribes to these two once, here, and
//! hands each event to every part that needs it (the waits, the
//! observers, the hold timings); each returns at once when it has nothing
//! to check. The replication role change is taken here for the same
//! reason: a demoted master answers its waiters and its observers. (Subscribed by each part itself, the last one to subscribe
//! got every flush and the others none: an observer was not woken by a
//! FLUSHALL once a WAIT had blocked.)

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw::{self, RedisModuleCtx};

use crate::api::rm;
use crate::key::Ctx;

static SUBSCRIBED: AtomicBool = AtomicBool::new(false);

/// Subscribes the module to FLUSHDB, SWAPDB and replication role changes,
/// once.
pub fn subscribe(ctx: Ctx) {
    if SUBSCRIBED.swap(true, Ordering::Relaxed) {
        return;
    }
    // Version 1 of both events' data is what Redis 6.0 and later send.
    let flush = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_FLUSHDB, dataver: 1 };
    let swap = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_SWAPDB, dataver: 1 };
    let role = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED, dataver: 1 };
    unsafe {
        rm!(RedisModule_SubscribeToServerEvent)(ctx.0, flush, Some(on_event));
        rm!(RedisModule_SubscribeToServerEvent)(ctx.0, swap, Some(on_event));
        rm!(RedisModule_SubscribeToServerEvent)(ctx.0, role, Some(on_role_changed));
    }
}

/// What Redis answers the blocked clients it unblocks when a master
/// becomes a replica.
pub const UNBLOCKED: &std::ffi::CStr =
    c"UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";

/// This master became a replica. Redis 7.0/8.2 and valkey 8.1 unblock every
/// blocked client first (`replicationSetMaster`), which took the waiters
/// and observers out already; valkey 9.1 in a cluster leaves
/// module-blocked clients blocked. Those came to a master, not with
/// `READONLY` to a replica (and a replica grants nothing), so they are
/// answered as Redis answers the others.
unsafe extern "C" fn on_role_changed(
    ctx: *mut RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::wait::on_demoted(Ctx(ctx));
        crate::observe::on_demoted(Ctx(ctx));
    }));
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
