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
mod db_events;
mod election;
mod entry;
mod errors;
mod fence;
mod guard;
mod holders;
mod key;
mod key_events;
mod lease;
mod migration;
mod observe;
mod registration;
mod reply;
mod rwlock;
mod semaphore;
mod stats;
mod timer;
mod timings;
mod top;
mod wait;

use std::ffi::c_int;

use redis_module::raw;
use redis_module::{redis_module, Context, RedisString, Status};

use fence::FENCE_TYPE;

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
        // Plus what atomic slot migration needs declared (Valkey 9), where the server knows it.
        let options = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int | migration::subscribe(ctx.ctx);
        api::rm!(RedisModule_SetModuleOptions)(ctx.ctx, options);
    }
    if let Err(e) = registration::register(ctx.ctx) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    Status::Ok
}

/// Redis's allocator inside the server. Cargo still builds and runs this
/// crate's (empty) unit-test binary when `cargo test` is given a test-name
/// filter, despite `test = false`; outside a server Redis's allocator aborts
/// at the first allocation, so that binary takes the system's.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;

redis_module! {
    name: "lock",
    version: 1,
    allocator: (Allocator, Allocator {}),
    data_types: [FENCE_TYPE],
    init: init,
    commands: [],
}
