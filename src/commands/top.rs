//! `LOCK.TOP`: the keys clients wait on right now, most contended first,
//! from the module's own queues (never a scan of the keyspace).
//!
//! ACL: the command declares no key (the keys come from the queues), so
//! Redis checks none; it lists only the keys the calling user may read
//! (`%R~` or `~`), checked with `RM_ACLCheckKeyPermissions` for the user
//! named by `RM_GetCurrentUserName`. A server without those calls (none
//! that loads this module: both are Redis 7.0's) would list every key.
//!
//! Cost: the keys are ranked on the queues in place, and the ACL is
//! checked in that order only until `COUNT` keys pass, so a user who may
//! read the top keys costs O(K + n log n) for K contended keys. One who may
//! not reads on in pages twice as long each time, each a new pass over the
//! queues: O(K log K) at worst, when the ACL hides nearly every key. The
//! check runs with the queues' lock released (`crate::blocked::queue`'s discipline).

use std::ffi::c_int;

use redis_lock_rules::lock;
use redis_lock_rules::top::{parse_top_options, Contended};
use redis_lock_rules::{Entry, Remaining};
use redis_module::raw::{self, RedisModuleCtx, RedisModuleString, RedisModuleUser};

use crate::blocked::queue::{self, TopKey};
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::reply::{Argv, Failure, Reply, Value};
use crate::store::holders_key::HoldersKey;
use crate::store::lock_key::LockKey;

type Outcome = Result<Reply, Failure>;

/// LOCK.TOP [COUNT n]
pub fn top(ctx: Ctx, argv: Argv) -> Outcome {
    let &[_, ref options @ ..] = argv else { return Err(Failure::Arity) };
    let count = parse_top_options(options.iter().map(|&o| bytes(o)))?;
    let mut page = queue::contended(ctx, None, count);
    if page.keys.is_empty() {
        return Ok(Reply::List(Vec::new()));
    }
    let user = Caller::new(ctx.0);
    let mut listed = Vec::with_capacity(count);
    let mut n = count;
    'pages: loop {
        let mut last_hidden = None;
        for c in page.keys {
            if user.may_read(ctx, &c.key.0) {
                listed.push(c);
                if listed.len() == count {
                    break 'pages;
                }
                last_hidden = None;
            } else {
                last_hidden = Some(c);
            }
        }
        if !page.more {
            break;
        }
        // The ACL hid some: read on after this page's last key, in pages
        // twice as long each time (at most log2(K) of them).
        let after = last_hidden.or_else(|| listed.last().cloned());
        n = n.saturating_mul(2);
        page = queue::contended(ctx, after.as_ref(), n);
    }
    drop(user);
    let now = ctx.now_ms();
    let entries = listed.into_iter().map(|c| entry(ctx, c, now)).collect();
    Ok(Reply::List(entries))
}

/// One listed key: its queue as the waiters see it, and its holders now.
fn entry(ctx: Ctx, c: Contended<TopKey>, now: i64) -> Vec<(&'static std::ffi::CStr, Value)> {
    let ((key, family), waiters, since) = (c.key, c.waiters, c.oldest_since);
    let name = ctx.string(&key);
    let (holders, owner, ttl) = holders_of(ctx, name, now);
    ctx.free(name);
    vec![
        (c"key", Value::Bytes(key)),
        (c"family", Value::Bytes(family.name().as_bytes().to_vec())),
        (c"waiters", Value::Int(waiters as i64)),
        (c"oldest-wait-ms", Value::Int(now.saturating_sub(since).max(0))),
        (c"holders", Value::Int(holders as i64)),
        (c"owner", owner.map_or(Value::Nil, Value::Bytes)),
        (c"ttl-ms", Value::Int(ttl)),
    ]
}

/// Live holders, the exclusive owner's token, and the remaining lease of
/// the holder that ends first (-1: no expiry, -2: no holder).
fn holders_of(ctx: Ctx, name: *mut RedisModuleString, now: i64) -> (u64, Option<Vec<u8>>, i64) {
    {
        let k = LockKey::open_read(ctx, name);
        match k.entry() {
            Entry::Absent => return (0, None, -2),
            Entry::Str(value) => {
                let ttl = match k.remaining() {
                    Remaining::Persistent => -1,
                    Remaining::Ms(ms) => ms,
                };
                return (1, lock::describe(value).owner, ttl);
            }
            Entry::OtherType => {}
        }
    }
    let mut k = HoldersKey::open_read(ctx, name);
    match k.scan(now, None) {
        Ok(Some(summary)) if summary.live > 0 => {
            let ttl = k.first_live().map_or(-2, |end| end.saturating_sub(now).max(0));
            (summary.live, None, ttl)
        }
        // No live holder, or a type that is no lock of ours.
        _ => (0, None, -2),
    }
}

/// The calling user, as the ACL sees it.
struct Caller {
    user: *mut RedisModuleUser,
    /// The server has no call to check with: every key is listed.
    unchecked: bool,
}

impl Caller {
    fn new(ctx: *mut RedisModuleCtx) -> Caller {
        // SAFETY: plain reads of the API table, filled in at load.
        let apis = unsafe {
            (
                raw::RedisModule_GetCurrentUserName,
                raw::RedisModule_GetModuleUserFromUserName,
                raw::RedisModule_ACLCheckKeyPermissions,
                raw::RedisModule_FreeModuleUser,
            )
        };
        let (Some(name_of), Some(user_of), Some(_), Some(_)) = apis else {
            return Caller { user: std::ptr::null_mut(), unchecked: true };
        };
        let mut user = std::ptr::null_mut();
        unsafe {
            let name = name_of(ctx);
            if !name.is_null() {
                user = user_of(name);
                if let Some(free) = raw::RedisModule_FreeString {
                    free(ctx, name);
                }
            }
        }
        Caller { user, unchecked: false }
    }

    fn may_read(&self, ctx: Ctx, key: &[u8]) -> bool {
        if self.unchecked {
            return true;
        }
        // A user that cannot be looked up (deleted while connected) reads nothing.
        let Some(check) = (unsafe { raw::RedisModule_ACLCheckKeyPermissions }).filter(|_| !self.user.is_null()) else {
            return false;
        };
        let name = ctx.string(key);
        let ok = unsafe { check(self.user, name, raw::REDISMODULE_CMD_KEY_ACCESS as c_int) };
        ctx.free(name);
        ok == raw::REDISMODULE_OK as c_int
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        if let (false, Some(free)) = (self.user.is_null(), unsafe { raw::RedisModule_FreeModuleUser }) {
            unsafe { free(self.user) };
        }
    }
}
