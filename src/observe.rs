//! `LOCK.OBSERVE … AFTER rev WAIT timeout-ms`: clients blocked until a
//! key's leadership differs from the revision they last saw.
//!
//! Observers are not waiters: they never take the key, so they are kept
//! apart from the key's line (`crate::wait`), per key and grouped by the
//! revision they saw (`redis_lock_rules::observers`). What they share with
//! the waiters is the machinery:
//! - every change of the key is noticed through a keyspace-event
//!   subscription (`crate::key_events`, taken on the first OBSERVE): the module's own writes
//!   (grant, proclaim, release, takeover, renewal) raise the same events a
//!   native `SET`, `DEL` or `PEXPIRE` does, and a script's `SET`, `DEL`,
//!   expiry, eviction, `RENAME` away raise theirs; whole databases that
//!   change without a key event (FLUSHDB, FLUSHALL, SWAPDB) through the
//!   server events. An event only arms the key's check timer for now: the
//!   key is read, once, right after the command that changed it, and every
//!   observer whose revision differs is answered with that reading.
//! - the check timer is also armed at the leader's expiry, because Redis's
//!   own expiry can lag behind a key's deadline; the timer cannot.
//! - timeouts are timers of ours (`crate::timer`), cut to
//!   [`MAX_TIMER_MS`](redis_lock_rules::queue::MAX_TIMER_MS); a timed-out
//!   observer is answered with the key's current (unchanged) state.
//! - `CLIENT UNBLOCK` (TIMEOUT: answered as a timeout; ERROR: Redis's
//!   error), disconnect, and Redis unblocking every client (this master
//!   became a replica) take an observer out at once; where the server
//!   leaves them blocked (valkey 9.1 in a cluster), the role change's
//!   server event answers them `UNBLOCKED` as the others are.
//! - in a cluster, observers of a key whose slot this node no longer
//!   serves are answered with the redirection, as Redis answers its own
//!   blocked clients (`clusterRedirectBlockedClientIfNeeded`): `MOVED` to
//!   the slot's owner, `CLUSTERDOWN` for a slot nobody serves. On a master
//!   that imports the slot they stay (they came with `ASKING`); on one
//!   that migrates it away, observers of a key still here stay and those
//!   of a key not here get `TRYAGAIN` (a new command would get `ASK`). On
//!   a replica (`READONLY` clients) the slot is served while the replica's
//!   master serves it. The slot is checked by each check of the key that
//!   finds no leader (a migrated key's deletion is an event) and, because a
//!   slot can move with no key in it and no server event tells a module of
//!   slot moves (none in Redis 7.0), by one module-wide timer every
//!   [`CLUSTER_CHECK_MS`]: one `CLUSTER NODES` for every slot that has
//!   observers (`lock_observer_slot_checks` counts the readings).
//!
//! Observers only read, so paused writes (`CLIENT PAUSE WRITE`,
//! `FAILOVER`) do not hold them back: a lease that ends during a pause
//! reads as ended, as `GET` reads it, and no leader can be granted until
//! the pause is over.
//!
//! Discipline as in `crate::wait`: the state lock is never held across a
//! call into Redis that can run a callback of ours.

use std::ffi::{c_int, c_void, CString};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::cluster::{key_slot, observer_tryagain, NodesView, ObserverSlot};
use redis_lock_rules::observers::{Arm, Observers};
use redis_lock_rules::queue::next_piece;
use redis_lock_rules::Entry;
use redis_module::raw::{self, RedisModuleBlockedClient, RedisModuleCtx, RedisModuleString, RedisModuleTimerID};

use crate::api::rm;
use crate::cluster;
use crate::db_events;
use crate::election::{self, leader_reply, Led};
use crate::entry;
use crate::key::{bytes, Ctx, LockKey};
use crate::key_events;
use crate::reply::Failure;
use crate::stats::{self, observing, OBSERVING};
use crate::timer;

/// How often, in a cluster, the slots with observers are checked for a
/// move that came without a key event (one `CLUSTER NODES` for them all).
pub const CLUSTER_CHECK_MS: i64 = 1_000;

