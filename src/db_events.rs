//! Which databases a server event changed wholesale (FLUSHDB, FLUSHALL,
//! SWAPDB): no key event names the keys that went, so the waits' queues
//! and the observers check every key of theirs in those databases.

use std::ffi::{c_int, c_void};

use redis_module::raw;

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
