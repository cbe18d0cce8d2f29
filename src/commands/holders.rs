//! The SEM.* handlers, and the flow they share with RWLOCK.*
//! (`crate::rwlock`): a key with several holders, each with its own token
//! and lease. The rules (`redis_lock_rules::holders`) decide on the live
//! holders; `crate::store::holders_key` stores the result; `crate::blocked::queue` queues and
//! serves those who wait.
//!
//! Every write command first drops the holders whose lease has ended (the
//! permit of a dead holder is free at its own lease end, whoever else still
//! holds; at most `PRUNE_BOUND` of them per command, the rest counted),
//! unless it answers with an error: then it changes nothing.

use redis_lock_rules::args::{
    check_holder_key_and_token, check_lease_terms, parse_grant_options, parse_ttl, wait_deadline, Grammar, GrantOptions,
};
use redis_lock_rules::encode::decimal;
use redis_lock_rules::held::{self, SessionState};
use redis_lock_rules::holders::{
    admit, check_tag, grant, held_off_by_delay, parse_info_options, parse_limit, parse_mode, place_end, refused_early,
    renew as renewal, tag_after_grant, Admit, Family, Kind, Renewal, Summary, Want,
};
use redis_lock_rules::lease::Terms;
use redis_lock_rules::revoke;
use redis_module::raw::RedisModuleString;

use crate::blocked::queue::{self, Claim};
use crate::blocked::session_end;
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::reply::{Argv, Failure, Item, Outcome, Reply, Value};
use crate::server::counters::{holder_counters, holder_grants, FamilyCounters};
use crate::server::{eviction, revoked};
use crate::store::fence;
use crate::store::holders_key::{count_scores, Edit, Hold, HoldersKey, Mark};
use crate::store::{session, session_revoked};

/// SEM.ACQUIRE key token limit ttl-ms [FENCE] [WAIT timeout-ms] [LOCKDELAY ms] [MAXHOLD ms] [SESSION id]
pub fn sem_acquire(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, token, limit, ttl, ref options @ ..] = argv else { return Err(Failure::Arity) };
    check_holder_key_and_token(bytes(key), bytes(token))?;
    let want = Want::Permit { limit: parse_limit(bytes(limit))? };
    let ttl = parse_ttl(bytes(ttl))?;
    acquire(ctx, key, token, want, ttl, parse_grant_options(Grammar::Holders, options.iter().map(|&o| bytes(o)))?)
}

/// SEM.RENEW key token ttl-ms
///
/// Replies 1, 2 (cut short by MAXHOLD), 0, or `-ms` left for a revoked holder.
pub fn sem_renew(ctx: Ctx, argv: Argv) -> Outcome {
    renew(ctx, Family::Semaphore, argv)
}

/// SEM.RELEASE key token
pub fn sem_release(ctx: Ctx, argv: Argv) -> Outcome {
    release(ctx, Family::Semaphore, argv)
}

/// SEM.INFO key [COUNT n]
pub fn sem_info(ctx: Ctx, argv: Argv) -> Outcome {
    info(ctx, Family::Semaphore, argv)
}

/// RWLOCK.ACQUIRE key token READ|WRITE ttl-ms [FENCE] [WAIT timeout-ms] [LOCKDELAY ms] [MAXHOLD ms] [SESSION id]
pub fn rw_acquire(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, key, token, mode, ttl, ref options @ ..] = argv else { return Err(Failure::Arity) };
    check_holder_key_and_token(bytes(key), bytes(token))?;
    let want = parse_mode(bytes(mode))?;
    let ttl = parse_ttl(bytes(ttl))?;
    acquire(ctx, key, token, want, ttl, parse_grant_options(Grammar::Holders, options.iter().map(|&o| bytes(o)))?)
}

/// RWLOCK.RENEW key token ttl-ms
pub fn rw_renew(ctx: Ctx, argv: Argv) -> Outcome {
    renew(ctx, Family::ReadWrite, argv)
}

/// RWLOCK.RELEASE key token
pub fn rw_release(ctx: Ctx, argv: Argv) -> Outcome {
    release(ctx, Family::ReadWrite, argv)
}

/// RWLOCK.INFO key [COUNT n]
pub fn rw_info(ctx: Ctx, argv: Argv) -> Outcome {
    info(ctx, Family::ReadWrite, argv)
}

