//! The one way the module blocks a client, for every kind of blocked
//! client (the wait queues' waiters, `crate::blocked::waiters`; the
//! election observers, `crate::blocked::observers`; and any later kind,
//! which implements [`Kind`]). The bookkeeping is pure
//! (`redis_lock_rules::blocked::Clients`); this is its shell:
//!
//! - [`block`] blocks the calling client with the one reply callback, the
//!   one reply-freeing callback, and the kind's timeout (`CLIENT UNBLOCK`)
//!   and disconnect callbacks;
//! - a wait's deadline is a timer of ours, not Redis's: on 7.0, a client
//!   whose Redis-managed timeout passes after a grant has unblocked it, but
//!   before the grant's reply is sent, is unblocked with no reply at all,
//!   and then reads its next command's reply as this one's. Our timer and
//!   our answers both take the client out of the book first, so exactly
//!   one of them answers. No timer is asked for more than
//!   [`MAX_TIMER_MS`](redis_lock_rules::blocked::MAX_TIMER_MS): a longer
//!   wait is cut into pieces;
//! - each key with blocked clients has at most one check timer
//!   ([`check_by`]), armed by events and by deadlines seen on the key (a
//!   lease's end: Redis's own expiry can lag behind a key's deadline; the
//!   timer cannot), stopped when the key's last client leaves; when it
//!   fires, the kind checks the key ([`Kind::check`]);
//! - [`finish`] answers a client: the answer is sent by the one sender,
//!   `crate::boundary::entry::send`, from Redis's reply callback.
//!
//! A client that times out, is removed by `CLIENT UNBLOCK`, or disconnects
//! (also when Redis unblocks every client because this master became a
//! replica) leaves the book at once and is never answered again.
//!
//! Discipline: a kind's book is never locked across a call into Redis that
//! can run a callback of ours (opening, writing or deleting keys raises
//! keyspace events). Creating and stopping timers runs none, so it happens
//! under the lock.

use std::ffi::{c_int, c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::MutexGuard;

use redis_lock_rules::blocked::{next_piece, Also, Arm, Clients, Left, Lines, Taken};
use redis_module::raw::{RedisModuleBlockedClient, RedisModuleCtx, RedisModuleString, RedisModuleTimerID};

use crate::boundary::api::rm;
use crate::boundary::ctx::Ctx;
use crate::boundary::entry;
use crate::boundary::reply::{Failure, Outcome};
use crate::boundary::timer;
use crate::server::counters::Counter;
use crate::server::events::{DbEvent, KeyEvent, UNBLOCKED};

/// A key: a database index and a key name. Blocked clients belong to a
/// database index, as Redis's own do: after SWAPDB a client blocked on db
/// 0 waits for whatever db 0 now holds.
pub type KeyId = (c_int, Vec<u8>);

/// A blocked client as the machine keeps it; `data` is its kind's.
pub struct Blocked<D> {
    bc: *mut RedisModuleBlockedClient,
    /// When the wait gives up (Unix ms; none: never).
    deadline: Option<i64>,
    /// The timer of the deadline, or of the next piece of a long wait.
    timeout: Option<RedisModuleTimerID>,
    pub data: D,
}

/// A kind's book: its blocked clients, per key and per client.
pub type Book<K> = Clients<KeyId, <K as Kind>::Lines, RedisModuleTimerID>;

/// The pointers inside a book are only touched on Redis's main thread.
pub struct Shared<T>(pub T);
unsafe impl<T> Send for Shared<T> {}

/// What a kind of blocked client brings to the machine.
pub trait Kind: Sized + 'static {
    /// What the kind keeps per client.
    type Data;
    /// How it keeps a key's clients.
    type Lines: Lines<Member = Blocked<Self::Data>>;
    /// Its book, behind its own lock. A poisoned lock only means a panic
    /// was caught mid-update; the book is still structurally sound.
    fn book() -> MutexGuard<'static, Shared<Book<Self>>>;
    /// How many of its clients are blocked now.
    fn gauge() -> &'static AtomicU64;
    /// A check of `key` is due (an event, or its check timer): answer the
    /// clients it can. Runs from a timer: no database is selected.
    fn check(ctx: Ctx, key: &KeyId);
    /// What a client whose wait ran out is answered. `own_ctx`: in the
    /// client's own context (`CLIENT UNBLOCK … TIMEOUT`), whose database is
    /// the key's and must not be changed; otherwise from a timer.
    fn timed_out(ctx: Ctx, key: &KeyId, data: &Self::Data, own_ctx: bool) -> Outcome;
    /// What `CLIENT UNBLOCK … TIMEOUT` answers a client the book no longer
    /// has (answered already, in the same event-loop turn).
    fn unknown(ctx: Ctx) -> Outcome;
    /// Lets go of what `data` holds (retained strings, …).
    fn let_go(ctx: Ctx, data: Self::Data);
    /// Counts waits that timed out.
    fn timeouts() -> &'static Counter;
    /// Counts waits that ended otherwise: disconnected, sent on.
    fn cancellations() -> &'static Counter;
}

