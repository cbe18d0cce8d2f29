//! The waiters of `… WAIT` as a kind of blocked client
//! (`crate::blocked::machine`), FIFO per key, and the hand-over: a freed
//! key goes to the head of its line, once.
//!
//! - LOCK.RELEASE (and SEM/RWLOCK.RELEASE) hands it over in the same
//!   command (no other client can slip in; replicas see `DEL` +
//!   `SET ... PXAT` in one transaction);
//! - deletion or expiry by anything else is noticed through the key-event
//!   listener (`crate::blocked::queue`) and the key's check timer, armed at
//!   the holder's expiry, and the head is granted from the timer.
//! - whole databases that change without a per-key event (FLUSHDB,
//!   FLUSHALL sync or ASYNC, SWAPDB, the flush before DEBUG RELOAD or a
//!   full resync) are noticed through the database-event listener, and
//!   every queue in them is checked the same way.
//!
//! Grants from a timer wait while writes are paused (`CLIENT PAUSE`,
//! `FAILOVER`, a shutdown waiting for a replica): nothing may be written or
//! propagated then, and a key that expired during the pause is still in the
//! keyspace. The check retries every [`PAUSE_RETRY_MS`] until the pause ends.
//! In a cluster they happen only where the key's slot is served (see
//! `crate::server::cluster`); elsewhere the queue's waiters are sent on.

use std::sync::atomic::AtomicU64;
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::held;
use redis_lock_rules::holders::{admit, grant as grant_place, tag_after_grant, Admit, Want};
use redis_lock_rules::lease::{self as rules_lease, Terms};
use redis_lock_rules::lock;
use redis_lock_rules::queue::Line;
use redis_module::raw::RedisModuleString;

pub use crate::blocked::claim::Claim;
use crate::blocked::machine::{self, Blocked, Book, KeyId, Kind, Shared};
use crate::blocked::session_waits;
use crate::boundary::api::rm;
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::reply::{Failure, Outcome, Reply};
use crate::server::counters::{self as stats, Counter, WAITING};
use crate::server::timings;
use crate::server::{cluster, eviction};
use crate::store::fence;
use crate::store::holders_key::{Edit, Hold, HoldersKey, Mark};
use crate::store::lease::{self, Granted};
use crate::store::lock_key::{LockKey, NewValue};
use crate::store::lock_set::LockSet;
use crate::store::session;

/// How often a grant held back by paused writes is retried.
pub const PAUSE_RETRY_MS: i64 = 10;

/// What the queue keeps of a waiter besides its blocked client.
pub struct Waiter {
    /// The waiter's token, retained until it is stored or the wait ends.
    pub token: *mut RedisModuleString,
    pub ttl: i64,
    /// Whether it wants a fence (its refusal is then nil, not 0).
    pub fence: bool,
    pub claim: Claim,
    /// Its LOCKDELAY and MAXHOLD, stored with its grant.
    pub terms: Terms,
    /// When the wait began (Unix ms), for `INFO lock`'s wait times.
    pub since: i64,
    /// The session its grant attaches to (`LOCK.ACQUIRE … SESSION id`).
    pub session: Option<u128>,
    /// Its client and wait number, as the machine knows them (set as it
    /// blocks): what a session's end answers it by.
    pub wait: (u64, u64),
}

impl Waiter {
    /// The reply of a wait that ends without the lock: 0, or nil with FENCE.
    fn refusal(&self) -> Outcome {
        Ok(if self.fence { Reply::Nil } else { Reply::Int(0) })
    }

    /// The counter of its refusal (0 or nil).
    fn refusals(&self) -> &'static Counter {
        match self.claim {
            Claim::Lock | Claim::Elect { .. } | Claim::All => &stats::REFUSALS,
            Claim::Holder(want) => stats::holder_counters(want.family()).refusals,
        }
    }
}

/// The wait queues' kind of blocked client.
pub struct Waiters;

static BOOK: LazyLock<Mutex<Shared<Book<Waiters>>>> = LazyLock::new(|| Mutex::new(Shared(Book::<Waiters>::default())));

impl Kind for Waiters {
    type Data = Waiter;
    type Lines = Line<Blocked<Waiter>>;

