//! redis-lock: native lock commands for redis-server.
//!
//! `LOCK.ACQUIRE`, `LOCK.RENEW`, `LOCK.RELEASE` and `LOCK.TAKEOVER` decide
//! exactly as the reference Lua scripts do (the rules live in the pure
//! `redis-lock-rules` crate); this crate is the thin Redis adapter around
//! them. Load with `redis-server --loadmodule target/release/libredis_lock.so`.
//!
//! The layers, each importing only those below it (`tests/layers.rs` keeps
//! it so; docs/repository.md draws them): `boundary` (the edge with the
//! server), `server` (configs, counters, events, INFO, the cluster),
//! `store` (the keys and their replicated effects), `blocked` (the one
//! blocked-client machine and its kinds), `commands` (the handlers, one
//! file per family); and on top this file and `registration` (the one
//! command table), which wire them: the listeners of server events, the
//! config hooks, the INFO section.

mod blocked;
mod boundary;
mod command_info;
mod commands;
mod registration;
mod server;
mod store;

use std::ffi::c_int;

use redis_module::raw;
use redis_module::{redis_module, Context, RedisString, Status};

use blocked::{machine, observers::Observers, queue, waiters::Waiters};
use boundary::api::{self, rm};
use server::events::{self, Also, Listener};
use server::{cluster_fence, config, counters, eviction, info, migration, revoked, timings};
use store::eviction_rdb::WINDOW_TYPE;
use store::fence::FENCE_TYPE;
use store::session_rdb::SESSION_TYPE;
use store::session_revoked::REVOKED_TYPE;

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Some(name) = api::missing() {
        ctx.log_warning(&format!("lock: this server lacks {name}; redis 7.0 or later is required"));
        return Status::Err;
    }
    // Who hears the server's events, in this order (each subscription is
    // taken when a listener first needs it).
    events::listen(vec![
        Listener {
            also: Also::Zset,
            on_key: Some(queue::on_key_event),
            gate: Some(&counters::WAITING),
            on_db: machine::on_db_event::<Waiters>,
        },
        Listener {
            also: Also::String,
            on_key: Some(machine::on_key_event::<Observers>),
            gate: Some(&counters::OBSERVING),
            on_db: machine::on_db_event::<Observers>,
        },
        Listener {
            also: Also::Nothing,
            on_key: Some(timings::on_key_event),
            gate: Some(&timings::TRACKED),
            on_db: timings::on_db_event,
        },
        Listener {
            also: Also::EvictedOnly,
            on_key: Some(eviction::on_key_event),
            gate: None,
            on_db: eviction::on_db_event,
        },
        // After eviction's: the sessions' holds it found evicted.
        Listener {
            also: Also::EvictedOnly,
            on_key: Some(store::session_evicted::on_key_event),
            gate: Some(&server::eviction_sessions::PENDING),
            on_db: store::session_evicted::on_db_event,
        },
        Listener { also: Also::Nothing, on_key: None, gate: None, on_db: store::fence::on_db_event },
        Listener {
            also: Also::Nothing,
            on_key: Some(revoked::on_key_event),
            gate: Some(&revoked::GATE),
            on_db: revoked::on_db_event,
        },
        Listener { also: Also::Nothing, on_key: None, gate: None, on_db: store::session::on_db_event },
        Listener { also: Also::Nothing, on_key: None, gate: None, on_db: store::session_revoked::on_db_event },
        Listener { also: Also::Nothing, on_key: None, gate: None, on_db: blocked::session_end::on_db_event },
    ]);
    // Sessions: their timer runs from now on (once a second while there is
    // nothing to do); the first session subscribes to the database events
    // (a FLUSHALL forgets them, a promotion restarts their deadlines).
    let c = boundary::ctx::Ctx(ctx.ctx);
    blocked::session_end::arm(c, c.now_ms() + 1_000);
    config::on_hold_timing_off(timings::stop_holds);
    config::on_eviction_mode(eviction::mode_changed);
    unsafe {
        rm!(RedisModule_RegisterInfoFunc)(ctx.ctx, Some(info::render));
        if !cluster_fence::register(ctx.ctx) {
            ctx.log_warning("lock: could not register the command filter for cluster fences");
            return Status::Err;
        }
        if !config::register(ctx.ctx) {
            ctx.log_warning("lock: could not register or load the module's configs");
            return Status::Err;
        }
        // After the configs: whether lock keys can be evicted, said now.
        eviction::init(ctx.ctx);
        // Refused commands must not invalidate WATCH: we signal changes ourselves.
        // Plus what atomic slot migration needs declared (Valkey 9), where the server knows it.
        let options = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int | migration::subscribe(ctx.ctx);
        rm!(RedisModule_SetModuleOptions)(ctx.ctx, options);
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
    data_types: [FENCE_TYPE, SESSION_TYPE, REVOKED_TYPE, WINDOW_TYPE],
    init: init,
    commands: [],
}
