//! The revoked holds of this node's sessions (`LOCK.REVOKE` of a
//! session-held lock, docs/revocation.md; the bookkeeping is
//! `redis_lock_rules::session_revoked`). The lock key carries the mark and
//! the deadline itself (its value and `PXAT`); this table is what the
//! session's holder and the server need without reading keys: a
//! keepalive's O(1) "some of your holds are revoked", SESSION.INFO's
//! listing, and the deadlines at which the sessions' timer
//! (`crate::blocked::session_end`) ends each hold and detaches it from
//! its session.
//!
//! A semaphore's or read-write lock's holder held by a session is noted
//! with its token (a session may hold several places of one key); its key
//! carries the deadline as its revoked hold member, and its place scored
//! the deadline plus the key's delay.
//!
//! Replicated as `SESSION.APPLY REVOKEHOLD id key deadline reason [token]`
//! (an absolute deadline) next to the key's `SET … PXAT` or `ZADD`; a
//! `SESSION.APPLY DETACH` (a release, the end at the deadline) or `FORGET`
//! drops the entry there too. Its RDB home is the aux data of the keyless type
//! `lkrevoked`, written only while some hold is revoked, with the revoked
//! keys that Redis's expiry may end (`crate::server::revoked`'s notes).

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::args::{parse_session_id, session_id_text};
use redis_lock_rules::encode::decimal;
use redis_lock_rules::session::Id;
use redis_lock_rules::session_revoked::{Revocation, RevokedHolds};
use redis_module::native_types::RedisType;
use redis_module::raw::{self, RedisModuleIO, RedisModuleString};

use crate::boundary::api::rm;
use crate::boundary::aux::aux_only;
use crate::boundary::ctx::{bytes, Ctx};
use crate::server::events::{Changed, DbEvent};
use crate::server::revoked;
use crate::store::hold_key::HoldKey;
use crate::store::session;

static TABLE: LazyLock<Mutex<RevokedHolds<HoldKey>>> = LazyLock::new(|| Mutex::new(RevokedHolds::default()));
/// How many holds are revoked: nothing is locked while there are none.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn table() -> MutexGuard<'static, RevokedHolds<HoldKey>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn counted(t: &RevokedHolds<HoldKey>) {
    COUNT.store(t.len(), Ordering::Relaxed);
}

/// Session `id`'s hold `name` (in the context's database; `token`'s place
/// among its holders for a semaphore or read-write lock) is revoked until
/// `deadline` for `reason`; replicated.
pub fn revoke(
    ctx: Ctx,
    id: Id,
    name: *mut RedisModuleString,
    token: Option<*mut RedisModuleString>,
    deadline: i64,
    reason: &str,
) {
    let mut t = table();
    t.revoke(id, HoldKey::new(ctx.db(), bytes(name), token.map(bytes)), deadline, reason.to_owned());
    counted(&t);
    drop(t);
    replicate_revoke(ctx, id, name, token, deadline, reason.as_bytes());
}

/// `SESSION.APPLY REVOKEHOLD id key deadline reason [token]` to replicas
/// and the AOF.
pub fn replicate_revoke(
    ctx: Ctx,
    id: Id,
    name: *mut RedisModuleString,
    token: Option<*mut RedisModuleString>,
    deadline: i64,
    reason: &[u8],
) {
    let id = session_id_text(id);
    let mut digits = [0u8; 20];
    let at = decimal(deadline, &mut digits);
    let (format, token) = match token {
        Some(t) => (c"cbsbbs", t),
        None => (c"cbsbb", std::ptr::null_mut()),
    };
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx.0,
            c"SESSION.APPLY".as_ptr(),
            format.as_ptr(),
            c"REVOKEHOLD".as_ptr(),
            id.as_ptr(),
            id.len(),
            name,
            at.as_ptr(),
            at.len(),
            reason.as_ptr(),
            reason.len(),
            token,
        );
    }
}