/// A key: a database index and a key name.
type KeyId = (c_int, Vec<u8>);

struct Observer {
    bc: *mut RedisModuleBlockedClient,
    /// When the observation gives up (Unix ms; none: never).
    deadline: Option<i64>,
    /// The timer of the deadline, or of the next piece of a long wait.
    timeout: Option<RedisModuleTimerID>,
}

impl Observer {
    /// Not from the timeout timer's own callback (Redis frees that one).
    fn let_go(&self, ctx: Ctx) {
        if let Some(id) = self.timeout {
            timer::stop::<ObserveTimeout>(ctx, id);
        }
    }
}

#[derive(Default)]
struct State {
    observers: Observers<KeyId, Observer, RedisModuleTimerID>,
    subscribed: bool,
    /// The cluster's slot-check timer is armed (it stops by itself once
    /// no observer is left).
    polling: bool,
}

/// The pointers inside are only touched on Redis's main thread.
struct Shared(State);
unsafe impl Send for Shared {}

static STATE: LazyLock<Mutex<Shared>> = LazyLock::new(|| Mutex::new(Shared(State::default())));
static NEXT_OBSERVATION: AtomicU64 = AtomicU64::new(0);

fn state() -> MutexGuard<'static, Shared> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn in_cluster(ctx: Ctx) -> bool {
    let flags = unsafe { rm!(RedisModule_GetContextFlags)(ctx.0) } as u32;
    flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
}

/// Blocks the calling client until `name`'s revision is no longer `after`
/// or `deadline` (Unix ms; none: never) passes. `expires_at` is the
/// current leader's lease end, if any.
pub fn block(ctx: Ctx, name: *mut RedisModuleString, after: u64, deadline: Option<i64>, expires_at: Option<i64>) {
    ensure_subscribed(ctx);
    let client = unsafe { rm!(RedisModule_GetClientId)(ctx.0) };
    let seq = NEXT_OBSERVATION.fetch_add(1, Ordering::Relaxed);
    // Our own timeout timer, not Redis's, for the reason `crate::wait::block` gives.
    let bc = unsafe {
        let bc = rm!(RedisModule_BlockClient)(ctx.0, Some(on_reply), Some(on_timeout), Some(free_reply), 0);
        rm!(RedisModule_SetDisconnectCallback)(bc, Some(on_disconnect));
        bc
    };
    let now = ctx.now_ms();
    let timeout = deadline.map(|at| timer::start(ctx, at - now, on_observe_timeout, ObserveTimeout { client, seq }));
    let key = (ctx.db(), bytes(name).to_vec());
    let slot = key_slot(&key.1);
    state().0.observers.push(key.clone(), slot, client, seq, after, Observer { bc, deadline, timeout });
    OBSERVING.fetch_add(1, Ordering::Relaxed);
    stats::OBSERVES_STARTED.add();
    arm_for(ctx, &key, expires_at);
    ensure_polling(ctx);
}

/// Arms `key`'s check for the leader's lease end (one ms past it: the
/// lease has ended by then).
fn arm_for(ctx: Ctx, key: &KeyId, expires_at: Option<i64>) {
    if let Some(at) = expires_at {
        check_by(ctx, key, at.saturating_add(1));
    }
}

/// What a blocked observer is answered.
enum Answer {
    /// The key's leadership as read for this change (shared by every
    /// observer it wakes), or WRONGTYPE when the key is no string.
    State(Rc<Result<Option<Led>, Failure>>),
    /// A redirection (`MOVED`, `TRYAGAIN`, `CLUSTERDOWN`).
    Error(CString),
}

fn finish(answer: Answer, o: Observer, ctx: Ctx, counter: &stats::Counter) {
    counter.add();
    o.let_go(ctx);
    unsafe { rm!(RedisModule_UnblockClient)(o.bc, Box::into_raw(Box::new(answer)).cast()) };
}

