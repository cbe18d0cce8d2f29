//! The LOCK.* command handlers: parse the arguments, let the pure rules of
//! `redis-lock-rules` decide, apply the effect, reply. Argument checks all
//! run before the key is opened, so a rejected call changes nothing.

use redis_lock_rules::args::{
    check_key_and_token, check_lease_terms, check_utf8, expiry_at, parse_fence, parse_grant_options,
    parse_renew_options, parse_ttl, Grammar, GrantOptions,
};
use redis_lock_rules::held;
use redis_lock_rules::lease::{self as rules_lease, Shown, Terms, View};
use redis_lock_rules::lock::{self, Takeover};
use redis_lock_rules::{revoke, value};
use redis_lock_rules::{Entry, Remaining};
use redis_module::raw::RedisModuleString;

use crate::blocked::queue::{self, open_behind_waiters};
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::reply::{Argv, Failure, Outcome, Reply, Value};
use crate::server::counters::{self as stats, Counter};
use crate::server::eviction;
use crate::server::timings;
use crate::store::fence;
use crate::store::lease;
use crate::store::lock_key::{LockKey, NewValue};
use crate::store::{session, session_revoked};

/// Counts the verdict and turns it into the 1/0 reply.
#[inline(always)]
fn verdict(granted: bool, on_grant: &Counter) -> Outcome {
    if granted {
        on_grant.add();
    } else {
        stats::REFUSALS.add();
    }
    Ok(Reply::Int(i64::from(granted)))
}

/// The reply of a grant command: 1/0, or with FENCE the fence / nil. A
/// fenced grant also tells replicas and the AOF the new high-water mark.
#[inline(always)]
fn grant_reply(ctx: Ctx, granted: bool, fence: bool) -> Outcome {
    if !fence {
        return verdict(granted, &stats::GRANTS);
    }
    if !granted {
        stats::REFUSALS.add();
        return Ok(Reply::Nil);
    }
    let fence = fence::issue(ctx, ctx.now_ms())?;
    stats::GRANTS.add();
    Ok(Reply::Int(fence::grant_value(ctx, Some(fence))))
}

/// LOCK.ACQUIRE key token ttl-ms [FENCE] [WAIT timeout-ms] [LOCKDELAY ms] [MAXHOLD ms] [SESSION id]
pub fn acquire(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, token, ttl, ref options @ ..] = argv else { return Err(Failure::Arity) };
    let token_bytes = bytes(token);
    check_key_and_token(bytes(key), token_bytes)?;
    let ttl = parse_ttl(bytes(ttl))?;
    let opts = parse_grant_options(Grammar::Acquire, options.iter().map(|&o| bytes(o)))?;
    acquire_with(ctx, key, (token, token_bytes), ttl, &opts)
}

/// `SET key token NX PX ttl`, or wait in line for the key. `token` comes
/// with its bytes, read once (each read is a call into Redis). Inlined in
/// both callers: the hottest path of the module, where moving the options
/// and the checked grant between frames cost more than the checks.
#[inline(always)]
fn acquire_with(
    ctx: Ctx,
    key: *mut RedisModuleString,
    (token, token_bytes): (*mut RedisModuleString, &[u8]),
    ttl: i64,
    opts: &GrantOptions,
) -> Outcome {
    let now = ctx.now_ms();
    let lease::Checked { grant, terms, wait_until } = lease::check_grant(ctx, token_bytes, ttl, opts, now)?;
    // SESSION id: the session keeps the lock (docs/sessions.md); ttl-ms is
    // checked as always, but the session, not it, decides how long.
    let held = match opts.session {
        Some(id) => {
            held::check_options(opts)?;
            Some((id, session::held_grant(id, token_bytes, now, opts.max_hold)?))
        }
        None => None,
    };
    let mut k = open_behind_waiters(ctx, key, now);
    let granted = lock::may_acquire(k.entry()) && !queue::reserved(ctx, key);
    if granted {
        match &held {
            Some((id, (value, pxat))) => {
                k.set_maybe_expiring(NewValue::Composed(value), *pxat);
                session::attach(ctx, *id, key);
            }
            None => k.set(lease::lock_value(token_bytes, &grant).new_value(token), grant.pxat),
        }
        timings::hold_started(ctx, key, timings::Family::Exclusive, now);
    } else if let Some(deadline) = wait_until.filter(|_| ctx.may_block()) {
        if !queue::has_room() {
            return Err(Failure::TooManyWaiters);
        }
        let holder = k.expires_at();
        drop(k);
        queue::block(
            ctx,
            key,
            token,
            queue::Request {
                claim: queue::Claim::Lock,
                ttl,
                fence: opts.fence,
                deadline,
                terms,
                session: opts.session,
            },
            holder,
        );
        return Ok(Reply::Blocked);
    } else if lease::delayed(&k) {
        stats::DELAYED_ACQUIRES.add();
    }
    grant_reply(ctx, granted, opts.fence)
}

