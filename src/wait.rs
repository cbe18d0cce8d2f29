//! `LOCK.ACQUIRE ... WAIT`: clients blocked inside the server, FIFO per key.
//!
//! A key has a queue only while someone waits on it, so a lock nobody waits
//! on costs nothing here. A freed lock goes to the queue's head, once:
//! - LOCK.RELEASE hands it over in the same command (no other client can
//!   slip in; replicas see `DEL` + `SET ... PXAT` in one transaction);
//! - deletion or expiry by anything else is noticed through a keyspace-event
//!   subscription (taken on the first WAIT) and a timer armed at the
//!   holder's expiry, and the head is granted from a timer callback.
//!   Redis's own expiry can lag behind a key's deadline; the timer cannot.
//! - whole databases that change without a per-key event (FLUSHDB, FLUSHALL
//!   sync or ASYNC, SWAPDB, the flush before DEBUG RELOAD or a full resync)
//!   are noticed through server events (taken with the keyspace one), and
//!   every queue in them is checked the same way.
//!
//! Queues belong to a database index, as Redis's own blocked clients do:
//! after SWAPDB a waiter on db 0 waits for whatever db 0 now holds.
//!
//! A waiter that times out, is removed by `CLIENT UNBLOCK`, or disconnects
//! leaves the queue at once and is never granted.
//!
//! Discipline: the state lock is never held across a call into Redis, since
//! such a call can raise a keyspace event whose callback takes the lock.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::Entry;
use redis_module::raw::{self, RedisModuleBlockedClient, RedisModuleCtx, RedisModuleString};

use crate::api::rm;
use crate::fence;
use crate::key::{bytes, Ctx, LockKey, NewValue};
use crate::stats;

struct Waiter {
    client: u64,
    /// Tells this wait from the same client's later ones.
    seq: u64,
    bc: *mut RedisModuleBlockedClient,
    /// The waiter's token, retained until it is stored or the wait ends.
    token: *mut RedisModuleString,
    ttl: i64,
    fence: bool,
    /// The timer that ends the wait at its timeout (none: wait forever).
    timeout: Option<raw::RedisModuleTimerID>,
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

    /// Lets go of what the wait holds: its token and its timeout timer.
    /// Not from the timeout timer's own callback (Redis frees that timer
    /// after the callback returns).
    fn let_go(&self, ctx: Ctx) {
        unsafe {
            rm!(RedisModule_FreeString)(std::ptr::null_mut(), self.token);
            if let Some(id) = self.timeout {
                let mut data: *mut c_void = std::ptr::null_mut();
                if rm!(RedisModule_StopTimer)(ctx.0, id, &mut data) == raw::REDISMODULE_OK as c_int && !data.is_null() {
                    drop(Box::from_raw(data.cast::<WaitTimeout>()));
                }
            }
        }
    }
}

#[derive(Default)]
struct Queue {
    waiters: VecDeque<Waiter>,
    /// When the earliest armed expiry timer fires, if one is armed.
    timer_at: Option<i64>,
}

#[derive(Default)]
struct State {
    queues: HashMap<(c_int, Vec<u8>), Queue>,
    /// Where each blocked client waits: timeouts and disconnects find it here.
    by_client: HashMap<u64, (c_int, Vec<u8>)>,
    subscribed: bool,
}

/// The pointers inside are only touched on Redis's main thread.
struct Shared(State);
unsafe impl Send for Shared {}

static STATE: LazyLock<Mutex<Shared>> = LazyLock::new(|| Mutex::new(Shared(State::default())));
/// Clients waiting now; lets every command skip the state when it is 0.
static WAITING: AtomicU64 = AtomicU64::new(0);
/// Numbers the waits (see [`Waiter::seq`]).
static NEXT_WAIT: AtomicU64 = AtomicU64::new(0);

fn state() -> MutexGuard<'static, Shared> {
    // A poisoned lock only means a panic was caught mid-update; the queues
    // are still structurally sound.
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Clients blocked in WAIT right now.
pub fn waiting() -> u64 {
    WAITING.load(Ordering::Relaxed)
}