    fn book() -> MutexGuard<'static, Shared<Book<Self>>> {
        BOOK.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn gauge() -> &'static AtomicU64 {
        &WAITING
    }

    fn check(ctx: Ctx, key: &KeyId) {
        ctx.select(key.0);
        let name = ctx.string(&key.1);
        grant_next(ctx, name);
        ctx.free(name);
    }

    fn timed_out(_ctx: Ctx, _key: &KeyId, w: &Waiter, _own_ctx: bool) -> Outcome {
        w.refusals().add();
        w.refusal()
    }

    fn unknown(_ctx: Ctx) -> Outcome {
        stats::REFUSALS.add();
        Ok(Reply::Int(0))
    }

    fn let_go(ctx: Ctx, w: Waiter) {
        if let Some(id) = w.session {
            session_waits::forget(id, w.wait);
        }
        timings::waited(w.claim.family(), w.since, ctx.now_ms());
        unsafe { rm!(RedisModule_FreeString)(std::ptr::null_mut(), w.token) };
        if let Claim::Elect { value } = w.claim {
            unsafe { rm!(RedisModule_FreeString)(std::ptr::null_mut(), value) };
        }
    }

    fn timeouts() -> &'static Counter {
        &stats::WAITS_TIMED_OUT
    }

    fn cancellations() -> &'static Counter {
        &stats::WAITS_CANCELLED
    }
}

fn book() -> MutexGuard<'static, Shared<Book<Waiters>>> {
    Waiters::book()
}

type Head = Blocked<Waiter>;

/// Grants `name` to the head of its queue while the head can be granted
/// (the exclusive lock: once; a semaphore: while permits are free; a
/// read-write lock: a writer alone, or the readers up to the next writer),
/// if anyone waits and a grant may be made here now.
pub fn grant_next(ctx: Ctx, name: *mut RedisModuleString) {
    if stats::waiting() == 0 {
        return;
    }
    let key = (ctx.db(), bytes(name).to_vec());
    if !book().0.has(&key) {
        return;
    }
    if writes_paused() {
        machine::check_by::<Waiters>(ctx, &key, ctx.now_ms() + PAUSE_RETRY_MS);
        return;
    }
    if let Some(redirect) = cluster::redirect(ctx, bytes(name)) {
        machine::answer_all::<Waiters>(ctx, &key, &redirect);
        return;
    }
    // `lock.eviction refuse` while the server may evict: every waiter is
    // answered with the refusal, as its command would be now.
    if let Some(refused) = eviction::refuses_waiters() {
        let n = machine::answer_all::<Waiters>(ctx, &key, &refused.into());
        eviction::refused_waiters(n);
        return;
    }
    // A head that cannot be served is answered and the next one tried, so
    // one unservable waiter never strands the rest.
    loop {
        let step = match head_claim(&key) {
            None => return,
            Some(Claim::Lock | Claim::Elect { .. }) => grant_lock(ctx, name, &key),
            Some(Claim::Holder(want)) => grant_holder(ctx, name, &key, want),
            Some(Claim::All) => grant_all(ctx, &key),
        };
        if let Step::Done = step {
            return;
        }
    }
}

/// After one waiter was dealt with: try the next one, or stop.
enum Step {
    Next,
    Done,
}

/// The head's claim, if anyone waits on `key`.
fn head_claim(key: &KeyId) -> Option<Claim> {
    book().0.head(key).map(|b| b.data.claim)
}

