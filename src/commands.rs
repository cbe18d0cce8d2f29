//! The LOCK.* command handlers: parse the arguments, let the pure rules of
//! `redis-lock-rules` decide, apply the effect, reply. Argument checks all
//! run before the key is opened, so a rejected call changes nothing.

use redis_lock_rules::args::{check_key_and_token, check_utf8, expiry_at, parse_ttl};
use redis_lock_rules::encode::structured_value;
use redis_lock_rules::{lock, ArgError, WrongType};
use redis_module::raw::RedisModuleString;

use crate::key::{bytes, Ctx, LockKey};

/// A command's arguments, the command name first.
pub type Argv<'a> = &'a [*mut RedisModuleString];

/// Why a command did not produce its integer reply.
#[derive(Debug)]
pub enum Failure {
    /// Missing or extra arguments.
    Arity,
    Arg(ArgError),
    WrongType,
}

impl From<ArgError> for Failure {
    fn from(e: ArgError) -> Self {
        Failure::Arg(e)
    }
}

impl From<WrongType> for Failure {
    fn from(_: WrongType) -> Self {
        Failure::WrongType
    }
}

/// 1 when the command took effect, 0 when it was refused.
pub type Reply = Result<i64, Failure>;

/// LOCK.ACQUIRE key token ttl-ms
pub fn acquire(ctx: Ctx, argv: Argv) -> Reply {
    let &[_, key, token, ttl] = argv else { return Err(Failure::Arity) };
    check_key_and_token(bytes(key), bytes(token))?;
    acquire_with(ctx, key, token, parse_ttl(bytes(ttl))?)
}

/// `SET key token NX PX ttl`.
fn acquire_with(ctx: Ctx, key: *mut RedisModuleString, token: *mut RedisModuleString, ttl: i64) -> Reply {
    let at = expiry_at(ctx.now_ms(), ttl)?;
    let mut k = LockKey::open(ctx, key);
    if !lock::may_acquire(k.entry()) {
        return Ok(0);
    }
    // The argument itself becomes the value (shared, as SET does), so a
    // lock costs the same memory as a plain key.
    k.set(token, at);
    Ok(1)
}

/// LOCK.RENEW key token ttl-ms
pub fn renew(ctx: Ctx, argv: Argv) -> Reply {
    let &[_, key, token, ttl] = argv else { return Err(Failure::Arity) };
    check_key_and_token(bytes(key), bytes(token))?;
    let at = expiry_at(ctx.now_ms(), parse_ttl(bytes(ttl))?)?;
    let mut k = LockKey::open(ctx, key);
    if !lock::may_renew(k.entry(), bytes(token))? {
        return Ok(0);
    }
    k.expire_at(at);
    Ok(1)
}

/// LOCK.RELEASE key token
pub fn release(ctx: Ctx, argv: Argv) -> Reply {
    let &[_, key, token] = argv else { return Err(Failure::Arity) };
    check_key_and_token(bytes(key), bytes(token))?;
    let mut k = LockKey::open(ctx, key);
    if !lock::may_release(k.entry(), bytes(token))? {
        return Ok(0);
    }
    k.delete();
    Ok(1)
}

/// LOCK.TAKEOVER key token run-id ttl-ms
pub fn takeover(ctx: Ctx, argv: Argv) -> Reply {
    let &[_, key, token, run_id, ttl] = argv else { return Err(Failure::Arity) };
    check_key_and_token(bytes(key), bytes(token))?;
    let ttl = parse_ttl(bytes(ttl))?;
    if bytes(run_id).is_empty() {
        // The Go wrapper's AcquireLockOrTakeover degrades to AcquireLock
        // before encoding anything, so any token bytes are fine here.
        return acquire_with(ctx, key, token, ttl);
    }
    let (token_str, run_str) = (check_utf8(bytes(token))?, check_utf8(bytes(run_id))?);
    let at = expiry_at(ctx.now_ms(), ttl)?;
    let mut k = LockKey::open(ctx, key);
    if !lock::may_take_over(k.entry(), bytes(run_id), ttl, || k.remaining())? {
        return Ok(0);
    }
    let value = ctx.string(&structured_value(token_str, run_str));
    k.set(value, at);
    // The key now holds its own reference; drop ours.
    ctx.free(value);
    Ok(1)
}
