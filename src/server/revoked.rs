//! The revoked holds whose deadline Redis's own expiry may reach first
//! (`LOCK.REVOKE`, `docs/revocation.md`): a lock without a lock-delay
//! expires at its deadline, and a key that expires takes its value with
//! it, so the module could not tell that hold's end from any other
//! expiry. The revoke notes the key here (this server's memory only, not
//! replicated); its `expired` event at or after the deadline is counted as
//! the revocation's end (`lock_revoked_ends`). The module's own end of the
//! hold (settling, pruning, a revoke without grace) counts it itself and
//! [`forget`]s the key; a `del` (a release, a settled delete) forgets it
//! uncounted. Nothing is looked up while no revocation is pending: one
//! relaxed load per key event.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::raw::RedisModuleString;

use crate::boundary::ctx::{bytes, Ctx};
use crate::server::counters::REVOKED_ENDS;
use crate::server::events::{self, Also, DbEvent, KeyEvent};

type Key = (c_int, Vec<u8>);

static PENDING: LazyLock<Mutex<HashMap<Key, i64>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
/// How many notes are kept: the key-event listener's gate (0: it has
/// nothing to look for).
pub static COUNT: AtomicU64 = AtomicU64::new(0);

fn pending() -> MutexGuard<'static, HashMap<Key, i64>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

fn publish(p: &HashMap<Key, i64>) {
    COUNT.store(p.len() as u64, Ordering::Relaxed);
}

/// `name` (in the context's database) holds a hold revoked until
/// `deadline` (Unix ms; an earlier one already noted is kept).
pub fn noted(ctx: Ctx, name: *mut RedisModuleString, deadline: i64) {
    events::need(ctx, Also::Nothing);
    let mut p = pending();
    let at = p.entry((ctx.db(), bytes(name).to_vec())).or_insert(deadline);
    *at = (*at).min(deadline);
    publish(&p);
}

/// The module ended `name`'s revoked hold itself (and counted it).
pub fn forget(ctx: Ctx, name: *mut RedisModuleString) {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut p = pending();
    p.remove(&(ctx.db(), bytes(name).to_vec()));
    publish(&p);
}

/// The key-event listener: an expiry at or after the deadline is the
/// revocation's end; a deletion, eviction or move ends the note.
pub fn on_key_event(ctx: Ctx, ev: &KeyEvent) {
    if COUNT.load(Ordering::Relaxed) == 0 || ev.name == b"expire" {
        return;
    }
    let mut p = pending();
    if let Some(deadline) = p.remove(&(ctx.db(), bytes(ev.key).to_vec())) {
        if ev.expired() && ctx.now_ms() >= deadline {
            REVOKED_ENDS.add();
        }
        publish(&p);
    }
}

/// Whole databases changed (flushed, swapped) or this master became a
/// replica: the notes are dropped (their keys went, or are the master's).
pub fn on_db_event(_ctx: Ctx, ev: &DbEvent) {
    if matches!(ev, DbEvent::Changed(_) | DbEvent::Demoted) && COUNT.load(Ordering::Relaxed) != 0 {
        let mut p = pending();
        p.clear();
        publish(&p);
    }
}
