//! redis-lock: native lock commands for redis-server.
//!
//! `LOCK.ACQUIRE`, `LOCK.RENEW`, `LOCK.RELEASE` and `LOCK.TAKEOVER` decide
//! exactly as the reference Lua scripts do (the rules live in the pure
//! `redis-lock-rules` crate); this crate is the thin Redis adapter around
//! them. Load with `redis-server --loadmodule target/release/libredis_lock.so`.

mod api;
mod commands;
mod entry;
mod fence;
mod key;
mod stats;
mod wait;

use std::ffi::{c_int, CStr};

use redis_module::raw::{self, RedisModuleCtx};
use redis_module::{redis_module, Context, RedisString, Status};

use entry::command_fn;
use fence::FENCE_TYPE;

command_fn!(acquire_cmd => commands::acquire);
command_fn!(renew_cmd => commands::renew);
command_fn!(release_cmd => commands::release);
command_fn!(takeover_cmd => commands::takeover);
command_fn!(info_cmd => commands::info);
command_fn!(fence_floor_cmd => commands::fence_floor);

type CommandFn = unsafe extern "C" fn(*mut RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// Every command: name, handler, flags, key positions (first, last, step).
/// A lock's key is always argument 1, so cluster routing and ACL key
/// patterns apply; LOCK.FENCEFLOOR has no key.
///
/// Only the commands that can grow memory are `deny-oom`, as with the
/// native commands the scripts run (SET is, PEXPIRE and DEL are not): a
/// server at its memory limit must still let holders renew and release,
/// or memory pressure would turn into lost and stranded locks.
///
/// LOCK.ACQUIRE can block (WAIT), so it is flagged `blocking`, not `fast`,
/// as BLPOP is: tools that sort commands by those flags must not count a
/// wait of seconds as a fast command.
const COMMANDS: &[(&CStr, CommandFn, &CStr, c_int)] = &[
    (c"lock.acquire", acquire_cmd, c"write deny-oom blocking", 1),
    (c"lock.renew", renew_cmd, c"write fast", 1),
    (c"lock.release", release_cmd, c"write fast", 1),
    (c"lock.takeover", takeover_cmd, c"write deny-oom fast", 1),
    (c"lock.info", info_cmd, c"readonly fast", 1),
    (c"lock.fencefloor", fence_floor_cmd, c"write fast", 0),
];

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Some(name) = api::missing() {
        ctx.log_warning(&format!("lock: this server lacks {name}; redis 7.0 or later is required"));
        return Status::Err;
    }
    unsafe {
        api::rm!(RedisModule_RegisterInfoFunc)(ctx.ctx, Some(stats::info));
        // Refused commands must not invalidate WATCH: we signal changes ourselves.
        api::rm!(RedisModule_SetModuleOptions)(ctx.ctx, raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int);
        for &(name, handler, flags, key) in COMMANDS {
            let created = api::rm!(RedisModule_CreateCommand)(ctx.ctx, name.as_ptr(), Some(handler), flags.as_ptr(), key, key, key);
            if created != raw::REDISMODULE_OK as c_int {
                ctx.log_warning(&format!("lock: could not register {}", name.to_string_lossy()));
                return Status::Err;
            }
        }
    }
    Status::Ok
}

redis_module! {
    name: "lock",
    version: 1,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [FENCE_TYPE],
    init: init,
    commands: [],
}
