//! How long waits and holds take, per family, and how holds end: the
//! distributions and counters of `INFO lock` (issue 23).
//!
//! Memory is fixed except for one map: the exclusive keys (plain locks and
//! elections) the module granted and that are still held, key → when and
//! as what it was granted, so that the hold's end (LOCK.RELEASE, a
//! takeover, Redis's `expired` event) can record its length without any
//! per-key scan. Its entries are 16 bytes plus the table's overhead, at
//! most [`MAX_TRACKED`] of them; an entry is keyed by a 64-bit hash of the
//! database and key name (a collision, ~N²/2⁶⁵ for N held locks, can only
//! attribute a hold's end to the wrong grant time). A lock that ends other
//! than by release, takeover or expiry (a client's `DEL`, a script's
//! `SET`, eviction, `FLUSHDB`) is dropped from the map without being
//! recorded; one deleted by something whose event the module does not
//! subscribe to (`DEL`, `RENAME`: subscribing to those would put a callback
//! on the module's own writes) stays until its key is granted again.
//!
//! Hold timing (the map, and the `expired`/`evicted` subscription that
//! ends its entries) is off unless `lock.hold-timing` is on: it costs every
//! grant a map insert, and every keyspace event of the server (native
//! commands' too) a call into the module. Wait times are always on.
//!
//! Semaphore and read-write holders are not timed (that would need an
//! entry per holder); their ends are counted where the module already sees
//! them: releases, and leases found ended.
//!
//! Everything here is touched on Redis's main thread only.

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CString};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::histogram::Histogram;
use redis_lock_rules::holders::Family as HolderFamily;
use redis_module::raw::{self, RedisModuleCtx, RedisModuleInfoCtx, RedisModuleString};

use crate::api::rm;
use crate::key::{bytes, Ctx};
use crate::stats;

/// At most this many held exclusive keys are timed at once (~40 MB at most
/// with the table's overhead); grants beyond it are not timed.
pub const MAX_TRACKED: usize = 1 << 20;

/// The families `INFO lock` reports, in its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    Exclusive = 0,
    Semaphore = 1,
    Rwlock = 2,
    Election = 3,
}

const FAMILIES: [Family; 4] = [Family::Exclusive, Family::Semaphore, Family::Rwlock, Family::Election];

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Exclusive => "exclusive",
            Family::Semaphore => "semaphore",
            Family::Rwlock => "rwlock",
            Family::Election => "election",
        }
    }

    pub fn of_holders(f: HolderFamily) -> Family {
        match f {
            HolderFamily::Semaphore => Family::Semaphore,
            HolderFamily::ReadWrite => Family::Rwlock,
        }
    }
}

/// How a timed hold ended.
#[derive(Clone, Copy)]
pub enum End {
    Released,
    Expired,
    TakenOver,
}

/// A held exclusive key the module granted.
#[derive(Clone, Copy)]
struct Held {
    since: i64,
    family: Family,
}

/// Passes the already mixed 64-bit key hash through.
#[derive(Default)]
struct Pass(u64);

impl Hasher for Pass {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Default)]
struct Timings {
    wait: [Histogram; 4],
    hold: [Histogram; 4],
    released: [u64; 4],
    expired: [u64; 4],
    taken_over: [u64; 4],
    /// The semaphore and read-write counters of `crate::stats` at the last
    /// `CONFIG RESETSTAT` (those keep counting since the start).
    base: [u64; 4],
    held: HashMap<u64, Held, BuildHasherDefault<Pass>>,
    subscribed: bool,
    /// Redis's `total_commands_processed` and `total_connections_received`
    /// at the last `INFO lock` read.
    stat_seen: (u64, u64),
}

/// Tells `INFO lock` readers nothing was tracked, without taking the lock.
static TRACKED: AtomicU64 = AtomicU64::new(0);

/// Statics are touched on the main thread only; the mutex is uncontended.
static STATE: LazyLock<Mutex<Timings>> = LazyLock::new(|| Mutex::new(Timings::default()));

