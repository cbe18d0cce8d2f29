//! `LOCK.ACQUIRE ... WAIT`: clients blocked inside the server, FIFO per key.
//!
//! A key has a queue only while someone waits on it, so a lock nobody waits
//! on costs nothing here. A freed lock goes to the queue's head, once:
//! - LOCK.RELEASE hands it over in the same command (no other client can
//!   slip in; replicas see `DEL` + `SET ... PXAT` in one transaction);
//! - deletion or expiry by anything else is noticed through a keyspace-event
//!   subscription (`crate::key_events`, taken on the first WAIT) and the queue's check timer,
//!   armed at the holder's expiry, and the head is granted from the timer.
//!   Redis's own expiry can lag behind a key's deadline; the timer cannot.
//! - whole databases that change without a per-key event (FLUSHDB, FLUSHALL
//!   sync or ASYNC, SWAPDB, the flush before DEBUG RELOAD or a full resync)
//!   are noticed through server events (taken with the keyspace one), and
//!   every queue in them is checked the same way.
//!
//! Grants from a timer wait while writes are paused (`CLIENT PAUSE`,
//! `FAILOVER`, a shutdown waiting for a replica): nothing may be written or
//! propagated then, and a key that expired during the pause is still in the
//! keyspace. The check retries every [`PAUSE_RETRY_MS`] until the pause ends.
//! In a cluster they happen only where the key's slot is served (see
//! `crate::cluster`); elsewhere the queue's waiters are sent on.
//!
//! Each queue has at most one check timer, stopped when the queue empties;
//! each waiter at most one timeout timer, stopped when its wait ends. No
//! timer is ever asked for more than
//! [`MAX_TIMER_MS`](redis_lock_rules::queue::MAX_TIMER_MS) (`crate::timer`):
//! a longer delay is cut into pieces.
//!
//! Queues belong to a database index, as Redis's own blocked clients do:
//! after SWAPDB a waiter on db 0 waits for whatever db 0 now holds.
//!
//! A waiter that times out, is removed by `CLIENT UNBLOCK`, or disconnects
//! (also when Redis unblocks every client because this master became a
//! replica) leaves the queue at once and is never granted.
//!
//! Discipline: the state lock is never held across a call into Redis that
//! can run a callback of ours (opening, writing or deleting keys raises
//! keyspace events). Creating and stopping timers runs none, so it happens
//! under the lock.

use std::ffi::{c_int, c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::holders::{admit, grant as grant_place, tag_after_grant, Admit, Want};
use redis_lock_rules::lease::{self as rules_lease, Terms};
use redis_lock_rules::lock;
use redis_lock_rules::queue::{next_piece, Arm, Left, Queues};
use redis_lock_rules::top::{most_contended, Contended, Page};
use redis_module::raw::{self, RedisModuleBlockedClient, RedisModuleCtx, RedisModuleString, RedisModuleTimerID};

use crate::api::rm;
use crate::cluster;
use crate::config;
use crate::db_events;
use crate::errors;
use crate::fence;
use crate::holders::{Edit, Hold, HoldersKey};
use crate::key::{bytes, Ctx, LockKey};
use crate::key_events;
use crate::lease::{self, Granted};
use crate::stats::{self, waiting, WAITING};
use crate::timer;
use crate::timings;

/// How often a grant held back by paused writes is retried.
pub const PAUSE_RETRY_MS: i64 = 10;

/// A queue: a database index and a key name.
type QueueId = (c_int, Vec<u8>);

/// What a waiter waits for. One queue per key serves all of them in
/// arrival order: a `LOCK.ACQUIRE` waiter on a semaphore's key waits, as on
/// any existing key, until the key is gone, and those behind it wait too.
#[derive(Clone, Copy, Debug)]
pub enum Claim {
    /// The exclusive lock (`LOCK.ACQUIRE … WAIT`).
    Lock,
    /// A place among a semaphore's or read-write lock's holders.
    Holder(Want),
    /// The exclusive lock as an election's leader (`LOCK.ELECT … WAIT`):
    /// granted as `Lock`, storing the election value with the grant's
    /// fence as term and revision. `value` is retained while it waits.
    Elect { value: *mut RedisModuleString },
}

impl Claim {
    /// The family its wait is counted in.
    pub fn family(self) -> timings::Family {
        match self {
            Claim::Lock => timings::Family::Exclusive,
            Claim::Elect { .. } => timings::Family::Election,
            Claim::Holder(want) => timings::Family::of_holders(want.family()),
        }
    }
}

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
}

