//! How long waits and holds take, per family, and how holds end: the
//! distributions and counters of `INFO lock` (issue 23).
//!
//! Memory is fixed except for one table (`rules::hold_table`): the holds
//! the module granted with `lock.hold-timing` on and that are still held —
//! an exclusive key (plain lock, election) → when and as what it was
//! granted; a semaphore's or read-write lock's key → its family and, per
//! holder token, when it was granted and when its lease ends — so that the
//! hold's end can record its length without any per-key scan. Keys and
//! tokens are 64-bit hashes (database and key name; token): a collision,
//! ~N²/2⁶⁵ for N timed keys, can only attribute an end to the wrong grant.
//! At most [`MAX_TRACKED`] holds in all; grants beyond are not timed.
//!
//! Where holds start and end (the hooks, each before the write it times,
//! so that the module's own `del` event finds the hold already recorded):
//!
//! - exclusive keys: [`hold_started`] after a grant (`crate::commands::lock`
//!   acquire and takeover, `crate::blocked::handover`, `crate::commands::election`);
//!   [`hold_ended`] on LOCK.RELEASE (before its delete), a takeover, and a
//!   lease settled as ended (`crate::store::lease::settle`, before its write);
//! - semaphores and read-write locks: one hook, [`holders_commit`], at the
//!   top of `crate::store::holders_key::HoldersKey::commit` (so every SEM.* / RWLOCK.*
//!   write and `crate::blocked::handover` goes through it): pruned places
//!   end as expired (held until their lease end, the lock-delay after it is
//!   not held), a release as released, a grant starts timing, a renewal
//!   moves the lease end, and a commit that deletes the key (no live holder
//!   left) ends the key's remaining timed holders as expired;
//! - Redis's own events ([`on_key_event`]): `expired` ends a whole key's
//!   holds as expired (an exclusive hold when Redis deleted the key, each
//!   holder at its lease end); `evicted` and the generic events of a
//!   deletion, overwrite or move by someone else (`DEL`, `UNLINK`,
//!   `RENAME`, `MOVE`, `COPY … REPLACE`, `RESTORE`, a native command that
//!   emptied the key: [`removes_value`]) end them as *deleted*: counted in
//!   `lock_holds_deleted_F`, not recorded in the distribution; `FLUSHDB`,
//!   `FLUSHALL` and `SWAPDB` forget every hold, unrecorded (the table
//!   cannot tell databases apart).
//!
//! Not seen: a value overwritten by a command of another event class (a
//! script's `SET` over a lock: the Lua reference takeover raises the
//! string event `set`, to which the module does not subscribe — that would
//! call into the module on every string write of the server); the hold
//! then ends at the key's next end the module sees, timed from the
//! module's grant. A holder removed by a hand-written `ZREM` (a `zrem`
//! event) is ended with its key.
//!
//! Hold timing (the table, and the subscriptions that end its entries) is
//! off unless `lock.hold-timing` is on: it costs every grant a table
//! insert, and every keyspace event of the expired, evicted and generic
//! classes (native commands' too) a call into the module. Wait times are
//! always on.
//!
//! Everything here is touched on Redis's main thread only.

use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::histogram::Histogram;
use redis_lock_rules::hold_table::{held_key, slot_of, token_hash, Ended, HoldTable};
use redis_lock_rules::holders::{last_after, Change, Family as HolderFamily, Last};
use redis_module::raw::{self, RedisModuleInfoCtx, RedisModuleString};

use crate::boundary::api::rm;
use crate::boundary::ctx::{bytes, Ctx};
use crate::server::config;
use crate::server::counters;
use crate::server::events::{self, Also, DbEvent, KeyEvent};
pub use crate::server::holder_commit::{Commit, HolderEdit};

/// At most this many holds (an exclusive key, or a holder of a semaphore
/// or read-write lock) are timed at once; grants beyond are not timed.
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

pub use redis_lock_rules::hold_table::End;

