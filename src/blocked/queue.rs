//! `… WAIT`: what the handlers see of the wait queues — blocking a waiter,
//! counting a key's waiters, LOCK.TOP's page, a newcomer kept behind those
//! who wait — and the queues' event listeners. The waiters themselves and
//! the hand-over of a freed key are `crate::blocked::waiters`.
//!
//! A key has a queue only while someone waits on it, so a lock nobody waits
//! on costs nothing here. The queues' bookkeeping is pure
//! (`redis_lock_rules::queue`); the machine that blocks, times out and
//! answers is `crate::blocked::machine`.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_lock_rules::cluster::key_slot;
use redis_lock_rules::lease::Terms;
use redis_lock_rules::top::{most_contended, Contended, Page};
use redis_lock_rules::{ArgError, Entry};
use redis_module::raw::RedisModuleString;

use crate::blocked::machine::{self, Kind};
use crate::blocked::session_waits;
pub use crate::blocked::waiters::{grant_next, Claim};
use crate::blocked::waiters::{Waiter, Waiters};
use crate::boundary::api::rm;
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::reply::Failure;
use crate::server::counters::{self as stats, waiting};
use crate::server::events::{self, Also, KeyEvent};
use crate::server::{config, timings};
use crate::store::lease;
use crate::store::lock_key::LockKey;

/// What a waiter asks for, as its command said.
pub struct Request {
    pub claim: Claim,
    /// The lease it wants (ms).
    pub ttl: i64,
    /// Whether it wants a fence (its refusal is then nil, not 0).
    pub fence: bool,
    /// When the wait gives up (Unix ms; none: never).
    pub deadline: Option<i64>,
    /// Its LOCKDELAY and MAXHOLD, stored with its grant (a holder's
    /// MAXHOLD counts from that grant, not from its call).
    pub terms: Terms,
    /// `SESSION id`: the grant attaches to this session (if it is still
    /// alive then).
    pub session: Option<u128>,
}

/// How many clients wait on `key` in the context's database.
pub fn waiters_on(ctx: Ctx, key: &[u8]) -> usize {
    if waiting() == 0 {
        return 0;
    }
    Waiters::book().0.waiters_on(&(ctx.db(), key.to_vec()))
}

/// Whether `lock.max-waiters` leaves room for one more blocked client
/// (waiters and observers count alike).
pub fn has_room() -> bool {
    let max = config::max_waiters();
    max == 0 || waiting().saturating_add(stats::observing()) < max
}

/// Blocks the calling client until `token` is granted `name` or the wait
/// ends at `deadline` (Unix ms; none: never). `expires_at` is the current
/// holder's deadline, if any.
pub fn block(
    ctx: Ctx,
    name: *mut RedisModuleString,
    token: *mut RedisModuleString,
    Request { claim, ttl, fence, deadline, terms, session }: Request,
    expires_at: Option<i64>,
) {
    // ZSET: a holder removed by hand (`ZREM`) frees a permit too.
    events::need(ctx, Also::Zset);
    unsafe {
        rm!(RedisModule_RetainString)(std::ptr::null_mut(), token);
        if let Claim::Elect { value } = claim {
            rm!(RedisModule_RetainString)(std::ptr::null_mut(), value);
        }
    }
    let key = (ctx.db(), bytes(name).to_vec());
    // Read before the book is locked: opening a key can raise an event.
    let expiry = LockKey::open(ctx, name).expires_at();
    let waiter = Waiter { token, ttl, fence, claim, terms, since: ctx.now_ms(), session, wait: (0, 0) };
    let k = key.clone();
    machine::block::<Waiters>(ctx, deadline, waiter, |book, client, seq, mut b| {
        known_by_its_session(&mut b.data, client, seq);
        book.enqueue(k, || key_slot(bytes(name)), client, seq, b, expiry);
    });
    stats::WAITS_STARTED.add();
    if let Some(at) = expires_at {
        // One ms past the deadline: the key is expired by then, not at it.
        machine::check_by::<Waiters>(ctx, &key, at.saturating_add(1));
    }
}

/// Session `id` ended: each of its waiting requests is answered
/// `ERR no such session …` (it would never attach) and leaves its line.
pub fn session_ended_answer(ctx: Ctx, id: u128) {
    let Some(waits) = session_waits::take(id) else { return };
    for (client, seq) in waits {
        let refused = Err(Failure::Arg(ArgError::SessionUnknown));
        machine::answer_one::<Waiters>(ctx, client, seq, refused, &stats::WAITS_CANCELLED);
    }
}

/// Names a waiter just blocked by its client and wait number, and notes
/// it as its session's (`SESSION id`): the session's end answers it.
fn known_by_its_session(w: &mut Waiter, client: u64, seq: u64) {
    w.wait = (client, seq);
    if let Some(id) = w.session {
        session_waits::note(id, (client, seq));
    }
}