/// Reads `key` and answers every observer whose revision differs; the
/// rest wait for the next change or the lease's end.
fn check(ctx: Ctx, key: &KeyId) {
    if !state().0.observers.has(key) {
        return;
    }
    unsafe { rm!(RedisModule_SelectDb)(ctx.0, key.0) };
    let name = ctx.string(&key.1);
    let current = election::read(ctx, name);
    ctx.free(name);
    let rev = election::rev_of(&current);
    // No leader here may mean the key left with its slot (MIGRATE deletes
    // it here), which is no end of its leadership: the slot decides first.
    // A key still led here has its changes made here, and the once-a-second
    // slot check covers the rest; so renewals and proclaims read no topology.
    if rev == 0 {
        if let Some(view) = slot_view(ctx) {
            if let Some(error) = redirection(ctx, &view, key) {
                answer_all(ctx, key, error);
                return;
            }
        }
    }
    let expires_at = current.as_ref().ok().and_then(|l| l.as_ref()).and_then(|l| l.expires_at);
    let taken = state().0.observers.take_changed(key, rev);
    stop_check(ctx, taken.stop);
    OBSERVING.fetch_sub(taken.observers.len() as u64, Ordering::Relaxed);
    let current = Rc::new(current);
    for o in taken.observers {
        finish(Answer::State(Rc::clone(&current)), o, ctx, &stats::OBSERVER_WAKES);
    }
    arm_for(ctx, key, expires_at);
}

/// Answers every observer of `key` with `error` (a redirection, `UNBLOCKED`).
fn answer_all(ctx: Ctx, key: &KeyId, error: CString) {
    let taken = state().0.observers.take_all(key);
    stop_check(ctx, taken.stop);
    OBSERVING.fetch_sub(taken.observers.len() as u64, Ordering::Relaxed);
    for o in taken.observers {
        finish(Answer::Error(error.clone()), o, ctx, &stats::OBSERVERS_CANCELLED);
    }
}

/// This node's reading of the cluster, for observers (`None` outside a
/// cluster).
fn slot_view(ctx: Ctx) -> Option<NodesView> {
    let view = cluster::nodes_view(ctx)?;
    stats::OBSERVER_SLOT_CHECKS.add();
    Some(view)
}

/// The error for `key`'s observers when its slot is not served here, in
/// `view`. The key's database must be selected.
fn redirection(ctx: Ctx, view: &NodesView, key: &KeyId) -> Option<CString> {
    let slot = key_slot(&key.1);
    let text = match view.observers_at(slot) {
        ObserverSlot::Wait => return None,
        ObserverSlot::WaitIfKeyHere if key_here(ctx, key) => return None,
        ObserverSlot::WaitIfKeyHere => observer_tryagain(slot),
        ObserverSlot::Redirect(text) => text,
    };
    CString::new(text).ok()
}

/// Whether `key` exists here (an expired one does not).
fn key_here(ctx: Ctx, key: &KeyId) -> bool {
    let name = ctx.string(&key.1);
    let here = !matches!(LockKey::open_read(ctx, name).entry(), Entry::Absent);
    ctx.free(name);
    here
}

/// Arms the cluster's slot-check timer if it is not armed (outside a
/// cluster, never).
fn ensure_polling(ctx: Ctx) {
    if !in_cluster(ctx) {
        return;
    }
    {
        let mut s = state();
        if s.0.polling {
            return;
        }
        s.0.polling = true;
    }
    timer::start(ctx, CLUSTER_CHECK_MS, on_slot_check, SlotCheck);
}

struct SlotCheck;

/// Once a second while observers block in a cluster: one `CLUSTER NODES`,
/// and the observers of every observed slot no longer served here are sent
/// on. O(slots with observers), plus the keys of a slot being migrated away
/// or moved (those keys' observers are answered).
unsafe extern "C" fn on_slot_check(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    drop(Box::from_raw(data.cast::<SlotCheck>()));
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = Ctx(ctx);
        let slots = {
            let mut s = state();
            s.0.polling = false;
            s.0.observers.slots()
        };
        if slots.is_empty() {
            return;
        }
        if let Some(view) = slot_view(ctx) {
            for slot in slots {
                if view.observers_at(slot) == ObserverSlot::Wait {
                    continue;
                }
                // Its own statement: the guard must not live through the loop.
                let keys = state().0.observers.keys_in_slot(slot);
                for key in keys {
                    unsafe { rm!(RedisModule_SelectDb)(ctx.0, key.0) };
                    if let Some(error) = redirection(ctx, &view, &key) {
                        answer_all(ctx, &key, error);
                    }
                }
            }
        }
        if !state().0.observers.is_empty() {
            ensure_polling(ctx);
        }
    }));
}

