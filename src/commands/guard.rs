//! LOCK.GUARD: a command that runs only while a token holds a lock, decided
//! and run in one step (the inner command runs inside ours, through
//! `RedisModule_Call`, so nothing else can run between the check and it).
//!
//! The inner command is the caller's own, with the server's checks:
//! - `C`: the caller's ACL user must be allowed the command and its keys
//!   (skipped when replaying the AOF or a master's stream, which have no
//!   user and whose effects were decided already);
//! - `M`: a `deny-oom` inner command is refused at the memory limit, as if
//!   sent directly (LOCK.GUARD itself is not `deny-oom`, so a guarded DEL
//!   still runs there);
//! - `!`: the inner command's effects go to replicas and the AOF as Redis
//!   propagates that command (relative expiries become `PXAT`/`PEXPIREAT`);
//!   the check replicates nothing, unless it settles a lease that ended
//!   (`crate::store::lease`: the tombstone's `SET … PXAT`, and then `NOTHELD`);
//! - `E`: Redis's own refusals (unknown command, arity, ACL, OOM) come back
//!   as error replies, sent to the caller unchanged;
//! - `0`: the reply is in the caller's protocol (RESP2 or RESP3), so it is
//!   forwarded byte for byte.
//!
//! No `S` (script mode): on Redis 7.0 it refuses BLPOP and friends, which
//! later servers run; the server's temporary client denies blocking, so
//! every server runs them as inside MULTI. What `S` would add for writes —
//! the read-only replica, `min-replicas-to-write`, MISCONF and stale-master
//! checks — Redis already applied to LOCK.GUARD itself, a `write` command.
//! For the same reason no `W`: where writes are refused, so is LOCK.GUARD.
//!
//! Keys: LOCK.GUARD is registered with `getkeys-api`, so whenever Redis
//! asks (cluster routing, ACL key patterns, `COMMAND GETKEYS`) this module
//! reports the lock key and every key of the inner command.

use std::ffi::{c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_lock_rules::args::check_key_and_token;
use redis_lock_rules::guard::{self, check_command, held};
use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use crate::boundary::api::rm;
use crate::boundary::ctx::{bytes, Ctx};
use crate::boundary::entry;
use crate::boundary::reply::{Argv, CallReply, Failure, Reply};
use crate::server::counters as stats;
use crate::store::lease;

/// The registered command function: answers Redis's key-position requests
/// here, runs the command through [`entry::run`] otherwise.
pub unsafe extern "C" fn command(ctx: *mut RedisModuleCtx, argv: *mut *mut RedisModuleString, argc: c_int) -> c_int {
    if rm!(RedisModule_IsKeysPositionRequest)(ctx) != 0 {
        // A panic here would leave Redis with the keys found so far, which
        // is at least the lock key: never a crash.
        let _ = catch_unwind(AssertUnwindSafe(|| report_keys(ctx, argv, argc)));
        return raw::REDISMODULE_OK as c_int;
    }
    entry::run(ctx, argv, argc, guard)
}

/// LOCK.GUARD key token command [arg ...]
///
/// Runs `command arg ...` when `token` holds `key` and replies exactly what
/// it replied; otherwise replies `NOTHELD …` and runs nothing.
pub fn guard(ctx: Ctx, argv: Argv) -> Result<Reply, Failure> {
    let &[_, key, token, name, ref args @ ..] = argv else { return Err(Failure::Arity) };
    check_key_and_token(bytes(key), bytes(token))?;
    check_command(bytes(name)).map_err(|r| Failure::Error(r.reply_cstr()))?;
    // The key is closed before the inner command runs: it may change it.
    // A lease that ended (LOCKDELAY, MAXHOLD) is settled first, as by every
    // write: a tombstone is held by no token.
    let is_held = held(lease::open_now(ctx, key).entry(), bytes(token))?;
    if !is_held {
        stats::GUARD_REFUSALS.add();
        return Err(Failure::Error(guard::NOT_HELD));
    }
    stats::GUARDED.add();
    Ok(Reply::Call(call(ctx, bytes(name), args)))
}

/// Runs `name args...` as the caller would (see the module doc for the flags).
fn call(ctx: Ctx, name: &[u8], args: &[*mut RedisModuleString]) -> CallReply {
    // RM_Call takes the name as a C string; check_command refused a NUL in it.
    let mut short = [0u8; 32];
    let long;
    let name: &CStr = if name.len() < short.len() {
        short[..name.len()].copy_from_slice(name);
        match CStr::from_bytes_until_nul(&short) {
            Ok(n) => n,
            Err(_) => return CallReply(std::ptr::null_mut()),
        }
    } else {
        long = match CString::new(name) {
            Ok(n) => n,
            Err(_) => return CallReply(std::ptr::null_mut()),
        };
        &long
    };
    // The vector (`v`) is passed only when non-empty: Redis 7.0 sizes its
    // argument array with `vlen - 1`, which an empty vector underflows.
    let format = match (ctx.replaying(), args.is_empty()) {
        (false, false) => c"!CME0v",
        (false, true) => c"!CME0",
        (true, false) => c"!E0v",
        (true, true) => c"!E0",
    };
    let reply = unsafe {
        let call = rm!(RedisModule_Call);
        if args.is_empty() {
            call(ctx.0, name.as_ptr(), format.as_ptr())
        } else {
            // Redis only reads the vector (and takes a reference to each string).
            call(ctx.0, name.as_ptr(), format.as_ptr(), args.as_ptr().cast_mut(), args.len())
        }
    };
    CallReply(reply)
}

/// Tells Redis the keys of `LOCK.GUARD key token command [arg ...]`: the
/// lock key (read: ownership is a read), then the inner command's keys with
/// the flags Redis gives for them. Redis gives flags only for commands with
/// a key-finding function (SORT, EVAL, ZUNIONSTORE, …), none (0) for the
/// others; with no flags an ACL key pattern of any kind admits the key
/// here, and the inner call's own check (`C`) then applies the command's
/// exact read/write permissions.
unsafe fn report_keys(ctx: *mut RedisModuleCtx, argv: *mut *mut RedisModuleString, argc: c_int) {
    if argc < 2 || argv.is_null() {
        return;
    }
    rm!(RedisModule_KeyAtPosWithFlags)(
        ctx,
        1,
        (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as c_int,
    );
    if argc < 4 {
        return;
    }
    let inner = argv.add(3);
    // A nested guard would ask for its keys recursively, as deep as the
    // client nests it; it is refused when it runs, so its keys need no report.
    if bytes(*inner).eq_ignore_ascii_case(b"lock.guard") {
        return;
    }
    let (mut n, mut flags) = (0 as c_int, std::ptr::null_mut::<c_int>());
    let positions = rm!(RedisModule_GetCommandKeysWithFlags)(ctx, inner, argc - 3, &mut n, &mut flags);
    if positions.is_null() {
        // Unknown command, wrong arity, or no keys: the call will say which.
        return;
    }
    for i in 0..usize::try_from(n).unwrap_or(0) {
        let key_flags = if flags.is_null() { 0 } else { *flags.add(i) };
        rm!(RedisModule_KeyAtPosWithFlags)(ctx, *positions.add(i) + 3, key_flags);
    }
    rm!(RedisModule_Free)(positions.cast());
    if !flags.is_null() {
        rm!(RedisModule_Free)(flags.cast());
    }
}
