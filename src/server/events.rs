//! The module's one subscription to each server event it reads, decoded
//! once into a typed value ([`KeyEvent`], [`DbEvent`]) and handed to the
//! listeners `lib.rs` registered at load ([`listen`]), in their order. This
//! file imports no consumer: the wait queues, the observers and hold timing
//! are listeners, and a new consumer is one more.
//!
//! Why one subscription: a module has one callback per server event: a
//! second `RM_SubscribeToServerEvent` for the same event replaces the first
//! (`module.c`), so parts that each subscribed got each other's events
//! lost (an observer was not woken by a FLUSHALL once a WAIT had blocked).
//! Keyspace subscriptions do stack, but Redis calls every subscriber on
//! every event of its classes, the native commands' events included, and
//! builds a context with a temporary client for each call (about 600
//! instructions, measured by callgrind on redis 7.0.15): three parts each
//! subscribed on their own cost every `DEL`, `EXPIRE`, `RENAME` or expiry
//! of the server three such calls; here it is one.
//!
//! Nothing is subscribed before a listener needs it ([`need`]: the first
//! WAIT, OBSERVE, or hold timed), so a server that never uses them pays
//! nothing on its native commands. The classes only some listeners read
//! (`ZSET`: the waits, a holder removed by hand; `STRING`: the observers, a
//! `SET` by anyone) have a subscription of their own, taken by the first
//! that needs it. A subscription cannot be dropped (Redis 7.0 has no call
//! for it); a listener returns at its first load while it has nothing to
//! check.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use redis_lock_rules::cluster::{key_slot, slot_state};
use redis_lock_rules::migration::{exported_reply, Ranges};
use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use crate::boundary::api::rm;
use crate::boundary::ctx::Ctx;

/// The classes every listener reads: a key deleted, renamed, moved, given a
/// TTL (GENERIC), expired or evicted.
const CORE: c_int = raw::REDISMODULE_NOTIFY_GENERIC | raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED;

/// What a listener reads besides [`CORE`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Also {
    Nothing,
    /// Sorted-set events (the waits: `ZREM` of a holder frees a place).
    Zset,
    /// String events (the observers: a `SET` changes a leader's value).
    String,
    /// Only evictions, none of [`CORE`] (eviction's tracker: a held lock
    /// evicted), in a subscription of their own so that its listener is
    /// not called on every `DEL` of the server.
    EvictedOnly,
}

/// A keyspace event, decoded once for every listener.
pub struct KeyEvent<'a> {
    /// Its class (`REDISMODULE_NOTIFY_*`).
    pub class: c_int,
    /// Its name (`del`, `expired`, …), empty if Redis sent none.
    pub name: &'a [u8],
    pub key: *mut RedisModuleString,
}

impl KeyEvent<'_> {
    pub fn expired(&self) -> bool {
        self.class & raw::REDISMODULE_NOTIFY_EXPIRED != 0
    }

    pub fn evicted(&self) -> bool {
        self.class & raw::REDISMODULE_NOTIFY_EVICTED != 0
    }
}

/// The databases an event changed: these two, or all.
#[derive(Clone, Copy)]
pub enum Changed {
    Dbs(c_int, c_int),
    All,
}

impl Changed {
    pub fn includes(self, db: c_int) -> bool {
        match self {
            Changed::Dbs(a, b) => db == a || db == b,
            Changed::All => true,
        }
    }
}

/// A server event about whole databases, slots or the server's role.
pub enum DbEvent {
    /// FLUSHDB, FLUSHALL (sync or ASYNC, also the flush before DEBUG
    /// RELOAD or a full resync) finished, or SWAPDB swapped: no key event
    /// names the keys that went.
    Changed(Changed),
    /// This master became a replica.
    Demoted,
    /// This replica became a master (a failover).
    Promoted,
    /// A `CONFIG SET` changed the server's configuration.
    ConfigChanged,
    /// An atomic slot migration handed slots to another node
    /// (`crate::server::migration`): blocked clients of keys in them are
    /// sent on, what is kept of their keys is forgotten.
    SlotsLeft(SlotsLeft),
    /// The last export of slots from this node ended (completed or not).
    ExportEnded,
    /// The server forked a child (an RDB save, an AOF rewrite…), and this
    /// is the parent right after: what it propagates from now on is
    /// written after the child's snapshot.
    Forked,
}