fn db(ctx: Ctx) -> c_int {
    unsafe { rm!(RedisModule_GetSelectedDb)(ctx.0) }
}

/// How many clients wait on `key` in the context's database.
pub fn waiters_on(ctx: Ctx, key: &[u8]) -> usize {
    if waiting() == 0 {
        return 0;
    }
    state().0.queues.get(&(db(ctx), key.to_vec())).map_or(0, |q| q.waiters.len())
}

/// Whether a command may block here: not inside MULTI, a script, or any
/// context that forbids blocking (WAIT then degrades to a single attempt).
pub fn may_block(ctx: Ctx) -> bool {
    let flags = unsafe { rm!(RedisModule_GetContextFlags)(ctx.0) } as u32;
    flags & (raw::REDISMODULE_CTX_FLAGS_MULTI | raw::REDISMODULE_CTX_FLAGS_LUA | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING) == 0
}

/// Blocks the calling client until `token` is granted `name` or the wait
/// times out. `expires_at` is the current holder's deadline, if any.
pub fn block(ctx: Ctx, name: *mut RedisModuleString, token: *mut RedisModuleString, ttl: i64, fence: bool, timeout_ms: i64, expires_at: Option<i64>) {
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
        let bc = rm!(RedisModule_BlockClient)(ctx.0, Some(on_reply), Some(on_timeout), Some(free_reply), 0);
        rm!(RedisModule_SetDisconnectCallback)(bc, Some(on_disconnect));
        bc
    };
    let timeout = (timeout_ms > 0).then(|| {
        let data = Box::into_raw(Box::new(WaitTimeout { client, seq }));
        unsafe { rm!(RedisModule_CreateTimer)(ctx.0, timeout_ms, Some(on_wait_timeout), data.cast()) }
    });
    let key = (db(ctx), bytes(name).to_vec());
    {
        let mut s = state();
        s.0.by_client.insert(client, key.clone());
        s.0.queues.entry(key).or_default().waiters.push_back(Waiter { client, seq, bc, token, ttl, fence, timeout });
    }
    WAITING.fetch_add(1, Ordering::Relaxed);
    stats::WAITS_STARTED.add();
    if let Some(at) = expires_at {
        arm(ctx, bytes(name), at);
    }
}

