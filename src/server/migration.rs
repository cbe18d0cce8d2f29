//! Atomic slot migration: Valkey 9's `CLUSTER MIGRATESLOTS` (tested) and
//! Redis 8.4's `CLUSTER MIGRATION` (designed from its source, untested:
//! no binary of it is available to the tests). The decisions are pure, in
//! `redis_lock_rules::migration`; this file reads the server events and
//! hands each step to the parts it concerns.
//!
//! What the servers do, and so what is left to the module (details and
//! source lines in docs/cluster.md):
//! - Valkey refuses `CLUSTER MIGRATESLOTS` while a loaded module has not
//!   declared `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION`; that bit
//!   is declared only where the server says it knows it ([`options`]).
//! - The slots' keys reach the target as commands (an AOF rewrite of the
//!   slots, then the source's replication stream): values and absolute
//!   expiries arrive as written, holders' sorted sets with their scores.
//!   Nothing of the module's memory travels: waiters, observers and hold
//!   timings stay on the source.
//! - The source serves the slots until the hand-over, with its writes
//!   paused for its last moments (grants from timers wait, as for `CLIENT
//!   PAUSE`: `crate::wait`), then the target takes them with a new epoch.
//!   No keyspace event tells the source its keys left (Valkey deletes them
//!   in the background, unnotified), and no key event names the keys of a
//!   slot that moved while empty; the export's completion event does. On
//!   it, waiters and observers of keys in the moved slots are answered
//!   `MOVED` (what a native blocked client gets), and their timed holds
//!   are forgotten. An export that fails or is cancelled changes nothing
//!   here: they keep waiting.
//! - On the target, the import's start makes the next fenced grant bump
//!   this node's epoch first (`crate::cluster_fence`, the rule it already
//!   has for `SETSLOT … IMPORTING`), and its completion makes the cached
//!   epoch stale (the server bumped it as it took the slots), before any
//!   command on those slots runs: the first fence there is above every
//!   fence the source made.
//!
//! - While an export runs, Valkey checks every command a module replicates
//!   for its slot and fails every export on a "cross-slot" one; for a
//!   command without keys (`LOCK.FENCEFLOOR`, which tells replicas and the
//!   AOF the fence mark) that check reads an uninitialised flag word
//!   (`VM_Replicate`'s `int read_flags;`, module.c) and failed the exports
//!   of a busy lock (measured: "A module replicated a cross-slot command").
//!   So while this node exports, the mark is held back
//!   ([`hold_fence_floor`]) and replicated, once, when the last export
//!   ends. Meanwhile fences keep their order through the epoch floor.
//!
//! One callback per server event and module (`crate::server::events` explains):
//! the migration events are subscribed here only, once, at load.

use std::ffi::{c_int, c_void, CString};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use redis_lock_rules::migration::{step, Dialect, Ranges, Step, REDIS_EVENT, REDIS_TRIM_EVENT, VALKEY_EVENT};
use redis_module::raw::{self, RedisModuleCtx};

use crate::boundary::api::rm;
use crate::boundary::ctx::Ctx;
use crate::server::cluster::cluster_call;
use crate::server::cluster_fence;
use crate::server::counters;
use crate::server::events::{dispatch_db, DbEvent, SlotsLeft};

/// The dialect detected at load: 0 none, 1 Valkey, 2 Redis.
static DIALECT: AtomicU8 = AtomicU8::new(0);

/// Exports in progress on this node (started, not yet ended).
static EXPORTS: AtomicU32 = AtomicU32::new(0);
/// The highest fence mark held back while exporting (0: none).
static HELD_FLOOR: AtomicU64 = AtomicU64::new(0);

/// Whether the fence mark `fence` is held back instead of replicated now:
/// while this node exports slots (see the module docs); it is replicated
/// when the last export ends.
pub fn hold_fence_floor(fence: u64) -> bool {
    if EXPORTS.load(Ordering::Relaxed) == 0 {
        return false;
    }
    HELD_FLOOR.fetch_max(fence, Ordering::Relaxed);
    true
}

fn dialect() -> Dialect {
    match DIALECT.load(Ordering::Relaxed) {
        1 => Dialect::Valkey,
        2 => Dialect::Redis,
        _ => Dialect::None,
    }
}

/// Which atomic slot migration this server may have, from what it says it
/// supports (`RM_GetModuleOptionsAll`, `RM_IsSubEventSupported`; either
/// missing: none). A candidate: [`subscribe`] confirms it.
fn detect() -> Dialect {
    // SAFETY: reads of the API table Redis filled at load; both calls take
    // no context and only read constants.
    unsafe {
        let Some(supported) = raw::RedisModule_IsSubEventSupported else { return Dialect::None };
        let options_all = raw::RedisModule_GetModuleOptionsAll.map(|f| f());
        Dialect::detect(options_all, |id, sub| supported(raw::RedisModuleEvent { id, dataver: 1 }, sub) != 0)
    }
}

/// Subscribes to this server's migration events, if it has atomic slot
/// migration, and returns the module options that needs declared (Valkey
/// 9: `HANDLE_ATOMIC_SLOT_MIGRATION`; elsewhere none): `RM_SetModuleOptions`
/// takes the whole mask, so `lib.rs` ORs this into its own. Once, at load.
/// The dialect counts only once the server accepted every subscription
/// (it refuses an event id it does not know).
pub fn subscribe(ctx: *mut RedisModuleCtx) -> c_int {
    let d = detect();
    let ids: &[u64] = match d {
        Dialect::None => return 0,
        Dialect::Valkey => &[VALKEY_EVENT],
        Dialect::Redis => &[REDIS_EVENT, REDIS_TRIM_EVENT],
    };
    let ok = ids.iter().all(|&id| {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        unsafe { rm!(RedisModule_SubscribeToServerEvent)(ctx, event, Some(on_event)) == raw::REDISMODULE_OK as c_int }
    });
    if !ok {
        return 0;
    }
    DIALECT.store(if d == Dialect::Valkey { 1 } else { 2 }, Ordering::Relaxed);
    d.options()
}

