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

use redis_lock_rules::args::{check_lease_terms, check_utf8, wait_deadline, ArgError, GrantOptions};
use redis_lock_rules::encode::structured_value;
use redis_lock_rules::held;
use redis_lock_rules::lease::{self, Grant, Settle, Shown, Terms, View};
use redis_lock_rules::value::{self, Election, Stored};
use redis_lock_rules::Entry;
use redis_module::raw::RedisModuleString;

use crate::boundary::ctx::Ctx;
use crate::boundary::reply::Failure;
use crate::server::counters as stats;
use crate::server::eviction;
use crate::server::{cluster, config};
use crate::server::{revoked, timings};
use crate::store::fence;
use crate::store::lock_key::{LockKey, NewValue};
use crate::store::session;

/// Opens `name` for a write command at `now`, settling an ended lease first.
#[inline(always)]
pub fn open(ctx: Ctx, name: *mut RedisModuleString, now: i64) -> LockKey {
    let mut k = LockKey::open(ctx, name);
    settle_at(&mut k, || now);
    k
}

/// [`open`] for a command that needs the time only to settle a lease: the
/// clock (a call into Redis) is read only when the value may carry one,
/// so a key without a lease field pays nothing for the lease rules.
#[inline(always)]
pub fn open_now(ctx: Ctx, name: *mut RedisModuleString) -> LockKey {
    let mut k = LockKey::open(ctx, name);
    settle_at(&mut k, || ctx.now_ms());
    k
}

/// Settles the open key's lease if it ended by `now`.
pub fn settle(k: &mut LockKey, now: i64) {
    settle_at(k, || now);
}

/// [`settle`], reading `now` only for a value that may carry a lease.
/// Inlined into every command that opens a lock key: the check is a look
/// at the value's last bytes (most keys hold no lease field, and for them
/// neither the expiry nor the clock is even read); the rest is out of line.
#[inline(always)]
fn settle_at(k: &mut LockKey, now: impl FnOnce() -> i64) {
    // The value's first or last bytes: most keys hold neither a session's
    // hold nor a lease field, and for them neither the expiry nor the
    // clock is even read.
    if matches!(k.entry(), Entry::Str(v) if value::is_held(v) || lease::may_have_lease(v)) {
        settle_lease(k, now());
    }
}

/// [`settle`] of a value that may be a session's hold or carry a lease field.
#[cold]
#[inline(never)]
fn settle_lease(k: &mut LockKey, now: i64) {
    // What ends: a session's hold (and whether by its hold limit, a
    // revocation's deadline included, rather than its session's end), or
    // a lease; and whether it was a revoked hold that reached its deadline.
    let (verdict, held, revoked_end) = match k.entry() {
        Entry::Str(v) if value::is_held(v) => match value::parse_held(v) {
            Some(h) => {
                let state = session::state_of(&h.session, now);
                let verdict = held::settle(&h, state, k.expires_at(), now);
                if matches!(verdict, Settle::Keep) {
                    if let Some(until) = held::orphan_end(state, k.expires_at(), now, config::orphan_grace()) {
                        lease_orphan(k, until);
                    }
                    return;
                }
                let by_limit = h.hold_until.is_some_and(|at| at <= now);
                (verdict, Some(by_limit), h.revoked.is_some().then_some(by_limit))
            }
            None => return,
        },
        Entry::Str(v) => (lease::settle(v, k.expires_at(), now), None, None),
        _ => return,
    };
    if matches!(verdict, Settle::Keep) {
        return;
    }
    // A revoked hold that reached its deadline (not a lease its holder
    // let run out before it) is the revocation's end.
    let revoked_end = match k.entry() {
        Entry::Str(v) if held.is_none() => {
            value::parse(v).filter(|s| s.revoked.is_some()).map(|s| lease::lease_end(&s) == s.hold_until)
        }
        _ => revoked_end,
    };
    // Either way the revoked note is done with (the tombstone's expiry is
    // no revoked end).
    if let Some(at_deadline) = revoked_end {
        if at_deadline {
            stats::REVOKED_ENDS.add();
        }
        let (ctx, name) = k.ctx_and_name();
        revoked::forget(ctx, name);
    }
    // A session's hold ended by its session's end (not its hold limit).
    if held == Some(false) {
        stats::SESSION_HOLDS_ENDED.add();
    }
    // The lease ran out while held (its key lives on as the tombstone).
    // Recorded before the write, whose `del` would end it as deleted.
    let (ctx, name) = k.ctx_and_name();
    timings::hold_ended(ctx, name, timings::End::Expired, || now);
    match verdict {
        Settle::Keep => {}
        Settle::Tombstone { until } => {
            k.set(NewValue::Composed(&value::tombstone(until)), until);
            stats::DELAYS_STARTED.add();
        }
        Settle::Delete => k.delete(),
    }
}

