//! The command context: what every layer above reaches the server through
//! (the clock, the selected database, the context's flags, strings), and
//! the bytes of an argument.

use std::ffi::{c_int, CStr};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use crate::boundary::api::rm;

/// The command's (or a timer's, or an event's) context.
#[derive(Clone, Copy)]
pub struct Ctx(pub *mut RedisModuleCtx);

impl Ctx {
    /// The server's clock, in Unix milliseconds.
    pub fn now_ms(self) -> i64 {
        unsafe { rm!(RedisModule_Milliseconds)() }
    }

    /// The database the command runs in (`SELECT`).
    pub fn db(self) -> c_int {
        unsafe { rm!(RedisModule_GetSelectedDb)(self.0) }
    }

    /// Selects database `db` (from a timer or an event: never in a client's
    /// own context, whose database it would change).
    pub fn select(self, db: c_int) {
        unsafe { rm!(RedisModule_SelectDb)(self.0, db) };
    }

    fn flags(self) -> u32 {
        unsafe { rm!(RedisModule_GetContextFlags)(self.0) as u32 }
    }

    /// Whether the command comes from the master's replication stream or
    /// the AOF: effects decided elsewhere, to apply as they are.
    pub fn replaying(self) -> bool {
        self.flags() & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0
    }

    /// Whether the server runs in cluster mode.
    pub fn in_cluster(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
    }

    /// Whether this server is a master.
    pub fn is_master(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
    }

    /// Whether a command may block here: not inside MULTI, a script, or any
    /// context that forbids blocking (WAIT then degrades to a single attempt).
    pub fn may_block(self) -> bool {
        self.flags()
            & (raw::REDISMODULE_CTX_FLAGS_MULTI
                | raw::REDISMODULE_CTX_FLAGS_LUA
                | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING)
            == 0
    }

    /// The calling client's id.
    pub fn client_id(self) -> u64 {
        unsafe { rm!(RedisModule_GetClientId)(self.0) }
    }

    /// A new string owned by the caller (free it with [`Ctx::free`]).
    pub fn string(self, bytes: &[u8]) -> *mut RedisModuleString {
        unsafe { rm!(RedisModule_CreateString)(self.0, bytes.as_ptr().cast(), bytes.len()) }
    }

    pub fn free(self, s: *mut RedisModuleString) {
        unsafe { rm!(RedisModule_FreeString)(self.0, s) }
    }

    /// Raises a keyspace notification, as a native write does.
    pub fn notify(self, class: c_int, event: &CStr, key: *mut RedisModuleString) {
        unsafe {
            rm!(RedisModule_NotifyKeyspaceEvent)(self.0, class, event.as_ptr(), key);
        }
    }
}

/// The bytes of a command argument (valid while the command runs).
pub fn bytes<'a>(s: *mut RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    let ptr = unsafe { rm!(RedisModule_StringPtrLen)(s, &mut len) };
    if ptr.is_null() {
        return &[];
    }
    // SAFETY: Redis guarantees `len` readable bytes at `ptr` for as long as
    // the argument lives, which is the whole command.
    unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
}