struct Waiter {
    bc: *mut RedisModuleBlockedClient,
    /// The waiter's token, retained until it is stored or the wait ends.
    token: *mut RedisModuleString,
    ttl: i64,
    fence: bool,
    claim: Claim,
    terms: Terms,
    /// When the wait gives up (Unix ms; none: never).
    deadline: Option<i64>,
    /// The timer of the deadline, or of the next piece of a long wait.
    timeout: Option<RedisModuleTimerID>,
    /// When the wait began (Unix ms), for `INFO lock`'s wait times.
    since: i64,
}

impl Waiter {
    /// The reply of a wait that ends without the lock: 0, or nil with FENCE.
    fn refusal(&self) -> Answer {
        if self.fence {
            Answer::Nil
        } else {
            Answer::Int(0)
        }
    }

    /// The counter of its refusal (0 or nil).
    fn refusals(&self) -> &'static stats::Counter {
        match self.claim {
            Claim::Lock | Claim::Elect { .. } => &stats::REFUSALS,
            Claim::Holder(want) => stats::holder_counters(want.family()).refusals,
        }
    }

    /// Lets go of what the wait holds: its token and its timeout timer.
    /// Not from the timeout timer's own callback (Redis frees that timer
    /// after the callback returns).
    fn let_go(&self, ctx: Ctx) {
        timings::waited(self.claim.family(), self.since, ctx.now_ms());
        unsafe { rm!(RedisModule_FreeString)(std::ptr::null_mut(), self.token) };
        if let Claim::Elect { value } = self.claim {
            unsafe { rm!(RedisModule_FreeString)(std::ptr::null_mut(), value) };
        }
        if let Some(id) = self.timeout {
            timer::stop::<WaitTimeout>(ctx, id);
        }
    }
}

/// The queues (their bookkeeping is pure: `redis_lock_rules::queue`),
/// holding Redis's handles: blocked clients, tokens, timer ids.
#[derive(Default)]
struct State {
    queues: Queues<QueueId, Waiter, RedisModuleTimerID>,
    subscribed: bool,
}

/// The pointers inside are only touched on Redis's main thread.
struct Shared(State);
unsafe impl Send for Shared {}

static STATE: LazyLock<Mutex<Shared>> = LazyLock::new(|| Mutex::new(Shared(State::default())));
/// Numbers the waits: their order in a line, and what tells a client's
/// wait from its later ones (a timeout timer names the wait it ends).
static NEXT_WAIT: AtomicU64 = AtomicU64::new(0);

fn state() -> MutexGuard<'static, Shared> {
    // A poisoned lock only means a panic was caught mid-update; the queues
    // are still structurally sound.
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many clients wait on `key` in the context's database.
pub fn waiters_on(ctx: Ctx, key: &[u8]) -> usize {
    if waiting() == 0 {
        return 0;
    }
    state().0.queues.waiters_on(&(ctx.db(), key.to_vec()))
}

/// A contended key as LOCK.TOP lists it: its name, and the family the
/// head of its queue waits in.
pub type TopKey = (Vec<u8>, timings::Family);