/// Gives the open key, a hold of a session this node does not know and
/// without an end, the end `until` (`PEXPIREAT`): unless its live holder
/// adopts it first (`SESSION.ADOPT`), it ends then as a lease would. Only
/// where this node serves the key's slot: while the slot is still being
/// imported (a `MIGRATE` under way, an atomic migration) the holder's
/// client still routes to the old node and could not adopt it.
#[cold]
#[inline(never)]
fn lease_orphan(k: &mut LockKey, until: i64) {
    let (ctx, name) = k.ctx_and_name();
    if cluster::redirect(ctx, crate::boundary::ctx::bytes(name)).is_some() {
        return;
    }
    k.expire_at(until);
    stats::ORPHANS_LEASED.add();
}

/// Whether the open key is in a lock-delay (holds a tombstone).
#[inline(always)]
pub fn delayed(k: &LockKey) -> bool {
    // The first byte tells a held lock's bare token from a tombstone
    // without a call: a refusal's common case.
    matches!(k.entry(), Entry::Str(v) if v.first() == Some(&b'{') && value::parse_tombstone(v).is_some())
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

/// A lock grant as checked before any key is opened (LOCK.ACQUIRE,
/// LOCK.ACQUIREALL): its lease at the time checked, its terms, and when its
/// `WAIT` gives up (`Some(None)`: never; `None`: no `WAIT`).
pub struct Checked {
    pub grant: Grant,
    pub terms: Terms,
    pub wait_until: Option<Option<i64>>,
}

/// Every check of a lock grant of `token` for `ttl` ms with `opts` at
/// `now` that needs no key: the lease terms, the times, the token, the
/// fence space, the eviction refusal. An error here changes nothing.
#[inline(always)]
pub fn check_grant(ctx: Ctx, token: &[u8], ttl: i64, opts: &GrantOptions, now: i64) -> Result<Checked, Failure> {
    check_lease_terms(opts, ttl)?;
    let terms = Terms::of(opts);
    let grant = lease::grant(now, ttl, terms)?;
    check_token(token, terms)?;
    let wait_until = opts.wait.map(|timeout| wait_deadline(now, timeout)).transpose()?;
    fence::check_space(ctx, opts.fence)?;
    eviction::refusal(ctx)?;
    Ok(Checked { grant, terms, wait_until })
}

/// Checks, before the key is opened, what a lock grant with `terms` needs
/// of its token: with lease fields the value is structured, so the token
/// must be UTF-8 (Go's JSON carries nothing else unchanged).
#[inline]
pub fn check_token(token: &[u8], terms: Terms) -> Result<(), ArgError> {
    if terms.stores_fields() {
        check_utf8(token)?;
    }
    Ok(())
}

/// The value of a takeover's grant `g`: `{"owner":…,"runId":…}` as it
/// always was, followed by the lease fields if any. Composed only once the
/// takeover is granted (a refusal costs no encoding).
pub fn takeover_value(token: &str, run_id: &str, g: &Grant) -> Vec<u8> {
    if g.hold_until.is_none() && g.delay.is_none() {
        return structured_value(token, run_id);
    }
    lease::encode_with(Stored { run_id: Some(run_id.to_owned()), ..Stored::owned_by(token) }, g)
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

/// What LOCK.INFO shows of `value` (expiring at `pxat`) at `now`, read-only
/// (also on a replica): a lease or a session-held lock that ended is shown
/// as it will be once settled.
pub fn shown(value: &[u8], pxat: Option<i64>, now: i64) -> Shown {
    let Some(h) = value::parse_held(value) else { return lease::show(value, pxat, now) };
    match held::settle(&h, session::state_of(&h.session, now), pxat, now) {
        Settle::Keep => Shown::Value { bytes: None, view: View { hold_until: h.hold_until, ..View::default() } },
        Settle::Tombstone { until } => Shown::Value {
            bytes: Some(value::tombstone(until)),
            view: View { delayed_until: Some(until), ..View::default() },
        },
        Settle::Delete => Shown::Absent,
    }
}

/// Whether the open key holds a hold of session `id` that is not revoked:
/// a grant made after the revoked hold's key went (a `DEL` by hand).
pub fn held_anew(k: &LockKey, id: redis_lock_rules::session::Id) -> bool {
    matches!(k.entry(), Entry::Str(v) if value::parse_held(v).is_some_and(|h| h.revoked.is_none()
        && redis_lock_rules::args::parse_session_id(h.session.as_bytes()) == Ok(id)))
}

/// The session of a session-held value, if it is one.
#[inline]
pub fn held_by_session(value: &[u8]) -> Option<String> {
    value::parse_held(value).map(|h| h.session)
}