/// Slots that left this node, and where each went.
pub struct SlotsLeft {
    ranges: Ranges,
    /// `CLUSTER NODES` as read at the hand-over (none: not read, nobody
    /// was blocked).
    nodes: Option<String>,
}

impl SlotsLeft {
    pub fn new(ranges: Ranges, nodes: Option<String>) -> Self {
        SlotsLeft { ranges, nodes }
    }

    /// Whether `slot` left.
    pub fn left(&self, slot: u16) -> bool {
        self.ranges.contains(slot)
    }

    /// What a blocked client of `key` is answered: the redirection a
    /// native blocked client gets (`MOVED slot host:port`), if its slot left.
    pub fn redirect(&self, key: &[u8]) -> Option<CString> {
        let slot = key_slot(key);
        if !self.ranges.contains(slot) {
            return None;
        }
        let nodes = self.nodes.as_deref()?;
        exported_reply(&slot_state(nodes, slot), slot).and_then(|t| CString::new(t).ok())
    }
}

/// What Redis answers the blocked clients it unblocks when a master
/// becomes a replica.
pub const UNBLOCKED: &CStr =
    c"UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";

/// A consumer of events.
pub struct Listener {
    /// The classes it reads besides [`CORE`].
    pub also: Also,
    /// None: it reads no key event.
    pub on_key: Option<fn(Ctx, &KeyEvent)>,
    /// A counter that is 0 while the listener has nothing to look for in
    /// a key event (no waiter, no timed hold…): the event is then not
    /// handed to it, a load instead of a call. None: always called.
    pub gate: Option<&'static AtomicU64>,
    pub on_db: fn(Ctx, &DbEvent),
}

/// Hands a server event decoded elsewhere (`crate::server::migration`) to
/// every listener, in their order.
pub fn dispatch_db(ctx: Ctx, ev: &DbEvent) {
    for l in listeners() {
        (l.on_db)(ctx, ev);
    }
}

type KeyFn = (fn(Ctx, &KeyEvent), Option<&'static AtomicU64>);

/// The listeners, and for each class of key event the key-event functions
/// that read it, in the listeners' order: a key event (several per write
/// while anyone waits) calls only those, with no test per listener.
struct Registered {
    all: Vec<Listener>,
    core: Vec<KeyFn>,
    zset: Vec<KeyFn>,
    string: Vec<KeyFn>,
    evicted: Vec<KeyFn>,
}

static LISTENERS: OnceLock<Registered> = OnceLock::new();

/// Registers the listeners, in the order they are called. Once, at load.
pub fn listen(all: Vec<Listener>) {
    let reading = |f: &dyn Fn(Also) -> bool| -> Vec<KeyFn> {
        all.iter().filter(|l| f(l.also)).filter_map(|l| Some((l.on_key?, l.gate))).collect()
    };
    let core = reading(&|a| a != Also::EvictedOnly);
    let zset = reading(&|a| a == Also::Zset);
    let string = reading(&|a| a == Also::String);
    let evicted = reading(&|a| a == Also::EvictedOnly);
    let _ = LISTENERS.set(Registered { all, core, zset, string, evicted });
}

fn listeners() -> &'static [Listener] {
    LISTENERS.get().map_or(&[], |r| r.all.as_slice())
}

