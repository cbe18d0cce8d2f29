//! The node's sessions (docs/sessions.md; the bookkeeping is
//! `redis_lock_rules::session`): granting, keeping alive, revoking, which
//! keys each holds, and how every change reaches replicas and the AOF —
//! as `SESSION.APPLY` entries with absolute times, applied there by
//! [`apply`]. Their RDB home is `crate::store::session_rdb`; the timer that
//! ends them and releases their holds, `crate::blocked::session_end`.

use std::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::args::{expiry_at, session_id_text, ArgError};
use redis_lock_rules::encode::decimal;
use redis_lock_rules::held::{self, SessionState};
use redis_lock_rules::session::{Id, Reason, Sessions};
use redis_module::raw::RedisModuleString;

use crate::boundary::api::rm;
use crate::boundary::ctx::{bytes, Ctx};
use crate::server::counters as stats;
use crate::server::events::{self, Changed, DbEvent};
use crate::server::{eviction, eviction_window};
use crate::store::session_gone;

pub use crate::store::hold_key::HoldKey;

/// The database bit of a holder's hold in the RDB (`crate::store::session_rdb`).
pub const HOLDER: c_int = 1 << 30;

static TABLE: LazyLock<Mutex<Sessions>> = LazyLock::new(|| Mutex::new(Sessions::default()));

/// The table. A poisoned lock only means a panic was caught mid-update.
pub fn table() -> MutexGuard<'static, Sessions> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Publishes how many sessions the table has (`INFO lock`'s `lock_sessions`).
pub fn counted(t: &Sessions) {
    stats::SESSIONS.store(t.len() as u64, Ordering::Relaxed);
}

/// A new id: 128 bits of the server's CSPRNG, never one this node has now.
fn new_id() -> Id {
    loop {
        let mut b = [0u8; 16];
        unsafe { rm!(RedisModule_GetRandomBytes)(b.as_mut_ptr(), b.len()) };
        let id = u128::from_le_bytes(b);
        // Its short id too: it names the session in holders' keys.
        if id != 0 && !table().taken(id) {
            return id;
        }
    }
}

/// `SESSION.GRANT`: a new session of `ttl` ms with `lock_delay`, replicated
/// with its absolute deadline. Its id and deadline.
pub fn grant(ctx: Ctx, ttl: i64, lock_delay: i64) -> Result<(Id, i64), ArgError> {
    let deadline = expiry_at(ctx.now_ms(), ttl)?;
    deadline.checked_add(lock_delay).ok_or(ArgError::TtlTooLarge)?;
    let id = new_id();
    events::need_db(ctx);
    let mut t = table();
    t.grant(id, ttl, lock_delay, deadline);
    counted(&t);
    drop(t);
    replicate_grant(ctx, id, ttl, lock_delay, deadline);
    stats::SESSIONS_GRANTED.add();
    Ok((id, deadline))
}

/// `SESSION.KEEPALIVE` of one id: its TTL when it was kept alive (its new
/// deadline replicated), `None` when it is unknown or ended. O(1).
pub fn keepalive(ctx: Ctx, id: Id) -> Option<i64> {
    let (ttl, delay, deadline, holds) = {
        let mut t = table();
        let deadline = t.keepalive(id, ctx.now_ms())?;
        let info = t.info(id, 0)?;
        (info.ttl, info.lock_delay, deadline, info.holds > 0)
    };
    eviction::session_lease(ctx, id, deadline, holds);
    replicate_grant(ctx, id, ttl, delay, deadline);
    stats::SESSION_KEEPALIVES.add();
    Some(ttl)
}

