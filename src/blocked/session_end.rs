//! The timer that ends sessions and releases their holds in bounded
//! slices (docs/sessions.md): each tick ends at most [`MAX_ENDS`] sessions
//! whose deadline passed, then settles at most [`MAX_HOLDS`] holds of
//! ended sessions (at most [`MAX_KEY_BYTES`] of key names, and for at most
//! [`MAX_SLICE`]), each as a
//! command opening the key would (`crate::store::lease::settle`): a
//! tombstone for the lock-delay after an expiry, a `DEL` after a revoke;
//! the key's event then wakes its waiters and observers. It re-arms at
//! 1 ms while work remains, else at the next deadline (at most a second
//! away, so that sessions loaded from an RDB or AOF, or kept on a replica
//! just promoted, are looked at without a command).
//!
//! It also runs the slices of an AOF rewrite's walk (`crate::store::aof_walk`)
//! and of the orphan walk (`crate::blocked::orphan_walk`).
//!
//! Only a master ends sessions: on a replica the tick does nothing but
//! re-arm (and walk, after the replica's own AOF rewrite); the master's
//! effects arrive as `SESSION.APPLY` entries.

use std::ffi::c_void;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis_lock_rules::held;
use redis_module::raw::{RedisModuleCtx, RedisModuleString, RedisModuleTimerID};

use crate::blocked::{orphan_walk, queue};
use crate::boundary::api::rm;
use crate::boundary::cpu;
use crate::boundary::ctx::Ctx;
use crate::boundary::timer;
use crate::server::counters as stats;
use crate::server::events::DbEvent;
use crate::store::aof_walk::{self, Budget};
use crate::store::holders_key::{Edit, Hold, HoldersKey, Mark};
use crate::store::lease;
use crate::store::session::{self, table};
use crate::store::session_gone;
use crate::store::{session_evicted, session_revoked};

/// Sessions ended per tick, at most.
pub const MAX_ENDS: usize = 128;
/// Holds released per tick, at most.
pub const MAX_HOLDS: usize = 256;
/// Key-name bytes released per tick, at most (a replicated entry stays small).
pub const MAX_KEY_BYTES: usize = 16 * 1024;
/// Time spent releasing holds per tick, at most (checked every [`CHUNK`]).
pub const MAX_SLICE: Duration = Duration::from_micros(200);
/// Revoked holds ended at their deadline per tick, at most.
pub const MAX_REVOKED: usize = 64;
/// Holds taken from the table at a time.
const CHUNK: usize = 8;
/// The longest the timer sleeps.
const IDLE_MS: i64 = 1_000;
/// How often it looks again while writes are paused.
const PAUSE_RETRY_MS: i64 = 10;

/// The armed timer and when it fires (Unix ms).
static ARMED: Mutex<Option<(RedisModuleTimerID, i64)>> = Mutex::new(None);

struct Tick;

/// Makes the timer fire no later than `at` (Unix ms).
pub fn arm(ctx: Ctx, at: i64) {
    let now = ctx.now_ms();
    let mut armed = ARMED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((id, when)) = *armed {
        if when <= at {
            return;
        }
        timer::stop::<Tick>(ctx, id);
    }
    let delay = at.saturating_sub(now).clamp(0, IDLE_MS);
    *armed = Some((timer::start(ctx, delay, on_tick, Tick), now + delay));
}

unsafe extern "C" fn on_tick(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    drop(Box::from_raw(data.cast::<Tick>()));
    // This timer is the one firing: Redis frees it itself.
    *ARMED.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let ctx = Ctx(ctx);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // While writes are paused (CLIENT PAUSE, FAILOVER, a shutdown
        // waiting for a replica) nothing may be written or propagated.
        let paused = rm!(RedisModule_AvoidReplicaTraffic)() != 0;
        // A replica ends nothing; it only walks after its own AOF rewrite.
        let work = match ctx.is_master() {
            true => Some(tick as fn(Ctx) -> Option<i64>),
            false => aof_walk::walking().then_some(walk_only as fn(Ctx) -> Option<i64>),
        };
        let next = match (work, paused) {
            (Some(work), false) => {
                // CPU time: what the server's thread spent here, without
                // the time the OS gave other processes meanwhile.
                let started = cpu::thread_us();
                let next = work(ctx);
                let us = cpu::thread_us().saturating_sub(started);
                stats::SESSION_TICK_MAX_US.fetch_max(us, std::sync::atomic::Ordering::Relaxed);
                next
            }
            (Some(_), true) => Some(ctx.now_ms() + PAUSE_RETRY_MS),
            (None, _) => None,
        };
        arm(ctx, next.unwrap_or(ctx.now_ms() + IDLE_MS));
    }));
}

