//! LOCK.ACQUIREALL: several exclusive locks for one token and one lease,
//! all or none, at once or waiting in every key's line together. Each key
//! is stored exactly as LOCK.ACQUIRE stores it, so renewal and release stay
//! per key (LOCK.RENEW, LOCK.RELEASE, the reference scripts). Every check
//! runs before the first key is opened: a rejected call changes nothing.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_lock_rules::args::{check_key_and_token, parse_grant_options, Grammar};
use redis_lock_rules::held;
use redis_lock_rules::multi::{check_keys, parse_numkeys};
use redis_lock_rules::number::parse_ttl;

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use crate::blocked::queue::{self, open_behind_waiters};
use crate::boundary::api::rm;
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::entry;
use crate::boundary::reply::{Argv, Failure, Outcome, Reply};
use crate::server::counters as stats;
use crate::store::fence;
use crate::store::lease;
use crate::store::lock_set::LockSet;
use crate::store::session;

/// The registered command function: answers Redis's key-position requests
/// here (Redis 7.0 finds a module command's keys only through them when
/// they are counted by `numkeys`: its cluster routing and `CROSSSLOT` need
/// them), runs the command through [`entry::run`] otherwise.
pub unsafe extern "C" fn command(ctx: *mut RedisModuleCtx, argv: *mut *mut RedisModuleString, argc: c_int) -> c_int {
    if rm!(RedisModule_IsKeysPositionRequest)(ctx) != 0 {
        let _ = catch_unwind(AssertUnwindSafe(|| report_keys(ctx, argv, argc)));
        return raw::REDISMODULE_OK as c_int;
    }
    entry::run(ctx, argv, argc, acquire_all)
}

/// Tells Redis the keys `numkeys` counts (those present; an invalid count:
/// none, the command's own error says why).
unsafe fn report_keys(ctx: *mut RedisModuleCtx, argv: *mut *mut RedisModuleString, argc: c_int) {
    if argc < 2 || argv.is_null() {
        return;
    }
    let Ok(n) = parse_numkeys(bytes(*argv.add(1))) else { return };
    let flags =
        (raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_INSERT) as c_int;
    for pos in 2..(n as c_int + 2).min(argc) {
        rm!(RedisModule_KeyAtPosWithFlags)(ctx, pos, flags);
    }
}

/// LOCK.ACQUIREALL numkeys key [key ...] token ttl-ms [FENCE] [WAIT timeout-ms] [LOCKDELAY ms] [MAXHOLD ms] [SESSION id]
///
/// Replies 1 (every key granted) or 0 (none); with FENCE an array of one
/// fence per key, in the order named, or nil. With SESSION, every key is
/// held by the session (attached as it is granted, also after WAIT).
pub fn acquire_all(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, numkeys, ref rest @ ..] = argv else { return Err(Failure::Arity) };
    let n = parse_numkeys(bytes(numkeys))?;
    let (keys, rest) = rest.split_at_checked(n).ok_or(Failure::Arity)?;
    let &[token, ttl, ref options @ ..] = rest else { return Err(Failure::Arity) };
    let names: Vec<&[u8]> = keys.iter().map(|&k| bytes(k)).collect();
    check_keys(&names)?;
    check_key_and_token(names[0], bytes(token))?;
    let ttl = parse_ttl(bytes(ttl))?;
    let opts = parse_grant_options(Grammar::Acquire, options.iter().map(|&o| bytes(o)))?;
    let now = ctx.now_ms();
    let lease::Checked { grant, terms, wait_until } = lease::check_grant(ctx, bytes(token), ttl, &opts, now)?;
    // SESSION id: the session keeps every key (docs/sessions.md), checked
    // alive before any key is opened.
    let held = match opts.session {
        Some(id) => {
            held::check_options(&opts)?;
            Some((id, session::held_grant(id, bytes(token), now, opts.max_hold)?))
        }
        None => None,
    };
    // Those in line first: a key freed meanwhile goes to its line's head.
    for &key in keys {
        drop(open_behind_waiters(ctx, key, now));
    }
    let queued = keys.iter().any(|&key| queue::reserved(ctx, key));
    let set = LockSet::open(ctx, keys, now);
    let busy = set.busy();
    if !queued && busy.is_empty() {
        // Issued before the keys change: an exhausted space refuses.
        let fences = (0..n).filter(|_| opts.fence).map(|_| fence::issue(ctx, now)).collect::<Result<_, _>>()?;
        set.grant(token, &grant, held.as_ref(), now);
        stats::GRANTS.add_n(n as u64);
        return Ok(fence::grant_values(ctx, fences));
    }
    if let Some(deadline) = wait_until.filter(|_| ctx.may_block()) {
        if !queue::has_room() {
            return Err(Failure::TooManyWaiters);
        }
        let mut holders = vec![None; n];
        for (i, at) in busy {
            holders[i] = at;
        }
        drop(set);
        let request =
            queue::Request { claim: queue::Claim::All, ttl, fence: opts.fence, deadline, terms, session: opts.session };
        queue::block_all(ctx, keys, token, request, &holders);
        return Ok(Reply::Blocked);
    }
    if set.delayed() {
        stats::DELAYED_ACQUIRES.add();
    }
    stats::REFUSALS.add();
    Ok(if opts.fence { Reply::Nil } else { Reply::Int(0) })
}
