//! Eviction must never take a held lock silently.
//!
//! Under `maxmemory` with any policy but `noeviction` Redis may evict a lock
//! key (lock keys carry a TTL, so `volatile-*` takes them too), and the next
//! caller is granted it at once. A module cannot exempt a native key from
//! eviction on any server of the matrix (`docs/eviction.md`), so this file
//! makes the risk visible and lets the user forbid it:
//!
//! - **The settings**: `maxmemory` and `maxmemory-policy` are read (`INFO
//!   memory`) at load and after every `CONFIG SET` (the server event
//!   `REDISMODULE_EVENT_CONFIG`, there since Redis 7.0): never on a
//!   command's path. When they let Redis evict lock keys the server log
//!   gets a warning and `INFO lock` shows `lock_evictable:1`.
//! - **`lock.eviction refuse`** (the default): while they do, every grant
//!   (LOCK.ACQUIRE, LOCK.TAKEOVER, LOCK.ELECT, SEM.ACQUIRE, RWLOCK.ACQUIRE,
//!   a waiter's turn) is refused with an error naming the policy
//!   ([`refusal`]: one relaxed load on the grant path). Renewals, releases
//!   and reads go on: a holder keeps what it holds.
//! - **Holds lost to eviction**: while the settings let Redis evict, every
//!   write of the module to a lock key records its holder and until when
//!   the key keeps others out (`redis_lock_rules::eviction::Tracker`: a
//!   grant, and also a renewal, so that a lock granted before the
//!   settings changed is tracked from its next renewal). The `evicted`
//!   keyspace event (every server; Redis raises it after the delete, so
//!   the value cannot be read: the table is what tells a lock from any
//!   other key) counts each live hold of the evicted key in `INFO lock`
//!   (`lock_evicted_*`), logs it, and remembers (key, token) so that its
//!   holder can ask `LOCK.EVICTED key token` after a renewal answered 0.
//!
//! Everything here runs on Redis's main thread.

use std::ffi::{c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::eviction::{Evicted, Family, Memory, Tracker, POLICIES, REFUSALS, REFUSAL_OTHER};
use redis_lock_rules::eviction_window::{lost_line, suppressed_line, SESSION_HELD};
use redis_lock_rules::hold_table::{key_hash, token_hash};
use redis_lock_rules::holders::{last_after, Change, Family as HolderFamily, Last};
use redis_module::raw::{self, RedisModuleCtx, RedisModuleInfoCtx, RedisModuleString};

use crate::boundary::api::rm;
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::reply::Failure;
use crate::boundary::timer;
use crate::server::config;
use crate::server::counters::Counter;
use crate::server::events::{self, Also, DbEvent, KeyEvent};
use crate::server::eviction_sessions as sessions;
use crate::server::eviction_window as window;
use crate::server::timings::{Commit, HolderEdit};

/// Holds tracked at most (each ~100 bytes: two B-tree entries); beyond,
/// a grant is not tracked (`lock_eviction_untracked`).
pub const MAX_TRACKED: usize = 1 << 20;
/// Evicted (key, token) pairs remembered for `LOCK.EVICTED`, oldest first out.
pub const MAX_RECENT: usize = 10_000;
/// Eviction log lines per second at most, of each kind (holds known lost,
/// keys evicted in the window); the rest are summed a second later.
const LOG_PER_SECOND: u64 = 10;

/// The server may evict lock keys now (`maxmemory` > 0, policy not `noeviction`).
static EVICTABLE: AtomicBool = AtomicBool::new(false);
/// EVICTABLE and `lock.eviction refuse`: what the grant path reads.
static REFUSING: AtomicBool = AtomicBool::new(false);
/// Index in `POLICIES` of the policy read last; `POLICIES.len()`: another.
static POLICY: AtomicUsize = AtomicUsize::new(0);
static MAXMEMORY: AtomicU64 = AtomicU64::new(0);
/// Holds in the table: lets a write skip the table when it is empty.
static TRACKED: AtomicUsize = AtomicUsize::new(0);
/// EVICTABLE, or holds tracked, or keys evicted in the window remembered:
/// what a write of a lock key reads ([`watching`]).
static WATCHING: AtomicBool = AtomicBool::new(false);

/// Grants refused by `lock.eviction refuse` (waiters answered so included).
pub static REFUSED: Counter = Counter::new();
/// Holds lost to eviction, by family (`Family as usize`).
static EVICTED: [Counter; 4] = [Counter::new(), Counter::new(), Counter::new(), Counter::new()];
/// Grants made while the server could evict that the full table could not track.
static UNTRACKED: Counter = Counter::new();

struct State {
    tracker: Tracker,
    /// The second of the last eviction log line, and lines in it: of
    /// tracked holds lost, and of keys evicted in the window only.
    log_second: i64,
    logged: [u64; 2],
    /// Holds, and keys evicted in the window, not logged one by one yet.
    suppressed: (u64, u64),
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| {
    Mutex::new(State {
        tracker: Tracker::new(MAX_TRACKED, MAX_RECENT),
        log_second: 0,
        logged: [0, 0],
        suppressed: (0, 0),
    })
});

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The refusals as C strings, per `POLICIES` index, then the other one.
static REFUSAL_TEXT: LazyLock<Vec<CString>> = LazyLock::new(|| {
    REFUSALS.iter().chain(std::iter::once(&REFUSAL_OTHER)).map(|s| CString::new(*s).unwrap_or_default()).collect()
});

/// `Err` with the refusal when `lock.eviction refuse` forbids a grant now.
/// The grant paths call it after their argument checks and before they
/// open the key, so a refused grant changes nothing. One relaxed load
/// while the server cannot evict.
#[inline]
pub fn refusal(ctx: Ctx) -> Result<(), Failure> {
    if !REFUSING.load(Ordering::Relaxed) {
        return Ok(());
    }
    refuse(ctx)
}

#[inline(never)]
fn refuse(ctx: Ctx) -> Result<(), Failure> {
    if ctx.replaying() {
        return Ok(());
    }
    REFUSED.add();
    Err(Failure::Error(refusal_text()))
}

/// The waiters' form of [`refusal`]: the error each waiter of a freed key
/// is answered with instead of a grant (counted per waiter by the caller).
pub fn refuses_waiters() -> Option<&'static CStr> {
    REFUSING.load(Ordering::Relaxed).then(refusal_text)
}

