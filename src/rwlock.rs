//! The RWLOCK.* handlers: a read-write lock is a key of several holders
//! (`crate::semaphore` has the shared flow) that admits any number of
//! readers or one writer. In the queue a waiting writer holds back the
//! readers behind it, so writers are not starved.

use redis_lock_rules::args::{check_holder_key_and_token, parse_grant_options, parse_ttl, Grammar};
use redis_lock_rules::holders::{parse_mode, Family};

use crate::key::{bytes, Ctx};
use crate::reply::{Argv, Failure, Reply};
use crate::semaphore::{acquire, info, release, renew};

type Outcome = Result<Reply, Failure>;

/// RWLOCK.ACQUIRE key token READ|WRITE ttl-ms [FENCE] [WAIT timeout-ms] [LOCKDELAY ms] [MAXHOLD ms]
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
