//! The server's fencing-token high-water mark and how it survives: RDB aux
//! data here, `LOCK.FENCEFLOOR` in the replication stream (see
//! `commands::fence_floor`), the clock floor in `redis_lock_rules::fence`.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

use redis_lock_rules::fence;
use redis_module::native_types::RedisType;
use redis_module::raw::{self, RedisModuleIO};

use crate::cluster_fence;
use crate::key::Ctx;
use crate::stats::Counter;

/// The largest fence handed out or learnt (from the master, the RDB or AOF).
static HIGH_WATER: AtomicU64 = AtomicU64::new(0);

/// Hands out the next fence, or `None` when the space is exhausted. In a
/// cluster the floor is the configEpoch's (`crate::cluster_fence`).
pub fn issue(ctx: Ctx, now_ms: i64) -> Option<u64> {
    let last = HIGH_WATER.load(Ordering::Relaxed);
    let next = match cluster_fence::floor(ctx, now_ms) {
        Some(floor) => redis_lock_rules::cluster_fence::next(last, floor)?,
        None => fence::next(last, now_ms)?,
    };
    HIGH_WATER.store(next, Ordering::Relaxed);
    Some(next)
}

/// The reply of a grant, counted in `grants`: its fence, whose new floor
/// goes to replicas and the AOF with the grant's effects, or 1 without
/// FENCE. Every grant replies through here: a command's, a waiter's.
pub fn grant_reply(ctx: Ctx, fence: Option<u64>, grants: &Counter) -> i64 {
    grants.add();
    match fence {
        Some(f) => {
            ctx.replicate_fence_floor(f);
            f as i64
        }
        None => 1,
    }
}

/// Learns that fences up to `floor` exist; returns the mark.
pub fn raise(floor: u64) -> u64 {
    HIGH_WATER.fetch_max(floor, Ordering::Relaxed).max(floor)
}

unsafe extern "C" fn aux_save(rdb: *mut RedisModuleIO, _when: c_int) {
    raw::save_unsigned(rdb, HIGH_WATER.load(Ordering::Relaxed));
}

/// Redis 7.2+ calls this instead of `aux_save`: writing nothing when no
/// fence was ever handed out keeps such RDBs loadable without the module.
unsafe extern "C" fn aux_save2(rdb: *mut RedisModuleIO, when: c_int) {
    if HIGH_WATER.load(Ordering::Relaxed) > 0 {
        aux_save(rdb, when);
    }
}

unsafe extern "C" fn aux_load(rdb: *mut RedisModuleIO, _encver: c_int, _when: c_int) -> c_int {
    match raw::load_unsigned(rdb) {
        Ok(v) => {
            raise(v);
            raw::REDISMODULE_OK as c_int
        }
        Err(_) => raw::REDISMODULE_ERR as c_int,
    }
}

/// A data type with no keys, only aux data: the RDB home of the mark.
pub static FENCE_TYPE: RedisType = RedisType::new(
    "lockfence",
    0,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: None,
        rdb_save: None,
        aof_rewrite: None,
        mem_usage: None,
        digest: None,
        free: None,
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: Some(aux_save2),
    },
);