/// Someone was refused a place among `key`'s holders, which has session
/// members: an orphan walk of it, if one is due
/// (`crate::blocked::orphan_walk`), starts at this timer's next tick.
pub fn walk_orphans(ctx: Ctx, key: *mut RedisModuleString) {
    if orphan_walk::wanted(ctx, key) {
        arm(ctx, ctx.now_ms());
    }
}

/// The database-event listener: a flush, a swap or a role change forgets
/// the orphan walks; a fork of an AOF rewrite without the RDB preamble starts a walk restating the node's state
/// (`crate::store::aof_walk`), in this timer's slices from now on.
pub fn on_db_event(ctx: Ctx, ev: &DbEvent) {
    orphan_walk::on_db_event(ev);
    if aof_walk::on_db_event(ctx, ev) {
        arm(ctx, ctx.now_ms());
    }
}

/// Ends `token`'s place among `name`'s holders, held by session `id`,
/// which ended: kept through the key's lock-delay after an expiry (no
/// longer the session's), removed after a revoke; the key's line is then
/// served. Nothing when the place is no longer the session's (released,
/// or granted anew since).
fn end_holder(ctx: Ctx, id: u128, name: *mut RedisModuleString, token: &[u8]) {
    let token = ctx.string(token);
    let mut k = HoldersKey::open(ctx, name);
    let now = ctx.now_ms();
    if let Ok(Some(s)) = k.scan(now, Some(token)) {
        let counters = stats::holder_counters(s.kind.family());
        let end = match (s.session == Some(held::short(id)), s.own) {
            (true, Some(place)) => held::holder_end(session::state(id, now), place, s.delay, now),
            _ => None,
        };
        let edit = match end {
            None => Edit::Keep,
            Some(Some(at)) => Edit::Put { token, at, tag: None, hold: Hold::Keep },
            Some(None) => Edit::Remove { token },
        };
        k.mark_session(Mark::Clear);
        let _quiet = queue::serving();
        k.commit(Some(&s), edit, counters.expired);
        drop(k);
        if end.is_some() {
            stats::SESSION_HOLDS_ENDED.add();
            queue::grant_next(ctx, name);
        }
    }
    ctx.free(token);
}