/// Numbers the waits of every kind: their order in a line, and what tells
/// a client's wait from its later ones (a timeout timer names the wait it
/// ends).
static NEXT_WAIT: AtomicU64 = AtomicU64::new(0);

/// Blocks the calling client until it is answered or `deadline` (Unix ms;
/// none: never) passes. `push` puts it in the kind's book (under the lock:
/// it must not call into Redis), given the client's id and wait number.
pub fn block<K: Kind>(
    ctx: Ctx,
    deadline: Option<i64>,
    data: K::Data,
    push: impl FnOnce(&mut Book<K>, u64, u64, Blocked<K::Data>),
) {
    let client = ctx.client_id();
    let seq = NEXT_WAIT.fetch_add(1, Ordering::Relaxed);
    let bc = unsafe {
        let bc = rm!(RedisModule_BlockClient)(ctx.0, Some(on_reply), Some(on_unblock::<K>), Some(free_reply), 0);
        rm!(RedisModule_SetDisconnectCallback)(bc, Some(on_disconnect::<K>));
        bc
    };
    let timeout = deadline.map(|at| timer::start(ctx, at - ctx.now_ms(), on_deadline::<K>, Wait { client, seq }));
    push(&mut K::book().0, client, seq, Blocked { bc, deadline, timeout, data });
    K::gauge().fetch_add(1, Ordering::Relaxed);
}

/// Ends a wait: counts it in `counter`, lets go of what it holds, and
/// unblocks the client with `outcome` (sent from `on_reply`).
pub fn finish<K: Kind>(ctx: Ctx, b: Blocked<K::Data>, outcome: Outcome, counter: &Counter) {
    counter.add();
    let bc = let_go::<K>(ctx, b);
    unsafe { rm!(RedisModule_UnblockClient)(bc, Box::into_raw(Box::new(Some(outcome))).cast()) };
}

/// Stops the wait's timeout timer and lets go of its data: its handle is
/// left. Not from the timeout timer's own callback with the timer still
/// set (Redis frees a fired timer itself).
fn let_go<K: Kind>(ctx: Ctx, b: Blocked<K::Data>) -> *mut RedisModuleBlockedClient {
    if let Some(id) = b.timeout {
        timer::stop::<Wait>(ctx, id);
    }
    K::let_go(ctx, b.data);
    b.bc
}

/// What a client leaving `key`'s clients leaves to do: stop the timer of
/// a key now without clients; and when the first left with others behind
/// it, check the key again (readers behind a writer that gave up may be
/// admitted beside the readers holding now). The same for every other key
/// it waited on.
pub fn left<K: Kind>(
    ctx: Ctx,
    key: &KeyId,
    left: Left<Blocked<K::Data>, RedisModuleTimerID, KeyId>,
) -> Blocked<K::Data> {
    K::gauge().fetch_sub(1, Ordering::Relaxed);
    stop_check(ctx, left.stop);
    if left.new_head {
        check_by::<K>(ctx, key, ctx.now_ms());
    }
    also::<K>(ctx, left.also);
    left.member
}

/// Clients taken out of a key together: the gauge and the key's timer, and
/// the other keys they waited on.
pub fn taken<K: Kind>(ctx: Ctx, taken: Taken<Blocked<K::Data>, RedisModuleTimerID, KeyId>) -> Vec<Blocked<K::Data>> {
    K::gauge().fetch_sub(taken.members.len() as u64, Ordering::Relaxed);
    stop_check(ctx, taken.stop);
    also::<K>(ctx, taken.also);
    taken.members
}