/// The next `n` keys of the context's database with waiters, in LOCK.TOP's
/// order, after `after` (from the first without it): each with its waiter
/// count and when its head (the longest waiting) queued. One pass over the
/// queues with no lookup by key, ranked on references into them: only the
/// `n` returned names are copied. O(K + n log n) for K queues; nothing
/// when nobody waits. The state lock is released on return, before the
/// caller checks the ACL (a call into Redis).
pub fn contended(ctx: Ctx, after: Option<&Contended<TopKey>>, n: usize) -> Page<TopKey> {
    if waiting() == 0 {
        return Page::default();
    }
    let db = ctx.db();
    let s = state();
    let lines = s.0.queues.lines().filter(|(k, _, _)| k.0 == db).map(|(k, head, waiters)| Contended {
        key: (k.1.as_slice(), head.claim.family()),
        waiters,
        oldest_since: head.since,
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

/// Whether a command may block here: not inside MULTI, a script, or any
/// context that forbids blocking (WAIT then degrades to a single attempt).
pub fn may_block(ctx: Ctx) -> bool {
    let flags = unsafe { rm!(RedisModule_GetContextFlags)(ctx.0) } as u32;
    flags
        & (raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_LUA | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING)
        == 0
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
    Request { claim, ttl, fence, deadline, terms }: Request,
    expires_at: Option<i64>,
) {
    ensure_subscribed(ctx);
    let client = unsafe { rm!(RedisModule_GetClientId)(ctx.0) };
    let seq = NEXT_WAIT.fetch_add(1, Ordering::Relaxed);
    // The timeout is a timer of ours, not Redis's: on 7.0, a client whose
    // Redis-managed timeout passes after a grant has unblocked it, but
    // before the grant's reply is sent, is unblocked with no reply at all,
    // and then reads its next command's reply as this one's. Our timer and
    // our grants both take the waiter out of the queue first, so exactly one
    // of them answers. (`on_timeout` still serves CLIENT UNBLOCK.)
    let bc = unsafe {
        rm!(RedisModule_RetainString)(std::ptr::null_mut(), token);
        if let Claim::Elect { value } = claim {
            rm!(RedisModule_RetainString)(std::ptr::null_mut(), value);
        }
        let bc = rm!(RedisModule_BlockClient)(ctx.0, Some(on_reply), Some(on_timeout), Some(free_reply), 0);
        rm!(RedisModule_SetDisconnectCallback)(bc, Some(on_disconnect));
        bc
    };
    let timeout = deadline.map(|at| timer::start(ctx, at - ctx.now_ms(), on_wait_timeout, WaitTimeout { client, seq }));
    let key = (ctx.db(), bytes(name).to_vec());
    let expiry = LockKey::open(ctx, name).expires_at();
    let waiter = Waiter { bc, token, ttl, fence, claim, terms, deadline, timeout, since: ctx.now_ms() };
    state().0.queues.push(key.clone(), client, seq, waiter, expiry);
    WAITING.fetch_add(1, Ordering::Relaxed);
    stats::WAITS_STARTED.add();
    if let Some(at) = expires_at {
        // One ms past the deadline: the key is expired by then, not at it.
        check_by(ctx, &key, at.saturating_add(1));
    }
}

/// Grants `name` to the head of its queue while the head can be granted
/// (the exclusive lock: once; a semaphore: while permits are free; a
/// read-write lock: a writer alone, or the readers up to the next writer),
/// if anyone waits and a grant may be made here now.
pub fn grant_next(ctx: Ctx, name: *mut RedisModuleString) {
    if waiting() == 0 {
        return;
    }
    let key = (ctx.db(), bytes(name).to_vec());
    if !state().0.queues.has_queue(&key) {
        return;
    }
    if writes_paused() {
        check_by(ctx, &key, ctx.now_ms() + PAUSE_RETRY_MS);
        return;
    }
    if let Some(redirect) = cluster::redirect(ctx, bytes(name)) {
        send_away(ctx, &key, &redirect);
        return;
    }
    // A head that cannot be served is answered and the next one tried, so
    // one unservable waiter never strands the rest.
    loop {
        let step = match head_claim(&key) {
            None => return,
            Some(Claim::Lock | Claim::Elect { .. }) => grant_lock(ctx, name, &key),
            Some(Claim::Holder(want)) => grant_holder(ctx, name, &key, want),
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
fn head_claim(key: &QueueId) -> Option<Claim> {
    state().0.queues.head(key).map(|w| w.claim)
}

/// The exclusive lock's head: granted if the key is absent. A lease that
/// ended is settled first; its tombstone holds the key, and the queue,
/// until the key's own expiry ends the lock-delay.
fn grant_lock(ctx: Ctx, name: *mut RedisModuleString, key: &QueueId) -> Step {
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
        saw_expiry(key, holder);
        if let Some(at) = holder {
            check_by(ctx, key, at.saturating_add(1));
        }
        return Step::Done;
    }
    if freed_too_early(ctx, key, now) {
        return Step::Done;
    }
    let end = |now, w: &Waiter| rules_lease::grant(now, w.ttl, w.terms).ok();
    let (w, g, fence) = match take_head(ctx, key, now, end) {
        Ok(head) => head,
        Err(step) => return step,
    };
    let value = match (w.claim, fence) {
        (Claim::Elect { value }, Some(term)) => {
            Granted::Bytes(lease::elect_value(bytes(w.token), term, bytes(value), &g))
        }
        _ => lease::lock_value(bytes(w.token), &g),
    };
    let at = g.pxat;
    k.set(value.new_value(w.token), at);
    drop(k);
    timings::hold_started(ctx, name, w.claim.family(), now);
    // The key's expiry, delay included: the Redis 8 last-millisecond rule
    // (`freed_too_early`) is about the key, not the lease inside it.
    saw_expiry(key, Some(at));
    let grants = if matches!(w.claim, Claim::Elect { .. }) { &stats::ELECTIONS } else { &stats::GRANTS };
    answer_grant(ctx, w, fence, grants);
    check_by(ctx, key, at.saturating_add(1));
    Step::Done
}

/// Takes the head for a grant at `now`: with what `grant(now, waiter)`
/// makes of it (its lease end; a lock's value too) and, with FENCE, its
/// fence, issued before the key changes so that an exhausted fence space
/// refuses the grant instead of granting with a nil reply. A head that
/// cannot be served is answered: `Err(Step::Next)`.
fn take_head<G>(
    ctx: Ctx,
    key: &QueueId,
    now: i64,
    grant: impl Fn(i64, &Waiter) -> Option<G>,
) -> Result<(Waiter, G, Option<u64>), Step> {
    let w = pop_head(ctx, key).ok_or(Step::Done)?;
    let Some(granted) = grant(now, &w) else {
        // now + ttl no longer fits: the wait cannot be served.
        finish(ctx, w.refusal(), w, &stats::WAITS_CANCELLED);
        return Err(Step::Next);
    };
    match w.fence.then(|| fence::issue(ctx, now)) {
        Some(None) => {
            finish(ctx, Answer::FencesExhausted, w, &stats::WAITS_CANCELLED);
            Err(Step::Next)
        }
        fence => Ok((w, granted, fence.flatten())),
    }
}

/// Answers a granted waiter: 1, or its fence (told to replicas and the AOF).
fn answer_grant(ctx: Ctx, w: Waiter, fence: Option<u64>, grants: &stats::Counter) {
    let reply = Answer::Int(fence::grant_reply(ctx, fence, grants));
    finish(ctx, reply, w, &stats::WAITS_GRANTED);
}

/// A semaphore's or read-write lock's head: granted while the rules admit
/// it; otherwise the queue waits for the earliest lease end. A head the key
/// can never admit (another type, another family, another limit, a token
/// that already holds) is answered as its command would be now.
fn grant_holder(ctx: Ctx, name: *mut RedisModuleString, key: &QueueId, want: Want) -> Step {
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
        return answer_head(ctx, key, Some(Answer::Error(errors::WRONGTYPE.into())));
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
                check_by(ctx, key, at.saturating_add(1));
            }
            return Step::Done;
        }
        // Its own command would be refused now: 0, or nil with FENCE.
        Admit::AlreadyHolds => Some(None),
        Admit::LimitDiffers(limit) => Some(Some(Answer::Error(errors::limit_differs(limit)))),
        Admit::DelayDiffers(ms) => Some(Some(Answer::Error(errors::delay_differs(ms)))),
        Admit::WrongFamily => Some(Some(Answer::Error(errors::WRONGTYPE.into()))),
    };
    if let Some(answer) = answer {
        drop(k);
        return answer_head(ctx, key, answer);
    }
    let place = |now, w: &Waiter| grant_place(now, w.ttl, delay, w.terms.max_hold).ok();
    let (w, granted, fence) = match take_head(ctx, key, now, place) {
        Ok(head) => head,
        Err(step) => return step,
    };
    let at = granted.at;
    let tag = tag_after_grant(summary.as_ref(), want, delay);
    let edit = Edit::Put { token: w.token, at, tag, hold: Hold::of(granted.hold_until) };
    k.commit(summary.as_ref(), edit, counters.expired);
    drop(k);
    saw_expiry(key, Some(at).max(summary.as_ref().and_then(|s| s.last)));
    answer_grant(ctx, w, fence, stats::holder_grants(want));
    Step::Next
}

/// Held by a release from its write through the `grant_next` after it:
/// the release's own `zrem`/`del` events (and its grants') would arm the
/// key's check for now, a timer that fires after the command only to find
/// the queue served (13 % of a semaphore's queued grant). Those events are
/// skipped while this is held; expiry and eviction events still count (a
/// key found expired as it was opened may be another queue's).
/// `grant_next` does not take it itself when a timer or a head leaving
/// calls it: there the grant's events keep an early check armed that the
/// next head's departure (`left_line`) would otherwise have to replace, a
/// second timer (measured: a read-write lock's queued grant through
/// `CLIENT UNBLOCK` rose by a quarter).
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

/// Remembers `key`'s expiry, as just seen on a held key or granted.
fn saw_expiry(key: &QueueId, at: Option<i64>) {
    state().0.queues.saw_expiry(key, at);
}

/// Whether `key`, found gone at `now`, may have been deleted inside the
/// last millisecond of the lease that held it (Redis 8's active expiry,
/// see `Queues::gone_in_last_ms`): then nothing is granted before the next
/// millisecond, and the check is re-armed for it. Otherwise the key's
/// `expired` event would have the queue grant the next holder a lease that
/// overlaps the old one by that millisecond.
fn freed_too_early(ctx: Ctx, key: &QueueId, now: i64) -> bool {
    if !state().0.queues.gone_in_last_ms(key, now) {
        return false;
    }
    check_by(ctx, key, now.saturating_add(1));
    true
}

/// The head's token (retained by the queue while it waits) and lease terms.
fn head_token(key: &QueueId) -> Option<(*mut RedisModuleString, Terms)> {
    state().0.queues.head(key).map(|w| (w.token, w.terms))
}

/// Ends the head's wait with `answer` (none: its refusal); it is not granted.
fn answer_head(ctx: Ctx, key: &QueueId, answer: Option<Answer>) -> Step {
    let Some(w) = pop_head(ctx, key) else { return Step::Done };
    let answer = answer.unwrap_or_else(|| {
        w.refusals().add();
        w.refusal()
    });
    finish(ctx, answer, w, &stats::WAITS_CANCELLED);
    Step::Next
}

/// Whether writes are paused (`CLIENT PAUSE`, `FAILOVER`, a shutdown
/// waiting for its replicas): a grant now would write while nothing may.
fn writes_paused() -> bool {
    unsafe { rm!(RedisModule_AvoidReplicaTraffic)() != 0 }
}

/// Answers every waiter of `key` with `error` (the slot is served
/// elsewhere, or moving): they re-send their command where it belongs.
fn send_away(ctx: Ctx, key: &QueueId, error: &CString) {
    while let Some(w) = pop_head(ctx, key) {
        finish(ctx, Answer::Error(error.clone()), w, &stats::WAITS_CANCELLED);
    }
}

/// This master became a replica (`crate::db_events`, on a role change): every
/// waiter is answered as Redis answers the clients it unblocks itself.
pub(crate) fn on_demoted(ctx: Ctx) {
    if waiting() == 0 {
        return;
    }
    let keys: Vec<QueueId> = state().0.queues.keys().cloned().collect();
    let error = crate::db_events::UNBLOCKED.to_owned();
    for key in keys {
        send_away(ctx, &key, &error);
    }
}

/// Slots left this node by an atomic slot migration (`crate::migration`):
/// every waiter on a key for which `redirect` has an error is answered it.
pub(crate) fn send_away_where(ctx: Ctx, redirect: &dyn Fn(&[u8]) -> Option<CString>) {
    if waiting() == 0 {
        return;
    }
    let keys: Vec<QueueId> = state().0.queues.keys().cloned().collect();
    for key in keys {
        if let Some(error) = redirect(&key.1) {
            send_away(ctx, &key, &error);
        }
    }
}

/// Removes and returns the head waiter of `key`.
fn pop_head(ctx: Ctx, key: &QueueId) -> Option<Waiter> {
    let left = state().0.queues.pop_head(key)?;
    Some(left_line(ctx, key, left))
}

/// Removes the waiter of `client` wherever it waits; with `seq`, only if
/// it is still that wait.
fn remove_client(ctx: Ctx, client: u64, seq: Option<u64>) -> Option<Waiter> {
    let (key, left) = {
        let mut s = state();
        let key = s.0.queues.key_of(client)?.clone();
        (key, s.0.queues.remove(client, seq)?)
    };
    Some(left_line(ctx, &key, left))
}

/// What a waiter leaving `key`'s line leaves to do: stop the timer of a
/// line now gone; and when the head left, check the key again, since it
/// can unblock those behind it (readers behind a writer that gave up are
/// admitted beside the readers holding now).
fn left_line(ctx: Ctx, key: &QueueId, left: Left<Waiter, RedisModuleTimerID>) -> Waiter {
    WAITING.fetch_sub(1, Ordering::Relaxed);
    if let Some(id) = left.stop {
        timer::stop::<Check>(ctx, id);
    }
    if left.new_head {
        check_by(ctx, key, ctx.now_ms());
    }
    left.waiter
}

/// What a wait ended by [`finish`] replies.
enum Answer {
    Int(i64),
    Nil,
    FencesExhausted,
    /// A redirection (`MOVED`, `TRYAGAIN`, `CLUSTERDOWN`).
    Error(CString),
}

/// Ends a wait: unblocks the client with `reply` (sent by `on_reply`).
fn finish(ctx: Ctx, reply: Answer, w: Waiter, counter: &stats::Counter) {
    counter.add();
    w.let_go(ctx);
    unsafe {
        rm!(RedisModule_UnblockClient)(w.bc, Box::into_raw(Box::new(reply)).cast());
    }
}

/// Which wait a timeout timer ends.
struct WaitTimeout {
    client: u64,
    seq: u64,
}

/// A wait's timeout timer: the next piece of a long wait, or its end: if
/// it still waits, it is refused (0, or nil with FENCE).
unsafe extern "C" fn on_wait_timeout(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    let WaitTimeout { client, seq } = *Box::from_raw(data.cast::<WaitTimeout>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = Ctx(ctx);
        let now = ctx.now_ms();
        {
            let mut s = state();
            let Some(w) = s.0.queues.waiter_mut(client, seq) else { return };
            // This timer is the one firing: Redis frees it itself.
            w.timeout = None;
            if let Some(delay) = next_piece(w.deadline, now) {
                w.timeout = Some(timer::start(ctx, delay, on_wait_timeout, WaitTimeout { client, seq }));
                return;
            }
        }
        if let Some(w) = remove_client(ctx, client, Some(seq)) {
            w.refusals().add();
            finish(ctx, w.refusal(), w, &stats::WAITS_TIMED_OUT);
        }
    }));
}