fn state() -> MutexGuard<'static, Timings> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The map's key for `name` in database `db`: a multiply-rotate hash over
/// 8 bytes at a time (keys are short; this runs on every grant and release).
fn key_hash(db: c_int, name: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (db as u64).wrapping_add(name.len() as u64).wrapping_mul(K);
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(23) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let mut w = [0u8; 8];
    let rest = chunks.remainder();
    w[..rest.len()].copy_from_slice(rest);
    h = (h.rotate_left(23) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    // hashbrown reads the top 7 bits too: fold the high half down and up.
    h ^ (h >> 29)
}

/// A wait of `family` that began at `since` (Unix ms) ended now, however.
pub fn waited(family: Family, since: i64, now: i64) {
    state().wait[family as usize].record(now.saturating_sub(since).max(0) as u64);
}

/// The module granted `name` (an exclusive key) at `now`. Nothing unless
/// `lock.hold-timing` is on.
pub fn hold_started(ctx: Ctx, name: *mut RedisModuleString, family: Family, now: i64) {
    if !crate::config::hold_timing() {
        return;
    }
    let h = key_hash(ctx.db(), bytes(name));
    let mut s = state();
    if s.held.len() >= MAX_TRACKED && !s.held.contains_key(&h) {
        return;
    }
    s.held.insert(h, Held { since: now, family });
    TRACKED.store(s.held.len() as u64, Ordering::Relaxed);
    if !s.subscribed {
        s.subscribed = true;
        drop(s);
        subscribe(ctx);
    }
}

/// The hold of `name` ended at `now` as `end`, if the module granted it
/// with `lock.hold-timing` on (with it off the map is empty: one load).
pub fn hold_ended(ctx: Ctx, name: *mut RedisModuleString, end: End, now: i64) {
    if TRACKED.load(Ordering::Relaxed) == 0 {
        return;
    }
    end_hold(key_hash(ctx.db(), bytes(name)), end, now);
}

fn end_hold(h: u64, end: End, now: i64) {
    let mut s = state();
    let Some(Held { since, family }) = s.held.remove(&h) else { return };
    TRACKED.store(s.held.len() as u64, Ordering::Relaxed);
    let f = family as usize;
    s.hold[f].record(now.saturating_sub(since).max(0) as u64);
    let counter = match end {
        End::Released => &mut s.released[f],
        End::Expired => &mut s.expired[f],
        End::TakenOver => &mut s.taken_over[f],
    };
    *counter = counter.saturating_add(1);
}

/// `lock.hold-timing` turned off: holds in progress are forgotten (never
/// recorded), and the map's memory goes. The subscription taken by
/// [`subscribe`] stays (Redis 7.0 has no way to drop one); its callback
/// then returns at its first load.
pub fn stop_holds() {
    let mut s = state();
    s.held.clear();
    s.held.shrink_to_fit();
    TRACKED.store(0, Ordering::Relaxed);
}

/// Subscribes to what ends a hold without a command of ours: expiry, and
/// eviction and flushes (dropped from the map unrecorded). Not `del` and
/// the other generic events: the module raises those itself on every write.
/// Taken at the first grant timed (the config's setter has no context to
/// subscribe with; no hold is timed before that grant), once.
fn subscribe(ctx: Ctx) {
    crate::db_events::subscribe(ctx);
    unsafe {
        rm!(RedisModule_SubscribeToKeyspaceEvents)(
            ctx.0,
            raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED,
            Some(on_key_event),
        );
    }
}

unsafe extern "C" fn on_key_event(
    ctx: *mut RedisModuleCtx,
    type_: c_int,
    _event: *const std::ffi::c_char,
    key: *mut RedisModuleString,
) -> c_int {
    if TRACKED.load(Ordering::Relaxed) != 0 {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let ctx = Ctx(ctx);
            let h = key_hash(ctx.db(), bytes(key));
            if type_ & raw::REDISMODULE_NOTIFY_EXPIRED != 0 {
                end_hold(h, End::Expired, ctx.now_ms());
            } else {
                state().held.remove(&h);
            }
        }));
    }
    raw::REDISMODULE_OK as c_int
}

/// A flush or SWAPDB: the map cannot tell which entries belonged to which
/// database (it keeps hashes), so every entry goes, unrecorded.
pub(crate) unsafe extern "C" fn on_db_event(
    _ctx: *mut RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    _: *mut c_void,
) {
    if event.id == raw::REDISMODULE_EVENT_FLUSHDB && subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        let mut s = state();
        s.held.clear();
        s.held.shrink_to_fit();
        TRACKED.store(0, Ordering::Relaxed);
    });
}