/// The other keys a client waiting on several left: their timers and checks.
fn also<K: Kind>(ctx: Ctx, also: Vec<Also<KeyId, RedisModuleTimerID>>) {
    for a in also {
        stop_check(ctx, a.stop);
        if a.new_head {
            check_by::<K>(ctx, &a.key, ctx.now_ms());
        }
    }
}

fn stop_check(ctx: Ctx, stop: Option<RedisModuleTimerID>) {
    if let Some(id) = stop {
        timer::stop::<Check>(ctx, id);
    }
}

/// Takes `client`'s wait out, wherever it is; with `seq`, only if it is
/// still that wait.
fn remove<K: Kind>(ctx: Ctx, client: u64, seq: Option<u64>) -> Option<(KeyId, Blocked<K::Data>)> {
    let (key, l) = K::book().0.remove(client, seq)?;
    let b = left::<K>(ctx, &key, l);
    Some((key, b))
}

/// Answers `client`'s wait `seq` with `outcome`, if it still waits:
/// wherever it is in its key's line (a session that ended while it waited).
pub fn answer_one<K: Kind>(ctx: Ctx, client: u64, seq: u64, outcome: Outcome, counter: &Counter) {
    if let Some((_, b)) = remove::<K>(ctx, client, Some(seq)) {
        finish::<K>(ctx, b, outcome, counter);
    }
}

/// Answers every client of `key` with `error` (a redirection: its slot is
/// served elsewhere; `UNBLOCKED`): they re-send where it belongs.
pub fn answer_all<K: Kind>(ctx: Ctx, key: &KeyId, error: &CString) -> u64 {
    let all = K::book().0.take_all(key);
    let members = taken::<K>(ctx, all);
    let n = members.len() as u64;
    for b in members {
        finish::<K>(ctx, b, Err(Failure::Message(error.clone())), K::cancellations());
    }
    n
}

/// A kind's database-event listener: flushed or swapped databases have
/// their keys checked; a master demoted answers every client as Redis
/// answers the clients it unblocks itself; slots that left with an atomic
/// migration have their clients sent where the slots went (`MOVED`).
pub fn on_db_event<K: Kind>(ctx: Ctx, ev: &DbEvent) {
    if K::gauge().load(Ordering::Relaxed) == 0 {
        return;
    }
    match ev {
        DbEvent::Changed(changed) => {
            let keys: Vec<KeyId> = K::book().0.keys().filter(|(db, _)| changed.includes(*db)).cloned().collect();
            // No key event tells which keys went away: each is checked
            // right after this command.
            let now = ctx.now_ms();
            for key in keys {
                check_by::<K>(ctx, &key, now);
            }
        }
        DbEvent::Demoted => {
            let keys: Vec<KeyId> = K::book().0.keys().cloned().collect();
            let unblocked = UNBLOCKED.to_owned();
            for key in keys {
                answer_all::<K>(ctx, &key, &unblocked);
            }
        }
        DbEvent::SlotsLeft(left) => {
            let slots: Vec<u16> = K::book().0.slots().into_iter().filter(|&s| left.left(s)).collect();
            for slot in slots {
                let keys = K::book().0.keys_in_slot(slot);
                for key in keys {
                    if let Some(error) = left.redirect(&key.1) {
                        answer_all::<K>(ctx, &key, &error);
                    }
                }
            }
        }
        DbEvent::ConfigChanged | DbEvent::ExportEnded | DbEvent::Promoted | DbEvent::Forked => {}
    }
}

/// A kind's key-event listener: if anyone is blocked on the event's key,
/// check it right after this command.
pub fn on_key_event<K: Kind>(ctx: Ctx, ev: &KeyEvent) {
    if K::gauge().load(Ordering::Relaxed) != 0 {
        check_now::<K>(ctx, ev.key);
    }
}

/// Makes `key`'s check fire no later than `at_ms` (Unix ms): keeps an
/// earlier one, replaces a later one; a key without clients gets none.
pub fn check_by<K: Kind>(ctx: Ctx, key: &KeyId, at_ms: i64) {
    let mut s = K::book();
    let Some(Arm { delay, gen, stop }) = s.0.check_by(key, at_ms, ctx.now_ms()) else { return };
    if let Some(old) = stop {
        timer::stop::<Check>(ctx, old);
    }
    let id = timer::start(ctx, delay, on_check::<K>, Check { key: key.clone(), gen });
    s.0.armed(key, gen, id);
}

