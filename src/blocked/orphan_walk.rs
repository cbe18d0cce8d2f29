//! The orphan walk (docs/sessions.md, "A key moved to another node"): a
//! semaphore's or read-write lock's place held by a session this node does
//! not know (its key moved here) gets an end, as an exclusive orphan does,
//! found in bounded slices of the sessions' timer
//! (`crate::blocked::session_end`) rather than by a scan in a command.
//!
//! A command that refuses a place (or queues for one) on a key with
//! session members asks for a walk of it ([`wanted`]; `lock.orphan-grace`
//! 0: none; a key walked within the interval,
//! `redis_lock_rules::orphan_walk::interval`: none again). The walk reads
//! the key's session members from the lowest score up, one lookup
//! (O(log N)) per session: a session this node knows is stepped over with
//! all its places; each place of one it does not know gets a lease ending
//! `lock.orphan-grace` from then (then the key's lock-delay), its session
//! member moved to the orphans' score (`held::ORPHAN`, below the range
//! walked: never met again, still adoptable), one replicated `ZADD` and
//! the key's `PEXPIREAT`, counted in `lock_orphans_leased`; the key's line
//! is served (its check timer armed at the new first end). A place with a
//! hold limit keeps its end. At most [`MAX_STEPS`] lookups per tick.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis_lock_rules::held::{self, session_from_score, session_token, SessionState, ORPHAN, SESSIONS_LOW};
use redis_lock_rules::orphan_walk::{interval, Cursor, Walks};
use redis_module::raw::RedisModuleString;

use crate::blocked::queue;
use crate::boundary::ctx::{bytes, Ctx};
use crate::server::counters as stats;
use crate::server::events::{self, DbEvent};
use crate::server::{cluster, config};
use crate::store::holders_key::{Edit, Hold, HoldersKey, Mark};
use crate::store::session;

/// Session members looked at per tick, at most.
pub const MAX_STEPS: usize = 256;

static WALKS: Mutex<Option<Walks>> = Mutex::new(None);

fn walks() -> MutexGuard<'static, Option<Walks>> {
    WALKS.lock().unwrap_or_else(|e| e.into_inner())
}

fn with<T>(f: impl FnOnce(&mut Walks) -> T) -> T {
    f(walks().get_or_insert_with(Walks::default))
}

/// Asks for a walk of `key` (in the caller's database): someone was
/// refused a place there, and it has session members. Whether one was
/// queued (the caller arms the timer).
pub fn wanted(ctx: Ctx, key: *mut RedisModuleString) -> bool {
    let grace = config::orphan_grace();
    if grace <= 0 || !ctx.is_master() {
        return false;
    }
    let now = ctx.now_ms();
    let queued = with(|w| w.want(bytes(key), ctx.db(), now, interval(grace)));
    if queued {
        // A flush or a role change forgets what was walked (below).
        events::need_db(ctx);
    }
    queued
}

/// A flush or a swap (the keys walked are gone, or others stand in their
/// place: a key restored right after is walked again at once) or a role
/// change (a replica walks nothing) forgets every walk.
pub fn on_db_event(ev: &DbEvent) {
    if matches!(ev, DbEvent::Changed(_) | DbEvent::Demoted | DbEvent::Promoted) {
        with(Walks::clear);
    }
}

/// One slice of the walk: at most [`MAX_STEPS`] lookups and (after the
/// first) `time`; whether work remains.
pub fn step(ctx: Ctx, time: Duration) -> bool {
    let started = Instant::now();
    let grace = config::orphan_grace();
    let mut steps = 0;
    while steps < MAX_STEPS && (steps == 0 || started.elapsed() < time) {
        let Some((db, key, cursor)) = with(|w| w.current().map(|((db, k), c)| (*db, k.clone(), c))) else {
            return false;
        };
        if grace <= 0 {
            // Orphans are held as they are now: nothing to walk.
            with(Walks::clear);
            return false;
        }
        ctx.select(db);
        let name = ctx.string(&key);
        walk_one(ctx, name, cursor, grace);
        ctx.free(name);
        steps += 1;
    }
    with(|w| w.busy())
}

/// One lookup in the current key `name`, resuming at `cursor`.
fn walk_one(ctx: Ctx, name: *mut RedisModuleString, cursor: Option<Cursor>, grace: i64) {
    let now = ctx.now_ms();
    // Never while the slot is imported: its holder's client cannot adopt
    // there yet (one CLUSTER NODES read per key, in cluster mode).
    if cursor.is_none() && cluster::redirect(ctx, bytes(name)).is_some() {
        with(Walks::skip);
        return;
    }
    let c = cursor.unwrap_or(Cursor { from: SESSIONS_LOW, after: false });
    let k = HoldersKey::open(ctx, name);
    let next = match k.tag() {
        Ok(Some(_)) => k.next_session_member(c.from, c.after),
        _ => None,
    };
    drop(k);
    let Some((member, score)) = next else {
        with(|w| w.done(now));
        return;
    };
    let unknown = session_from_score(score)
        .filter(|&short| short != ORPHAN)
        .is_some_and(|short| session::state_of_short(short, now).0 == SessionState::Unknown);
    // The member leaves the range once found (or goes): the walk goes on
    // at the same score; a known session's members are stepped over.
    let moved = match session_token(&member) {
        Some(token) if unknown => end_orphan(ctx, name, token, grace),
        _ => false,
    };
    with(|w| w.resume_at(Cursor { from: score, after: !moved }));
}

/// Gives `token`'s place among `name`'s holders, held by a session this
/// node does not know, its orphan's end (`held::orphan_place`) and marks
/// its session member as found (`held::ORPHAN`); a member whose place
/// ended or went is dropped. Whether the member left the walked range.
fn end_orphan(ctx: Ctx, name: *mut RedisModuleString, token: &[u8], grace: i64) -> bool {
    let t = ctx.string(token);
    let mut k = HoldersKey::open(ctx, name);
    let now = ctx.now_ms();
    let (mut moved, mut leased) = (false, false);
    if let Ok(Some(s)) = k.scan(now, Some(t)) {
        let counters = stats::holder_counters(s.kind.family());
        let _quiet = queue::serving();
        match s.own {
            Some(place) => {
                let at = held::orphan_place(place, now, grace, s.delay);
                k.mark_session(Mark::Set(ORPHAN));
                k.commit(
                    Some(&s),
                    Edit::Put { token: t, at: at.unwrap_or(place), tag: None, hold: Hold::Keep },
                    counters.expired,
                );
                leased = at.is_some();
            }
            None => {
                // Its place ended: pruned with its member (if the scan
                // found it); a member left over goes.
                k.commit(Some(&s), Edit::Keep, counters.expired);
                k.drop_session_member(token);
            }
        }
        moved = true;
    }
    drop(k);
    if leased {
        stats::ORPHANS_LEASED.add();
        queue::grant_next(ctx, name);
    }
    ctx.free(t);
    moved
}
