//! The revoked holds whose deadline Redis's own expiry may reach first
//! (`LOCK.REVOKE`, `docs/revocation.md`): a lock without a lock-delay
//! expires at its deadline, and a key that expires takes its value with
//! it, so the module could not tell that hold's end from any other
//! expiry. The revoke notes the key here; its `expired` event at or after
//! the deadline is counted as the revocation's end (`lock_revoked_ends`).
//! The note is replicated (`SESSION.APPLY NOTE key deadline`, next to the
//! key's `SET … PXAT`) and saved in the RDB with the sessions' revoked
//! holds (`crate::store::session_revoked`), so that a promoted replica or
//! a restarted server counts such an end too. The module's own end of the
//! hold (settling, pruning, a revoke without grace) counts it itself and
//! [`forget`]s the key; a `del` (a release, a settled delete) forgets it
//! uncounted. Nothing is looked up while no revocation is pending: one
//! relaxed load per key event.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::raw::RedisModuleString;

use redis_lock_rules::encode::decimal;

use crate::boundary::api::rm;
use crate::boundary::ctx::{bytes, Ctx};
use crate::server::counters::REVOKED_ENDS;
use crate::server::events::{self, Also, DbEvent, KeyEvent};

type Key = (c_int, Vec<u8>);
/// A semaphore's or read-write lock's holder: database, key, token.
pub type Holder = (c_int, Vec<u8>, Vec<u8>);

/// The most holder reasons kept (the oldest are not dropped: past this,
/// a new one is not kept, and its holder's `reason` is unknown).
pub const MAX_REASONS: usize = 10_000;

/// In key order: an AOF rewrite's walk resumes after the last it restated.
static PENDING: LazyLock<Mutex<BTreeMap<Key, i64>>> = LazyLock::new(|| Mutex::new(BTreeMap::new()));
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Notes plus reasons kept: the key-event listener's gate (0: it has
/// nothing to look for in a key event, and is not called).
pub static GATE: AtomicU64 = AtomicU64::new(0);
/// The `REASON`s of revoked semaphore and read-write lock holders: a
/// sorted-set member has one score, which carries the deadline, so the
/// reason is kept here (replicated with the note, saved with it).
static REASONS: LazyLock<Mutex<BTreeMap<Holder, String>>> = LazyLock::new(|| Mutex::new(BTreeMap::new()));
static REASON_COUNT: AtomicUsize = AtomicUsize::new(0);

fn reasons() -> MutexGuard<'static, BTreeMap<Holder, String>> {
    REASONS.lock().unwrap_or_else(|e| e.into_inner())
}

fn publish_reasons(r: &BTreeMap<Holder, String>) {
    REASON_COUNT.store(r.len(), Ordering::Relaxed);
    regate();
}

fn pending() -> MutexGuard<'static, BTreeMap<Key, i64>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

fn publish(p: &BTreeMap<Key, i64>) {
    COUNT.store(p.len(), Ordering::Relaxed);
    regate();
}

fn regate() {
    let kept = COUNT.load(Ordering::Relaxed) + REASON_COUNT.load(Ordering::Relaxed);
    GATE.store(kept as u64, Ordering::Relaxed);
}

/// `name` (in the context's database) holds a hold revoked until
/// `deadline` (Unix ms; an earlier one already noted is kept); replicated.
pub fn noted(ctx: Ctx, name: *mut RedisModuleString, deadline: i64) {
    apply(ctx, bytes(name), deadline);
    replicate_note(ctx, name, deadline, None);
}

/// [`noted`] for a semaphore's or read-write lock's holder `token`, with
/// its `reason`; replicated (`SESSION.APPLY NOTE key deadline token reason`).
pub fn noted_holder(ctx: Ctx, name: *mut RedisModuleString, deadline: i64, token: &[u8], reason: &str) {
    apply(ctx, bytes(name), deadline);
    apply_reason(ctx, bytes(name), token, reason.as_bytes());
    replicate_note(ctx, name, deadline, Some((token, reason.as_bytes())));
}

/// `SESSION.APPLY NOTE key deadline [token reason]` to replicas and the
/// AOF: a note, and a holder's reason.
pub fn replicate_note(ctx: Ctx, name: *mut RedisModuleString, deadline: i64, holder: Option<(&[u8], &[u8])>) {
    let mut digits = [0u8; 20];
    let at = decimal(deadline, &mut digits);
    let (format, (token, reason)) = match holder {
        Some(h) => (c"csbbb", h),
        None => (c"csb", (&b""[..], &b""[..])),
    };
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx.0,
            c"SESSION.APPLY".as_ptr(),
            format.as_ptr(),
            c"NOTE".as_ptr(),
            name,
            at.as_ptr(),
            at.len(),
            token.as_ptr(),
            token.len(),
            reason.as_ptr(),
            reason.len(),
        );
    }
}

/// Up to `max` notes after `after` (database and key; from the first:
/// `None`), in order, with their deadlines: an AOF rewrite's walk
/// (`crate::store::aof_walk`). O(log n + max).
pub fn notes_after(after: Option<&(c_int, Vec<u8>)>, max: usize) -> Vec<((c_int, Vec<u8>), i64)> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    use std::ops::Bound::{Excluded, Unbounded};
    let p = pending();
    let found = p.range::<Key, _>((after.map_or(Unbounded, Excluded), Unbounded));
    found.take(max).map(|(k, &at)| (k.clone(), at)).collect()
}

/// The deadline noted for `key` in `db`, if any.
pub fn note_of(db: c_int, key: &[u8]) -> Option<i64> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    pending().get(&(db, key.to_vec())).copied()
}