/// LOCK.RENEW key token ttl-ms [FLOOR fence]
///
/// Replies 1, or 2 when the lock's MAXHOLD cut the new lease short, or
/// `-ms` (the time left) when the hold was revoked (LOCK.REVOKE).
pub fn renew(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, token, ttl, ref options @ ..] = argv else { return Err(Failure::Arity) };
    check_key_and_token(bytes(key), bytes(token))?;
    let now = ctx.now_ms();
    let ttl = parse_ttl(bytes(ttl))?;
    let at = expiry_at(now, ttl)?;
    let floor = parse_renew_options(options.iter().map(|&o| bytes(o)))?;
    if let Some(f) = floor {
        check_floor(ctx, f)?;
    }
    let mut k = lease::open(ctx, key, now);
    let granted = lock::may_renew(k.entry(), bytes(token))?;
    if !granted {
        stats::REFUSALS.add();
        return Ok(Reply::Int(0));
    }
    // A revoked hold renews up to its deadline only, and hears of it.
    let (renewal, revoked) = match k.entry() {
        // A session keeps its locks: a renewal by the holder changes
        // nothing, but a revoked one hears of it.
        Entry::Str(v) if value::is_held(v) => return renew_held(ctx, v, floor, now),
        Entry::Str(v) if rules_lease::may_have_lease(v) => match value::parse(v) {
            Some(stored) => (rules_lease::renew(&stored, now, ttl)?, revoke::revoked_of(&stored).map(|(_, d)| d)),
            None => (None, None),
        },
        _ => (None, None),
    };
    let capped = match renewal {
        None => {
            k.expire_at(at);
            false
        }
        Some(r) => {
            match &r.value {
                Some(v) => k.set(NewValue::Composed(v), r.pxat),
                None => k.expire_at(r.pxat),
            }
            r.capped
        }
    };
    // Only a holder raises the mark: a quorum lock confirms its fence on
    // every node it holds (docs/quorum.md).
    if let Some(f) = floor {
        fence::raise_from(ctx, f);
        fence::replicate_floor(ctx, f);
    }
    stats::RENEWALS.add();
    if capped && revoked.is_none() {
        stats::CAPPED_RENEWALS.add();
    }
    Ok(Reply::Int(revoke::renew_reply(capped, revoked, now)))
}

/// LOCK.RENEW of a session-held lock by its holder (`v`, its value): 1, or
/// `-ms` left when that hold was revoked. Out of line: a renewal of any
/// other lock never runs it.
#[cold]
#[inline(never)]
fn renew_held(ctx: Ctx, v: &[u8], floor: Option<u64>, now: i64) -> Outcome {
    // Without a hold limit (it ends with the token) it is not revoked.
    let limited = !v.ends_with(b"\"}");
    let revoked = limited.then(|| value::parse_held(v)).flatten().and_then(|h| held::revoked_of(&h).map(|(_, d)| d));
    if let Some(f) = floor {
        fence::raise_from(ctx, f);
        fence::replicate_floor(ctx, f);
    }
    stats::RENEWALS.add();
    Ok(Reply::Int(revoke::renew_reply(false, revoked, now)))
}

