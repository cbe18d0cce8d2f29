//! `LOCK.OBSERVE … AFTER rev WAIT timeout-ms`: clients blocked until a
//! key's leadership differs from the revision they last saw.
//!
//! Observers are not waiters: they never take the key, so they are kept
//! apart from the key's line (`crate::blocked::queue`), per key and grouped by the
//! revision they saw (`redis_lock_rules::observers`). What they share with
//! the waiters is the machine (`crate::blocked::machine`):
//! - every change of the key is noticed through a keyspace-event
//!   listener (`crate::server::events`, subscribed at the first OBSERVE): the module's own writes
//!   (grant, proclaim, release, takeover, renewal) raise the same events a
//!   native `SET`, `DEL` or `PEXPIRE` does, and a script's `SET`, `DEL`,
//!   expiry, eviction, `RENAME` away raise theirs; whole databases that
//!   change without a key event (FLUSHDB, FLUSHALL, SWAPDB) through the
//!   server events. An event only arms the key's check timer for now: the
//!   key is read, once, right after the command that changed it, and every
//!   observer whose revision differs is answered with that reading.
//! - the check timer is also armed at the leader's expiry, because Redis's
//!   own expiry can lag behind a key's deadline; the timer cannot.
//! - timeouts are timers of ours (`crate::boundary::timer`), cut to
//!   [`MAX_TIMER_MS`](redis_lock_rules::blocked::MAX_TIMER_MS); a timed-out
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
//! Discipline as in `crate::blocked::queue`: the state lock is never held across a
//! call into Redis that can run a callback of ours.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::cluster::{key_slot, observer_tryagain, NodesView, ObserverSlot};
use redis_lock_rules::observers::ByRev;
use redis_lock_rules::Entry;
use redis_module::raw::{RedisModuleCtx, RedisModuleString};

use crate::blocked::machine::{self, Blocked, Book, KeyId, Kind, Shared};
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::reply::{Failure, Outcome, Reply};
use crate::boundary::timer;
use crate::server::cluster;
use crate::server::counters::{self as stats, Counter, OBSERVING};
use crate::server::events::{self, Also};
use crate::store::leadership::{self, leader_reply, Led};
use crate::store::lock_key::LockKey;

/// How often, in a cluster, the slots with observers are checked for a
/// move that came without a key event (one `CLUSTER NODES` for them all).
pub const CLUSTER_CHECK_MS: i64 = 1_000;

/// The observers' kind of blocked client (they keep nothing of their own).
pub struct Observers;

static BOOK: LazyLock<Mutex<Shared<Book<Observers>>>> =
    LazyLock::new(|| Mutex::new(Shared(Book::<Observers>::default())));
/// The cluster's slot-check timer is armed (it stops by itself once no
/// observer is left).
static POLLING: AtomicBool = AtomicBool::new(false);

impl Kind for Observers {
    type Data = ();
    type Lines = ByRev<Blocked<()>>;

    fn book() -> MutexGuard<'static, Shared<Book<Self>>> {
        BOOK.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn gauge() -> &'static AtomicU64 {
        &OBSERVING
    }

    fn check(ctx: Ctx, key: &KeyId) {
        check(ctx, key);
    }

    /// Answered with the key's current, unchanged state.
    fn timed_out(ctx: Ctx, key: &KeyId, _: &(), own_ctx: bool) -> Outcome {
        answer(&read_now(ctx, key, !own_ctx), ctx.now_ms())
    }

    fn unknown(_ctx: Ctx) -> Outcome {
        Ok(Reply::Nil)
    }

    fn let_go(_ctx: Ctx, _: ()) {}

    fn timeouts() -> &'static Counter {
        &stats::OBSERVER_TIMEOUTS
    }

    fn cancellations() -> &'static Counter {
        &stats::OBSERVERS_CANCELLED
    }
}

