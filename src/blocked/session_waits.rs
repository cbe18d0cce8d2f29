//! Which waiting requests each session has (`LOCK.ACQUIRE … SESSION id
//! WAIT`): a session that ends answers them at once
//! (`crate::blocked::waiters::session_ended_answer`). Each wait is named by
//! its client and wait number, as the blocked-client machine knows it.

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex, MutexGuard};

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