/// Makes `key`'s check timer fire no later than `at_ms` (Unix ms): keeps an
/// earlier one, replaces a later one.
fn check_by(ctx: Ctx, key: &QueueId, at_ms: i64) {
    let mut s = state();
    let Some(Arm { delay, gen, stop }) = s.0.queues.check_by(key, at_ms, ctx.now_ms()) else { return };
    if let Some(old) = stop {
        timer::stop::<Check>(ctx, old);
    }
    let id = timer::start(ctx, delay, on_check, Check { key: key.clone(), gen });
    s.0.queues.armed(key, gen, id);
}

/// Which queue a check timer checks.
struct Check {
    key: QueueId,
    gen: u64,
}

/// A queue's check timer: the key may be free now (expired or deleted):
/// grant it, or wait for the current holder's deadline.
unsafe extern "C" fn on_check(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    let Check { key, gen } = *Box::from_raw(data.cast::<Check>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = Ctx(ctx);
        // A replaced timer is stale; Redis frees the firing one itself.
        if !state().0.queues.check_fired(&key, gen) {
            return;
        }
        rm!(RedisModule_SelectDb)(ctx.0, key.0);
        let name = ctx.string(&key.1);
        grant_next(ctx, name);
        ctx.free(name);
    }));
}

fn ensure_subscribed(ctx: Ctx) {
    let mut s = state();
    if s.0.subscribed {
        return;
    }
    s.0.subscribed = true;
    drop(s);
    db_events::subscribe(ctx);
    // ZSET: a holder removed by hand (`ZREM`) frees a permit too.
    key_events::subscribe(ctx, key_events::Also::Zset);
}