/// One tick's work; when the next is due.
fn tick(ctx: Ctx) -> Option<i64> {
    let now = ctx.now_ms();
    let ended = {
        let mut t = table();
        let ended = t.expire_due(now, MAX_ENDS);
        for &(id, at) in &ended {
            session_gone::note(&t, id, (at, redis_lock_rules::session::Reason::Expired, None), now);
        }
        ended
    };
    for &(id, at) in &ended {
        session::replicate_end(ctx, id, (at, redis_lock_rules::session::Reason::Expired, None));
        stats::SESSIONS_EXPIRED.add();
        queue::session_ended_answer(ctx, id);
    }
    // Holds in chunks, until a bound is reached: their count, their key
    // names' bytes, or the time spent (however costly each one's release:
    // its waiters' events, hold timing, a big value).
    let started = Instant::now();
    let (mut released, mut bytes) = (0, 0);
    let mut done = Vec::new();
    while released + done.len() < MAX_HOLDS && bytes < MAX_KEY_BYTES && started.elapsed() < MAX_SLICE {
        let (holds, finished) = table().next_holds(CHUNK, MAX_KEY_BYTES - bytes, |k| k.weight());
        if holds.is_empty() && finished.is_empty() {
            break;
        }
        done.extend(finished);
        for (id, hold) in holds {
            released += 1;
            bytes += hold.weight();
            let (db, name, token) = hold.split();
            ctx.select(db);
            let name = ctx.string(name);
            match token {
                None => drop(lease::open(ctx, name, ctx.now_ms())),
                Some(token) => end_holder(ctx, id, name, token),
            }
            ctx.free(name);
        }
    }
    let revoked = end_revoked(ctx, now);
    if !done.is_empty() {
        for &id in &done {
            session_revoked::forget_session(id);
            session_evicted::forget_session(id);
        }
        let mut t = table();
        for &id in &done {
            t.forget(id);
        }
        session::counted(&t);
        drop(t);
        for id in done {
            session::replicate_forget(ctx, id);
        }
    }
    // An AOF rewrite's walk (`crate::store::aof_walk`): its own slice, in
    // what is left of this one's time (at least one entry).
    let walk = Budget { entries: MAX_HOLDS, bytes: MAX_KEY_BYTES, time: MAX_SLICE.saturating_sub(started.elapsed()) };
    let walking = aof_walk::step(ctx, walk);
    // The orphan walk: its own slice, in what is left (at least one lookup).
    let orphans = orphan_walk::step(ctx, MAX_SLICE.saturating_sub(started.elapsed()));
    let t = table();
    if t.ending() || ended.len() == MAX_ENDS || revoked == MAX_REVOKED || walking || orphans {
        Some(now + 1)
    } else {
        // Past the deadline: the key's `PXAT` (a lock-delay of 0) has expired.
        let next = [t.next_due(), session_revoked::next_due()].into_iter().flatten().min();
        next.map(|at| at.saturating_add(1))
    }
}

/// A replica's tick: a slice of its AOF rewrite's walk; when the next is due.
fn walk_only(ctx: Ctx) -> Option<i64> {
    let walk = Budget { entries: MAX_HOLDS, bytes: MAX_KEY_BYTES, time: MAX_SLICE };
    aof_walk::step(ctx, walk).then(|| ctx.now_ms() + 1)
}

/// Ends the revoked session holds whose deadline has come (at most
/// [`MAX_REVOKED`]): each key is settled as a command opening it would
/// (the lock-delay's tombstone, or gone; counted), and its session forgets
/// the hold, unless the key holds the session anew (a `DEL` by hand, then
/// a new grant). How many it took.
fn end_revoked(ctx: Ctx, now: i64) -> usize {
    let due = session_revoked::take_due(now, MAX_REVOKED);
    for (id, hold) in &due {
        let (db, name, token) = hold.split();
        ctx.select(db);
        let name = ctx.string(name);
        match token {
            Some(token) => end_revoked_holder(ctx, *id, name, token),
            None => {
                let k = lease::open(ctx, name, ctx.now_ms());
                let anew = lease::held_anew(&k, *id);
                drop(k);
                if !anew {
                    session::detach_id(ctx, *id, name);
                }
            }
        }
        ctx.free(name);
    }
    due.len()
}

/// A revoked holder of session `id` at its deadline: its place, if still
/// there (the key's lock-delay after the deadline), stays unheld (its
/// session member goes; pruned in the same write, its end counted), the
/// key's line is served, and the session forgets the hold (replicated
/// `DETACH` with the token); unless the session holds the token's place
/// anew (granted again since, not revoked).
fn end_revoked_holder(ctx: Ctx, id: u128, name: *mut RedisModuleString, token: &[u8]) {
    let token = ctx.string(token);
    let mut k = HoldersKey::open(ctx, name);
    let now = ctx.now_ms();
    let short = held::short(id);
    let mut anew = false;
    let _quiet = queue::serving();
    if let Ok(Some(s)) = k.scan(now, Some(token)) {
        let counters = stats::holder_counters(s.kind.family());
        anew = s.session == Some(short) && !s.revoked && s.own_lease(now).is_some();
        let edit = match (s.session == Some(short), s.own) {
            (true, Some(at)) if !anew => {
                k.mark_session(Mark::Clear);
                Edit::Put { token, at, tag: None, hold: Hold::Keep }
            }
            _ => Edit::Keep,
        };
        k.commit(Some(&s), edit, counters.expired);
    }
    drop(k);
    if !anew {
        session_revoked::detach_holder(ctx, short, name, token);
        queue::grant_next(ctx, name);
    }
    ctx.free(token);
}