fn refusal_text() -> &'static CStr {
    let i = POLICY.load(Ordering::Relaxed).min(REFUSAL_TEXT.len().saturating_sub(1));
    REFUSAL_TEXT.get(i).map_or(c"ERR lock.eviction is refuse", |s| s.as_c_str())
}

/// Counts waiters answered with the refusal.
pub fn refused_waiters(n: u64) {
    REFUSED.add_n(n);
}

fn memory() -> Memory {
    let p = POLICY.load(Ordering::Relaxed);
    Memory { maxmemory: MAXMEMORY.load(Ordering::Relaxed), policy: (p < POLICIES.len()).then_some(p) }
}

fn recompute() {
    let evictable = memory().may_evict();
    EVICTABLE.store(evictable, Ordering::Relaxed);
    REFUSING.store(evictable && config::eviction_refuses(), Ordering::Relaxed);
    rewatch();
}

fn rewatch() {
    let w = EVICTABLE.load(Ordering::Relaxed) || TRACKED.load(Ordering::Relaxed) != 0 || window::pending();
    WATCHING.store(w, Ordering::Relaxed);
}

/// Reads `maxmemory` and `maxmemory_policy` from `INFO memory`; false if
/// the server would not say (the last values stay).
fn read_memory() -> bool {
    let apis = unsafe {
        (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldUnsigned,
            raw::RedisModule_ServerInfoGetFieldC,
            raw::RedisModule_FreeServerInfo,
        )
    };
    let (Some(get), Some(unsigned), Some(text), Some(free)) = apis else { return false };
    unsafe {
        let data = get(std::ptr::null_mut(), c"memory".as_ptr());
        if data.is_null() {
            return false;
        }
        let mut err: c_int = 0;
        let maxmemory = unsigned(data, c"maxmemory".as_ptr(), &mut err);
        let policy = text(data, c"maxmemory_policy".as_ptr());
        let read = err == 0 && !policy.is_null();
        if read {
            let m = Memory::of(maxmemory, CStr::from_ptr(policy).to_bytes());
            MAXMEMORY.store(m.maxmemory, Ordering::Relaxed);
            POLICY.store(m.policy.unwrap_or(POLICIES.len()), Ordering::Relaxed);
        }
        free(std::ptr::null_mut(), data);
        read
    }
}

