//! LOCK.REVOKE (issue 31, `docs/revocation.md`): ask the holder of an
//! exclusive lock, an election's leader, or a holder of a semaphore or
//! read-write lock to give its hold up by a deadline the server enforces.
//! The rules are `redis_lock_rules::revoke`: the deadline is a hold limit
//! (a lock's `holdUntil`, a holder's hold member), so the server ends the
//! hold with what already ends a lease that runs out (the key's expiry,
//! settling to the tombstone, the queues' check timers). A family of its
//! own: it opens either kind of key. A lock held by a session is revoked
//! alone (not its session): its value and expiry carry the deadline as
//! any revoked lock's, and the session's table notes it for its holder.

use redis_lock_rules::args::{check_holder_key_and_token, parse_session_id};
use redis_lock_rules::held::{self as rules_held, Revoked, SessionState};
use redis_lock_rules::revoke::{self, LockRevoke, Options, Write};
use redis_lock_rules::value::{self, Held};
use redis_lock_rules::{ArgError, Entry};
use redis_module::raw::RedisModuleString;

use crate::blocked::{queue, session_end};
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::reply::{Argv, Failure, Outcome, Reply, Value};
use crate::server::counters::{self as stats, holder_counters};
use crate::server::{revoked, timings};
use crate::store::fence;
use crate::store::holders_key::{Edit, Hold, HoldersKey, Mark};
use crate::store::lease;
use crate::store::lock_key::{LockKey, NewValue};
use crate::store::{session, session_revoked};

/// What a revoke did, as its reply says.
enum Did {
    /// The holder has until the deadline (Unix ms).
    Revoked,
    /// The hold ended at once (no `GRACE`, or a deadline already passed).
    Ended,
    /// `TOKEN` does not hold the key (any more).
    NotHolder,
    /// Nobody holds the key.
    NoHolder,
}

/// The reply: `result revoked|ended|not-holder|no-holder token T|nil deadline MS|nil`.
fn reply(did: Did, token: Option<Vec<u8>>, deadline: Option<i64>) -> Outcome {
    let result: &[u8] = match did {
        Did::Revoked => b"revoked",
        Did::Ended => b"ended",
        Did::NotHolder => b"not-holder",
        Did::NoHolder => b"no-holder",
    };
    if matches!(did, Did::Revoked | Did::Ended) {
        stats::REVOKES.add();
    }
    Ok(Reply::Fields(vec![
        (c"result", Value::Bytes(result.to_vec())),
        (c"token", token.map_or(Value::Nil, Value::Bytes)),
        (c"deadline", deadline.map_or(Value::Nil, Value::Int)),
    ]))
}

/// LOCK.REVOKE key [TOKEN token] [GRACE ms] [REASON text]
pub fn revoke(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, ref options @ ..] = argv else { return Err(Failure::Arity) };
    if bytes(key).is_empty() {
        return Err(Failure::Arg(ArgError::KeyOrTokenMissing));
    }
    let opts = revoke::parse_options(options.iter().map(|&o| bytes(o)))?;
    let now = ctx.now_ms();
    revoke::deadline(now, opts.grace, None)?;
    // A lease that ended is settled first: nobody holds it any more.
    let mut k = lease::open(ctx, key, now);
    let verdict = match k.entry() {
        Entry::Absent => return reply(Did::NoHolder, None, None),
        Entry::OtherType => {
            drop(k);
            return revoke_holder(ctx, key, &opts, now);
        }
        Entry::Str(v) => match value::parse_held(v) {
            // One hold of a session: the session keeps its other holds.
            Some(held) => return revoke_held(ctx, k, key, held, &opts, now),
            None => revoke::revoke_lock(v, k.expires_at(), now, &opts)?,
        },
    };
    let (owner, deadline, write) = match verdict {
        LockRevoke::NoHolder => return reply(Did::NoHolder, None, None),
        LockRevoke::NotHolder => return reply(Did::NotHolder, opts.token.map(<[u8]>::to_vec), None),
        LockRevoke::Revoked { owner, deadline, write } => (owner.into_bytes(), deadline, write),
    };
    match write {
        Write::Store { mut value, pxat } => {
            // An election's revision moves: its observers are answered.
            let rev = value.election.as_ref().map(|_| fence::issue(ctx, now)).transpose()?;
            if let (Some(e), Some(rev)) = (value.election.as_mut(), rev) {
                e.rev = rev;
            }
            k.set(NewValue::Composed(&value.encode()), pxat);
            if let Some(rev) = rev {
                fence::replicate_floor(ctx, rev);
            }
            revoked::noted(ctx, key, deadline);
            reply(Did::Revoked, Some(owner), Some(deadline))
        }
        Write::Tombstone { until } => {
            timings::hold_ended(ctx, key, timings::End::Expired, || now);
            k.set(NewValue::Composed(&value::tombstone(until)), until);
            stats::DELAYS_STARTED.add();
            stats::REVOKED_ENDS.add();
            reply(Did::Ended, Some(owner), Some(deadline))
        }
        Write::Delete => {
            timings::hold_ended(ctx, key, timings::End::Expired, || now);
            let _quiet = queue::serving();
            k.delete();
            drop(k);
            queue::grant_next(ctx, key);
            stats::REVOKED_ENDS.add();
            reply(Did::Ended, Some(owner), Some(deadline))
        }
    }
}