fn stop_check(ctx: Ctx, stop: Option<RedisModuleTimerID>) {
    if let Some(id) = stop {
        timer::stop::<Check>(ctx, id);
    }
}

/// Takes `client`'s observation out; with `seq`, only if it is still that one.
fn remove_client(ctx: Ctx, client: u64, seq: Option<u64>) -> Option<(KeyId, Observer)> {
    let (key, (o, stop)) = {
        let mut s = state();
        let key = s.0.observers.key_of(client)?.clone();
        (key, s.0.observers.remove(client, seq)?)
    };
    OBSERVING.fetch_sub(1, Ordering::Relaxed);
    stop_check(ctx, stop);
    Some((key, o))
}

/// The state of `key` now, for an observer answered without a change.
/// In a blocked client's own context (`CLIENT UNBLOCK`) its database is
/// already the key's, and selecting would change the client's: `select`
/// only from a timer.
fn read_now(ctx: Ctx, key: &KeyId, select: bool) -> Result<Option<Led>, Failure> {
    if select {
        unsafe { rm!(RedisModule_SelectDb)(ctx.0, key.0) };
    }
    let name = ctx.string(&key.1);
    let current = election::read(ctx, name);
    ctx.free(name);
    current
}

struct ObserveTimeout {
    client: u64,
    seq: u64,
}

/// An observation's timeout timer: the next piece of a long wait, or its
/// end: answered with the key's current, unchanged state.
unsafe extern "C" fn on_observe_timeout(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    let ObserveTimeout { client, seq } = *Box::from_raw(data.cast::<ObserveTimeout>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = Ctx(ctx);
        let now = ctx.now_ms();
        {
            let mut s = state();
            let Some(o) = s.0.observers.observer_mut(client, seq) else { return };
            o.timeout = None;
            if let Some(delay) = next_piece(o.deadline, now) {
                o.timeout = Some(timer::start(ctx, delay, on_observe_timeout, ObserveTimeout { client, seq }));
                return;
            }
        }
        if let Some((key, o)) = remove_client(ctx, client, Some(seq)) {
            let current = read_now(ctx, &key, true);
            finish(Answer::State(Rc::new(current)), o, ctx, &stats::OBSERVER_TIMEOUTS);
        }
    }));
}

fn check_by(ctx: Ctx, key: &KeyId, at_ms: i64) {
    let mut s = state();
    let Some(Arm { delay, gen, stop }) = s.0.observers.check_by(key, at_ms, ctx.now_ms()) else { return };
    if let Some(old) = stop {
        timer::stop::<Check>(ctx, old);
    }
    let id = timer::start(ctx, delay, on_check, Check { key: key.clone(), gen });
    s.0.observers.armed(key, gen, id);
}

struct Check {
    key: KeyId,
    gen: u64,
}