/// Up to `max` kept reasons after `after` (database, key, token; from the
/// first: `None`), in order. O(log n + max).
pub fn reasons_after(after: Option<&Holder>, max: usize) -> Vec<(Holder, String)> {
    if REASON_COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    use std::ops::Bound::{Excluded, Unbounded};
    let r = reasons();
    let found = r.range::<Holder, _>((after.map_or(Unbounded, Excluded), Unbounded));
    found.take(max).map(|(h, why)| (h.clone(), why.clone())).collect()
}

/// Keeps `token`'s reason on `key` (at most [`MAX_REASONS`] of them).
pub fn apply_reason(ctx: Ctx, key: &[u8], token: &[u8], reason: &[u8]) {
    let mut r = reasons();
    let holder = (ctx.db(), key.to_vec(), token.to_vec());
    if r.len() < MAX_REASONS || r.contains_key(&holder) {
        r.insert(holder, String::from_utf8_lossy(reason).into_owned());
    }
    publish_reasons(&r);
}

/// The reason `token`'s hold of `key` was revoked for, if kept.
pub fn reason_of(ctx: Ctx, key: &[u8], token: &[u8]) -> Option<String> {
    if REASON_COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    reasons().get(&(ctx.db(), key.to_vec(), token.to_vec())).cloned()
}

/// `token`'s revoked hold of `key` ended (released, pruned).
pub fn forget_reason(ctx: Ctx, key: &[u8], token: &[u8]) {
    if REASON_COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut r = reasons();
    r.remove(&(ctx.db(), key.to_vec(), token.to_vec()));
    publish_reasons(&r);
}

/// Every kept reason: database, key, token, reason (for the RDB).
pub fn all_reasons() -> Vec<(c_int, Vec<u8>, Vec<u8>, String)> {
    if REASON_COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    reasons().iter().map(|((db, key, token), why)| (*db, key.clone(), token.clone(), why.clone())).collect()
}

/// Puts back the reasons an RDB carried (replacing any).
pub fn restore_reasons(reasons_read: Vec<(c_int, Vec<u8>, Vec<u8>, String)>) {
    let mut r = reasons();
    r.clear();
    r.extend(reasons_read.into_iter().take(MAX_REASONS).map(|(db, key, token, why)| ((db, key, token), why)));
    publish_reasons(&r);
}

/// Drops every reason kept for `key` (it went).
fn forget_key(db: c_int, key: &[u8]) {
    let mut r = reasons();
    let from = (db, key.to_vec(), Vec::new());
    let gone: Vec<Holder> =
        r.range(from..).take_while(|(h, _)| h.0 == db && h.1 == key).map(|(h, _)| h.clone()).collect();
    for h in gone {
        r.remove(&h);
    }
    publish_reasons(&r);
}

/// Notes `key` (in the context's database) as [`noted`] does, without
/// replicating: `SESSION.APPLY NOTE` from the master or the AOF.
pub fn apply(ctx: Ctx, key: &[u8], deadline: i64) {
    events::need(ctx, Also::Nothing);
    let mut p = pending();
    let at = p.entry((ctx.db(), key.to_vec())).or_insert(deadline);
    *at = (*at).min(deadline);
    publish(&p);
}

/// Every note: database, key, deadline (for the RDB).
pub fn notes() -> Vec<(c_int, Vec<u8>, i64)> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    pending().iter().map(|((db, key), &at)| (*db, key.clone(), at)).collect()
}

/// Puts back the notes an RDB carried (replacing any: the RDB holds every
/// note of the node it was saved on).
pub fn restore(ctx: Ctx, notes: Vec<(c_int, Vec<u8>, i64)>) {
    if !notes.is_empty() {
        events::need(ctx, Also::Nothing);
    }
    let mut p = pending();
    p.clear();
    p.extend(notes.into_iter().map(|(db, key, at)| ((db, key), at)));
    publish(&p);
}

/// The module ended `name`'s revoked hold itself (and counted it).
pub fn forget(ctx: Ctx, name: *mut RedisModuleString) {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut p = pending();
    p.remove(&(ctx.db(), bytes(name).to_vec()));
    publish(&p);
}

/// The key-event listener: an expiry at or after the deadline is the
/// revocation's end; a deletion, eviction or move ends the note.
pub fn on_key_event(ctx: Ctx, ev: &KeyEvent) {
    if ev.name == b"expire" {
        return;
    }
    // A holders key that went takes its holders' reasons with it.
    if REASON_COUNT.load(Ordering::Relaxed) != 0 {
        forget_key(ctx.db(), bytes(ev.key));
    }
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut p = pending();
    if let Some(deadline) = p.remove(&(ctx.db(), bytes(ev.key).to_vec())) {
        if ev.expired() && ctx.now_ms() >= deadline {
            REVOKED_ENDS.add();
        }
        publish(&p);
    }
}

/// Whole databases changed (flushed, swapped): the notes are dropped
/// (their keys went). A master that became a replica keeps them: its new
/// master's notes arrive with its data (its RDB's aux data on a full
/// resync, after the flush; `SESSION.APPLY NOTE` entries after that).
pub fn on_db_event(_ctx: Ctx, ev: &DbEvent) {
    if matches!(ev, DbEvent::Changed(_)) && COUNT.load(Ordering::Relaxed) != 0 {
        let mut p = pending();
        p.clear();
        publish(&p);
    }
    if matches!(ev, DbEvent::Changed(_)) && REASON_COUNT.load(Ordering::Relaxed) != 0 {
        let mut r = reasons();
        r.clear();
        publish_reasons(&r);
    }
}