/// `SESSION.REVOKE`: ends a live session now (its holds are released by
/// the timer, without lock-delay), for `why` if told. False when it is
/// unknown or ended.
pub fn revoke(ctx: Ctx, id: Id, why: Option<&str>) -> bool {
    let now = ctx.now_ms();
    let revoked = {
        let mut t = table();
        let ended = matches!(t.state(id, now), SessionState::Alive { .. }) && t.end(id, now, Reason::Revoked);
        if ended {
            session_gone::note(&t, id, (now, Reason::Revoked, why), now);
        }
        ended
    };
    if revoked {
        replicate_end(ctx, id, (now, Reason::Revoked, why));
        stats::SESSIONS_REVOKED.add();
    }
    revoked
}

/// What this node knows of `id` at `now`.
pub fn state(id: Id, now: i64) -> SessionState {
    table().state(id, now)
}

/// What this node knows of the session whose short id is `short` (a
/// holder's session member), and its whole id.
pub fn state_of_short(short: u64, now: i64) -> (SessionState, Option<Id>) {
    let t = table();
    match t.by_short(short) {
        Some(id) => (t.state(id, now), Some(id)),
        None => (SessionState::Unknown, None),
    }
}

/// The deadline of the live session named by a stored value's `session`
/// field (`None`: ended, or unknown here).
pub fn deadline_of(session: &str) -> Option<i64> {
    let id = redis_lock_rules::args::parse_session_id(session.as_bytes()).ok()?;
    let t = table();
    t.info(id, 0).filter(|i| i.ended.is_none()).map(|i| i.deadline)
}

/// The TTL left at `now` (ms, 0 once ended) of the session whose short id
/// is `short`; -1 for a session this node does not know.
pub fn ttl_left_of_short(short: u64, now: i64) -> i64 {
    let t = table();
    let Some(info) = t.by_short(short).and_then(|id| t.info(id, 0)) else { return -1 };
    if info.ended.is_some() {
        return 0;
    }
    (info.deadline - now).max(0)
}

/// What a holder's grant at `now` in session `id` needs: its session alive
/// here (else the error, before the key is opened).
pub fn alive(id: Id, now: i64) -> Result<(), ArgError> {
    match state(id, now) {
        SessionState::Alive { .. } => Ok(()),
        _ => Err(ArgError::SessionUnknown),
    }
}

/// The session named by a stored value's `session` field.
pub fn state_of(session: &str, now: i64) -> SessionState {
    match redis_lock_rules::args::parse_session_id(session.as_bytes()) {
        Ok(id) => state(id, now),
        Err(_) => SessionState::Unknown,
    }
}

/// What a grant at `now` to `token` in session `id` stores (its value and
/// the key's expiry, none without `MAXHOLD`), checked before the key is
/// opened: the session must be alive here, and the token UTF-8 (a JSON
/// string).
pub fn held_grant(id: Id, token: &[u8], now: i64, max_hold: Option<i64>) -> Result<(Vec<u8>, Option<i64>), ArgError> {
    let SessionState::Alive { lock_delay } = state(id, now) else { return Err(ArgError::SessionUnknown) };
    let token = redis_lock_rules::args::check_utf8(token)?;
    held::grant(&session_id_text(id), token, lock_delay, now, max_hold)
}

/// Notes that `id` now holds `name` (in the context's database), and
/// tells replicas and the AOF, next to the key's own effect.
pub fn attach(ctx: Ctx, id: Id, name: *mut RedisModuleString) {
    if attached(ctx, id, HoldKey::new(ctx.db(), bytes(name), None)) {
        replicate_hold(ctx, c"ATTACH", id, name);
    }
}

/// Attaches `key` to `id`, and tells eviction's window the session's
/// deadline (a session-held hold's lease).
fn attached(ctx: Ctx, id: Id, key: HoldKey) -> bool {
    let mut t = table();
    let new = t.attach(id, key);
    let deadline = t.info(id, 0).map(|i| i.deadline);
    drop(t);
    if let Some(deadline) = deadline {
        eviction::session_lease(ctx, id, deadline, true);
    }
    new
}

