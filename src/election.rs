//! The election handlers: LOCK.ELECT, LOCK.PROCLAIM, LOCK.LEADER and
//! LOCK.OBSERVE, on the exclusive lock's key (see `docs/election.md`).
//! The rules are `redis_lock_rules::election`; observers wait in
//! `crate::observe`, candidates in the key's one line (`crate::wait`).

use redis_lock_rules::args::{
    check_key_and_token, check_lease_terms, check_utf8, parse_grant_options, parse_ttl, wait_deadline, Grammar,
};
use redis_lock_rules::election::{
    check_value, elected, leadership, led_by, observe_ready, parse_observe_options, proclaimed, seen_rev, Leadership,
    Proclaim,
};
use redis_lock_rules::lease::{self as rules_lease, Settle, Terms};
use redis_lock_rules::{lock, ArgError, Entry};
use redis_module::raw::RedisModuleString;

use crate::commands::{check_fence_space, open_behind_waiters};
use crate::fence;
use crate::key::{bytes, Ctx, LockKey, NewValue};
use crate::lease;
use crate::observe;
use crate::reply::{Argv, Failure, Reply, Value};
use crate::stats;
use crate::wait;

type Outcome = Result<Reply, Failure>;

/// A key's leadership and when its lease ends (Unix ms; none: no expiry):
/// with LOCKDELAY, before the key's own expiry (`docs/lease.md`).
pub struct Led {
    pub leadership: Leadership,
    pub expires_at: Option<i64>,
}

/// Who leads `name` now: `None` when leaderless; WRONGTYPE when the key
/// is no string. Opens the key read-only: on a replica, an expired key is
/// gone, as for GET. A lease that has ended (LOCKDELAY, MAXHOLD) leads no
/// more, settled or not: observers armed for its end see it leaderless.
pub fn read(ctx: Ctx, name: *mut RedisModuleString) -> Result<Option<Led>, Failure> {
    let k = LockKey::open_read(ctx, name);
    let pxat = k.expires_at();
    let (leadership, expires_at) = match k.entry() {
        Entry::Absent => return Ok(None),
        Entry::OtherType => return Err(Failure::WrongType),
        Entry::Str(value) if rules_lease::settle(value, pxat, ctx.now_ms()) != Settle::Keep => return Ok(None),
        Entry::Str(value) => (leadership(value), rules_lease::held_until(value, pxat)),
    };
    Ok(leadership.map(|leadership| Led { leadership, expires_at }))
}

/// The revision a reading of the key stands for (another type: none, 0).
pub fn rev_of(current: &Result<Option<Led>, Failure>) -> u64 {
    match current {
        Ok(led) => seen_rev(led.as_ref().map(|l| &l.leadership)),
        Err(_) => 0,
    }
}

/// LOCK.LEADER's reply (and LOCK.OBSERVE's): nil, or
/// `value V term N rev N ttl-ms MS` (-1: the key has no expiry).
pub fn leader_reply(current: Option<&Led>, now: i64) -> Reply {
    let Some(Led { leadership, expires_at }) = current else { return Reply::Nil };
    let ttl = expires_at.map_or(-1, |at| at.saturating_sub(now).max(0));
    Reply::Fields(vec![
        (c"value", Value::Bytes(leadership.value.as_bytes().to_vec())),
        (c"term", Value::Int(leadership.term as i64)),
        (c"rev", Value::Int(leadership.rev as i64)),
        (c"ttl-ms", Value::Int(ttl)),
    ])
}

/// LOCK.ELECT key token ttl-ms value [WAIT timeout-ms] [LOCKDELAY ms] [MAXHOLD ms]
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
    let wait_until = opts.wait.map(|timeout| wait_deadline(now, timeout)).transpose()?;
    check_fence_space(ctx, opts)?;
    crate::eviction::refusal(ctx)?;
    let mut k = open_behind_waiters(ctx, key, now);
    if lock::may_acquire(k.entry()) {
        let term = fence::issue(ctx, now).ok_or(Failure::FencesExhausted)?;
        let stored = if terms.stores_fields() {
            lease::elect_value(bytes(token), term, bytes(value), &grant)
        } else {
            elected(token_str, term, value_str)
        };
        k.set(NewValue::Composed(&stored), grant.pxat);
        crate::timings::hold_started(ctx, key, crate::timings::Family::Election, now);
        return Ok(Reply::Int(fence::grant_reply(ctx, Some(term), &stats::ELECTIONS)));
    }
    if let Some(deadline) = wait_until.filter(|_| wait::may_block(ctx)) {
        if !wait::has_room() {
            return Err(Failure::TooManyWaiters);
        }
        let holder = k.expires_at();
        drop(k);
        let claim = wait::Claim::Elect { value };
        wait::block(ctx, key, token, wait::Request { claim, ttl, fence: true, deadline, terms }, holder);
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
    let mut k = lease::open(ctx, key, ctx.now_ms());
    let stored = match k.entry() {
        Entry::Absent => None,
        Entry::OtherType => return Err(Failure::WrongType),
        Entry::Str(v) => led_by(v, bytes(token)),
    };
    // The key's absolute expiry is kept; a hand-written election value
    // without one is no lease the module can keep.
    let (Some(stored), Some(at)) = (stored, k.expires_at()) else {
        stats::REFUSALS.add();
        return Ok(Reply::Int(0));
    };
    let rev = fence::issue(ctx, ctx.now_ms()).ok_or(Failure::FencesExhausted)?;
    match proclaimed(stored, value, rev) {
        Proclaim::Store(new) => {
            k.set(NewValue::Composed(&new), at);
            // The new revision's floor goes to replicas and the AOF.
            fence::grant_reply(ctx, Some(rev), &stats::PROCLAIMS);
            Ok(Reply::Int(1))
        }
        Proclaim::NotLeader => {
            stats::REFUSALS.add();
            Ok(Reply::Int(0))
        }
    }
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
        if wait::may_block(ctx) {
            if !wait::has_room() {
                return Err(Failure::TooManyWaiters);
            }
            observe::block(ctx, key, after, deadline, current.and_then(|l| l.expires_at));
            return Ok(Reply::Blocked);
        }
    }
    Ok(leader_reply(current.as_ref(), now))
}