/// Grants the free lock `name` to the head of its queue, if anyone waits.
/// The caller has just seen the key absent (or deleted it).
pub fn grant_next(ctx: Ctx, name: *mut RedisModuleString) {
    if waiting() == 0 {
        return;
    }
    let key = (db(ctx), bytes(name).to_vec());
    // A head that cannot be served is answered and the next one tried, so
    // one unservable waiter never strands the rest.
    while let Some(w) = pop_head(&key) {
        let mut k = LockKey::open(ctx, name);
        if !matches!(k.entry(), Entry::Absent) {
            // Someone took it first (only a script or a non-module writer
            // can): the head keeps its place.
            drop(k);
            let mut s = state();
            s.0.by_client.insert(w.client, key.clone());
            s.0.queues.entry(key).or_default().waiters.push_front(w);
            WAITING.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let now = ctx.now_ms();
        let Some(at) = now.checked_add(w.ttl) else {
            // now + ttl no longer fits: the wait cannot be served.
            finish(ctx, w.refusal(), w, &stats::WAITS_CANCELLED);
            continue;
        };
        // Issued before the key changes, so that an exhausted fence space
        // refuses the grant instead of granting with a nil reply.
        let fence = match w.fence.then(|| fence::issue(now)) {
            Some(None) => {
                finish(ctx, Answer::FencesExhausted, w, &stats::WAITS_CANCELLED);
                continue;
            }
            Some(Some(f)) => Some(f),
            None => None,
        };
        k.set(NewValue::Arg(w.token), at);
        drop(k);
        let reply = match fence {
            Some(f) => {
                ctx.replicate_fence_floor(f);
                Answer::Int(f as i64)
            }
            None => Answer::Int(1),
        };
        stats::GRANTS.add();
        finish(ctx, reply, w, &stats::WAITS_GRANTED);
        if waiters_on(ctx, &key.1) > 0 {
            arm(ctx, &key.1, at);
        }
        return;
    }
}

/// Removes and returns the head waiter of `key`.
fn pop_head(key: &(c_int, Vec<u8>)) -> Option<Waiter> {
    let mut s = state();
    let q = s.0.queues.get_mut(key)?;
    let w = q.waiters.pop_front();
    if q.waiters.is_empty() {
        s.0.queues.remove(key);
    }
    if let Some(w) = &w {
        s.0.by_client.remove(&w.client);
        WAITING.fetch_sub(1, Ordering::Relaxed);
    }
    w
}

/// Removes the waiter of `client` wherever it waits; with `seq`, only if
/// it is still that wait.
fn remove_client(client: u64, seq: Option<u64>) -> Option<Waiter> {
    let mut s = state();
    let key = s.0.by_client.get(&client)?.clone();
    let q = s.0.queues.get_mut(&key)?;
    let i = q.waiters.iter().position(|w| w.client == client && seq.is_none_or(|n| w.seq == n))?;
    let w = q.waiters.remove(i);
    if q.waiters.is_empty() {
        s.0.queues.remove(&key);
    }
    s.0.by_client.remove(&client);
    WAITING.fetch_sub(1, Ordering::Relaxed);
    w
}

/// What a wait ended by [`finish`] replies.
enum Answer {
    Int(i64),
    Nil,
    FencesExhausted,
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

/// A wait's timeout: if it still waits, it is refused (0, or nil with FENCE).
unsafe extern "C" fn on_wait_timeout(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    let WaitTimeout { client, seq } = *Box::from_raw(data.cast::<WaitTimeout>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if let Some(mut w) = remove_client(client, Some(seq)) {
            // This timer is the one firing: Redis frees it itself.
            w.timeout = None;
            stats::REFUSALS.add();
            finish(Ctx(ctx), w.refusal(), w, &stats::WAITS_TIMED_OUT);
        }
    }));
}

/// Arms a check of `key` at `at_ms` (its holder's deadline), unless an
/// earlier one is armed already.
fn arm(ctx: Ctx, key: &[u8], at_ms: i64) {
    let id = (db(ctx), key.to_vec());
    {
        let mut s = state();
        let Some(q) = s.0.queues.get_mut(&id) else { return };
        if q.timer_at.is_some_and(|t| t <= at_ms) {
            return;
        }
        q.timer_at = Some(at_ms);
    }
    // One ms past the deadline: the key is expired by then, not at it.
    let delay = (at_ms - ctx.now_ms() + 1).max(0);
    schedule(ctx, id, delay, Some(at_ms));
}

struct Check {
    key: (c_int, Vec<u8>),
    /// The deadline this timer was armed for (None: an event's immediate check).
    armed_for: Option<i64>,
}

fn schedule(ctx: Ctx, key: (c_int, Vec<u8>), delay_ms: i64, armed_for: Option<i64>) {
    let data = Box::into_raw(Box::new(Check { key, armed_for }));
    unsafe {
        rm!(RedisModule_CreateTimer)(ctx.0, delay_ms, Some(on_timer), data.cast());
    }
}

/// A timer: the key may be free now (expired or deleted): grant it, or
/// re-arm at the current holder's deadline.
unsafe extern "C" fn on_timer(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    let Check { key: (db_id, key), armed_for } = *Box::from_raw(data.cast::<Check>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = Ctx(ctx);
        {
            let mut s = state();
            match s.0.queues.get_mut(&(db_id, key.clone())) {
                None => return,
                Some(q) => {
                    if armed_for.is_some() && q.timer_at == armed_for {
                        q.timer_at = None;
                    }
                }
            }
        }
        rm!(RedisModule_SelectDb)(ctx.0, db_id);
        let name = ctx.string(&key);
        let k = LockKey::open(ctx, name);
        let free = matches!(k.entry(), Entry::Absent);
        let deadline = k.expires_at();
        drop(k);
        if free {
            grant_next(ctx, name);
        } else if let Some(at) = deadline {
            arm(ctx, &key, at);
        }
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
    let types = raw::REDISMODULE_NOTIFY_GENERIC | raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED;
    // Version 1 of both events' data is what Redis 6.0 and later send.
    let flush = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_FLUSHDB, dataver: 1 };
    let swap = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_SWAPDB, dataver: 1 };
    unsafe {
        rm!(RedisModule_SubscribeToKeyspaceEvents)(ctx.0, types, Some(on_key_event));
        rm!(RedisModule_SubscribeToServerEvent)(ctx.0, flush, Some(on_db_event));
        rm!(RedisModule_SubscribeToServerEvent)(ctx.0, swap, Some(on_db_event));
    }
}