/// A key event's listener's work: check `key` (in the context's database)
/// right after this command.
pub fn check_now<K: Kind>(ctx: Ctx, key: *mut RedisModuleString) {
    check_by::<K>(ctx, &(ctx.db(), crate::boundary::ctx::bytes(key).to_vec()), ctx.now_ms());
}

/// Which key a check timer checks.
struct Check {
    key: KeyId,
    gen: u64,
}

/// A key's check timer: a replaced timer is stale; Redis frees the firing
/// one itself.
unsafe extern "C" fn on_check<K: Kind>(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    let Check { key, gen } = *Box::from_raw(data.cast::<Check>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if K::book().0.check_fired(&key, gen) {
            K::check(Ctx(ctx), &key);
        }
    }));
}

/// Which wait a timeout timer ends.
struct Wait {
    client: u64,
    seq: u64,
}

/// A wait's timeout timer: the next piece of a long wait, or its end.
unsafe extern "C" fn on_deadline<K: Kind>(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    let Wait { client, seq } = *Box::from_raw(data.cast::<Wait>());
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = Ctx(ctx);
        {
            let mut s = K::book();
            let Some(b) = s.0.member_mut(client, seq) else { return };
            // This timer is the one firing: Redis frees it itself.
            b.timeout = None;
            if let Some(delay) = next_piece(b.deadline, ctx.now_ms()) {
                b.timeout = Some(timer::start(ctx, delay, on_deadline::<K>, Wait { client, seq }));
                return;
            }
        }
        if let Some((key, b)) = remove::<K>(ctx, client, Some(seq)) {
            let outcome = K::timed_out(ctx, &key, &b.data, false);
            finish::<K>(ctx, b, outcome, K::timeouts());
        }
    }));
}

/// `CLIENT UNBLOCK … TIMEOUT` (the waits' own deadlines are timers): the
/// client leaves and is answered as a timeout. Redis frees a handle
/// unblocked this way only once `RM_UnblockClient` was called on it.
unsafe extern "C" fn on_unblock<K: Kind>(
    ctx: *mut RedisModuleCtx,
    _argv: *mut *mut RedisModuleString,
    _argc: c_int,
) -> c_int {
    let c = Ctx(ctx);
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match remove::<K>(c, c.client_id(), None) {
            Some((key, b)) => {
                K::timeouts().add();
                let outcome = K::timed_out(c, &key, &b.data, true);
                let bc = let_go::<K>(c, b);
                rm!(RedisModule_UnblockClient)(bc, std::ptr::null_mut());
                outcome
            }
            None => K::unknown(c),
        }));
    entry::send(ctx, outcome.unwrap_or(Err(Failure::Error(crate::boundary::errors::INTERNAL))))
}

/// The client went away (or Redis unblocked it: this master became a
/// replica): it leaves at once and is never answered.
unsafe extern "C" fn on_disconnect<K: Kind>(ctx: *mut RedisModuleCtx, bc: *mut RedisModuleBlockedClient) {
    let c = Ctx(ctx);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if let Some((_, b)) = remove::<K>(c, c.client_id(), None) {
            K::cancellations().add();
            let_go::<K>(c, b);
            rm!(RedisModule_UnblockClient)(bc, std::ptr::null_mut());
        }
    }));
}

/// Replies to a client unblocked by [`finish`], through the one sender.
unsafe extern "C" fn on_reply(ctx: *mut RedisModuleCtx, _argv: *mut *mut RedisModuleString, _argc: c_int) -> c_int {
    let answer = rm!(RedisModule_GetBlockedClientPrivateData)(ctx).cast::<Option<Outcome>>();
    match answer.as_mut().and_then(Option::take) {
        Some(outcome) => entry::send(ctx, outcome),
        None => rm!(RedisModule_ReplyWithNull)(ctx),
    }
}

unsafe extern "C" fn free_reply(_ctx: *mut RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        drop(Box::from_raw(privdata.cast::<Option<Outcome>>()));
    }
}