/// A client may raise the fence mark at most [`redis_lock_rules::fence::HORIZON`]
/// past this server's clock, so that nobody can use up the fence space; what
/// the master or the AOF says was judged by the master's clock and applies.
fn check_floor(ctx: Ctx, floor: u64) -> Result<(), Failure> {
    if ctx.replaying() || redis_lock_rules::fence::within_horizon(floor, ctx.now_ms()) {
        Ok(())
    } else {
        Err(Failure::Arg(redis_lock_rules::ArgError::FloorTooFar))
    }
}

/// LOCK.RELEASE key token
pub fn release(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, token] = argv else { return Err(Failure::Arity) };
    check_key_and_token(bytes(key), bytes(token))?;
    // A lease that ended is settled first: its owner no longer holds it.
    let mut k = lease::open_now(ctx, key);
    let granted = lock::may_release(k.entry(), bytes(token))?;
    if granted {
        // Before the delete: its `del` event would end the hold as deleted.
        timings::hold_ended(ctx, key, timings::End::Released, || ctx.now_ms());
        if let Some(held_by) = match k.entry() {
            Entry::Str(v) => lease::held_by_session(v),
            _ => None,
        } {
            session_revoked::detach(ctx, &held_by, key);
        }
        let _quiet = queue::serving();
        k.delete();
        drop(k);
        // Hand over in the same step: nobody can slip in between.
        queue::grant_next(ctx, key);
    }
    verdict(granted, &stats::RELEASES)
}

/// LOCK.TAKEOVER key token run-id ttl-ms [FENCE] [LOCKDELAY ms] [MAXHOLD ms]
pub fn takeover(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, token, run_id, ttl, ref options @ ..] = argv else { return Err(Failure::Arity) };
    let (token_bytes, run_bytes) = (bytes(token), bytes(run_id));
    check_key_and_token(bytes(key), token_bytes)?;
    let ttl = parse_ttl(bytes(ttl))?;
    let opts = parse_grant_options(Grammar::Takeover, options.iter().map(|&o| bytes(o)))?;
    if run_bytes.is_empty() {
        // The Go wrapper's AcquireLockOrTakeover degrades to AcquireLock
        // before encoding anything, so any token bytes are fine here.
        return acquire_with(ctx, key, (token, token_bytes), ttl, &opts);
    }
    let (token_str, run_str) = (check_utf8(token_bytes)?, check_utf8(run_bytes)?);
    check_lease_terms(&opts, ttl)?;
    let now = ctx.now_ms();
    let grant = rules_lease::grant(now, ttl, Terms::of(&opts))?;
    fence::check_space(ctx, opts.fence)?;
    eviction::refusal(ctx)?;
    let mut k = open_behind_waiters(ctx, key, now);
    let takeover = match lock::take_over(k.entry(), run_bytes, ttl, || k.remaining())? {
        // A free key kept for the head of its line (see `queue::reserved`).
        Takeover::Free if queue::reserved(ctx, key) => Takeover::Refused,
        // Its run cannot take a revoked hold anew: the deadline stands.
        Takeover::SameRun if revoked_value(&k) => Takeover::Refused,
        takeover => takeover,
    };
    match takeover {
        Takeover::Refused => {
            if lease::delayed(&k) {
                stats::DELAYED_ACQUIRES.add();
            }
            return grant_reply(ctx, false, opts.fence);
        }
        Takeover::SameRun => stats::TAKEOVERS_SAME_RUN.add(),
        Takeover::StaleLegacy => stats::TAKEOVERS_STALE_LEGACY.add(),
        Takeover::Free => {}
    }
    if !matches!(takeover, Takeover::Free) {
        timings::hold_ended(ctx, key, timings::End::TakenOver, || now);
    }
    k.set(NewValue::Composed(&lease::takeover_value(token_str, run_str, &grant)), grant.pxat);
    timings::hold_started(ctx, key, timings::Family::Exclusive, now);
    grant_reply(ctx, true, opts.fence)
}