struct Timings {
    wait: [Histogram; 4],
    hold: [Histogram; 4],
    /// Hold ends by family; for semaphores and read-write locks, only
    /// those `crate::server::counters`' counters do not see (see [`record`]).
    released: [u64; 4],
    expired: [u64; 4],
    taken_over: [u64; 4],
    deleted: [u64; 4],
    /// The semaphore and read-write counters of `crate::server::counters` at the last
    /// `CONFIG RESETSTAT` (those keep counting since the start).
    base: [u64; 4],
    table: HoldTable<Family>,
    subscribed: bool,
    /// Redis's `total_commands_processed` and `total_connections_received`
    /// at the last `INFO lock` read.
    stat_seen: (u64, u64),
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            wait: Default::default(),
            hold: Default::default(),
            released: [0; 4],
            expired: [0; 4],
            taken_over: [0; 4],
            deleted: [0; 4],
            base: [0; 4],
            table: HoldTable::new(MAX_TRACKED),
            subscribed: false,
            stat_seen: (0, 0),
        }
    }
}

/// Tells `INFO lock` readers nothing was tracked, without taking the lock.
pub static TRACKED: AtomicU64 = AtomicU64::new(0);

/// Statics are touched on the main thread only; the mutex is uncontended.
static STATE: LazyLock<Mutex<Timings>> = LazyLock::new(|| Mutex::new(Timings::default()));

fn state() -> MutexGuard<'static, Timings> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// An atomic slot migration moved slots away (`crate::migration`): the
/// holds timed on keys of slots for which `left` is true are forgotten,
/// unrecorded (they go on where the keys are now; the server deletes its
/// copies here without a key event). One pass over the table, at that
/// event only.
fn forget_slots(left: impl Fn(u16) -> bool) {
    if TRACKED.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut s = state();
    s.table.forget_where(|h| left(slot_of(h)));
    publish(&s);
}

/// A wait of `family` that began at `since` (Unix ms) ended now, however.
pub fn waited(family: Family, since: i64, now: i64) {
    state().wait[family as usize].record(now.saturating_sub(since).max(0) as u64);
}

/// Adds a hold's end to the figures. `stats_saw`: a semaphore's or
/// read-write lock's end that `crate::server::counters` counted already (a release,
/// or a place pruned by a command), so only its length is recorded here.
/// Deleted holds are counted, not recorded: how long a lock was held until
/// someone deleted it says nothing about the work it protected.
fn record(s: &mut Timings, e: Ended<Family>, stats_saw: bool) {
    let f = e.family as usize;
    if !matches!(e.end, End::Deleted) {
        s.hold[f].record(e.ms);
    }
    if stats_saw && matches!(e.family, Family::Semaphore | Family::Rwlock) {
        return;
    }
    let counter = match e.end {
        End::Released => &mut s.released[f],
        End::Expired => &mut s.expired[f],
        End::TakenOver => &mut s.taken_over[f],
        End::Deleted => &mut s.deleted[f],
    };
    *counter = counter.saturating_add(1);
}

fn publish(s: &Timings) {
    TRACKED.store(s.table.len() as u64, Ordering::Relaxed);
}

/// Subscribes once, at the first hold timed.
fn after_grant(ctx: Ctx, mut s: MutexGuard<'static, Timings>) {
    publish(&s);
    if !s.subscribed {
        s.subscribed = true;
        drop(s);
        subscribe(ctx);
    }
}

/// The module granted `name` (an exclusive key) at `now`. Nothing unless
/// `lock.hold-timing` is on.
#[inline]
pub fn hold_started(ctx: Ctx, name: *mut RedisModuleString, family: Family, now: i64) {
    if config::hold_timing() {
        time_hold(ctx, name, family, now);
    }
}

#[inline(never)]
fn time_hold(ctx: Ctx, name: *mut RedisModuleString, family: Family, now: i64) {
    let h = held_key(ctx.db(), bytes(name));
    let mut s = state();
    if s.table.lock_granted(h, family, now) {
        after_grant(ctx, s);
    }
}