/// Valkey's `ValkeyModuleSlotRange`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ValkeyRange {
    start: c_int,
    end: c_int,
}

/// Valkey's `ValkeyModuleAtomicSlotMigrationInfoV1`.
#[repr(C)]
struct ValkeyInfo {
    version: u64,
    job_name: [u8; 41],
    slot_ranges: *const ValkeyRange,
    num_slot_ranges: u32,
}

/// Redis 8.4's `RedisModuleSlotRange` / `RedisModuleSlotRangeArray`.
#[repr(C)]
#[derive(Clone, Copy)]
struct RedisRange {
    start: u16,
    end: u16,
}

#[repr(C)]
struct RedisRangeArray {
    num_ranges: i32,
    ranges: [RedisRange; 0],
}

/// Redis 8.4's `RedisModuleClusterSlotMigrationInfoV1`.
#[repr(C)]
struct RedisInfo {
    version: u64,
    source_node_id: [u8; 41],
    destination_node_id: [u8; 41],
    task_id: *const u8,
    slots: *const RedisRangeArray,
}

/// Redis 8.4's `RedisModuleClusterSlotMigrationTrimInfoV1`.
#[repr(C)]
struct RedisTrimInfo {
    version: u64,
    slots: *const RedisRangeArray,
}

/// The slot ranges an event's data names (empty when it has none).
///
/// # Safety
/// `data` is what the server passed with `event`, of `dialect`'s layout.
unsafe fn ranges_of(dialect: Dialect, event: u64, data: *const c_void) -> Ranges {
    if data.is_null() {
        return Ranges::default();
    }
    match dialect {
        Dialect::Valkey => {
            let info = &*data.cast::<ValkeyInfo>();
            if info.slot_ranges.is_null() {
                return Ranges::default();
            }
            let list = std::slice::from_raw_parts(info.slot_ranges, info.num_slot_ranges as usize);
            Ranges::new(list.iter().map(|r| (i64::from(r.start), i64::from(r.end))))
        }
        Dialect::Redis => {
            let array = if event == REDIS_TRIM_EVENT {
                (*data.cast::<RedisTrimInfo>()).slots
            } else {
                (*data.cast::<RedisInfo>()).slots
            };
            redis_ranges(array)
        }
        Dialect::None => Ranges::default(),
    }
}

unsafe fn redis_ranges(array: *const RedisRangeArray) -> Ranges {
    if array.is_null() || (*array).num_ranges <= 0 {
        return Ranges::default();
    }
    let first = std::ptr::addr_of!((*array).ranges).cast::<RedisRange>();
    let list = std::slice::from_raw_parts(first, (*array).num_ranges as usize);
    Ranges::new(list.iter().map(|r| (i64::from(r.start), i64::from(r.end))))
}

unsafe extern "C" fn on_event(
    ctx: *mut RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let d = dialect();
        let what = step(d, event.id, subevent);
        if what == Step::Nothing {
            return;
        }
        let ctx = Ctx(ctx);
        let ranges = ranges_of(d, event.id, data);
        log(ctx, &format!("lock: slot migration {what:?}, slots {}", ranges.describe()));
        match what {
            Step::ImportStarted | Step::ImportCompleted => cluster_fence::importing(),
            Step::ImportAborted => cluster_fence::stale(),
            Step::ExportStarted => {
                EXPORTS.fetch_add(1, Ordering::Relaxed);
            }
            Step::ExportAborted => export_ended(ctx),
            Step::Exported => {
                export_ended(ctx);
                cluster_fence::stale();
                exported(ctx, ranges);
            }
            Step::Trimmed => dispatch_db(ctx, &DbEvent::SlotsLeft(SlotsLeft::new(ranges, None))),
            Step::Nothing => {}
        }
    }));
}

/// An export ended: when it was the last, the listeners hear it (the fence
/// mark held back while exporting is then replicated,
/// `crate::store::fence`).
fn export_ended(ctx: Ctx) {
    let left = EXPORTS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
    if left.unwrap_or(0) <= 1 {
        dispatch_db(ctx, &DbEvent::ExportEnded);
    }
}

/// Whether this node exports slots now.
pub fn exporting() -> bool {
    EXPORTS.load(Ordering::Relaxed) != 0
}

/// The fence mark held back while exporting, taken (0: none).
pub fn take_held_floor() -> u64 {
    HELD_FLOOR.swap(0, Ordering::Relaxed)
}

/// The slots in `ranges` now belong to another node: the listeners send
/// every waiter and observer of a key in them where its slot went (one
/// `CLUSTER NODES` for all, read only when someone is blocked) and forget
/// their timed holds.
fn exported(ctx: Ctx, ranges: Ranges) {
    let blocked = counters::waiting() != 0 || counters::observing() != 0;
    let nodes = if blocked { cluster_call(ctx, c"NODES") } else { None };
    dispatch_db(ctx, &DbEvent::SlotsLeft(SlotsLeft::new(ranges, nodes)));
}

fn log(ctx: Ctx, text: &str) {
    if let Ok(text) = CString::new(text) {
        unsafe { raw::RedisModule_Log.map(|f| f(ctx.0, c"notice".as_ptr(), c"%s".as_ptr(), text.as_ptr())) };
    }
}