/// Grants `token` a place among `key`'s holders, or queues it (`WAIT`), or
/// refuses. Those already in line are served first and a newcomer never
/// passes them. An error is judged before the queue is served or anything
/// is pruned, so it changes nothing.
fn acquire(
    ctx: Ctx,
    key: *mut RedisModuleString,
    token: *mut RedisModuleString,
    want: Want,
    ttl: i64,
    opts: GrantOptions,
) -> Outcome {
    let now = ctx.now_ms();
    // The key's delay, like its limit: every acquirer names the same.
    let delay = opts.lock_delay.unwrap_or(0);
    check_tag(want, delay)?;
    check_lease_terms(&opts, ttl)?;
    let granted = grant(now, ttl, delay, opts.max_hold)?;
    // SESSION id: the session keeps the place (docs/sessions.md); ttl-ms
    // is checked as always, but the session, not it, decides how long.
    let granted = match opts.session {
        Some(id) => {
            session::alive(id, now)?;
            held::holder_place(now, delay, opts.max_hold)?
        }
        None => granted,
    };
    let wait_until = opts.wait.map(|timeout| wait_deadline(now, timeout)).transpose()?;
    fence::check_space(ctx, opts.fence)?;
    eviction::refusal(ctx)?;
    let counters = holder_counters(want.family());
    let mut queued = queue::waiters_on(ctx, bytes(key)) > 0;
    let mut k = HoldersKey::open(ctx, key);
    let mut summary = k.scan(now, Some(token)).map_err(|_| Failure::WrongType)?;
    if let Some(error) = refused_early(summary.as_ref(), want, delay, queued) {
        return Err(failure(error));
    }
    if queued {
        drop(k);
        // A permit freed (a lease ended) goes to the head of the line.
        queue::grant_next(ctx, key);
        queued = queue::waiters_on(ctx, bytes(key)) > 0;
        k = HoldersKey::open(ctx, key);
        summary = k.scan(now, Some(token)).map_err(|_| Failure::WrongType)?;
    }
    match admit(summary.as_ref(), want, delay) {
        error @ (Admit::LimitDiffers(_) | Admit::DelayDiffers(_) | Admit::WrongFamily) => return Err(failure(error)),
        Admit::Grant if !queued => {
            // Issued before the key changes: an exhausted space refuses.
            let fence = opts.fence.then(|| fence::issue(ctx, now)).transpose()?;
            let tag = tag_after_grant(summary.as_ref(), want, delay);
            let hold = Hold::of(granted.hold_until);
            if let Some(id) = opts.session {
                k.mark_session(Mark::Set(held::short(id)));
            }
            k.commit(summary.as_ref(), Edit::Put { token, at: granted.at, tag, hold }, counters.expired);
            if let Some(id) = opts.session {
                session::attach_holder(ctx, id, key, token);
            }
            holder_grants(want).add();
            return Ok(Reply::Int(fence::grant_value(ctx, fence)));
        }
        Admit::AlreadyHolds => {}
        verdict @ (Admit::Grant | Admit::Wait) => {
            // A place it cannot have may be an orphan's (docs/sessions.md).
            if k.may_hold_sessions() {
                session_end::walk_orphans(ctx, key);
            }
            if let Some(deadline) = wait_until.filter(|_| ctx.may_block()) {
                if !queue::has_room() {
                    return Err(Failure::TooManyWaiters);
                }
                k.commit(summary.as_ref(), Edit::Keep, counters.expired);
                let next = k.first_live();
                drop(k);
                count_delayed(ctx, key, summary.as_ref(), verdict, want, now, &counters);
                let request = queue::Request {
                    claim: Claim::Holder(want),
                    ttl,
                    fence: opts.fence,
                    deadline,
                    terms: Terms::of(&opts),
                    session: opts.session,
                };
                queue::block(ctx, key, token, request, next);
                return Ok(Reply::Blocked);
            }
            k.commit(summary.as_ref(), Edit::Keep, counters.expired);
            drop(k);
            count_delayed(ctx, key, summary.as_ref(), verdict, want, now, &counters);
            counters.refusals.add();
            return Ok(if opts.fence { Reply::Nil } else { Reply::Int(0) });
        }
    }
    k.commit(summary.as_ref(), Edit::Keep, counters.expired);
    counters.refusals.add();
    Ok(if opts.fence { Reply::Nil } else { Reply::Int(0) })
}

