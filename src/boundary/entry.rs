//! The boundary between redis-server and Rust: every command enters here.
//!
//! A panic that unwound into redis-server would abort it and lose every
//! client's data, so each call runs under `catch_unwind` and a panic becomes
//! an error reply. (None is expected: the handlers index nothing and unwrap
//! nothing that input can reach. This is the second line of defence.)

use std::ffi::c_int;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use crate::boundary::api::rm;
use crate::boundary::ctx::Ctx;
use crate::boundary::errors::{delay_differs, limit_differs, EXHAUSTED, INTERNAL, TOO_MANY_WAITERS, WRONGTYPE};
use crate::boundary::reply::{Argv, Failure, Item, Outcome, Reply, Value};

/// Runs `handler` on the command's arguments and sends its reply.
pub fn run(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
    handler: fn(Ctx, Argv) -> Outcome,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let args: Argv = match usize::try_from(argc) {
            // SAFETY: Redis passes `argc` valid argument pointers.
            Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
            _ => &[],
        };
        handler(Ctx(ctx), args)
    }));
    match outcome {
        Ok(outcome) => {
            // Most replies are one integer: sent here, without send's frame
            // or the call that drops an Outcome (an integer owns nothing).
            let outcome = ManuallyDrop::new(outcome);
            match *outcome {
                Ok(Reply::Int(n)) => unsafe { rm!(RedisModule_ReplyWithLongLong)(ctx, n) },
                _ => send(ctx, ManuallyDrop::into_inner(outcome)),
            }
        }
        Err(_) => unsafe { rm!(RedisModule_ReplyWithError)(ctx, INTERNAL.as_ptr()) },
    };
    raw::REDISMODULE_OK as c_int
}

/// Sends a handler's reply (also a blocked client's, when its wait ends).
pub fn send(ctx: *mut RedisModuleCtx, outcome: Outcome) -> c_int {
    unsafe {
        match outcome {
            Ok(Reply::Int(n)) => rm!(RedisModule_ReplyWithLongLong)(ctx, n),
            Ok(Reply::Nil) => rm!(RedisModule_ReplyWithNull)(ctx),
            // The client is blocked: its reply comes when the wait ends.
            Ok(Reply::Blocked) => raw::REDISMODULE_OK as c_int,
            Ok(Reply::Ok) => rm!(RedisModule_ReplyWithSimpleString)(ctx, c"OK".as_ptr()),
            Ok(Reply::Ints(ints)) => {
                rm!(RedisModule_ReplyWithArray)(ctx, ints.len() as std::ffi::c_long);
                for n in ints {
                    rm!(RedisModule_ReplyWithLongLong)(ctx, n);
                }
                raw::REDISMODULE_OK as c_int
            }
            Ok(Reply::Fields(fields)) => send_fields(ctx, fields),
            Ok(Reply::List(entries)) => {
                rm!(RedisModule_ReplyWithArray)(ctx, entries.len() as std::ffi::c_long);
                for fields in entries {
                    send_fields(ctx, fields);
                }
                raw::REDISMODULE_OK as c_int
            }
            Ok(Reply::Call(reply)) => reply.send(ctx),
            Ok(Reply::Bytes(b)) => rm!(RedisModule_ReplyWithStringBuffer)(ctx, b.as_ptr().cast(), b.len()),
            Ok(Reply::Strings(strings)) => {
                rm!(RedisModule_ReplyWithArray)(ctx, strings.len() as std::ffi::c_long);
                for b in strings {
                    rm!(RedisModule_ReplyWithStringBuffer)(ctx, b.as_ptr().cast(), b.len());
                }
                raw::REDISMODULE_OK as c_int
            }
            Err(Failure::Arity) => rm!(RedisModule_WrongArity)(ctx),
            Err(Failure::Arg(e)) => rm!(RedisModule_ReplyWithError)(ctx, e.reply_cstr().as_ptr()),
            Err(Failure::WrongType) => rm!(RedisModule_ReplyWithError)(ctx, WRONGTYPE.as_ptr()),
            Err(Failure::FencesExhausted) => rm!(RedisModule_ReplyWithError)(ctx, EXHAUSTED.as_ptr()),
            Err(Failure::TooManyWaiters) => rm!(RedisModule_ReplyWithError)(ctx, TOO_MANY_WAITERS.as_ptr()),
            Err(Failure::Error(e)) => rm!(RedisModule_ReplyWithError)(ctx, e.as_ptr()),
            Err(Failure::Message(e)) => rm!(RedisModule_ReplyWithError)(ctx, e.as_ptr()),
            Err(Failure::LimitDiffers(limit)) => rm!(RedisModule_ReplyWithError)(ctx, limit_differs(limit).as_ptr()),
            Err(Failure::DelayDiffers(ms)) => rm!(RedisModule_ReplyWithError)(ctx, delay_differs(ms).as_ptr()),
        };
    }
    raw::REDISMODULE_OK as c_int
}

/// Sends field/value pairs as one flat array (out of line: the INFO
/// commands' replies, kept out of every command's reply path).
#[inline(never)]
unsafe fn send_fields(ctx: *mut RedisModuleCtx, fields: Vec<(&'static std::ffi::CStr, Value)>) -> c_int {
    rm!(RedisModule_ReplyWithArray)(ctx, 2 * fields.len() as std::ffi::c_long);
    for (name, value) in fields {
        let name = name.to_bytes();
        rm!(RedisModule_ReplyWithStringBuffer)(ctx, name.as_ptr().cast(), name.len());
        match value {
            Value::Int(n) => rm!(RedisModule_ReplyWithLongLong)(ctx, n),
            Value::Bytes(b) => rm!(RedisModule_ReplyWithStringBuffer)(ctx, b.as_ptr().cast(), b.len()),
            Value::Nil => rm!(RedisModule_ReplyWithNull)(ctx),
            // A flat array: token, ttl-ms, token, ttl-ms, … (as ZRANGE … WITHSCORES).
            Value::Holders(holders) => {
                rm!(RedisModule_ReplyWithArray)(ctx, 2 * holders.len() as std::ffi::c_long);
                for (token, ttl) in holders {
                    rm!(RedisModule_ReplyWithStringBuffer)(ctx, token.as_ptr().cast(), token.len());
                    rm!(RedisModule_ReplyWithLongLong)(ctx, ttl);
                }
                raw::REDISMODULE_OK as c_int
            }
            Value::Items(items) => {
                rm!(RedisModule_ReplyWithArray)(ctx, items.len() as std::ffi::c_long);
                for item in items {
                    match item {
                        Item::Int(n) => rm!(RedisModule_ReplyWithLongLong)(ctx, n),
                        Item::Bytes(b) => rm!(RedisModule_ReplyWithStringBuffer)(ctx, b.as_ptr().cast(), b.len()),
                    };
                }
                raw::REDISMODULE_OK as c_int
            }
        };
    }
    raw::REDISMODULE_OK as c_int
}

/// Defines an `extern "C"` command function that enters through [`run`].
macro_rules! command_fn {
    ($name:ident => $handler:path) => {
        unsafe extern "C" fn $name(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            $crate::boundary::entry::run(ctx, argv, argc, $handler)
        }
    };
}
pub(crate) use command_fn;