/// Notes that `id` now holds `token`'s place among `name`'s holders, and
/// tells replicas and the AOF, after the key's own effect.
pub fn attach_holder(ctx: Ctx, id: Id, name: *mut RedisModuleString, token: *mut RedisModuleString) {
    if attached(ctx, id, HoldKey::new(ctx.db(), bytes(name), Some(bytes(token)))) {
        replicate_holder(ctx, c"ATTACH", id, name, token);
    }
}

/// Notes that the session of short id `short` no longer holds `token`'s
/// place among `name`'s holders (released by its holder, or ended at a
/// revocation's deadline): its whole id, if this node knows it.
pub fn detach_holder(ctx: Ctx, short: u64, name: *mut RedisModuleString, token: *mut RedisModuleString) -> Option<Id> {
    let mut t = table();
    let id = t.by_short(short)?;
    t.detach(id, &HoldKey::new(ctx.db(), bytes(name), Some(bytes(token))));
    drop(t);
    replicate_holder(ctx, c"DETACH", id, name, token);
    Some(id)
}

fn replicate_holder(
    ctx: Ctx,
    op: &std::ffi::CStr,
    id: Id,
    name: *mut RedisModuleString,
    token: *mut RedisModuleString,
) {
    let id = session_id_text(id);
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx.0,
            c"SESSION.APPLY".as_ptr(),
            c"cbss".as_ptr(),
            op.as_ptr(),
            id.as_ptr(),
            id.len(),
            name,
            token,
        );
    }
}

/// Notes that `session` no longer holds `name` (released by its holder).
pub fn detach(ctx: Ctx, session: &str, name: *mut RedisModuleString) {
    let Ok(id) = redis_lock_rules::args::parse_session_id(session.as_bytes()) else { return };
    detach_id(ctx, id, name);
}

/// Notes that session `id` no longer holds `name`; replicated.
pub fn detach_id(ctx: Ctx, id: Id, name: *mut RedisModuleString) {
    table().detach(id, &HoldKey::new(ctx.db(), bytes(name), None));
    replicate_hold(ctx, c"DETACH", id, name);
}

/// Replicates `hold` of session `id` (`ATTACH`, in the hold's database,
/// which it selects): an AOF rewrite's walk restating it
/// (`crate::store::aof_walk`).
pub fn replicate_attach(ctx: Ctx, id: Id, hold: &HoldKey) {
    let (db, name, token) = hold.split();
    ctx.select(db);
    let name = ctx.string(name);
    match token {
        None => replicate_hold(ctx, c"ATTACH", id, name),
        Some(token) => {
            let token = ctx.string(token);
            replicate_holder(ctx, c"ATTACH", id, name, token);
            ctx.free(token);
        }
    }
    ctx.free(name);
}

/// Replicates a grant or a keepalive: the session with its absolute deadline.
pub fn replicate_grant(ctx: Ctx, id: Id, ttl: i64, lock_delay: i64, deadline: i64) {
    let id = session_id_text(id);
    let (mut a, mut b, mut c) = ([0u8; 20], [0u8; 20], [0u8; 20]);
    let (ttl, delay, at) = (decimal(ttl, &mut a), decimal(lock_delay, &mut b), decimal(deadline, &mut c));
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx.0,
            c"SESSION.APPLY".as_ptr(),
            c"cbbbb".as_ptr(),
            c"GRANT".as_ptr(),
            id.as_ptr(),
            id.len(),
            ttl.as_ptr(),
            ttl.len(),
            delay.as_ptr(),
            delay.len(),
            at.as_ptr(),
            at.len(),
        );
    }
}

/// Replicates a session's end (at, how, and a revoke's reason if told).
pub fn replicate_end(ctx: Ctx, id: Id, (at, reason, why): (i64, Reason, Option<&str>)) {
    let id = session_id_text(id);
    let mut digits = [0u8; 20];
    let at = decimal(at, &mut digits);
    let reason = match reason {
        Reason::Expired => c"EXPIRED",
        Reason::Revoked => c"REVOKED",
    };
    // Without a reason the format takes one argument fewer: the extra
    // variadic ones are not read.
    let (fmt, why) = match why {
        Some(why) => (c"cbbcb", why),
        None => (c"cbbc", ""),
    };
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx.0,
            c"SESSION.APPLY".as_ptr(),
            fmt.as_ptr(),
            c"END".as_ptr(),
            id.as_ptr(),
            id.len(),
            at.as_ptr(),
            at.len(),
            reason.as_ptr(),
            why.as_ptr(),
            why.len(),
        );
    }
}