/// The semaphore and read-write counters of `crate::stats` that count
/// their holds' ends: released and expired, per family.
fn holder_ends() -> [u64; 4] {
    [stats::SEM_RELEASES.get(), stats::SEM_EXPIRED.get(), stats::RW_RELEASES.get(), stats::RW_EXPIRED.get()]
}

/// `CONFIG RESETSTAT` (noticed by [`notice_resetstat`]): the distributions
/// and hold-end counters start over. Holds in progress stay timed (they end
/// after the reset).
fn reset_locked(s: &mut Timings) {
    for h in s.wait.iter_mut().chain(s.hold.iter_mut()) {
        h.reset();
    }
    s.released = [0; 4];
    s.expired = [0; 4];
    s.taken_over = [0; 4];
    s.base = holder_ends();
}

/// Notices a `CONFIG RESETSTAT` since the last `INFO lock` read, and then
/// resets (see [`reset_locked`]). Redis has no event for it, and a command filter
/// (which would see the command) runs before every command of the server,
/// a cost every GET and SET would pay. Instead: RESETSTAT zeroes Redis's
/// own `total_commands_processed` and `total_connections_received`, which
/// otherwise only grow; if either is below what the last read saw, a reset
/// happened in between. Missed only if more commands and connections came
/// after the reset than before it since the previous read.
fn notice_resetstat(s: &mut Timings) {
    // SAFETY: plain reads of the API table; a NULL context is allowed
    // (it only serves automatic memory management).
    let apis = unsafe {
        (raw::RedisModule_GetServerInfo, raw::RedisModule_ServerInfoGetFieldUnsigned, raw::RedisModule_FreeServerInfo)
    };
    let (Some(get), Some(field), Some(free)) = apis else { return };
    let seen = unsafe {
        let data = get(std::ptr::null_mut(), c"stats".as_ptr());
        if data.is_null() {
            return;
        }
        let mut err: c_int = 0;
        let mut read = |name: &std::ffi::CStr| {
            let v = field(data, name.as_ptr(), &mut err);
            (err == 0).then_some(v)
        };
        let seen = (read(c"total_commands_processed"), read(c"total_connections_received"));
        free(std::ptr::null_mut(), data);
        seen
    };
    let (Some(commands), Some(connections)) = seen else { return };
    let went_down = commands < s.stat_seen.0 || connections < s.stat_seen.1;
    s.stat_seen = (commands, connections);
    if went_down {
        reset_locked(s);
    }
}

/// Adds the fields of issue 23 to the `lock` section (after the counters).
pub unsafe fn info(ctx: *mut RedisModuleInfoCtx) {
    let mut s = state();
    notice_resetstat(&mut s);
    let ends = holder_ends();
    let since_reset = |i: usize| ends[i].saturating_sub(s.base[i]);
    for family in FAMILIES {
        let (f, name) = (family as usize, family.name());
        let text = |field: &str, value: String| {
            if let (Ok(field), Ok(value)) = (CString::new(format!("{field}_{name}")), CString::new(value)) {
                rm!(RedisModule_InfoAddFieldCString)(ctx, field.as_ptr(), value.as_ptr());
            }
        };
        if s.wait[f].count() > 0 {
            text("wait_ms", s.wait[f].summary());
        }
        if s.hold[f].count() > 0 {
            text("hold_ms", s.hold[f].summary());
        }
        if s.wait[f].count() > 0 {
            text("wait_hist_ms", s.wait[f].raw());
        }
        let (released, expired) = match family {
            Family::Semaphore => (since_reset(0), since_reset(1)),
            Family::Rwlock => (since_reset(2), since_reset(3)),
            _ => (s.released[f], s.expired[f]),
        };
        for (field, value) in [
            ("waits", s.wait[f].count()),
            ("holds_released", released),
            ("holds_expired", expired),
            ("holds_taken_over", s.taken_over[f]),
        ] {
            if let Ok(field) = CString::new(format!("{field}_{name}")) {
                rm!(RedisModule_InfoAddFieldULongLong)(ctx, field.as_ptr(), value);
            }
        }
    }
}