fn log(ctx: *mut RedisModuleCtx, level: &CStr, message: &str) {
    let Ok(message) = CString::new(message) else { return };
    if let Some(log) = unsafe { raw::RedisModule_Log } {
        unsafe { log(ctx, level.as_ptr(), c"%s".as_ptr(), message.as_ptr()) };
    }
}

/// The warning of settings that let Redis evict lock keys.
fn warning() -> String {
    let m = memory();
    let then = if config::eviction_refuses() {
        "lock.eviction is refuse: every grant is refused with an error until maxmemory-policy is noeviction or maxmemory 0 (CONFIG SET lock.eviction allow grants anyway); locks held now stay held, those renewed are tracked, and an eviction that may have taken one not renewed yet is counted (lock_evicted_unverified)"
    } else {
        "lock.eviction is allow: grants go on, and every held lock Redis evicts is counted in INFO lock (lock_evicted_*), logged, and told to its holder (LOCK.EVICTED)"
    };
    format!(
        "lock: maxmemory {} with maxmemory-policy {} lets Redis evict lock keys (they carry a TTL): an evicted lock is granted to the next caller at once, and its holder loses mutual exclusion; {then}",
        m.maxmemory,
        m.policy_name()
    )
}

/// Reads the settings and says so in the log when lock keys can be
/// evicted, or no longer can. `at_load`: always says it when they can.
fn review(ctx: *mut RedisModuleCtx, at_load: bool) {
    let was = (EVICTABLE.load(Ordering::Relaxed), REFUSING.load(Ordering::Relaxed));
    read_memory();
    recompute();
    let now = (EVICTABLE.load(Ordering::Relaxed), REFUSING.load(Ordering::Relaxed));
    if now.0 {
        // Only once the settings can evict: a server that never can pays
        // nothing for it (a keyspace subscription cannot be dropped).
        events::need(Ctx(ctx), Also::EvictedOnly);
    }
    if now.0 && (at_load || now != was) {
        log(ctx, c"warning", &warning());
        let until = window::until();
        if !was.0 && until > Ctx(ctx).now_ms() {
            log(ctx, c"warning", &format!("lock: holds granted while Redis could not evict are in no table and may be live until {until} (Unix ms): until then, every evicted key the module does not track is counted in lock_evicted_unverified and logged as possibly such a lock"));
        }
    } else if !now.0 && was.0 {
        log(
            ctx,
            c"notice",
            &format!(
                "lock: maxmemory {} with maxmemory-policy {}: Redis can no longer evict lock keys",
                MAXMEMORY.load(Ordering::Relaxed),
                memory().policy_name()
            ),
        );
    }
}

/// At load, after the configs: reads the settings, warns, and subscribes
/// to config changes; to evictions once the settings first let Redis
/// evict (a call into the module per evicted key of the server).
pub fn init(ctx: *mut RedisModuleCtx) {
    review(ctx, true);
    events::need_config(Ctx(ctx));
}

/// `lock.eviction` changed (config's hook).
pub fn mode_changed() {
    recompute();
}

/// The database-event listener: any `CONFIG SET` (rare, and one of several
/// names may be ours) has the settings read again.
pub fn on_db_event(ctx: Ctx, ev: &DbEvent) {
    if let DbEvent::ConfigChanged = ev {
        review(ctx.0, false);
    }
}

fn publish(s: &State) {
    TRACKED.store(s.tracker.len(), Ordering::Relaxed);
    rewatch();
}

/// Whether writes of lock keys must be told ([`lock_written`]): the
/// server may evict, or holds tracked earlier remain, or keys evicted in
/// the window. One relaxed load; when false, the write calls [`untracked`].
#[inline(always)]
pub fn watching() -> bool {
    WATCHING.load(Ordering::Relaxed)
}

/// A hold given until `at` while not [`watching`]: the server cannot
/// evict, so it goes in no table, only in the window's end.
#[inline(always)]
pub fn untracked(at: i64) {
    window::untracked(at);
}