/// Replicates that a session's holds are all released: it is forgotten.
pub fn replicate_forget(ctx: Ctx, id: Id) {
    let id = session_id_text(id);
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx.0,
            c"SESSION.APPLY".as_ptr(),
            c"cb".as_ptr(),
            c"FORGET".as_ptr(),
            id.as_ptr(),
            id.len(),
        );
    }
}

fn replicate_hold(ctx: Ctx, op: &std::ffi::CStr, id: Id, name: *mut RedisModuleString) {
    let id = session_id_text(id);
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx.0,
            c"SESSION.APPLY".as_ptr(),
            c"cbs".as_ptr(),
            op.as_ptr(),
            id.as_ptr(),
            id.len(),
            name,
        );
    }
}

/// One `SESSION.APPLY` entry, from the master's stream or the AOF.
pub enum Apply<'a> {
    Grant {
        id: Id,
        ttl: i64,
        lock_delay: i64,
        deadline: i64,
    },
    End {
        id: Id,
        at: i64,
        reason: Reason,
        /// A revoke's REASON, if told.
        why: Option<&'a str>,
    },
    Forget {
        id: Id,
    },
    /// `token`: a holder's hold (`ATTACH id key token`).
    Attach {
        id: Id,
        key: &'a [u8],
        token: Option<&'a [u8]>,
    },
    Detach {
        id: Id,
        key: &'a [u8],
        token: Option<&'a [u8]>,
    },
}

/// Applies what the master decided (in the context's database).
pub fn apply(ctx: Ctx, entry: Apply) {
    if matches!(entry, Apply::Grant { .. }) {
        events::need_db(ctx);
    }
    let mut t = table();
    match entry {
        Apply::Grant { id, ttl, lock_delay, deadline } => t.grant(id, ttl, lock_delay, deadline),
        Apply::End { id, at, reason, why } => {
            if t.end(id, at, reason) {
                session_gone::note(&t, id, (at, reason, why), ctx.now_ms());
            }
        }
        Apply::Forget { id } => t.forget(id),
        // Alive or ended: an AOF rewrite's walk restates an ended
        // session's holds after its END (the master never attaches to an
        // ended session, so no other ATTACH follows one).
        Apply::Attach { id, key, token } => {
            t.restate(id, HoldKey::new(ctx.db(), key, token));
            // Written by no code of this process: the window's, once promoted.
            if let Some(deadline) = t.info(id, 0).map(|i| i.deadline) {
                eviction_window::loaded_session(id, deadline, ctx.now_ms());
            }
        }
        Apply::Detach { id, key, token } => t.detach(id, &HoldKey::new(ctx.db(), key, token)),
    }
    counted(&t);
}

/// The database-event listener: a flush of every database (`FLUSHALL`, a
/// full resync's) forgets every session, as it deletes every lock; a
/// replica promoted to master restarts each session's deadline at its
/// full TTL.
///
/// The subscription to these events is taken when the first session
/// enters the table (a grant, a replicated grant, an RDB load), not at
/// load: every listener of a server event lengthens the list Redis walks
/// twice per event-loop iteration (before and after it sleeps), and a
/// node without sessions needs none.
pub fn on_db_event(ctx: Ctx, ev: &DbEvent) {
    match ev {
        DbEvent::Changed(Changed::All) => {
            let mut t = table();
            t.clear();
            counted(&t);
            session_gone::clear();
        }
        DbEvent::Promoted => table().promoted(ctx.now_ms()),
        _ => {}
    }
}
