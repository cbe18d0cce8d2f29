//! LOCKDELAY and MAXHOLD on the exclusive lock's key (the rules:
//! `redis_lock_rules::lease`): what a grant stores, and settling a lease
//! that has ended.
//!
//! Settling is lazy, as Redis's own expiry is: every module command that
//! opens a lock key for writing first rewrites a canonical value whose
//! lease has ended as its tombstone, keeping the key's expiry (replicated
//! as `SET key tombstone PXAT <same>`), or deletes it when no delay is left
//! to run. From then on the scripts see it as the module does: a value no
//! token owns, that `SET NX` cannot replace, gone when its delay ends (the
//! key's own expiry, which also wakes the key's waiters).

use redis_lock_rules::args::{check_utf8, ArgError};
use redis_lock_rules::encode::structured_value;
use redis_lock_rules::lease::{self, Grant, Settle, Terms};
use redis_lock_rules::value::{self, Election, Stored};
use redis_lock_rules::Entry;
use redis_module::raw::RedisModuleString;

use crate::key::{Ctx, LockKey, NewValue};
use crate::stats;

/// Opens `name` for a write command at `now`, settling an ended lease first.
pub fn open(ctx: Ctx, name: *mut RedisModuleString, now: i64) -> LockKey {
    let mut k = LockKey::open(ctx, name);
    settle(&mut k, now);
    k
}

/// Settles the open key's lease if it ended by `now`.
pub fn settle(k: &mut LockKey, now: i64) {
    // The value's last bytes first: most keys hold no lease field, and
    // for them the expiry is not even read.
    let verdict = match k.entry() {
        Entry::Str(v) if lease::may_have_lease(v) => lease::settle(v, k.expires_at(), now),
        _ => return,
    };
    match verdict {
        Settle::Keep => {}
        Settle::Tombstone { until } => {
            k.set(NewValue::Composed(&value::tombstone(until)), until);
            stats::DELAYS_STARTED.add();
        }
        Settle::Delete => k.delete(),
    }
}

/// Whether the open key is in a lock-delay (holds a tombstone).
pub fn delayed(k: &LockKey) -> bool {
    matches!(k.entry(), Entry::Str(v) if value::parse_tombstone(v).is_some())
}

/// What a lock grant stores.
pub enum Granted {
    /// The token argument itself (`SET key token PXAT …`).
    Token,
    /// A value the module composed.
    Bytes(Vec<u8>),
}

impl Granted {
    /// The value to store for `token`.
    pub fn new_value(&self, token: *mut RedisModuleString) -> NewValue<'_> {
        match self {
            Granted::Token => NewValue::Arg(token),
            Granted::Bytes(v) => NewValue::Composed(v),
        }
    }
}

/// The value and the key's expiry (Unix ms) of a lock grant at `now` to
/// `token` (with `run_id`, a takeover's), for `ttl_ms` with `terms`.
/// Without lease fields the value is what it always was: the bare token,
/// or `{"owner":…,"runId":…}`. With them it is structured, so the token
/// must be UTF-8 (Go's JSON carries nothing else unchanged).
pub fn lock_grant(
    token: &[u8],
    run_id: Option<&str>,
    now: i64,
    ttl_ms: i64,
    terms: Terms,
) -> Result<(Granted, i64), ArgError> {
    // Checked first, as LOCK.TAKEOVER always did.
    let owner = if terms.stores_fields() || run_id.is_some() { Some(check_utf8(token)?) } else { None };
    if !terms.stores_fields() {
        let at = lease::grant(now, ttl_ms, terms)?.pxat;
        return Ok(match (owner, run_id) {
            (Some(owner), Some(run)) => (Granted::Bytes(structured_value(owner, run)), at),
            _ => (Granted::Token, at),
        });
    }
    let owner = owner.unwrap_or_default();
    let base = Stored { run_id: run_id.map(str::to_owned), ..Stored::owned_by(owner) };
    let (bytes, at) = lease::granted(base, now, ttl_ms, terms)?;
    Ok((bytes.map_or(Granted::Token, Granted::Bytes), at))
}

/// The value of a lock grant `g` to `token` (a waiter's, checked as
/// UTF-8 when it called if its terms store fields): the bare token without
/// lease fields, else the structured value.
pub fn lock_value(token: &[u8], g: &Grant) -> Granted {
    if g.hold_until.is_none() && g.delay.is_none() {
        return Granted::Token;
    }
    let owner = String::from_utf8_lossy(token);
    Granted::Bytes(lease::encode_with(Stored::owned_by(&owner), g))
}

/// The value of an election grant `g` to `token` with fence `term` and
/// `value` (both checked as UTF-8 when the candidate called): the grant
/// is the term's first revision.
pub fn elect_value(token: &[u8], term: u64, value: &[u8], g: &Grant) -> Vec<u8> {
    let (owner, value) = (String::from_utf8_lossy(token), String::from_utf8_lossy(value));
    let election = Election { term, rev: term, value: value.into_owned() };
    lease::encode_with(Stored { election: Some(election), ..Stored::owned_by(&owner) }, g)
}
