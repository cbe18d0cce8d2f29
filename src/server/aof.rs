//! What the server's persistence is doing, as the module needs it: whether
//! the child just forked is an AOF rewrite without the RDB preamble
//! (`crate::store::aof_walk` then restates the node state after it).
//! Read once per fork.

use std::ffi::{c_int, CStr};

use redis_module::raw;

use crate::boundary::api::rm;
use crate::boundary::ctx::Ctx;

/// Whether the child just forked needs the node state restated after it
/// (`crate::store::aof_walk`): with the AOF on, whose child is an AOF
/// rewrite (`INFO persistence`), with `aof-use-rdb-preamble no`. A master
/// or a replica: a replica's `RedisModule_Replicate` reaches its own AOF
/// and no further (`shouldPropagate` lets the AOF through on any node;
/// `replicationFeedSlaves` returns at once on a replica, which proxies its
/// master's stream: redis 7.0.15's `server.c` and `replication.c`, the
/// same in valkey).
pub fn rewrite_without_preamble(ctx: Ctx) -> bool {
    let flags = unsafe { rm!(RedisModule_GetContextFlags)(ctx.0) } as u32;
    flags & raw::REDISMODULE_CTX_FLAGS_AOF != 0
        && rewriting()
        && config(ctx, c"aof-use-rdb-preamble") == Some(b"no".to_vec())
}

/// `aof_rewrite_in_progress` of `INFO persistence`: the child just forked
/// is the rewrite's (Redis sets the child's type before the event).
fn rewriting() -> bool {
    let apis = unsafe {
        (raw::RedisModule_GetServerInfo, raw::RedisModule_ServerInfoGetFieldSigned, raw::RedisModule_FreeServerInfo)
    };
    let (Some(get), Some(field), Some(free)) = apis else { return false };
    unsafe {
        let data = get(std::ptr::null_mut(), c"persistence".as_ptr());
        if data.is_null() {
            return false;
        }
        let mut err: c_int = 0;
        let v = field(data, c"aof_rewrite_in_progress".as_ptr(), &mut err);
        free(std::ptr::null_mut(), data);
        err == 0 && v == 1
    }
}

/// A server config's value (`CONFIG GET name`'s second element).
fn config(ctx: Ctx, name: &CStr) -> Option<Vec<u8>> {
    let element = unsafe { raw::RedisModule_CallReplyArrayElement }?;
    unsafe {
        let reply = rm!(RedisModule_Call)(ctx.0, c"CONFIG".as_ptr(), c"cc".as_ptr(), c"GET".as_ptr(), name.as_ptr());
        if reply.is_null() {
            return None;
        }
        let value = element(reply, 1);
        let mut len = 0usize;
        let ptr = if value.is_null() { std::ptr::null() } else { rm!(RedisModule_CallReplyStringPtr)(value, &mut len) };
        let out = (!ptr.is_null()).then(|| std::slice::from_raw_parts(ptr.cast::<u8>(), len).to_vec());
        rm!(RedisModule_FreeCallReply)(reply);
        out
    }
}