/// The key-event functions that read events of `only` (none: [`CORE`]).
fn key_listeners(only: Option<Also>) -> &'static [KeyFn] {
    let Some(r) = LISTENERS.get() else { return &[] };
    match only {
        None | Some(Also::Nothing) => &r.core,
        Some(Also::Zset) => &r.zset,
        Some(Also::String) => &r.string,
        Some(Also::EvictedOnly) => &r.evicted,
    }
}

static DB_TAKEN: AtomicBool = AtomicBool::new(false);
static CORE_TAKEN: AtomicBool = AtomicBool::new(false);
static ZSET_TAKEN: AtomicBool = AtomicBool::new(false);
static STRING_TAKEN: AtomicBool = AtomicBool::new(false);
static EVICTED_TAKEN: AtomicBool = AtomicBool::new(false);
static CONFIG_TAKEN: AtomicBool = AtomicBool::new(false);
static FORK_TAKEN: AtomicBool = AtomicBool::new(false);

/// Subscribes the module to configuration changes, once.
pub fn need_config(ctx: Ctx) {
    if !CONFIG_TAKEN.swap(true, Ordering::Relaxed) {
        let config = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_CONFIG, dataver: 1 };
        unsafe { rm!(RedisModule_SubscribeToServerEvent)(ctx.0, config, Some(on_server_event)) };
    }
}

/// Subscribes the module to the birth of a forked child, once: taken by
/// the node state an AOF rewrite without the RDB preamble must be told
/// (`crate::store::aof_walk`): the first session ([`need_db`]) or fence.
pub fn need_fork(ctx: Ctx) {
    if !FORK_TAKEN.load(Ordering::Relaxed) && !FORK_TAKEN.swap(true, Ordering::Relaxed) {
        let fork = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_FORK_CHILD, dataver: 1 };
        unsafe { rm!(RedisModule_SubscribeToServerEvent)(ctx.0, fork, Some(on_server_event)) };
    }
}

/// Subscribes the module to the database events (flushes, swaps, role
/// changes), once: rare events, so the sessions' table takes them at load
/// (a `FLUSHALL` forgets every session, a promotion restarts deadlines).
/// Also to a fork's ([`need_fork`]): the sessions' state outlives an AOF
/// rewrite without the RDB preamble.
pub fn need_db(ctx: Ctx) {
    need_fork(ctx);
    if !DB_TAKEN.swap(true, Ordering::Relaxed) {
        // Version 1 of these events' data is what Redis 6.0 and later send.
        let flush = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_FLUSHDB, dataver: 1 };
        let swap = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_SWAPDB, dataver: 1 };
        let role = raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED, dataver: 1 };
        unsafe {
            rm!(RedisModule_SubscribeToServerEvent)(ctx.0, flush, Some(on_server_event));
            rm!(RedisModule_SubscribeToServerEvent)(ctx.0, swap, Some(on_server_event));
            rm!(RedisModule_SubscribeToServerEvent)(ctx.0, role, Some(on_server_event));
        }
    }
}

/// Subscribes the module to the database events, to [`CORE`] and to
/// `also`, each once. Main thread only.
pub fn need(ctx: Ctx, also: Also) {
    if also == Also::EvictedOnly {
        if !EVICTED_TAKEN.swap(true, Ordering::Relaxed) {
            let types = raw::REDISMODULE_NOTIFY_EVICTED;
            unsafe { rm!(RedisModule_SubscribeToKeyspaceEvents)(ctx.0, types, Some(on_evicted)) };
        }
        return;
    }
    need_db(ctx);
    let take = |taken: &AtomicBool, types: c_int, callback: KeyCallback| {
        if !taken.swap(true, Ordering::Relaxed) {
            unsafe { rm!(RedisModule_SubscribeToKeyspaceEvents)(ctx.0, types, Some(callback)) };
        }
    };
    take(&CORE_TAKEN, CORE, on_core);
    match also {
        Also::Nothing => {}
        Also::Zset => take(&ZSET_TAKEN, raw::REDISMODULE_NOTIFY_ZSET, on_zset),
        Also::String => take(&STRING_TAKEN, raw::REDISMODULE_NOTIFY_STRING, on_string),
        Also::EvictedOnly => {}
    }
}