/// A lock held by a session: that one hold gets the deadline (its value's
/// `holdUntil`, the key's `PXAT` with the session's lock-delay after it),
/// and the session's table notes it, so that its keepalive and
/// SESSION.INFO tell the holder, and the sessions' timer ends the hold at
/// the deadline and detaches it.
fn revoke_held(ctx: Ctx, mut k: LockKey, key: *mut RedisModuleString, held: Held, opts: &Options, now: i64) -> Outcome {
    if opts.token.is_some_and(|t| t != held.token.as_bytes()) {
        return reply(Did::NotHolder, opts.token.map(<[u8]>::to_vec), None);
    }
    // Settled: its session is alive here, or one this node does not know.
    let state = session::state_of(&held.session, now);
    let lock_delay = rules_held::lock_delay(&held, state, k.expires_at());
    let (deadline, write) = rules_held::revoke(&held, lock_delay, now, opts)?;
    let owner = held.token.clone().into_bytes();
    match write {
        Revoked::Store { value, pxat } => {
            k.set(NewValue::Composed(&value), pxat);
            drop(k);
            if let (Ok(id), SessionState::Alive { .. }) = (parse_session_id(held.session.as_bytes()), state) {
                session_revoked::revoke(ctx, id, key, None, deadline, opts.reason);
                session_end::arm(ctx, deadline.saturating_add(1));
            }
            revoked::noted(ctx, key, deadline);
            reply(Did::Revoked, Some(owner), Some(deadline))
        }
        Revoked::Tombstone { until } => {
            timings::hold_ended(ctx, key, timings::End::Expired, || now);
            session_revoked::detach(ctx, &held.session, key);
            k.set(NewValue::Composed(&value::tombstone(until)), until);
            stats::DELAYS_STARTED.add();
            stats::REVOKED_ENDS.add();
            reply(Did::Ended, Some(owner), Some(deadline))
        }
        Revoked::Delete => {
            timings::hold_ended(ctx, key, timings::End::Expired, || now);
            session_revoked::detach(ctx, &held.session, key);
            let _quiet = queue::serving();
            k.delete();
            drop(k);
            queue::grant_next(ctx, key);
            stats::REVOKED_ENDS.add();
            reply(Did::Ended, Some(owner), Some(deadline))
        }
    }
}

