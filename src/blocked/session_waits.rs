//! Which waiting requests each session has (`LOCK.ACQUIRE … SESSION id
//! WAIT`): a session that ends answers them at once
//! (`crate::blocked::queue::session_ended_answer`). Each wait is named by
//! its client and wait number, as the blocked-client machine knows it.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_lock_rules::ArgError;
use redis_module::raw::RedisModuleString;

use crate::boundary::ctx::bytes;
use crate::store::session;

/// Per session, its requests' waits: (client, wait number).
type SessionWaits = HashMap<u128, HashSet<(u64, u64)>>;

static SESSION_WAITS: LazyLock<Mutex<SessionWaits>> = LazyLock::new(Default::default);

fn session_waits() -> MutexGuard<'static, SessionWaits> {
    SESSION_WAITS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes that `wait`, just blocked, waits for session `id`.
pub fn note(id: u128, wait: (u64, u64)) {
    session_waits().entry(id).or_default().insert(wait);
}

/// `wait` of session `id` left its line (granted, timed out, gone).
pub fn forget(id: u128, wait: (u64, u64)) {
    let mut waits = session_waits();
    if let Some(set) = waits.get_mut(&id) {
        set.remove(&wait);
        if set.is_empty() {
            waits.remove(&id);
        }
    }
}

/// The waits of session `id`, which ended: taken out, to be answered.
pub fn take(id: u128) -> Option<HashSet<(u64, u64)>> {
    session_waits().remove(&id)
}

/// What the head's grant at `now` stores when it waits with `SESSION id`
/// (`head`: its session, token and hold limit; none without): refused,
/// before anything is written, when its session ended (or is unknown here)
/// while it waited; it is then answered `ERR no such session …`, and the
/// next one is tried.
pub fn held_grant(head: Option<(u128, *mut RedisModuleString, Option<i64>)>, now: i64) -> Result<HeldGrant, ArgError> {
    let Some((id, token, max_hold)) = head else { return Ok(None) };
    Ok(Some((id, session::held_grant(id, bytes(token), now, max_hold)?)))
}

/// A lock's grant with a session: its id, value and the key's expiry.
pub type HeldGrant = Option<(u128, (Vec<u8>, Option<i64>))>;