/// A key was deleted, expired, evicted, renamed away or got a new TTL:
/// if anyone waits on it, check it right after this command.
pub(crate) fn on_key_event(ctx: Ctx, type_: c_int, key: *mut RedisModuleString) {
    let removed = raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED;
    if waiting() == 0 || (SERVING.load(Ordering::Relaxed) != 0 && type_ & removed == 0) {
        return;
    }
    check_by(ctx, &(ctx.db(), bytes(key).to_vec()), ctx.now_ms());
}

/// FLUSHDB / FLUSHALL finished, or SWAPDB swapped two databases: no key
/// event tells which keys went away, so every queue in the affected
/// databases is checked right after this command (a free key goes to its
/// head, a taken one waits for its new holder's deadline).
pub(crate) unsafe extern "C" fn on_db_event(
    ctx: *mut RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if waiting() == 0 {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let Some(changed) = db_events::changed(event, subevent, data) else { return };
        let keys: Vec<_> = state().0.queues.keys().filter(|(db, _)| changed.includes(*db)).cloned().collect();
        let ctx = Ctx(ctx);
        let now = ctx.now_ms();
        for key in keys {
            check_by(ctx, &key, now);
        }
    }));
}

/// Sends `answer` as the waiting command's reply.
unsafe fn reply(ctx: *mut RedisModuleCtx, answer: Option<&Answer>) -> c_int {
    match answer {
        Some(Answer::Int(n)) => rm!(RedisModule_ReplyWithLongLong)(ctx, *n),
        Some(Answer::FencesExhausted) => rm!(RedisModule_ReplyWithError)(ctx, errors::EXHAUSTED.as_ptr()),
        Some(Answer::Error(e)) => rm!(RedisModule_ReplyWithError)(ctx, e.as_ptr()),
        Some(Answer::Nil) | None => rm!(RedisModule_ReplyWithNull)(ctx),
    }
}

