//! The holds of this node's sessions lost to an eviction (docs/eviction.md,
//! "How a session's holder hears it"; the bookkeeping is
//! `redis_lock_rules::session_evicted`). Eviction's listener
//! (`crate::server::eviction`) queues each live session-held hold of an
//! evicted key (`crate::server::eviction_sessions`); this listener, next
//! in line, takes them at once: the session forgets the hold (its key is
//! gone) and notes it as evicted, so that its next keepalive replies
//! `-ttl` (O(1): a count) and `SESSION.INFO` lists it (`evicted`: key,
//! database, token, when). Nothing is written in the event itself: a
//! timer right after it replicates what is then true, as
//! `SESSION.APPLY EVICTHOLD id key at token` (the note; applied on a
//! replica and from the AOF) and the `DETACH` of a hold the session has
//! not been granted again meanwhile (the command the eviction came before
//! may be that grant).
//!
//! The notes are kept for the session's TTL after the eviction, at least
//! a minute; a session forgotten forgets them. Their RDB home is the aux
//! data of `crate::store::eviction_rdb`; an AOF rewrite without the RDB
//! preamble restates them (`crate::store::aof_walk`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::args::session_id_text;
use redis_lock_rules::encode::decimal;
use redis_lock_rules::eviction::Family;
use redis_lock_rules::session::Id;
use redis_lock_rules::session_evicted::{drop_due, note, EvictedHolds, Eviction};
use redis_module::raw::RedisModuleCtx;

use crate::boundary::api::rm;
use crate::boundary::ctx::Ctx;
use crate::boundary::timer;
use crate::server::counters as stats;
use crate::server::events::{Changed, DbEvent, KeyEvent};
use crate::server::eviction_sessions::{self, Lost};
use crate::store::hold_key::HoldKey;
use crate::store::session;

static TABLE: LazyLock<Mutex<EvictedHolds<HoldKey>>> = LazyLock::new(|| Mutex::new(EvictedHolds::default()));
/// How many notes there are: nothing is locked while there are none.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn table() -> MutexGuard<'static, EvictedHolds<HoldKey>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

fn counted(t: &EvictedHolds<HoldKey>) {
    COUNT.store(t.len(), Ordering::Relaxed);
}

/// The hold as the session's set keeps it (a lock's without its token).
fn session_hold(l: &Lost) -> HoldKey {
    let token = matches!(l.family, Family::Semaphore | Family::ReadWrite).then_some(&*l.hold.token);
    HoldKey::new(l.db, &l.key, token)
}

/// The note's key: the hold with its token, whatever its family.
fn note_key(l: &Lost) -> HoldKey {
    HoldKey::new(l.db, &l.key, Some(&l.hold.token))
}

/// The listener of evicted keys, after eviction's (gated on its queue):
/// each queued hold is detached from its session and noted, now; the
/// replication follows in a timer.
pub fn on_key_event(ctx: Ctx, _ev: &KeyEvent) {
    let lost = eviction_sessions::take();
    let mut told = Vec::with_capacity(lost.len());
    for l in lost {
        let mut s = session::table();
        let Some(id) = s.by_short(l.hold.short) else { continue };
        let Some(ttl) = s.info(id, 0).map(|i| i.ttl) else { continue };
        s.detach(id, &session_hold(&l));
        drop(s);
        let mut t = table();
        drop_due(&mut t, l.at);
        if note(&mut t, id, note_key(&l), l.at, ttl) {
            stats::SESSION_HOLDS_EVICTED.add();
        }
        counted(&t);
        drop(t);
        told.push((id, l));
    }
    if !told.is_empty() {
        timer::start(ctx, 0, replicate, told);
    }
}

