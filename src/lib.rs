//! redis-lock: native lock commands for redis-server.
//!
//! `LOCK.ACQUIRE`, `LOCK.RENEW`, `LOCK.RELEASE` and `LOCK.TAKEOVER` decide
//! exactly as the reference Lua scripts do (the rules live in the pure
//! `redis-lock-rules` crate); this crate is the thin Redis adapter around
//! them. Load with `redis-server --loadmodule target/release/libredis_lock.so`.

mod api;
mod cluster;
mod cluster_fence;
mod commands;
mod config;
mod entry;
mod errors;
mod fence;
mod key;
mod stats;
mod wait;

use std::ffi::{c_int, CStr};

use redis_module::raw::{self, RedisModuleCommandKeySpec, RedisModuleCtx};
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

/// Every command: name, handler, flags, and what it does to its key.
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
///
/// The key's access is declared as a Redis 7 key spec, which ACL key
/// permissions check: the writes read the value to decide, so they need
/// read and write permission (`RW`); LOCK.INFO only reads (`RO`), so a user
/// with `%R~` on the key may run it.
const COMMANDS: &[(&CStr, CommandFn, &CStr, Option<u32>)] = &[
    (c"lock.acquire", acquire_cmd, c"write deny-oom blocking", Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_INSERT)),
    (c"lock.renew", renew_cmd, c"write fast", Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE)),
    (c"lock.release", release_cmd, c"write fast", Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE)),
    (c"lock.takeover", takeover_cmd, c"write deny-oom fast", Some(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE)),
    (c"lock.info", info_cmd, c"readonly fast", Some(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS)),
    (c"lock.fencefloor", fence_floor_cmd, c"write fast", None),
];

/// Declares argument 1 as the command's one key, accessed as `flags` say.
fn set_key_spec(ctx: *mut RedisModuleCtx, name: &CStr, flags: u32) -> bool {
    use std::mem::size_of;
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: size_of::<RedisModuleCommandKeySpec>(),
        sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
    };
    let key = RedisModuleCommandKeySpec {
        notes: std::ptr::null(),
        flags: u64::from(flags),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 { index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 } },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 { range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 { lastkey: 0, keystep: 1, limit: 0 } },
    };
    // The list ends with an all-zero spec (begin_search_type 0).
    // SAFETY: the spec is plain data; all zeroes is its terminator.
    let mut specs = [key, unsafe { std::mem::zeroed() }];
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: std::ptr::null(),
        complexity: std::ptr::null(),
        since: std::ptr::null(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: 0,
        key_specs: specs.as_mut_ptr(),
        args: std::ptr::null_mut(),
    };
    // Redis copies what it keeps, so the stack data may go after the call.
    unsafe {
        let cmd = api::rm!(RedisModule_GetCommand)(ctx, name.as_ptr());
        !cmd.is_null() && api::rm!(RedisModule_SetCommandInfo)(cmd, &info) == raw::REDISMODULE_OK as c_int
    }
}

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Some(name) = api::missing() {
        ctx.log_warning(&format!("lock: this server lacks {name}; redis 7.0 or later is required"));
        return Status::Err;
    }
    unsafe {
        api::rm!(RedisModule_RegisterInfoFunc)(ctx.ctx, Some(stats::info));
        if !cluster_fence::register(ctx.ctx) {
            ctx.log_warning("lock: could not register the command filter for cluster fences");
            return Status::Err;
        }
        if !config::register(ctx.ctx) {
            ctx.log_warning("lock: could not register or load the module's configs");
            return Status::Err;
        }
        // Refused commands must not invalidate WATCH: we signal changes ourselves.
        api::rm!(RedisModule_SetModuleOptions)(ctx.ctx, raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int);
        for &(name, handler, flags, key) in COMMANDS {
            // No legacy key range: the key spec below declares the key.
            let created = api::rm!(RedisModule_CreateCommand)(ctx.ctx, name.as_ptr(), Some(handler), flags.as_ptr(), 0, 0, 0);
            if created != raw::REDISMODULE_OK as c_int || key.is_some_and(|k| !set_key_spec(ctx.ctx, name, k)) {
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
