//! The server's fencing-token high-water mark and how it survives: RDB aux
//! data here, `LOCK.FENCEFLOOR` in the replication stream (see
//! `crate::commands::lock::fence_floor`), the clock floor in `redis_lock_rules::fence`.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use redis_lock_rules::encode::decimal;
use redis_lock_rules::fence;
use redis_module::native_types::RedisType;
use redis_module::raw::{self, RedisModuleCtx, RedisModuleIO};

use crate::boundary::api::rm;
use crate::boundary::aux::aux_only;
use crate::boundary::ctx::Ctx;
use crate::boundary::reply::{Failure, Reply};
use crate::boundary::timer;
use crate::server::events::{self, DbEvent};
use crate::server::{cluster_fence, migration};

/// The largest fence handed out or learnt (from the master, the RDB or AOF).
static HIGH_WATER: AtomicU64 = AtomicU64::new(0);

/// Hands out the next fence, or refuses when the space is exhausted. In a
/// cluster the floor is the configEpoch's (`crate::server::cluster_fence`).
/// Every fence the module issues (a grant's, a waiter's, an election's
/// term, a proclaimed revision) comes from here.
pub fn issue(ctx: Ctx, now_ms: i64) -> Result<u64, Failure> {
    // The mark must outlive an AOF rewrite (`crate::store::aof_walk`).
    events::need_fork(ctx);
    let last = HIGH_WATER.load(Ordering::Relaxed);
    let next = match cluster_fence::floor(ctx, now_ms) {
        Some(floor) => redis_lock_rules::cluster_fence::next(last, floor),
        None => fence::next(last, now_ms),
    }
    .ok_or(Failure::FencesExhausted)?;
    HIGH_WATER.store(next, Ordering::Relaxed);
    Ok(next)
}

/// Whether a grant can go ahead: with FENCE (`wanted`), only while fences
/// remain, so that an exhausted space refuses before the key changes.
pub fn check_space(ctx: Ctx, wanted: bool) -> Result<(), Failure> {
    if wanted && fence::next(mark(), ctx.now_ms()).is_none() {
        return Err(Failure::FencesExhausted);
    }
    Ok(())
}

/// The integer a grant replies: its fence, whose new floor goes to
/// replicas and the AOF with the grant's effects, or 1 without FENCE.
/// Every grant replies through here: a command's, a waiter's.
pub fn grant_value(ctx: Ctx, fence: Option<u64>) -> i64 {
    match fence {
        Some(f) => {
            replicate_floor(ctx, f);
            f as i64
        }
        None => 1,
    }
}

/// The reply of a grant of several keys: their fences (increasing, one per
/// key; the last, the largest, goes to replicas and the AOF), or 1 without
/// FENCE (`fences` empty).
pub fn grant_values(ctx: Ctx, fences: Vec<u64>) -> Reply {
    match fences.last() {
        Some(&last) => {
            replicate_floor(ctx, last);
            Reply::Ints(fences.into_iter().map(|f| f as i64).collect())
        }
        None => Reply::Int(1),
    }
}

/// `LOCK.FENCEFLOOR fence` to replicas and the AOF; while this node exports
/// slots, held back and sent once the export ends ([`on_db_event`]).
pub fn replicate_floor(ctx: Ctx, fence: u64) {
    if migration::hold_fence_floor(fence) {
        return;
    }
    let mut digits = [0u8; 20];
    // Fences stay below 2^63 (redis_lock_rules::fence), so the cast is exact.
    let fence = decimal(fence as i64, &mut digits);
    unsafe {
        rm!(RedisModule_Replicate)(ctx.0, c"LOCK.FENCEFLOOR".as_ptr(), c"b".as_ptr(), fence.as_ptr(), fence.len());
    }
}

/// The database-event listener: the last export of slots ended, so the
/// mark held back meanwhile is replicated, from a timer (a context that
/// replicates as a command does; an event's may not).
pub fn on_db_event(ctx: Ctx, ev: &DbEvent) {
    if let DbEvent::ExportEnded = ev {
        timer::start(ctx, 0, replicate_held_floor, HeldFloor);
    }
}

struct HeldFloor;

unsafe extern "C" fn replicate_held_floor(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    drop(Box::from_raw(data.cast::<HeldFloor>()));
    let _ = std::panic::catch_unwind(|| {
        // Another export started meanwhile: its end replicates it.
        if migration::exporting() {
            return;
        }
        let fence = migration::take_held_floor();
        if fence != 0 {
            replicate_floor(Ctx(ctx), fence);
        }
    });
}

/// Learns that fences up to `floor` exist.
pub fn raise(floor: u64) {
    HIGH_WATER.fetch_max(floor, Ordering::Relaxed);
}

/// [`raise`], from a command (`LOCK.FENCEFLOOR`, also replayed from the
/// master or the AOF): the mark must then outlive an AOF rewrite too.
pub fn raise_from(ctx: Ctx, floor: u64) {
    events::need_fork(ctx);
    raise(floor);
}

/// The mark: the largest fence issued or learnt.
pub fn mark() -> u64 {
    HIGH_WATER.load(Ordering::Relaxed)
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
            if let (true, Some(from_io)) = (v > 0, raw::RedisModule_GetContextFromIO) {
                events::need_fork(Ctx(from_io(rdb)));
            }
            raw::REDISMODULE_OK as c_int
        }
        Err(_) => raw::REDISMODULE_ERR as c_int,
    }
}

/// A data type with no keys, only aux data: the RDB home of the mark.
pub static FENCE_TYPE: RedisType =
    RedisType::new("lockfence", 0, aux_only(Some(aux_load), Some(aux_save), Some(aux_save2)));