unsafe extern "C" fn on_check(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    let Check { key, gen } = *Box::from_raw(data.cast::<Check>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if !state().0.observers.check_fired(&key, gen) {
            return;
        }
        check(Ctx(ctx), &key);
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
    // STRING: a `SET` by anyone (a script, a client) changes the value.
    key_events::subscribe(ctx, key_events::Also::String);
}

/// This master became a replica (`crate::db_events`, on a role change): observers
/// that came to it as a master are answered as Redis answers the blocked
/// clients it unblocks itself.
pub(crate) fn on_demoted(ctx: Ctx) {
    if observing() == 0 {
        return;
    }
    let keys: Vec<KeyId> = state().0.observers.keys().cloned().collect();
    for key in keys {
        answer_all(ctx, &key, db_events::UNBLOCKED.to_owned());
    }
}

/// Slots left this node by an atomic slot migration (`crate::migration`):
/// every observer of a key for which `redirect` has an error is answered it.
pub(crate) fn answer_where(ctx: Ctx, redirect: &dyn Fn(&[u8]) -> Option<CString>) {
    if observing() == 0 {
        return;
    }
    let keys: Vec<KeyId> = state().0.observers.keys().cloned().collect();
    for key in keys {
        if let Some(error) = redirect(&key.1) {
            answer_all(ctx, &key, error);
        }
    }
}

/// A key changed: if anyone observes it, check it right after this command.
pub(crate) fn on_key_event(ctx: Ctx, key: *mut RedisModuleString) {
    if observing() == 0 {
        return;
    }
    check_by(ctx, &(ctx.db(), bytes(key).to_vec()), ctx.now_ms());
}

/// FLUSHDB / FLUSHALL finished, or SWAPDB: every key with observers in the
/// affected databases is checked right after this command.
pub(crate) unsafe extern "C" fn on_db_event(
    ctx: *mut RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if observing() == 0 {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let Some(changed) = db_events::changed(event, subevent, data) else { return };
        let keys: Vec<_> = state().0.observers.keys().filter(|(db, _)| changed.includes(*db)).cloned().collect();
        let ctx = Ctx(ctx);
        let now = ctx.now_ms();
        for key in keys {
            check_by(ctx, &key, now);
        }
    }));
}

/// Sends an observer's answer: the leadership as LOCK.LEADER replies it.
unsafe fn reply(ctx: *mut RedisModuleCtx, answer: Option<&Answer>) -> c_int {
    match answer {
        Some(Answer::State(current)) => match current.as_ref() {
            Ok(led) => entry::send(ctx, Ok(leader_reply(led.as_ref(), Ctx(ctx).now_ms()))),
            Err(_) => entry::send(ctx, Err(Failure::WrongType)),
        },
        Some(Answer::Error(e)) => rm!(RedisModule_ReplyWithError)(ctx, e.as_ptr()),
        None => rm!(RedisModule_ReplyWithNull)(ctx),
    }
}

unsafe extern "C" fn on_reply(ctx: *mut RedisModuleCtx, _argv: *mut *mut RedisModuleString, _argc: c_int) -> c_int {
    reply(ctx, rm!(RedisModule_GetBlockedClientPrivateData)(ctx).cast::<Answer>().as_ref())
}

/// `CLIENT UNBLOCK … TIMEOUT`: answered as a timeout, with the state now.
unsafe extern "C" fn on_timeout(ctx: *mut RedisModuleCtx, _argv: *mut *mut RedisModuleString, _argc: c_int) -> c_int {
    let client = rm!(RedisModule_GetClientId)(ctx);
    let answer = match remove_client(Ctx(ctx), client, None) {
        Some((key, o)) => {
            stats::OBSERVER_TIMEOUTS.add();
            o.let_go(Ctx(ctx));
            rm!(RedisModule_UnblockClient)(o.bc, std::ptr::null_mut());
            Answer::State(Rc::new(read_now(Ctx(ctx), &key, false)))
        }
        None => return rm!(RedisModule_ReplyWithNull)(ctx),
    };
    reply(ctx, Some(&answer))
}

/// The observer went away (or Redis unblocked it): it leaves at once.
unsafe extern "C" fn on_disconnect(ctx: *mut RedisModuleCtx, bc: *mut RedisModuleBlockedClient) {
    let client = rm!(RedisModule_GetClientId)(ctx);
    if let Some((_, o)) = remove_client(Ctx(ctx), client, None) {
        stats::OBSERVERS_CANCELLED.add();
        o.let_go(Ctx(ctx));
        rm!(RedisModule_UnblockClient)(bc, std::ptr::null_mut());
    }
}

unsafe extern "C" fn free_reply(_ctx: *mut RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        drop(Box::from_raw(privdata.cast::<Answer>()));
    }
}
