//! Who leads an election's key (the exclusive lock's key holding an
//! election value; the rules are `redis_lock_rules::election`), read as
//! LOCK.LEADER, LOCK.OBSERVE and the blocked observers
//! (`crate::blocked::observers`) all read it.

use redis_lock_rules::election::{leadership, seen_rev, Leadership};
use redis_lock_rules::lease::{self as rules_lease, Settle, Shown};
use redis_lock_rules::{revoke, value, Entry};
use redis_module::raw::RedisModuleString;

use crate::boundary::ctx::Ctx;
use crate::boundary::reply::{Failure, Reply, Value};
use crate::store::lease;
use crate::store::lock_key::LockKey;
use crate::store::session;

/// A key's leadership and when its lease ends (Unix ms; none: no expiry):
/// with LOCKDELAY, before the key's own expiry (`docs/lease.md`).
pub struct Led {
    pub leadership: Leadership,
    pub expires_at: Option<i64>,
    /// A revoked leader's reason and deadline (Unix ms), `LOCK.REVOKE`.
    pub revoked: Option<(String, i64)>,
}

/// Who leads `name` now: `None` when leaderless; WRONGTYPE when the key
/// is no string. Opens the key read-only: on a replica, an expired key is
/// gone, as for GET. A lease that has ended (LOCKDELAY, MAXHOLD) leads no
/// more, settled or not: observers armed for its end see it leaderless.
pub fn read(ctx: Ctx, name: *mut RedisModuleString) -> Result<Option<Led>, Failure> {
    let k = LockKey::open_read(ctx, name);
    let pxat = k.expires_at();
    let (leadership, expires_at, revoked) = match k.entry() {
        Entry::Absent => return Ok(None),
        Entry::OtherType => return Err(Failure::WrongType),
        // A session's leader: while its session lives, until its deadline.
        Entry::Str(value) if value.starts_with(value::HELD_PREFIX) => match lease::shown(value, pxat, ctx.now_ms()) {
            Shown::Value { bytes: None, .. } => {
                let deadline = value::parse_held(value).and_then(|h| session::deadline_of(&h.session));
                (leadership(value), deadline.into_iter().chain(pxat).min(), None)
            }
            _ => return Ok(None),
        },
        Entry::Str(value) if rules_lease::settle(value, pxat, ctx.now_ms()) != Settle::Keep => return Ok(None),
        Entry::Str(value) => (leadership(value), rules_lease::held_until(value, pxat), revoked(value)),
    };
    Ok(leadership.map(|leadership| Led { leadership, expires_at, revoked }))
}

/// The reason and deadline of a revoked value (read only from a value
/// whose last bytes may be a lease's).
fn revoked(value: &[u8]) -> Option<(String, i64)> {
    let v = value::parse(value).filter(|_| rules_lease::may_have_lease(value))?;
    revoke::revoked_of(&v).map(|(reason, at)| (reason.to_owned(), at))
}

/// The revision a reading of the key stands for (another type: none, 0).
pub fn rev_of(current: &Result<Option<Led>, Failure>) -> u64 {
    match current {
        Ok(led) => seen_rev(led.as_ref().map(|l| &l.leadership)),
        Err(_) => 0,
    }
}

/// LOCK.LEADER's reply (and LOCK.OBSERVE's): nil, or
/// `value V term N rev N ttl-ms MS` (-1: the key has no expiry)
/// `revoked REASON|nil revoked-until MS|nil` (LOCK.REVOKE).
pub fn leader_reply(current: Option<&Led>, now: i64) -> Reply {
    let Some(Led { leadership, expires_at, revoked }) = current else { return Reply::Nil };
    let ttl = expires_at.map_or(-1, |at| at.saturating_sub(now).max(0));
    Reply::Fields(vec![
        (c"value", Value::Bytes(leadership.value.as_bytes().to_vec())),
        (c"term", Value::Int(leadership.term as i64)),
        (c"rev", Value::Int(leadership.rev as i64)),
        (c"ttl-ms", Value::Int(ttl)),
        (c"revoked", revoked.as_ref().map_or(Value::Nil, |(r, _)| Value::Bytes(r.as_bytes().to_vec()))),
        (c"revoked-until", revoked.as_ref().map_or(Value::Nil, |&(_, at)| Value::Int(at))),
    ])
}