/// The exclusive lock's head: granted if the key is absent. A lease that
/// ended is settled first; its tombstone holds the key, and the queue,
/// until the key's own expiry ends the lock-delay.
fn grant_lock(ctx: Ctx, name: *mut RedisModuleString, key: &KeyId) -> Step {
    let mut k = LockKey::open(ctx, name);
    // Read after the key is opened, as in `grant_holder`.
    let now = ctx.now_ms();
    lease::settle(&mut k, now);
    if !lock::may_acquire(k.entry()) {
        // Someone holds it (only a script or a non-module writer can
        // take a key with a queue), or it is in its lock-delay: wait for
        // the key's deadline.
        let holder = k.expires_at();
        drop(k);
        watch_until(ctx, key, holder);
        return Step::Done;
    }
    if freed_too_early(ctx, key, now) {
        return Step::Done;
    }
    let head = book().0.head(key).and_then(|b| b.data.session.map(|id| (id, b.data.token, b.data.terms.max_hold)));
    let held = match session_waits::held_grant(head, now) {
        Ok(held) => held,
        Err(e) => return answer_head(ctx, key, Some(Err(Failure::Arg(e)))),
    };
    let end = |now, w: &Waiter| rules_lease::grant(now, w.ttl, w.terms).ok();
    let (b, g, fence) = match take_head(ctx, key, now, end) {
        Ok(head) => head,
        Err(step) => return step,
    };
    let w = &b.data;
    let at = match held {
        Some((id, (value, pxat))) => {
            let value = match (w.claim, fence) {
                (Claim::Elect { value: v }, Some(term)) => {
                    held::elected(&value, term, &String::from_utf8_lossy(bytes(v)))
                }
                _ => value,
            };
            k.set_maybe_expiring(NewValue::Composed(&value), pxat);
            session::attach(ctx, id, name);
            pxat
        }
        None => {
            let value = match (w.claim, fence) {
                (Claim::Elect { value }, Some(term)) => {
                    Granted::Bytes(lease::elect_value(bytes(w.token), term, bytes(value), &g))
                }
                _ => lease::lock_value(bytes(w.token), &g),
            };
            k.set(value.new_value(w.token), g.pxat);
            Some(g.pxat)
        }
    };
    drop(k);
    timings::hold_started(ctx, name, w.claim.family(), now);
    // The key's expiry, delay included: the Redis 8 last-millisecond rule
    // (`freed_too_early`) is about the key, not the lease inside it.
    saw_expiry(key, at);
    let grants = if matches!(w.claim, Claim::Elect { .. }) { &stats::ELECTIONS } else { &stats::GRANTS };
    answer_grant(ctx, b, fence, grants);
    if let Some(at) = at {
        machine::check_by::<Waiters>(ctx, key, at.saturating_add(1));
    }
    Step::Done
}

/// A head waiting on several keys (LOCK.ACQUIREALL): granted every key at
/// once when it heads every key's line and every key is free. Until then
/// it keeps its place in each line (a free key it heads stays free, and
/// those behind it wait), holding nothing; each key's check (a release,
/// an expiry, one ahead of it leaving) tries it again.
fn grant_all(ctx: Ctx, key: &KeyId) -> Step {
    let (client, seq, keys) = {
        let s = book();
        let Some((client, seq, _)) = s.0.first(key) else { return Step::Done };
        match s.0.keys_of(client, seq) {
            Some(keys) if keys.iter().all(|k| s.0.is_first_on(k, seq)) => (client, seq, keys),
            _ => return Step::Done,
        }
    };
    let names: Vec<_> = keys.iter().map(|k| ctx.string(&k.1)).collect();
    grant_set(ctx, &names, &keys, client, seq);
    for name in names {
        ctx.free(name);
    }
    Step::Done
}

/// Grants `keys` (open as `names`) to waiter `seq` of `client`, which
/// heads every line, if every key is free; else arms each held key's check
/// for its deadline.
fn grant_set(ctx: Ctx, names: &[*mut RedisModuleString], keys: &[KeyId], client: u64, seq: u64) {
    let set = LockSet::open(ctx, names, ctx.now_ms());
    // Read after the keys are opened, as in `grant_lock`.
    let now = ctx.now_ms();
    let busy = set.busy();
    if !busy.is_empty() {
        drop(set);
        for (i, holder) in busy {
            watch_until(ctx, &keys[i], holder);
        }
        return;
    }
    if keys.iter().filter(|k| freed_too_early(ctx, k, now)).count() > 0 {
        return;
    }
    let Some((home, left)) = book().0.remove(client, Some(seq)) else { return };
    let b = machine::left::<Waiters>(ctx, &home, left);
    let w = &b.data;
    let Ok(g) = rules_lease::grant(now, w.ttl, w.terms) else {
        // now + ttl no longer fits: the wait cannot be served.
        let refusal = w.refusal();
        return machine::finish::<Waiters>(ctx, b, refusal, &stats::WAITS_CANCELLED);
    };
    // With SESSION id: refused (`ERR no such session`) once it ended, as
    // a single key's head.
    let held = match session_waits::held_grant(w.session.map(|id| (id, w.token, w.terms.max_hold)), now) {
        Ok(held) => held,
        Err(e) => return machine::finish::<Waiters>(ctx, b, Err(Failure::Arg(e)), &stats::WAITS_CANCELLED),
    };
    // Issued before the keys change, as in `take_head`.
    let fences = match (0..keys.len()).filter(|_| w.fence).map(|_| fence::issue(ctx, now)).collect() {
        Ok(fences) => fences,
        Err(exhausted) => return machine::finish::<Waiters>(ctx, b, Err(exhausted), &stats::WAITS_CANCELLED),
    };
    let at = set.grant(w.token, &g, held.as_ref(), now);
    for k in keys {
        watch_until(ctx, k, at);
    }
    stats::GRANTS.add_n(keys.len() as u64);
    let reply = fence::grant_values(ctx, fences);
    machine::finish::<Waiters>(ctx, b, Ok(reply), &stats::WAITS_GRANTED);
}