/// Session `id` attached a hold, or was kept alive, and holds something
/// (`holds`) until `deadline`: the hook of the session store (a
/// session-held hold's lease is its session's deadline).
pub fn session_lease(ctx: Ctx, id: u128, deadline: i64, holds: bool) {
    window::session_lease(id, deadline, holds, EVICTABLE.load(Ordering::Relaxed), ctx.now_ms());
}

/// The hook of `LockKey::set` and `LockKey::expire_at`, after the write,
/// while [`watching`]: the owner of `value` (the key's value now) holds the
/// key `name` until `at` (its expiry). A tombstone or a value no token
/// owns holds nothing.
pub fn lock_written(ctx: Ctx, name: *mut RedisModuleString, value: Option<&[u8]>, at: i64) {
    let evictable = EVICTABLE.load(Ordering::Relaxed);
    let key = key_hash(ctx.db(), bytes(name));
    let (owner, session) = sessions::owner(value);
    let now = ctx.now_ms();
    if let Some((token, _)) = owner {
        if window::pending() {
            window::granted(key, token, now);
        }
    }
    let mut s = state();
    match owner {
        // A session's hold stays tracked whatever the settings: only the
        // module's delete ends it, and no keepalive would put it back.
        Some((token, family)) if evictable || at >= SESSION_HELD => {
            s.tracker.forget_evicted(key, token);
            if !s.tracker.hold_in(key, token, (at, family), true, session, now) {
                UNTRACKED.add();
                window::untracked(at);
            }
        }
        Some(_) => {
            s.tracker.drop_key(key);
            window::untracked(at);
        }
        None => s.tracker.drop_key(key),
    }
    publish(&s);
}

/// The hook of `LockKey::delete`: nobody holds the key.
pub fn lock_deleted(ctx: Ctx, name: *mut RedisModuleString) {
    if TRACKED.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut s = state();
    s.tracker.drop_key(key_hash(ctx.db(), bytes(name)));
    publish(&s);
}

/// The hook of `HoldersKey::commit` (beside hold timing's): a place
/// granted or renewed is held until its end; a released or ended place,
/// or every place of a key the commit deletes, holds nothing.
pub fn holders_commit(c: &Commit) {
    let Commit { ctx, name, summary, edit, ended, now, .. } = *c;
    if !watching() {
        if let HolderEdit::Put { at, .. } = edit {
            window::untracked(at);
        }
        return;
    }
    let evictable = EVICTABLE.load(Ordering::Relaxed);
    let key = key_hash(ctx.db(), bytes(name));
    if let HolderEdit::Put { token, .. } = edit {
        if window::pending() {
            window::granted(key, token_hash(token), now);
        }
    }
    let mut s = state();
    for &m in ended {
        s.tracker.drop_hold(key, token_hash(bytes(m)));
    }
    let change = match edit {
        HolderEdit::Keep => Change::Keep,
        HolderEdit::Put { at, .. } => Change::Put(at),
        HolderEdit::Remove { .. } => Change::Remove,
    };
    if summary.is_some() && matches!(last_after(summary, change), Last::Gone) {
        s.tracker.drop_key(key);
    } else {
        match edit {
            HolderEdit::Keep => {}
            HolderEdit::Remove { token } => s.tracker.drop_hold(key, token_hash(token)),
            HolderEdit::Put { token, at, tag } if evictable || at >= SESSION_HELD => {
                let kind = tag.map(|t| t.kind).or(summary.map(|s| s.kind));
                let family = match kind.map(|k| k.family()) {
                    Some(HolderFamily::ReadWrite) => Family::ReadWrite,
                    _ => Family::Semaphore,
                };
                let session = sessions::of_holder(c.session, token);
                let token = token_hash(token);
                s.tracker.forget_evicted(key, token);
                if !s.tracker.hold_in(key, token, (at, family), false, session, now) {
                    UNTRACKED.add();
                    window::untracked(at);
                }
            }
            HolderEdit::Put { token, at, .. } => {
                s.tracker.drop_hold(key, token_hash(token));
                window::untracked(at);
            }
        }
    }
    publish(&s);
}