/// Right after the eviction: each note still kept, and each hold its
/// session does not hold again, to replicas and the AOF.
unsafe extern "C" fn replicate(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    let told = *Box::from_raw(data.cast::<Vec<(Id, Lost)>>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = Ctx(ctx);
        for (id, l) in told {
            ctx.select(l.db);
            let name = ctx.string(&l.key);
            let noted = table().get(id, &note_key(&l)).is_some_and(|e| e.at == l.at);
            if noted {
                replicate_entry(ctx, id, &l.key, l.at, &l.hold.token);
            }
            if !session::table().holds(id, &session_hold(&l)) {
                match l.family {
                    Family::Semaphore | Family::ReadWrite => {
                        let token = ctx.string(&l.hold.token);
                        session::detach_holder(ctx, l.hold.short, name, token);
                        ctx.free(token);
                    }
                    _ => session::detach_id(ctx, id, name),
                }
            }
            ctx.free(name);
        }
    }));
}

/// `SESSION.APPLY EVICTHOLD id key at token` (in the hold's database,
/// selected): a note, or an AOF rewrite's walk restating it
/// (`crate::store::aof_walk`).
pub fn replicate_entry(ctx: Ctx, id: Id, key: &[u8], at: i64, token: &[u8]) {
    let id = session_id_text(id);
    let mut digits = [0u8; 20];
    let at = decimal(at, &mut digits);
    unsafe {
        rm!(RedisModule_Replicate)(
            ctx.0,
            c"SESSION.APPLY".as_ptr(),
            c"cbbbb".as_ptr(),
            c"EVICTHOLD".as_ptr(),
            id.as_ptr(),
            id.len(),
            key.as_ptr(),
            key.len(),
            at.as_ptr(),
            at.len(),
            token.as_ptr(),
            token.len(),
        );
    }
}

/// `SESSION.APPLY EVICTHOLD`: what the master noted (in the context's
/// database), with the session's TTL here.
pub fn apply(ctx: Ctx, id: Id, key: &[u8], at: i64, token: &[u8]) {
    let ttl = session::table().info(id, 0).map_or(0, |i| i.ttl);
    let mut t = table();
    drop_due(&mut t, ctx.now_ms());
    note(&mut t, id, HoldKey::new(ctx.db(), key, Some(token)), at, ttl);
    counted(&t);
}

/// How many of session `id`'s holds were lost to an eviction lately
/// (dropping a few notes whose time is over first). O(1).
pub fn count(id: Id, now: i64) -> usize {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let mut t = table();
    drop_due(&mut t, now);
    counted(&t);
    t.count(id)
}

/// Session `id`'s first `n` holds lost to an eviction: database, key,
/// token, when.
pub fn list(id: Id, n: usize) -> Vec<(HoldKey, Eviction)> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    table().list(id, n).into_iter().map(|(k, e)| (k.clone(), e.clone())).collect()
}

/// Up to `max` notes after `after` (when dropped, session, hold; from the
/// first: `None`), in that order, with when each was evicted: an AOF
/// rewrite's walk. O(log n + max).
pub fn after(after: Option<&(i64, Id, HoldKey)>, max: usize) -> Vec<(i64, Id, HoldKey, i64)> {
    if !kept() {
        return Vec::new();
    }
    table().after(after, max).into_iter().map(|(until, id, k, e)| (until, id, k.clone(), e.at)).collect()
}

/// One note: its session, hold (with its token) and eviction.
pub type Note = (Id, HoldKey, Eviction);

/// Whether any note is kept.
pub fn kept() -> bool {
    COUNT.load(Ordering::Relaxed) != 0
}

/// Every note (for the RDB).
pub fn all() -> Vec<Note> {
    if !kept() {
        return Vec::new();
    }
    table().iter().map(|(id, k, e)| (id, k.clone(), e.clone())).collect()
}

/// An eviction at `at` kept until `until`, as the RDB had it.
pub fn eviction(at: i64, until: i64) -> Eviction {
    Eviction { at, until }
}

/// The notes an RDB had, instead of any kept now.
pub fn restore(notes: Vec<Note>) {
    let mut t = table();
    t.clear();
    for (id, key, e) in notes {
        t.put(id, key, e);
    }
    counted(&t);
}

/// Session `id` is forgotten: so are its notes.
pub fn forget_session(id: Id) {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut t = table();
    t.forget_session(id);
    counted(&t);
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