/// Counts an acquirer the key made wait (refused, or queued) only because
/// places in their lock-delay fill it: those are counted (scores in
/// `[now, now + delay)`: lease ended, place not yet) with one `ZCOUNT`, on
/// a key with a delay only, and after the key is closed.
fn count_delayed(
    ctx: Ctx,
    key: *mut RedisModuleString,
    summary: Option<&Summary>,
    verdict: Admit,
    want: Want,
    now: i64,
    counters: &FamilyCounters,
) {
    let Some(s) = summary.filter(|s| s.delay > 0 && verdict == Admit::Wait) else { return };
    let (mut lo, mut hi) = ([0u8; 20], [0u8; 20]);
    let from = decimal(now, &mut lo);
    let below = [&b"("[..], decimal(now.saturating_add(s.delay), &mut hi)].concat();
    let in_delay = count_scores(ctx, key, from, &below);
    if held_off_by_delay(s, want, s.delay, in_delay) {
        counters.delayed.add();
    }
}

/// The error reply of an acquirer the key can never admit.
fn failure(verdict: Admit) -> Failure {
    match verdict {
        Admit::LimitDiffers(limit) => Failure::LimitDiffers(limit),
        Admit::DelayDiffers(delay) => Failure::DelayDiffers(delay),
        _ => Failure::WrongType,
    }
}

/// The key's summary if it has live holders of `family`: `None` when none
/// is left (the key is then free, whatever it was); `WRONGTYPE` for another
/// type or family.
fn live_of(family: Family, summary: Option<Summary>) -> Result<Option<Summary>, Failure> {
    match summary.filter(|s| s.live > 0) {
        Some(s) if s.kind.family() != family => Err(Failure::WrongType),
        other => Ok(other),
    }
}

/// `… RENEW key token ttl-ms`: a new lease end for a live holder.
fn renew(ctx: Ctx, family: Family, argv: Argv) -> Outcome {
    let &[_, key, token, ttl] = argv else { return Err(Failure::Arity) };
    check_holder_key_and_token(bytes(key), bytes(token))?;
    let now = ctx.now_ms();
    let ttl = parse_ttl(bytes(ttl))?;
    place_end(now, ttl, 0)?;
    let counters = holder_counters(family);
    let mut k = HoldersKey::open(ctx, key);
    let summary = k.scan(now, Some(token)).map_err(|_| Failure::WrongType)?;
    let live = live_of(family, summary)?;
    // A place in its lock-delay, or past its hold limit, is no longer its
    // holder's to renew. The key's delay follows the new lease end
    // (nothing is written on error).
    // A session keeps its holders: a renewal by the holder changes nothing
    // while its session lives, and is refused from its end on.
    // So is one revoked, past its deadline (its place in its lock-delay).
    if let Some((live, short)) = live.filter(|s| s.own.is_some()).and_then(|s| Some((s, s.session?))) {
        k.commit(summary.as_ref(), Edit::Keep, counters.expired);
        if session_ended(short, now) || live.own_lease(now).is_none() {
            counters.refusals.add();
            return Ok(Reply::Int(0));
        }
        counters.renewals.add();
        // Revoked: the time left before its deadline (nothing extends it).
        let revoked = live.hold.filter(|_| live.revoked);
        return Ok(Reply::Int(revoke::renew_reply(false, revoked, now)));
    }
    match live.map(|s| renewal(&s, now, ttl).map(|r| (s, r))).transpose()? {
        Some((live, Renewal::Renewed { at, capped })) => {
            k.commit(Some(&live), Edit::Put { token, at, tag: None, hold: Hold::Keep }, counters.expired);
            counters.renewals.add();
            // A revoked holder hears the time left before its deadline.
            let revoked = live.hold.filter(|_| live.revoked);
            if capped && revoked.is_none() {
                counters.capped.add();
            }
            Ok(Reply::Int(revoke::renew_reply(capped, revoked, now)))
        }
        _ => {
            k.commit(summary.as_ref(), Edit::Keep, counters.expired);
            counters.refusals.add();
            Ok(Reply::Int(0))
        }
    }
}