/// Takes the head for a grant at `now`: with what `grant(now, waiter)`
/// makes of it (its lease end; a lock's value too) and, with FENCE, its
/// fence, issued before the key changes so that an exhausted fence space
/// refuses the grant instead of granting with a nil reply. A head that
/// cannot be served is answered: `Err(Step::Next)`.
fn take_head<G>(
    ctx: Ctx,
    key: &KeyId,
    now: i64,
    grant: impl Fn(i64, &Waiter) -> Option<G>,
) -> Result<(Head, G, Option<u64>), Step> {
    let b = pop_head(ctx, key).ok_or(Step::Done)?;
    let Some(granted) = grant(now, &b.data) else {
        // now + ttl no longer fits: the wait cannot be served.
        let refusal = b.data.refusal();
        machine::finish::<Waiters>(ctx, b, refusal, &stats::WAITS_CANCELLED);
        return Err(Step::Next);
    };
    match b.data.fence.then(|| fence::issue(ctx, now)).transpose() {
        Err(exhausted) => {
            machine::finish::<Waiters>(ctx, b, Err(exhausted), &stats::WAITS_CANCELLED);
            Err(Step::Next)
        }
        Ok(fence) => Ok((b, granted, fence)),
    }
}

/// Answers a granted waiter: 1, or its fence (told to replicas and the AOF).
fn answer_grant(ctx: Ctx, b: Head, fence: Option<u64>, grants: &Counter) {
    grants.add();
    let reply = Ok(Reply::Int(fence::grant_value(ctx, fence)));
    machine::finish::<Waiters>(ctx, b, reply, &stats::WAITS_GRANTED);
}