/// Whether the open key holds a revoked hold (LOCK.REVOKE).
fn revoked_value(k: &LockKey) -> bool {
    matches!(k.entry(), Entry::Str(v) if rules_lease::may_have_lease(v)
        && value::parse(v).is_some_and(|s| s.revoked.is_some()))
}

/// LOCK.EVICTED key token
///
/// Replies 1 when `token`'s hold of `key` was lost to an eviction (among
/// the last 10,000 such, and not granted to it again since), else 0. The
/// client asks it once a renewal or release found its lock gone, to tell
/// the holder *evicted* rather than *lost*. O(1); reads no key.
pub fn evicted(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, token] = argv else { return Err(Failure::Arity) };
    Ok(Reply::Int(i64::from(eviction::was_evicted(ctx, bytes(key), bytes(token)))))
}

/// LOCK.FENCEFLOOR fence
///
/// Raises the server's fencing-token high-water mark to at least `fence`.
/// Masters send it to replicas and the AOF with every fenced grant; it can
/// only raise the mark, never lower it.
pub fn fence_floor(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, floor] = argv else { return Err(Failure::Arity) };
    let floor = parse_fence(bytes(floor))?;
    check_floor(ctx, floor)?;
    fence::raise_from(ctx, floor);
    fence::replicate_floor(ctx, floor);
    Ok(Reply::Ok)
}

/// LOCK.INFO key
pub fn info(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key] = argv else { return Err(Failure::Arity) };
    // Read-only (it runs on replicas): an ended lease is shown as it will
    // be once a write settles it, and nothing is written here.
    let k = LockKey::open_read(ctx, key);
    let value = match k.entry() {
        Entry::Absent => return Ok(Reply::Nil),
        Entry::OtherType => return Err(Failure::WrongType),
        Entry::Str(value) => value,
    };
    let (d, view) = match lease::shown(value, k.expires_at(), ctx.now_ms()) {
        Shown::Absent => return Ok(Reply::Nil),
        Shown::Value { bytes, view } => (lock::describe(bytes.as_deref().unwrap_or(value)), view),
    };
    let ttl = match k.remaining() {
        Remaining::Persistent => -1,
        Remaining::Ms(ms) => ms,
    };
    let bytes_or_nil = |b: Option<Vec<u8>>| b.map_or(Value::Nil, Value::Bytes);
    let int_or_nil = |n: Option<i64>| n.map_or(Value::Nil, Value::Int);
    let View { lock_delay, hold_until, lease_end, delayed_until } = view;
    // Only a live lease with a hold limit can be a revoked one.
    let revoked = hold_until
        .and_then(|_| value::parse(value).map(|s| s.revoked).or_else(|| value::parse_held(value).map(|h| h.revoked)))
        .flatten()
        .map(String::into_bytes);
    Ok(Reply::Fields(vec![
        (c"owner", bytes_or_nil(d.owner)),
        (c"run-id", bytes_or_nil(d.run_id)),
        (c"format", Value::Bytes(if d.structured { b"structured".to_vec() } else { b"legacy".to_vec() })),
        (c"ttl-ms", Value::Int(ttl)),
        // The server keeps no per-lock fence (see redis_lock_rules::fence).
        (c"fence", Value::Nil),
        (c"waiters", Value::Int(queue::waiters_on(ctx, bytes(key)) as i64)),
        (c"lock-delay-ms", int_or_nil(lock_delay)),
        (c"hold-until", int_or_nil(hold_until)),
        (c"lease-end", int_or_nil(lease_end)),
        (c"delayed-until", int_or_nil(delayed_until)),
        // The revocation's reason; its deadline is `hold-until`.
        (c"revoked", bytes_or_nil(revoked)),
    ]))
}