/// Replies to a client unblocked by `finish`.
unsafe extern "C" fn on_reply(ctx: *mut RedisModuleCtx, _argv: *mut *mut RedisModuleString, _argc: c_int) -> c_int {
    reply(ctx, rm!(RedisModule_GetBlockedClientPrivateData)(ctx).cast::<Answer>().as_ref())
}

/// `CLIENT UNBLOCK ... TIMEOUT` (the waits' own timeouts are timers): leave
/// the queue, reply 0 / nil.
unsafe extern "C" fn on_timeout(ctx: *mut RedisModuleCtx, _argv: *mut *mut RedisModuleString, _argc: c_int) -> c_int {
    let client = rm!(RedisModule_GetClientId)(ctx);
    let refusal = match remove_client(Ctx(ctx), client, None) {
        Some(w) => {
            stats::WAITS_TIMED_OUT.add();
            w.refusals().add();
            w.let_go(Ctx(ctx));
            // Redis frees a handle blocked this way only once it is unblocked.
            rm!(RedisModule_UnblockClient)(w.bc, std::ptr::null_mut());
            w.refusal()
        }
        None => {
            stats::REFUSALS.add();
            Answer::Int(0)
        }
    };
    reply(ctx, Some(&refusal))
}

/// The waiting client went away (or Redis unblocked it: this master became
/// a replica): leave the queue; it is never granted.
unsafe extern "C" fn on_disconnect(ctx: *mut RedisModuleCtx, bc: *mut RedisModuleBlockedClient) {
    let client = rm!(RedisModule_GetClientId)(ctx);
    if let Some(w) = remove_client(Ctx(ctx), client, None) {
        stats::WAITS_CANCELLED.add();
        w.let_go(Ctx(ctx));
        rm!(RedisModule_UnblockClient)(bc, std::ptr::null_mut());
    }
}

unsafe extern "C" fn free_reply(_ctx: *mut RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        drop(Box::from_raw(privdata.cast::<Answer>()));
    }
}