/// The hold of `name` ended at `now` as `end`, if the module granted it
/// with `lock.hold-timing` on (with it off the table is empty: one load).
/// Called before the module's own write that ends it: that write's `del`
/// event would otherwise end it as deleted. `now` is read only when some
/// hold is timed (it may be a call into Redis).
pub fn hold_ended(ctx: Ctx, name: *mut RedisModuleString, end: End, now: impl FnOnce() -> i64) {
    if TRACKED.load(Ordering::Relaxed) == 0 {
        return;
    }
    let h = held_key(ctx.db(), bytes(name));
    let mut s = state();
    if let Some(e) = s.table.lock_ended(h, end, now()) {
        record(&mut s, e, false);
        publish(&s);
    }
}

/// The hook of `crate::store::holders_key::HoldersKey::commit`, called before it
/// writes (and so before the `del` it may raise): what the commit does to
/// the timed holders of `name`, a semaphore or read-write lock key
/// `summary` describes (`None`: absent) at the scan's `now`.
///
/// - every place in `ended` (pruned: its place ended) ends as expired,
///   held until its lease end;
/// - `Edit::Remove`: its token's hold ends as released, now;
/// - `Edit::Put`: a renewal (the token holds a live place) moves its
///   lease end; otherwise a grant starts timing it (`lock.hold-timing`
///   on), its lease end being the place's end minus the key's delay;
/// - no live holder left (the commit deletes the key): the key's other
///   timed holders (ended places beyond the prune bound) end as expired.
///
/// With `lock.hold-timing` off (and so nothing timed): one load.
pub fn holders_commit(c: &Commit) {
    if !config::hold_timing() {
        return;
    }
    let Commit { ctx, name, summary, edit, ended, now, .. } = *c;
    let h = held_key(ctx.db(), bytes(name));
    let mut s = state();
    for &m in ended {
        if let Some(e) = s.table.holder_ended(h, token_hash(bytes(m)), End::Expired, now) {
            record(&mut s, e, true);
        }
    }
    match edit {
        HolderEdit::Keep => {}
        HolderEdit::Remove { token } => {
            if let Some(e) = s.table.holder_ended(h, token_hash(token), End::Released, now) {
                record(&mut s, e, true);
            }
        }
        HolderEdit::Put { token, at, tag } => {
            let t = token_hash(token);
            let delay = tag.map(|t| t.delay).or(summary.map(|s| s.delay)).unwrap_or(0);
            let lease_end = at.saturating_sub(delay);
            let kind = tag.map(|t| t.kind).or(summary.map(|s| s.kind));
            if summary.is_some_and(|s| s.own.is_some()) {
                s.table.holder_renewed(h, t, lease_end);
            } else if let Some(kind) = kind {
                if s.table.holder_granted(h, t, Family::of_holders(kind.family()), now, lease_end) {
                    return after_grant(ctx, s);
                }
            }
        }
    }
    let change = match edit {
        HolderEdit::Keep => Change::Keep,
        HolderEdit::Put { at, .. } => Change::Put(at),
        HolderEdit::Remove { .. } => Change::Remove,
    };
    if summary.is_some() && matches!(last_after(summary, change), Last::Gone) {
        let mut ends = Vec::new();
        s.table.key_expired(h, now, |e| ends.push(e));
        for e in ends {
            record(&mut s, e, true);
        }
    }
    publish(&s);
}

/// `lock.hold-timing` turned off: holds in progress are forgotten (never
/// recorded), and the table's memory goes. The subscription taken by
/// [`subscribe`] stays (Redis 7.0 has no way to drop one); its callback
/// then returns at its first load.
pub fn stop_holds() {
    let mut s = state();
    s.table.clear();
    publish(&s);
}