/// Blocks the calling client until `name`'s revision is no longer `after`
/// or `deadline` (Unix ms; none: never) passes. `expires_at` is the
/// current leader's lease end, if any.
pub fn block(ctx: Ctx, name: *mut RedisModuleString, after: u64, deadline: Option<i64>, expires_at: Option<i64>) {
    // STRING: a `SET` by anyone (a script, a client) changes the value.
    events::need(ctx, Also::String);
    let key = (ctx.db(), bytes(name).to_vec());
    let slot = key_slot(&key.1);
    let k = key.clone();
    machine::block::<Observers>(ctx, deadline, (), |book, client, seq, b| {
        book.observe(k, slot, client, seq, after, b);
    });
    stats::OBSERVES_STARTED.add();
    arm_for(ctx, &key, expires_at);
    ensure_polling(ctx);
}

/// Arms `key`'s check for the leader's lease end (one ms past it: the
/// lease has ended by then).
fn arm_for(ctx: Ctx, key: &KeyId, expires_at: Option<i64>) {
    if let Some(at) = expires_at {
        machine::check_by::<Observers>(ctx, key, at.saturating_add(1));
    }
}

/// An observer's answer: the leadership as LOCK.LEADER replies it.
fn answer(current: &Result<Option<Led>, Failure>, now: i64) -> Outcome {
    match current {
        Ok(led) => Ok(leader_reply(led.as_ref(), now)),
        Err(_) => Err(Failure::WrongType),
    }
}

/// Reads `key` and answers every observer whose revision differs; the
/// rest wait for the next change or the lease's end.
fn check(ctx: Ctx, key: &KeyId) {
    if !Observers::book().0.has(key) {
        return;
    }
    let current = read_now(ctx, key, true);
    let rev = leadership::rev_of(&current);
    // No leader here may mean the key left with its slot (MIGRATE deletes
    // it here), which is no end of its leadership: the slot decides first.
    // A key still led here has its changes made here, and the once-a-second
    // slot check covers the rest; so renewals and proclaims read no topology.
    if rev == 0 {
        if let Some(view) = slot_view(ctx) {
            if let Some(error) = redirection(ctx, &view, key) {
                machine::answer_all::<Observers>(ctx, key, &error);
                return;
            }
        }
    }
    let expires_at = current.as_ref().ok().and_then(|l| l.as_ref()).and_then(|l| l.expires_at);
    let changed = Observers::book().0.take_changed(key, rev);
    let now = ctx.now_ms();
    for b in machine::taken::<Observers>(ctx, changed) {
        machine::finish::<Observers>(ctx, b, answer(&current, now), &stats::OBSERVER_WAKES);
    }
    arm_for(ctx, key, expires_at);
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
    if !ctx.in_cluster() || POLLING.swap(true, Ordering::Relaxed) {
        return;
    }
    timer::start(ctx, CLUSTER_CHECK_MS, on_slot_check, SlotCheck);
}

struct SlotCheck;

/// Once a second while observers block in a cluster: one `CLUSTER NODES`,
/// and the observers of every observed slot no longer served here are sent
/// on. O(slots with observers), plus the keys of a slot being migrated away
/// or moved (those keys' observers are answered).
unsafe extern "C" fn on_slot_check(ctx: *mut RedisModuleCtx, data: *mut std::ffi::c_void) {
    drop(Box::from_raw(data.cast::<SlotCheck>()));
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = Ctx(ctx);
        POLLING.store(false, Ordering::Relaxed);
        let slots = Observers::book().0.slots();
        if slots.is_empty() {
            return;
        }
        if let Some(view) = slot_view(ctx) {
            for slot in slots {
                if view.observers_at(slot) == ObserverSlot::Wait {
                    continue;
                }
                // Its own statement: the guard must not live through the loop.
                let keys = Observers::book().0.keys_in_slot(slot);
                for key in keys {
                    ctx.select(key.0);
                    if let Some(error) = redirection(ctx, &view, &key) {
                        machine::answer_all::<Observers>(ctx, &key, &error);
                    }
                }
            }
        }
        if !Observers::book().0.is_empty() {
            ensure_polling(ctx);
        }
    }));
}

/// The state of `key` now. In a blocked client's own context (`CLIENT
/// UNBLOCK`) its database is already the key's, and selecting would change
/// the client's: `select` only from a timer.
fn read_now(ctx: Ctx, key: &KeyId, select: bool) -> Result<Option<Led>, Failure> {
    if select {
        ctx.select(key.0);
    }
    let name = ctx.string(&key.1);
    let current = leadership::read(ctx, name);
    ctx.free(name);
    current
}