/// Up to `max` revoked holds after `after` (deadline, session, hold; from
/// the first: `None`), in deadline order, with their reasons: an AOF
/// rewrite's walk (`crate::store::aof_walk`). O(log n + max).
pub fn after(after: Option<&(i64, Id, HoldKey)>, max: usize) -> Vec<(i64, Id, HoldKey, String)> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    let t = table();
    t.after(after, max).into_iter().map(|(at, id, k, r)| (at, id, k.clone(), r.reason.clone())).collect()
}

/// `SESSION.APPLY REVOKEHOLD`: what the master revoked.
pub fn apply_revoke(ctx: Ctx, id: Id, key: &[u8], token: Option<&[u8]>, deadline: i64, reason: &[u8]) {
    let mut t = table();
    t.revoke(id, HoldKey::new(ctx.db(), key, token), deadline, String::from_utf8_lossy(reason).into_owned());
    counted(&t);
}

/// Session `id` no longer holds `key` (in the context's database; `token`'s
/// place among its holders): its revocation, if any, is done with. Not
/// replicated: the `DETACH` that goes with it is.
pub fn forget(ctx: Ctx, id: Id, key: &[u8], token: Option<&[u8]>) {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut t = table();
    t.forget(id, &HoldKey::new(ctx.db(), key, token));
    counted(&t);
}

/// Session `id` is forgotten: so are its revoked holds.
pub fn forget_session(id: Id) {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut t = table();
    t.forget_session(id);
    counted(&t);
}

/// The holder released `name`, held by `session` (or a revoke ended it at
/// once): the session forgets the hold and its revocation; replicated
/// (`SESSION.APPLY DETACH`).
pub fn detach(ctx: Ctx, session: &str, name: *mut RedisModuleString) {
    session::detach(ctx, session, name);
    if let Ok(id) = parse_session_id(session.as_bytes()) {
        forget(ctx, id, bytes(name), None);
    }
}

/// The session of short id `short` no longer holds `token`'s place among
/// `name`'s holders (released, or ended at a revocation's deadline): it
/// forgets the hold and its revocation; replicated (`SESSION.APPLY DETACH
/// id key token`).
pub fn detach_holder(ctx: Ctx, short: u64, name: *mut RedisModuleString, token: *mut RedisModuleString) {
    if let Some(id) = session::detach_holder(ctx, short, name, token) {
        forget(ctx, id, bytes(name), Some(bytes(token)));
    }
}

/// How many of session `id`'s holds are revoked. O(1).
pub fn count(id: Id) -> usize {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    table().count(id)
}

/// Session `id`'s first `n` revoked holds.
pub fn list(id: Id, n: usize) -> Vec<(HoldKey, Revocation)> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    table().list(id, n).into_iter().map(|(k, r)| (k.clone(), r.clone())).collect()
}

/// Takes out at most `max` revoked holds whose deadline has come.
pub fn take_due(now: i64, max: usize) -> Vec<(Id, HoldKey)> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    let mut t = table();
    let due = t.take_due(now, max);
    counted(&t);
    due
}

/// The earliest deadline of a revoked hold.
pub fn next_due() -> Option<i64> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    table().next_due()
}

/// The database-event listener: a flush of every database forgets them
/// (as it forgets the sessions).
pub fn on_db_event(_ctx: Ctx, ev: &DbEvent) {
    if matches!(ev, DbEvent::Changed(Changed::All)) && COUNT.load(Ordering::Relaxed) != 0 {
        let mut t = table();
        t.clear();
        counted(&t);
    }
}

// The RDB (encoding version 1): the count, then per revoked hold its
// session (two unsigned halves), database, key name, deadline, reason,
// and (not in version 0) 1 and a holder's token, or 0;
// then the count of the revoked keys noted for their expiry, and per key
// its database, name and deadline; then the count of the semaphore and
// read-write lock holders' reasons, and per holder its database, key,
// token and reason.

