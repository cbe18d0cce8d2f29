//! The election handlers: LOCK.ELECT, LOCK.PROCLAIM, LOCK.LEADER and
//! LOCK.OBSERVE, on the exclusive lock's key (see `docs/election.md`).
//! The rules are `redis_lock_rules::election`; observers wait in
//! `crate::blocked::observers`, candidates in the key's one line
//! (`crate::blocked::queue`); who leads is read by `crate::store::leadership`.

use redis_lock_rules::args::{
    check_key_and_token, check_lease_terms, check_utf8, parse_grant_options, parse_ttl, wait_deadline, Grammar,
};
use redis_lock_rules::election::{
    check_value, elected, held_led_by, led_by, observe_ready, parse_observe_options, proclaimed, proclaimed_held,
    Proclaim,
};
use redis_lock_rules::held;
use redis_lock_rules::lease::{self as rules_lease, Terms};
use redis_lock_rules::{lock, ArgError, Entry};

use crate::blocked::{observers, queue};
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::reply::{Argv, Failure, Outcome, Reply};
use crate::server::counters as stats;
use crate::server::eviction;
use crate::server::timings;
use crate::store::fence;
use crate::store::leadership::{leader_reply, read};
use crate::store::lease;
use crate::store::lock_key::{LockKey, NewValue};
use crate::store::session;

/// LOCK.ELECT key token ttl-ms value [WAIT timeout-ms] [LOCKDELAY ms] [MAXHOLD ms] [SESSION id]
pub fn elect(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, token, ttl, value, ref options @ ..] = argv else { return Err(Failure::Arity) };
    check_key_and_token(bytes(key), bytes(token))?;
    let ttl = parse_ttl(bytes(ttl))?;
    let token_str = check_utf8(bytes(token)).map_err(|_| ArgError::ValueNotUtf8)?;
    let value_str = check_value(bytes(value))?;
    // ACQUIRE's options; FENCE is implied (the term is the fence), so
    // naming it is refused rather than silently meaningless.
    let mut opts = parse_grant_options(Grammar::Acquire, options.iter().map(|&o| bytes(o)))?;
    if opts.fence {
        return Err(Failure::Arg(ArgError::Syntax));
    }
    opts.fence = true;
    check_lease_terms(&opts, ttl)?;
    let terms = Terms::of(&opts);
    let now = ctx.now_ms();
    let grant = rules_lease::grant(now, ttl, terms)?;
    // SESSION id: the session keeps the leadership (docs/sessions.md).
    let held = match opts.session {
        Some(id) => {
            held::check_options(&opts)?;
            Some((id, session::held_grant(id, bytes(token), now, opts.max_hold)?))
        }
        None => None,
    };
    let wait_until = opts.wait.map(|timeout| wait_deadline(now, timeout)).transpose()?;
    fence::check_space(ctx, opts.fence)?;
    eviction::refusal(ctx)?;
    let mut k = queue::open_behind_waiters(ctx, key, now);
    if lock::may_acquire(k.entry()) && !queue::reserved(ctx, key) {
        let term = fence::issue(ctx, now)?;
        if let Some((id, (held_value, pxat))) = &held {
            k.set_maybe_expiring(NewValue::Composed(&held::elected(held_value, term, value_str)), *pxat);
            session::attach(ctx, *id, key);
            timings::hold_started(ctx, key, timings::Family::Election, now);
            stats::ELECTIONS.add();
            return Ok(Reply::Int(fence::grant_value(ctx, Some(term))));
        }
        let stored = if terms.stores_fields() {
            lease::elect_value(bytes(token), term, bytes(value), &grant)
        } else {
            elected(token_str, term, value_str)
        };
        k.set(NewValue::Composed(&stored), grant.pxat);
        timings::hold_started(ctx, key, timings::Family::Election, now);
        stats::ELECTIONS.add();
        return Ok(Reply::Int(fence::grant_value(ctx, Some(term))));
    }
    if let Some(deadline) = wait_until.filter(|_| ctx.may_block()) {
        if !queue::has_room() {
            return Err(Failure::TooManyWaiters);
        }
        let holder = k.expires_at();
        drop(k);
        let claim = queue::Claim::Elect { value };
        queue::block(
            ctx,
            key,
            token,
            queue::Request { claim, ttl, fence: true, deadline, terms, session: opts.session },
            holder,
        );
        return Ok(Reply::Blocked);
    }
    if lease::delayed(&k) {
        stats::DELAYED_ACQUIRES.add();
    }
    stats::REFUSALS.add();
    Ok(Reply::Nil)
}