/// Subscribes to what ends a hold without a command of ours: expiry,
/// eviction, and the generic events of a deletion, an overwrite or a move
/// by someone else (`DEL`, `RENAME`, `MOVE`, …; see [`removes_value`]);
/// and flushes. Taken at the first grant timed (the config's setter has no
/// context to subscribe with; no hold is timed before that grant), once.
///
/// The module raises `del` and `expire` itself on its own writes; every
/// hook that ends a hold runs before the write, so its own `del` finds the
/// hold already recorded, and `expire` ends nothing.
fn subscribe(ctx: Ctx) {
    events::need(ctx, Also::Nothing);
}

/// The generic events (Redis 7.0's `notifyKeyspaceEvent(NOTIFY_GENERIC, …)`
/// calls) after which the key no longer holds the value the module wrote:
/// deleted (`DEL`, `UNLINK`, `GETDEL`, `EXPIRE` in the past, a native
/// command that emptied it, a `MIGRATE` away), renamed away or overwritten
/// by a rename, moved to another database, overwritten by `COPY … REPLACE`
/// or `RESTORE … REPLACE`. Not `expire`, `persist`, `move_to` (its key was
/// absent), `new`.
fn removes_value(event: &[u8]) -> bool {
    matches!(event, b"del" | b"rename_from" | b"rename_to" | b"move_from" | b"copy_to" | b"restore")
}

/// The listener of key events (`crate::server::events`): a timed key that
/// expired, was evicted, or was deleted, overwritten or moved by someone
/// else ends its holds.
pub fn on_key_event(ctx: Ctx, ev: &KeyEvent) {
    if TRACKED.load(Ordering::Relaxed) == 0 {
        return;
    }
    let expired = ev.expired();
    if !(expired || ev.evicted() || removes_value(ev.name)) {
        return;
    }
    let h = held_key(ctx.db(), bytes(ev.key));
    let now = ctx.now_ms();
    let mut s = state();
    let mut ends = Vec::new();
    if expired {
        s.table.key_expired(h, now, |e| ends.push(e));
    } else {
        s.table.key_deleted(h, now, |e| ends.push(e));
    }
    // Nothing of the module counted these ends.
    for e in ends {
        record(&mut s, e, false);
    }
    publish(&s);
}

/// The listener of database events: a flush or SWAPDB forgets every hold,
/// unrecorded (the table keeps hashes: it cannot tell which holds belonged
/// to which database).
pub fn on_db_event(_ctx: Ctx, ev: &DbEvent) {
    match ev {
        DbEvent::Changed(_) => stop_holds(),
        // The holds go on, on the node that has the keys now.
        DbEvent::SlotsLeft(left) => forget_slots(|slot| left.left(slot)),
        _ => {}
    }
}

/// The semaphore and read-write counters of `crate::server::counters` that count
/// their holds' ends: released and expired, per family.
fn holder_ends() -> [u64; 4] {
    [counters::SEM_RELEASES.get(), counters::SEM_EXPIRED.get(), counters::RW_RELEASES.get(), counters::RW_EXPIRED.get()]
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
    s.deleted = [0; 4];
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
pub unsafe fn render(ctx: *mut RedisModuleInfoCtx) {
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
        // A semaphore's or read-write lock's: `crate::server::counters`' counters,
        // plus the ends only hold timing sees (a key that expired whole).
        let (released, expired) = match family {
            Family::Semaphore => (since_reset(0), since_reset(1)),
            Family::Rwlock => (since_reset(2), since_reset(3)),
            _ => (0, 0),
        };
        let (released, expired) = (released.saturating_add(s.released[f]), expired.saturating_add(s.expired[f]));
        for (field, value) in [
            ("waits", s.wait[f].count()),
            ("holds_released", released),
            ("holds_expired", expired),
            ("holds_taken_over", s.taken_over[f]),
            ("holds_deleted", s.deleted[f]),
        ] {
            if let Ok(field) = CString::new(format!("{field}_{name}")) {
                rm!(RedisModule_InfoAddFieldULongLong)(ctx, field.as_ptr(), value);
            }
        }
    }
    // The holds being timed now (all families): what hold timing keeps in memory.
    rm!(RedisModule_InfoAddFieldULongLong)(ctx, c"holds_timed".as_ptr(), s.table.len() as u64);
}