unsafe extern "C" fn aux_save(rdb: *mut RedisModuleIO, _when: c_int) {
    let notes = revoked::notes();
    let reasons = revoked::all_reasons();
    let t = table();
    raw::save_unsigned(rdb, t.len() as u64);
    for (id, hold, r) in t.iter() {
        let (db, key, token) = hold.split();
        raw::save_unsigned(rdb, (id >> 64) as u64);
        raw::save_unsigned(rdb, id as u64);
        raw::save_signed(rdb, i64::from(db));
        raw::save_slice(rdb, key);
        raw::save_signed(rdb, r.deadline);
        raw::save_slice(rdb, r.reason.as_bytes());
        raw::save_unsigned(rdb, u64::from(token.is_some()));
        if let Some(token) = token {
            raw::save_slice(rdb, token);
        }
    }
    raw::save_unsigned(rdb, notes.len() as u64);
    for (db, key, at) in notes {
        raw::save_signed(rdb, i64::from(db));
        raw::save_slice(rdb, &key);
        raw::save_signed(rdb, at);
    }
    raw::save_unsigned(rdb, reasons.len() as u64);
    for (db, key, token, why) in reasons {
        raw::save_signed(rdb, i64::from(db));
        raw::save_slice(rdb, &key);
        raw::save_slice(rdb, &token);
        raw::save_slice(rdb, why.as_bytes());
    }
}

/// Redis 7.2+ calls this instead of `aux_save`: nothing without a revoked hold.
unsafe extern "C" fn aux_save2(rdb: *mut RedisModuleIO, when: c_int) {
    if !table().is_empty() || !revoked::notes().is_empty() || !revoked::all_reasons().is_empty() {
        aux_save(rdb, when);
    }
}

unsafe extern "C" fn aux_load(rdb: *mut RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    match load(rdb, encver) {
        Ok(()) => raw::REDISMODULE_OK as c_int,
        Err(_) => raw::REDISMODULE_ERR as c_int,
    }
}

fn load(rdb: *mut RedisModuleIO, encver: c_int) -> Result<(), redis_module::error::Error> {
    let mut entries = BTreeMap::new();
    for _ in 0..raw::load_unsigned(rdb)? {
        let id = (u128::from(raw::load_unsigned(rdb)?) << 64) | u128::from(raw::load_unsigned(rdb)?);
        let db = raw::load_signed(rdb)? as c_int;
        let key = raw::load_string_buffer(rdb)?;
        let deadline = raw::load_signed(rdb)?;
        let reason = raw::load_string_buffer(rdb)?;
        let reason = String::from_utf8_lossy(reason.as_ref()).into_owned();
        let token = match encver >= 1 && raw::load_unsigned(rdb)? != 0 {
            true => Some(raw::load_string_buffer(rdb)?.as_ref().to_vec()),
            false => None,
        };
        entries.insert((id, HoldKey::new(db, key.as_ref(), token.as_deref())), (deadline, reason));
    }
    let mut notes = Vec::new();
    for _ in 0..raw::load_unsigned(rdb)? {
        let db = raw::load_signed(rdb)? as c_int;
        let key = raw::load_string_buffer(rdb)?;
        notes.push((db, key.as_ref().to_vec(), raw::load_signed(rdb)?));
    }
    let mut reasons = Vec::new();
    for _ in 0..raw::load_unsigned(rdb)? {
        let db = raw::load_signed(rdb)? as c_int;
        let key = raw::load_string_buffer(rdb)?.as_ref().to_vec();
        let token = raw::load_string_buffer(rdb)?.as_ref().to_vec();
        let why = String::from_utf8_lossy(raw::load_string_buffer(rdb)?.as_ref()).into_owned();
        reasons.push((db, key, token, why));
    }
    revoked::restore_reasons(reasons);
    // SAFETY: the module API's function table, filled in at load.
    if let Some(from_io) = unsafe { raw::RedisModule_GetContextFromIO } {
        revoked::restore(Ctx(unsafe { from_io(rdb) }), notes);
    }
    // The RDB holds every revoked hold of the node it was saved on.
    let mut t = table();
    t.clear();
    for ((id, key), (deadline, reason)) in entries {
        t.revoke(id, key, deadline, reason);
    }
    counted(&t);
    Ok(())
}

/// A data type with no keys, only aux data: the RDB home of the revoked holds.
pub static REVOKED_TYPE: RedisType =
    RedisType::new("lkrevoked", 1, aux_only(Some(aux_load), Some(aux_save), Some(aux_save2)));