/// `… RELEASE key token`: the holder leaves; its place goes to the head of
/// the line in the same command.
fn release(ctx: Ctx, family: Family, argv: Argv) -> Outcome {
    let &[_, key, token] = argv else { return Err(Failure::Arity) };
    check_holder_key_and_token(bytes(key), bytes(token))?;
    let counters = holder_counters(family);
    let mut k = HoldersKey::open(ctx, key);
    let now = ctx.now_ms();
    let summary = k.scan(now, Some(token)).map_err(|_| Failure::WrongType)?;
    match live_of(family, summary)? {
        // A lease that ended keeps its place through the delay: not released.
        // So does one whose session ended, even before its place is released.
        Some(live) if live.own_lease(now).is_some() && !live.session.is_some_and(|s| session_ended(s, now)) => {
            if live.revoked {
                // Released before its deadline: an ordinary release.
                revoked::forget(ctx, key);
                revoked::forget_reason(ctx, bytes(key), bytes(token));
            }
            let _quiet = queue::serving();
            k.commit(Some(&live), Edit::Remove { token }, counters.expired);
            drop(k);
            if let Some(short) = live.session {
                session_revoked::detach_holder(ctx, short, key, token);
            }
            counters.releases.add();
            queue::grant_next(ctx, key);
            Ok(Reply::Int(1))
        }
        _ => {
            k.commit(summary.as_ref(), Edit::Keep, counters.expired);
            counters.refusals.add();
            Ok(Reply::Int(0))
        }
    }
}

/// `… INFO key [COUNT n]`: the live holders (the `n` earliest lease ends,
/// or all) with their remaining lease, the limit or mode, and the waiters.
/// Reads only (works on replicas).
fn info(ctx: Ctx, family: Family, argv: Argv) -> Outcome {
    let &[_, key, ref options @ ..] = argv else { return Err(Failure::Arity) };
    let count = parse_info_options(options.iter().map(|&o| bytes(o)))?.unwrap_or(usize::MAX);
    let now = ctx.now_ms();
    let k = HoldersKey::open_read(ctx, key);
    let Some(tag) = k.tag().map_err(|_| Failure::WrongType)? else { return Ok(Reply::Nil) };
    // COUNT is at least 1: an empty list means no live holder.
    let holders = k.live_holders(now, count);
    if holders.is_empty() {
        return Ok(Reply::Nil);
    }
    if tag.family() != family {
        return Err(Failure::WrongType);
    }
    let (name, value) = match tag.kind {
        Kind::Semaphore { limit } => (c"limit", Value::Int(limit as i64)),
        Kind::ReadWrite { writer } => {
            (c"mode", Value::Bytes(if writer { b"write".to_vec() } else { b"read".to_vec() }))
        }
    };
    let hold_limits = k.hold_limits(&holders);
    let revoked = k.revoked_of(&holders);
    // Session-held holders: their lease is their session's (its TTL left).
    let sessions: Vec<(Vec<u8>, i64)> = if k.any_hold() {
        // An orphan given its end shows that end (its place's score).
        let short = |token: &Vec<u8>| k.session_of(token).filter(|&s| s != held::ORPHAN);
        let left = |token: &Vec<u8>| Some((token.clone(), session::ttl_left_of_short(short(token)?, now)));
        holders.iter().filter_map(|(token, _)| left(token)).collect()
    } else {
        Vec::new()
    };
    drop(k);
    // Their reasons, where kept (`crate::server::revoked`).
    let reasons = revoked
        .iter()
        .filter_map(|(token, _)| Some((token.clone(), revoked::reason_of(ctx, bytes(key), token)?)))
        .flat_map(|(token, why)| [Item::Bytes(token), Item::Bytes(why.into_bytes())])
        .collect();
    // What is left of each lease: negative for a place in its lock-delay
    // (its lease ended that long ago; the place is free `lock-delay-ms` later).
    let holders = holders
        .into_iter()
        .map(|(token, end)| {
            let held = sessions.iter().find(|(t, _)| *t == token).map(|&(_, left)| left);
            let left = held.unwrap_or(end - tag.delay - now);
            (token, left)
        })
        .collect();
    Ok(Reply::Fields(vec![
        (name, value),
        (c"holders", Value::Holders(holders)),
        (c"waiters", Value::Int(queue::waiters_on(ctx, bytes(key)) as i64)),
        (c"lock-delay-ms", Value::Int(tag.delay)),
        (c"hold-until", Value::Holders(hold_limits)),
        (c"revoked", Value::Holders(revoked)),
        (c"sessions", Value::Holders(sessions)),
        (c"revoked-reasons", Value::Items(reasons)),
    ]))
}

/// Whether the session of short id `short` has ended (a session this node
/// does not know keeps its places, as a session-held lock's).
fn session_ended(short: u64, now: i64) -> bool {
    matches!(session::state_of_short(short, now).0, SessionState::Ended { .. })
}