/// A semaphore's or read-write lock's head: granted while the rules admit
/// it; otherwise the queue waits for the earliest lease end. A head the key
/// can never admit (another type, another family, another limit, a token
/// that already holds) is answered as its command would be now.
fn grant_holder(ctx: Ctx, name: *mut RedisModuleString, key: &KeyId, want: Want) -> Step {
    let Some((token, terms)) = head_token(key) else { return Step::Done };
    let delay = terms.lock_delay.unwrap_or(0);
    let mut k = HoldersKey::open(ctx, name);
    // Read after the key is opened: outside a command (this runs from
    // timers and key events) Redis expires keys against its live clock as
    // it opens them, so a `now` read before could be a millisecond behind
    // Redis's own: the last lease seen ended, the key gone, and yet the
    // grant stamped as made during that lease's last millisecond.
    let now = ctx.now_ms();
    let counters = stats::holder_counters(want.family());
    let Ok(summary) = k.scan(now, Some(token)) else {
        drop(k);
        return answer_head(ctx, key, Some(Err(Failure::WrongType)));
    };
    if summary.is_none() && freed_too_early(ctx, key, now) {
        return Step::Done;
    }
    let answer = match admit(summary.as_ref(), want, delay) {
        Admit::Grant => None,
        Admit::Wait => {
            k.commit(summary.as_ref(), Edit::Keep, counters.expired);
            let next = k.first_live();
            saw_expiry(key, summary.as_ref().and_then(|s| s.last));
            drop(k);
            if let Some(at) = next {
                // One ms past the lease end: it has ended by then.
                machine::check_by::<Waiters>(ctx, key, at.saturating_add(1));
            }
            return Step::Done;
        }
        // Its own command would be refused now: 0, or nil with FENCE.
        Admit::AlreadyHolds => Some(None),
        Admit::LimitDiffers(limit) => Some(Some(Err(Failure::LimitDiffers(limit)))),
        Admit::DelayDiffers(ms) => Some(Some(Err(Failure::DelayDiffers(ms)))),
        Admit::WrongFamily => Some(Some(Err(Failure::WrongType))),
    };
    if let Some(answer) = answer {
        drop(k);
        return answer_head(ctx, key, answer);
    }
    // With SESSION id: refused (`ERR no such session`) once it ended.
    let in_session = book().0.head(key).and_then(|b| b.data.session);
    if let Some(e) = in_session.and_then(|id| session::alive(id, now).err()) {
        drop(k);
        return answer_head(ctx, key, Some(Err(Failure::Arg(e))));
    }
    let place = |now, w: &Waiter| match in_session {
        Some(_) => held::holder_place(now, delay, w.terms.max_hold).ok(),
        None => grant_place(now, w.ttl, delay, w.terms.max_hold).ok(),
    };
    let (b, granted, fence) = match take_head(ctx, key, now, place) {
        Ok(head) => head,
        Err(step) => return step,
    };
    let at = granted.at;
    let tag = tag_after_grant(summary.as_ref(), want, delay);
    let edit = Edit::Put { token: b.data.token, at, tag, hold: Hold::of(granted.hold_until) };
    k.mark_session(in_session.map_or(Mark::Keep, |id| Mark::Set(held::short(id))));
    k.commit(summary.as_ref(), edit, counters.expired);
    drop(k);
    if let Some(id) = in_session {
        session::attach_holder(ctx, id, name, b.data.token);
    }
    saw_expiry(key, Some(at).max(summary.as_ref().and_then(|s| s.last)));
    answer_grant(ctx, b, fence, stats::holder_grants(want));
    Step::Next
}

/// Remembers `key`'s expiry, as just seen on a held key or granted.
fn saw_expiry(key: &KeyId, at: Option<i64>) {
    book().0.saw_expiry(key, at);
}

/// Notes `key`'s expiry `at` and checks its line again one ms past it.
fn watch_until(ctx: Ctx, key: &KeyId, at: Option<i64>) {
    saw_expiry(key, at);
    if let Some(at) = at {
        machine::check_by::<Waiters>(ctx, key, at.saturating_add(1));
    }
}

/// Whether `key`, found gone at `now`, may have been deleted inside the
/// last millisecond of the lease that held it (Redis 8's active expiry,
/// see `Queues::gone_in_last_ms`): then nothing is granted before the next
/// millisecond, and the check is re-armed for it. Otherwise the key's
/// `expired` event would have the queue grant the next holder a lease that
/// overlaps the old one by that millisecond.
fn freed_too_early(ctx: Ctx, key: &KeyId, now: i64) -> bool {
    if !book().0.gone_in_last_ms(key, now) {
        return false;
    }
    machine::check_by::<Waiters>(ctx, key, now.saturating_add(1));
    true
}

/// The head's token (retained by the queue while it waits) and lease terms.
fn head_token(key: &KeyId) -> Option<(*mut RedisModuleString, Terms)> {
    book().0.head(key).map(|b| (b.data.token, b.data.terms))
}

/// Ends the head's wait with `answer` (none: its refusal); it is not granted.
fn answer_head(ctx: Ctx, key: &KeyId, answer: Option<Outcome>) -> Step {
    let Some(b) = pop_head(ctx, key) else { return Step::Done };
    let answer = answer.unwrap_or_else(|| {
        b.data.refusals().add();
        b.data.refusal()
    });
    machine::finish::<Waiters>(ctx, b, answer, &stats::WAITS_CANCELLED);
    Step::Next
}

/// Whether writes are paused (`CLIENT PAUSE`, `FAILOVER`, a shutdown
/// waiting for its replicas): a grant now would write while nothing may.
fn writes_paused() -> bool {
    unsafe { rm!(RedisModule_AvoidReplicaTraffic)() != 0 }
}

/// Removes and returns the head waiter of `key`.
fn pop_head(ctx: Ctx, key: &KeyId) -> Option<Head> {
    let left = book().0.pop_head(key)?;
    Some(machine::left::<Waiters>(ctx, key, left))
}
