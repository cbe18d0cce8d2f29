//! Holds of sessions lost to an eviction, on their way to their sessions
//! (docs/eviction.md, "How a session's holder hears it"). Eviction's table
//! (`crate::server::eviction`) keeps, beside each session-held hold it
//! tracks, the session's short id and the hold's token
//! ([`SessionHold`]); when Redis evicts the key, the live ones are queued
//! here, and the storage layer's listener of evictions (which runs next,
//! `crate::store::session_evicted`) takes them, so that the session's
//! keepalive tells its holder. Nothing is queued for a key no session held.
//!
//! Everything here runs on Redis's main thread.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use redis_lock_rules::args::parse_session_id;
use redis_lock_rules::eviction::{Family, SessionHold};
use redis_lock_rules::held::short;
use redis_lock_rules::hold_table::token_hash;
use redis_lock_rules::lock::{owner_of, Owner};
use redis_lock_rules::value;

/// One session-held hold lost to an eviction.
#[derive(Clone, Debug)]
pub struct Lost {
    pub db: c_int,
    pub key: Vec<u8>,
    pub family: Family,
    pub hold: SessionHold,
    /// When its key was evicted (Unix ms).
    pub at: i64,
}

static QUEUE: LazyLock<Mutex<Vec<Lost>>> = LazyLock::new(|| Mutex::new(Vec::new()));
/// Holds queued: the storage listener's gate (0: it is not called).
pub static PENDING: AtomicU64 = AtomicU64::new(0);

/// Who holds a lock key whose value is now `value` (eviction's slow
/// path): its token (hash) and family, and its session if a session holds
/// it. A tombstone or a value no token owns holds nothing.
pub fn owner(value: Option<&[u8]>) -> (Option<(u64, Family)>, Option<SessionHold>) {
    let Some(v) = value else { return (None, None) };
    if let Some((session, family)) = of_held(v) {
        return (Some((token_hash(&session.token), family)), Some(session));
    }
    let owner = match value::parse(v) {
        Some(stored) => {
            let family = if stored.election.is_some() { Family::Leader } else { Family::Lock };
            Some((token_hash(stored.owner.as_bytes()), family))
        }
        None if value::parse_tombstone(v).is_some() => None,
        None => match owner_of(v) {
            Owner::Raw(raw) => Some((token_hash(raw), Family::Lock)),
            Owner::Str(s) => Some((token_hash(&s.to_vec()), Family::Lock)),
            Owner::Unmatchable => None,
        },
    };
    (owner, None)
}

/// The session of a lock's or leader's value held by a session (and
/// whether it is a leader's).
fn of_held(v: &[u8]) -> Option<(SessionHold, Family)> {
    if !value::is_held(v) {
        return None;
    }
    let held = value::parse_held(v)?;
    let id = parse_session_id(held.session.as_bytes()).ok()?;
    let family = if held.election.is_some() { Family::Leader } else { Family::Lock };
    Some((SessionHold { short: short(id), token: held.token.into_bytes().into() }, family))
}

/// The session of a holder's place written by a commit (its short id).
pub fn of_holder(session: Option<u64>, token: &[u8]) -> Option<SessionHold> {
    session.map(|short| SessionHold { short, token: token.into() })
}

/// Queues the session-held holds of `key` (in `db`) evicted at `at`.
pub fn lost(db: c_int, key: &[u8], at: i64, holds: Vec<(Family, SessionHold)>) {
    if holds.is_empty() {
        return;
    }
    let mut q = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    q.extend(holds.into_iter().map(|(family, hold)| Lost { db, key: key.to_vec(), family, hold, at }));
    PENDING.store(q.len() as u64, Ordering::Relaxed);
}

/// Takes the queued holds.
pub fn take() -> Vec<Lost> {
    let mut q = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    PENDING.store(0, Ordering::Relaxed);
    std::mem::take(&mut *q)
}