/// A key was deleted, expired, evicted, renamed away or got a new TTL:
/// if anyone waits on it, check it right after this command.
unsafe extern "C" fn on_key_event(ctx: *mut RedisModuleCtx, _type: c_int, _event: *const std::ffi::c_char, key: *mut RedisModuleString) -> c_int {
    if waiting() == 0 {
        return raw::REDISMODULE_OK as c_int;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = Ctx(ctx);
        let id = (db(ctx), bytes(key).to_vec());
        if state().0.queues.contains_key(&id) {
            schedule(ctx, id, 0, None);
        }
    }));
    raw::REDISMODULE_OK as c_int
}

/// Databases whose keys changed wholesale: these two, or all (`None`, also
/// when Redis sent no data with the event).
type Dbs = Option<(c_int, c_int)>;

/// FLUSHDB / FLUSHALL finished, or SWAPDB swapped two databases: no key
/// event tells which keys went away, so every queue in the affected
/// databases is checked right after this command (a free key goes to its
/// head, a taken one re-arms at its new holder's deadline).
unsafe extern "C" fn on_db_event(ctx: *mut RedisModuleCtx, event: raw::RedisModuleEvent, subevent: u64, data: *mut c_void) {
    if waiting() == 0 {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let dbs: Dbs = match event.id {
            // START fires while the keys are still there; only END is news.
            raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END => {
                match data.cast::<raw::RedisModuleFlushInfo>().as_ref() {
                    Some(info) if info.dbnum >= 0 => Some((info.dbnum, info.dbnum)),
                    // -1 is FLUSHALL; without data, check everything.
                    _ => None,
                }
            }
            raw::REDISMODULE_EVENT_SWAPDB => data.cast::<raw::RedisModuleSwapDbInfo>().as_ref().map(|i| (i.dbnum_first, i.dbnum_second)),
            _ => return,
        };
        let affected = |db: c_int| dbs.is_none_or(|(a, b)| db == a || db == b);
        let keys: Vec<_> = state().0.queues.keys().filter(|(db, _)| affected(*db)).cloned().collect();
        // The lock is released: arming timers calls into Redis.
        for key in keys {
            schedule(Ctx(ctx), key, 0, None);
        }
    }));
}

/// Sends `answer` as the waiting command's reply.
unsafe fn reply(ctx: *mut RedisModuleCtx, answer: Option<&Answer>) -> c_int {
    match answer {
        Some(Answer::Int(n)) => rm!(RedisModule_ReplyWithLongLong)(ctx, *n),
        Some(Answer::FencesExhausted) => rm!(RedisModule_ReplyWithError)(ctx, crate::entry::EXHAUSTED.as_ptr()),
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
    let refusal = match remove_client(client, None) {
        Some(w) => {
            stats::WAITS_TIMED_OUT.add();
            w.let_go(Ctx(ctx));
            // Redis frees a handle blocked this way only once it is unblocked.
            rm!(RedisModule_UnblockClient)(w.bc, std::ptr::null_mut());
            w.refusal()
        }
        None => Answer::Int(0),
    };
    stats::REFUSALS.add();
    reply(ctx, Some(&refusal))
}

/// The waiting client went away: leave the queue; it is never granted.
unsafe extern "C" fn on_disconnect(ctx: *mut RedisModuleCtx, bc: *mut RedisModuleBlockedClient) {
    let client = rm!(RedisModule_GetClientId)(ctx);
    if let Some(w) = remove_client(client, None) {
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