/// LOCK.PROCLAIM key token value
pub fn proclaim(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, token, value] = argv else { return Err(Failure::Arity) };
    check_key_and_token(bytes(key), bytes(token))?;
    let value = check_value(bytes(value))?;
    // A lease that ended leads no more: settled first, as by every write.
    let mut k = lease::open_now(ctx, key);
    let stored = match k.entry() {
        Entry::Absent => None,
        Entry::OtherType => return Err(Failure::WrongType),
        Entry::Str(v) => {
            // A session's leader: its key's expiry (none, or its hold
            // limit's) is kept.
            if let Some(leads) = held_led_by(v, bytes(token)) {
                return proclaim_held(ctx, k, leads, value);
            }
            led_by(v, bytes(token))
        }
    };
    // The key's absolute expiry is kept; a hand-written election value
    // without one is no lease the module can keep.
    let (Some(stored), Some(at)) = (stored, k.expires_at()) else {
        stats::REFUSALS.add();
        return Ok(Reply::Int(0));
    };
    let rev = fence::issue(ctx, ctx.now_ms())?;
    match proclaimed(stored, value, rev) {
        Proclaim::Store(new) => {
            k.set(NewValue::Composed(&new), at);
            // The new revision's floor goes to replicas and the AOF.
            fence::replicate_floor(ctx, rev);
            stats::PROCLAIMS.add();
            Ok(Reply::Int(1))
        }
        Proclaim::NotLeader => {
            stats::REFUSALS.add();
            Ok(Reply::Int(0))
        }
    }
}

/// LOCK.PROCLAIM on a session's leader, by its leader (`leads`) or not;
/// the revision is issued only when it leads.
fn proclaim_held(ctx: Ctx, mut k: LockKey, leads: bool, value: &str) -> Outcome {
    let rev = if leads { fence::issue(ctx, ctx.now_ms())? } else { 0 };
    let new = match k.entry() {
        Entry::Str(v) if leads => proclaimed_held(v, value, rev),
        _ => Proclaim::NotLeader,
    };
    let Proclaim::Store(new) = new else {
        stats::REFUSALS.add();
        return Ok(Reply::Int(0));
    };
    let at = k.expires_at();
    k.set_maybe_expiring(NewValue::Composed(&new), at);
    fence::replicate_floor(ctx, rev);
    stats::PROCLAIMS.add();
    Ok(Reply::Int(1))
}

/// LOCK.LEADER key
pub fn leader(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key] = argv else { return Err(Failure::Arity) };
    let current = read(ctx, key)?;
    Ok(leader_reply(current.as_ref(), ctx.now_ms()))
}

/// LOCK.OBSERVE key [AFTER rev] [WAIT timeout-ms]
pub fn observe(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, ref options @ ..] = argv else { return Err(Failure::Arity) };
    let opts = parse_observe_options(options.iter().map(|&o| bytes(o)))?;
    let now = ctx.now_ms();
    let wait_until = opts.wait.map(|timeout| wait_deadline(now, timeout)).transpose()?;
    let current = read(ctx, key)?;
    let ready = observe_ready(current.as_ref().map(|l| &l.leadership), opts.after);
    if let (false, Some(after), Some(deadline)) = (ready, opts.after, wait_until) {
        if ctx.may_block() {
            if !queue::has_room() {
                return Err(Failure::TooManyWaiters);
            }
            observers::block(ctx, key, after, deadline, current.and_then(|l| l.expires_at));
            return Ok(Reply::Blocked);
        }
    }
    Ok(leader_reply(current.as_ref(), now))
}