/// Blocks the calling client until `token` is granted every key of
/// `names` at once (LOCK.ACQUIREALL … WAIT): it takes one place, its
/// arrival, at the end of every key's line. `holders` are the keys'
/// deadlines now (none: free, or no expiry), each key's check is armed
/// for its own. A waiter on N keys costs O(N log W) to join and to leave.
pub fn block_all(
    ctx: Ctx,
    names: &[*mut RedisModuleString],
    token: *mut RedisModuleString,
    Request { claim, ttl, fence, deadline, terms, session }: Request,
    holders: &[Option<i64>],
) {
    events::need(ctx, Also::Zset);
    unsafe { rm!(RedisModule_RetainString)(std::ptr::null_mut(), token) };
    let db = ctx.db();
    let keys: Vec<_> = names.iter().map(|&n| (db, bytes(n).to_vec())).collect();
    let waiter = Waiter { token, ttl, fence, claim, terms, since: ctx.now_ms(), session, wait: (0, 0) };
    machine::block::<Waiters>(ctx, deadline, waiter, |book, client, seq, mut b| {
        known_by_its_session(&mut b.data, client, seq);
        book.enqueue_all(keys.clone(), |k| key_slot(&k.1), client, seq, b);
        for (k, &at) in keys.iter().zip(holders) {
            book.saw_expiry(k, at);
        }
    });
    stats::WAITS_STARTED.add();
    for (k, at) in keys.iter().zip(holders) {
        if let Some(at) = at {
            machine::check_by::<Waiters>(ctx, k, at.saturating_add(1));
        }
    }
}

/// Whether someone still waits on `key` (in the context's database): a
/// free key is then kept for the head of its line, which waits for other
/// keys too (LOCK.ACQUIREALL), and a newcomer may not take it.
#[inline]
pub fn reserved(ctx: Ctx, key: *mut RedisModuleString) -> bool {
    // Reading the name is a call into Redis: only when someone waits.
    waiting() != 0 && waiters_on(ctx, bytes(key)) > 0
}

/// Opens `key` for a newcomer at `now`, settling an ended lease. A free
/// key that others wait on goes to the head of their queue first, so
/// nobody jumps the line; a free key that someone still waits on is kept
/// for them ([`reserved`]).
#[inline(always)]
pub fn open_behind_waiters(ctx: Ctx, key: *mut RedisModuleString, now: i64) -> LockKey {
    let k = lease::open(ctx, key, now);
    if waiting() == 0 || !matches!(k.entry(), Entry::Absent) {
        return k;
    }
    drop(k);
    serve_first(ctx, key)
}

/// The rare half of [`open_behind_waiters`]: the free key goes to its
/// queue's head before the newcomer looks again.
#[inline(never)]
fn serve_first(ctx: Ctx, key: *mut RedisModuleString) -> LockKey {
    grant_next(ctx, key);
    LockKey::open(ctx, key)
}

/// A contended key as LOCK.TOP lists it: its name, and the family the
/// head of its queue waits in.
pub type TopKey = (Vec<u8>, timings::Family);

/// The next `n` keys of the context's database with waiters, in LOCK.TOP's
/// order, after `after` (from the first without it): each with its waiter
/// count and when its head (the longest waiting) queued. One pass over the
/// queues with no lookup by key, ranked on references into them: only the
/// `n` returned names are copied. O(K + n log n) for K queues; nothing
/// when nobody waits. The book's lock is released on return, before the
/// caller checks the ACL (a call into Redis).
pub fn contended(ctx: Ctx, after: Option<&Contended<TopKey>>, n: usize) -> Page<TopKey> {
    if waiting() == 0 {
        return Page::default();
    }
    let db = ctx.db();
    let s = Waiters::book();
    let lines = s.0.heads().filter(|(k, _, _)| k.0 == db).map(|(k, head, waiters)| Contended {
        key: (k.1.as_slice(), head.data.claim.family()),
        waiters,
        oldest_since: head.data.since,
    });
    let after = after.map(|a| Contended {
        key: (a.key.0.as_slice(), a.key.1),
        waiters: a.waiters,
        oldest_since: a.oldest_since,
    });
    let page = most_contended(lines, after.as_ref(), n);
    let keys = page
        .keys
        .into_iter()
        .map(|c| Contended { key: (c.key.0.to_vec(), c.key.1), waiters: c.waiters, oldest_since: c.oldest_since })
        .collect();
    Page { keys, more: page.more }
}

/// Held by a release from its write through the `grant_next` after it:
/// the release's own `zrem`/`del` events (and its grants') would arm the
/// key's check for now, a timer that fires after the command only to find
/// the queue served (13 % of a semaphore's queued grant). Those events are
/// skipped while this is held; expiry and eviction events still count (a
/// key found expired as it was opened may be another queue's).
/// `grant_next` does not take it itself when a timer or a head leaving
/// calls it: there the grant's events keep an early check armed that the
/// next head's departure would otherwise have to replace, a second timer
/// (measured: a read-write lock's queued grant through `CLIENT UNBLOCK`
/// rose by a quarter).
pub fn serving() -> Serving {
    SERVING.fetch_add(1, Ordering::Relaxed);
    Serving(())
}

static SERVING: AtomicU64 = AtomicU64::new(0);

pub struct Serving(());

impl Drop for Serving {
    fn drop(&mut self) {
        SERVING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The queues' key-event listener: a key was deleted, expired, evicted,
/// renamed away or got a new TTL (or a holder was removed by `ZREM`): if
/// anyone waits on it, check it right after this command.
pub fn on_key_event(ctx: Ctx, ev: &KeyEvent) {
    if waiting() == 0 || (SERVING.load(Ordering::Relaxed) != 0 && !(ev.expired() || ev.evicted())) {
        return;
    }
    machine::check_now::<Waiters>(ctx, ev.key);
}