/// A semaphore's or read-write lock's holder: `TOKEN`, or the one holder.
fn revoke_holder(ctx: Ctx, key: *mut RedisModuleString, opts: &Options, now: i64) -> Outcome {
    if let Some(t) = opts.token {
        check_holder_key_and_token(bytes(key), t)?;
    }
    let mut k = HoldersKey::open(ctx, key);
    let Some(first) = k.scan(now, None).map_err(|_| Failure::WrongType)?.filter(|s| s.live > 0) else {
        return reply(Did::NoHolder, None, None);
    };
    let counters = holder_counters(first.kind.family());
    let name = match opts.token {
        Some(t) => t.to_vec(),
        None if first.live > 1 => return Err(Failure::Arg(ArgError::TokenRequired)),
        None => match k.live_holders(now, 1).pop() {
            Some((t, _)) => t,
            None => return reply(Did::NoHolder, None, None),
        },
    };
    let token = ctx.string(&name);
    let outcome = revoke_holder_token(ctx, key, k, token, opts, now, counters.expired);
    ctx.free(token);
    outcome
}

fn revoke_holder_token(
    ctx: Ctx,
    key: *mut RedisModuleString,
    mut k: HoldersKey,
    token: *mut RedisModuleString,
    opts: &Options,
    now: i64,
    expired: &stats::Counter,
) -> Outcome {
    let name = bytes(token).to_vec();
    let summary = k.scan(now, Some(token)).map_err(|_| Failure::WrongType)?;
    // Held while its lease runs; a place in its lock-delay is no one's.
    let Some((s, own)) = summary.filter(|s| s.own_lease(now).is_some()).and_then(|s| Some((s, s.own?))) else {
        k.commit(summary.as_ref(), Edit::Keep, expired);
        return match opts.token {
            Some(_) => reply(Did::NotHolder, Some(name), None),
            None => reply(Did::NoHolder, None, None),
        };
    };
    let deadline = revoke::deadline(now, opts.grace, s.hold)?;
    // A hold member's score carries the half that marks it exactly only
    // below 2^52 ms (year 144,683).
    if deadline >= 1 << 52 {
        return Err(Failure::Arg(ArgError::GraceTooLarge));
    }
    let place = deadline.checked_add(s.delay).ok_or(ArgError::GraceTooLarge)?.min(own);
    // Held by a session: ended now, its session no longer holds it.
    let held_by = s.session;
    if deadline <= now && s.delay == 0 {
        let _quiet = queue::serving();
        k.commit(Some(&s), Edit::Remove { token }, expired);
        drop(k);
        if let Some(short) = held_by {
            session_revoked::detach_holder(ctx, short, key, token);
        }
        revoked::forget_reason(ctx, bytes(key), &name);
        queue::grant_next(ctx, key);
        stats::REVOKED_ENDS.add();
        return reply(Did::Ended, Some(name), Some(deadline));
    }
    if held_by.is_some() && deadline <= now {
        k.mark_session(Mark::Clear);
    }
    k.commit(Some(&s), Edit::Put { token, at: place, tag: None, hold: Hold::Revoked(deadline) }, expired);
    drop(k);
    match held_by {
        Some(short) if deadline <= now => session_revoked::detach_holder(ctx, short, key, token),
        Some(short) => note_held(ctx, short, key, token, deadline, opts.reason, now),
        None => {}
    }
    if deadline > now {
        // Its reason: the hold member's score carries only the deadline.
        revoked::noted_holder(ctx, key, deadline, &name, opts.reason);
    } else {
        revoked::noted(ctx, key, deadline);
    }
    // Ended now but in its lock-delay: its pruning counts the end.
    let did = if deadline <= now { Did::Ended } else { Did::Revoked };
    reply(did, Some(name), Some(deadline))
}

/// A holder held by a session, revoked with time left: the session's table
/// notes it (its keepalive and SESSION.INFO tell the holder), and the
/// sessions' timer ends it at the deadline and detaches it. Nothing for a
/// session this node does not know, or one that ended.
fn note_held(
    ctx: Ctx,
    short: u64,
    key: *mut RedisModuleString,
    token: *mut RedisModuleString,
    deadline: i64,
    reason: &str,
    now: i64,
) {
    if let (SessionState::Alive { .. }, Some(id)) = session::state_of_short(short, now) {
        session_revoked::revoke(ctx, id, key, Some(token), deadline, reason);
        session_end::arm(ctx, deadline.saturating_add(1));
    }
}