type KeyCallback = unsafe extern "C" fn(*mut RedisModuleCtx, c_int, *const c_char, *mut RedisModuleString) -> c_int;

/// Hands a key event to the listeners that read it (`only`: those whose
/// [`Also`] it is; none: all that read [`CORE`]).
unsafe fn dispatch(
    ctx: *mut RedisModuleCtx,
    class: c_int,
    event: *const c_char,
    key: *mut RedisModuleString,
    only: Option<Also>,
) -> c_int {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let name = if event.is_null() { &b""[..] } else { CStr::from_ptr(event).to_bytes() };
        let ev = KeyEvent { class, name, key };
        for &(on_key, gate) in key_listeners(only) {
            match gate {
                Some(g) if g.load(Ordering::Relaxed) == 0 => {}
                _ => on_key(Ctx(ctx), &ev),
            }
        }
    }));
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_core(
    ctx: *mut RedisModuleCtx,
    class: c_int,
    event: *const c_char,
    key: *mut RedisModuleString,
) -> c_int {
    dispatch(ctx, class, event, key, None)
}

unsafe extern "C" fn on_zset(
    ctx: *mut RedisModuleCtx,
    class: c_int,
    event: *const c_char,
    key: *mut RedisModuleString,
) -> c_int {
    dispatch(ctx, class, event, key, Some(Also::Zset))
}

unsafe extern "C" fn on_string(
    ctx: *mut RedisModuleCtx,
    class: c_int,
    event: *const c_char,
    key: *mut RedisModuleString,
) -> c_int {
    dispatch(ctx, class, event, key, Some(Also::String))
}

unsafe extern "C" fn on_evicted(
    ctx: *mut RedisModuleCtx,
    class: c_int,
    event: *const c_char,
    key: *mut RedisModuleString,
) -> c_int {
    dispatch(ctx, class, event, key, Some(Also::EvictedOnly))
}

unsafe extern "C" fn on_server_event(
    ctx: *mut RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let Some(ev) = decode(event, subevent, data) else { return };
        dispatch_db(Ctx(ctx), &ev);
    }));
}

/// What a server event means; `None` when it is no news (FLUSHDB's START
/// fires while the keys are still there; only END is).
///
/// # Safety
/// `data` is the event's data as Redis passed it to the callback.
unsafe fn decode(event: raw::RedisModuleEvent, subevent: u64, data: *mut c_void) -> Option<DbEvent> {
    match event.id {
        raw::REDISMODULE_EVENT_FLUSHDB if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END => {
            Some(DbEvent::Changed(match data.cast::<raw::RedisModuleFlushInfo>().as_ref() {
                Some(info) if info.dbnum >= 0 => Changed::Dbs(info.dbnum, info.dbnum),
                // -1 is FLUSHALL; without data, check everything.
                _ => Changed::All,
            }))
        }
        raw::REDISMODULE_EVENT_SWAPDB => Some(DbEvent::Changed(
            data.cast::<raw::RedisModuleSwapDbInfo>()
                .as_ref()
                .map_or(Changed::All, |i| Changed::Dbs(i.dbnum_first, i.dbnum_second)),
        )),
        // Redis 7.0/8.2 and valkey 8.1 unblock every blocked client first
        // (`replicationSetMaster`); valkey 9.1 in a cluster leaves
        // module-blocked clients blocked: the listeners answer theirs.
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED
            if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA =>
        {
            Some(DbEvent::Demoted)
        }
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED
            if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER =>
        {
            Some(DbEvent::Promoted)
        }
        raw::REDISMODULE_EVENT_CONFIG => Some(DbEvent::ConfigChanged),
        raw::REDISMODULE_EVENT_FORK_CHILD if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN => {
            Some(DbEvent::Forked)
        }
        _ => None,
    }
}