/// Redis evicted `key` (after deleting it): its tracked live holds were
/// lost, and if the table knew it as no exclusive key's while holds given
/// untracked may have been live (`eviction_window`), it may have been one
/// of those. Counted, logged (at most [`LOG_PER_SECOND`] lines a second,
/// the rest summed into one line a second later), remembered for
/// `LOCK.EVICTED`. The listener of evicted keys only (`Also::EvictedOnly`).
pub fn on_key_event(c: Ctx, ev: &KeyEvent) {
    let (db, name) = (c.db(), bytes(ev.key));
    let now = c.now_ms();
    let key = key_hash(db, name);
    let mut s = state();
    let mut held = Vec::new();
    let lost = if TRACKED.load(Ordering::Relaxed) == 0 {
        Evicted::default()
    } else {
        s.tracker.evicted_from(key, now, &mut held)
    };
    let unverified = !lost.exclusive && window::evicted(key, now);
    publish(&s);
    // Sessions' holds: told to their sessions by the next listener.
    sessions::lost(db, name, now, held);
    if lost.total() == 0 && !unverified {
        return;
    }
    for (counter, n) in EVICTED.iter().zip(lost.holds) {
        counter.add_n(n);
    }
    let second = now.div_euclid(1000);
    if second != s.log_second {
        s.log_second = second;
        s.logged = [0, 0];
    }
    // Tracked losses and keys evicted in the window have a budget each:
    // a cache's evictions in the window never hide a lock known lost.
    let budget = usize::from(lost.total() == 0);
    if s.logged[budget] >= LOG_PER_SECOND {
        if s.suppressed == (0, 0) {
            // The sum is logged a second later, whatever comes next.
            timer::start(c, 1000, log_suppressed, ());
        }
        s.suppressed.0 += lost.total();
        s.suppressed.1 += u64::from(unverified);
        return;
    }
    s.logged[budget] += 1;
    drop(s);
    let until = unverified.then(window::until);
    log(c.0, c"warning", &lost_line(&String::from_utf8_lossy(name), db, memory().policy_name(), &lost, until));
}

/// A second after evictions beyond [`LOG_PER_SECOND`]: one line for them all.
unsafe extern "C" fn log_suppressed(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        drop(Box::from_raw(data.cast::<()>()));
    }
    let _ = std::panic::catch_unwind(|| {
        let (held, keys) = std::mem::take(&mut state().suppressed);
        if held + keys > 0 {
            log(ctx, c"warning", &suppressed_line(held, keys, memory().policy_name()));
        }
    });
}

/// The latest lease end of a hold this process gave (tracked or not),
/// session-held holds aside: what a process that loads this one's data
/// must count as its window (`crate::server::eviction_rdb`).
pub fn latest_end() -> i64 {
    let tracked =
        if TRACKED.load(Ordering::Relaxed) == 0 { None } else { state().tracker.last_end_below(SESSION_HELD) };
    tracked.unwrap_or(0).max(window::until())
}

/// Whether `token`'s hold of `key` (in the context's database) was lost
/// to an eviction: among the last [`MAX_RECENT`] such, and not granted to
/// it again since. O(1); reads no key.
pub fn was_evicted(ctx: Ctx, key: &[u8], token: &[u8]) -> bool {
    let (key, token) = (key_hash(ctx.db(), key), token_hash(token));
    state().tracker.was_evicted(key, token) || window::was_evicted(key, token, ctx.now_ms())
}

/// `INFO lock`'s eviction fields (after the counters).
pub unsafe fn render(ctx: *mut RedisModuleInfoCtx) {
    // Numbers only, as every counter of the section (the policy itself is
    // INFO memory's `maxmemory_policy`).
    let fields: [(&CStr, u64); 10] = [
        (c"evictable", u64::from(EVICTABLE.load(Ordering::Relaxed))),
        (c"eviction_refusals", REFUSED.get()),
        (c"evicted_locks", EVICTED[Family::Lock as usize].get()),
        (c"evicted_leaders", EVICTED[Family::Leader as usize].get()),
        (c"evicted_sem_holders", EVICTED[Family::Semaphore as usize].get()),
        (c"evicted_rw_holders", EVICTED[Family::ReadWrite as usize].get()),
        (c"eviction_tracked", TRACKED.load(Ordering::Relaxed) as u64),
        (c"eviction_untracked", UNTRACKED.get()),
        (c"evicted_unverified", window::EVICTED.get()),
        (c"eviction_window_until", window::until().max(0) as u64),
    ];
    for (name, value) in fields {
        rm!(RedisModule_InfoAddFieldULongLong)(ctx, name.as_ptr(), value);
    }
}
