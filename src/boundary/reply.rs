//! The reply vocabulary shared by every handler and the C boundary: a
//! command's arguments, its reply, why it failed, and LOCK.GUARD's
//! forwarded reply. Every handler and every blocked client's answer is
//! sent through `crate::boundary::entry::send`.

use std::ffi::{c_char, c_int, CStr, CString};

use redis_lock_rules::guard::legacy_acl_error;
use redis_lock_rules::{ArgError, WrongType};
use redis_module::raw::{self, RedisModuleCallReply, RedisModuleCtx, RedisModuleString};

use crate::boundary::api::rm;
use crate::boundary::errors::INTERNAL;

/// What a command (or a blocked client, when its wait ends) replies.
pub type Outcome = Result<Reply, Failure>;

/// A command's arguments, the command name first.
pub type Argv<'a> = &'a [*mut RedisModuleString];

/// Why a command did not produce its integer reply.
#[derive(Debug)]
pub enum Failure {
    /// Missing or extra arguments.
    Arity,
    Arg(ArgError),
    WrongType,
    /// The 63-bit fence space is used up (only a replayed log or a master gets there).
    FencesExhausted,
    /// A WAIT that would block beyond `lock.max-waiters`.
    TooManyWaiters,
    /// An error reply composed elsewhere (LOCK.GUARD's NOTHELD and refusals).
    Error(&'static CStr),
    /// An error reply composed at run time: the redirection a blocked
    /// client is sent on with (`MOVED`, `TRYAGAIN`, `CLUSTERDOWN`), or
    /// `UNBLOCKED`.
    Message(CString),
    /// A semaphore acquired with another limit than its stored one (this).
    LimitDiffers(u64),
    /// A semaphore or read-write lock acquired with another lock-delay
    /// than its key's (this, ms).
    DelayDiffers(i64),
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

/// A command's successful reply.
#[derive(Debug)]
pub enum Reply {
    /// 1 when the command took effect, 0 when it was refused.
    Int(i64),
    Nil,
    Ok,
    /// No reply now: the client waits (LOCK.ACQUIRE ... WAIT).
    Blocked,
    /// An array of integers (LOCK.ACQUIREALL … FENCE: a fence per key;
    /// SESSION.KEEPALIVE: a TTL per session).
    Ints(Vec<i64>),
    /// Field/value pairs (LOCK.INFO).
    Fields(Vec<(&'static CStr, Value)>),
    /// An array of field/value lists (LOCK.TOP).
    List(Vec<Vec<(&'static CStr, Value)>>),
    /// What an inner command replied, forwarded as it is (LOCK.GUARD).
    Call(CallReply),
    /// A bulk string (SESSION.GRANT's id).
    Bytes(Vec<u8>),
    /// An array of bulk strings (SESSION.LIST).
    Strings(Vec<Vec<u8>>),
}

#[derive(Debug)]
pub enum Value {
    Int(i64),
    Bytes(Vec<u8>),
    Nil,
    /// Holders and their remaining lease in ms (SEM.INFO, RWLOCK.INFO).
    Holders(Vec<(Vec<u8>, i64)>),
    /// A flat array (SESSION.INFO's revoked holds: key, db, deadline,
    /// reason, …).
    Items(Vec<Item>),
}

/// One element of [`Value::Items`].
#[derive(Debug)]
pub enum Item {
    Int(i64),
    Bytes(Vec<u8>),
}

/// A reply of `RedisModule_Call`, freed on drop.
#[derive(Debug)]
pub struct CallReply(pub(crate) *mut RedisModuleCallReply);

impl CallReply {
    /// Sends the reply to the caller as it is, except Redis 7.0's `ERR` for
    /// an ACL refusal, which becomes the `NOPERM` every later server sends.
    pub fn send(&self, ctx: *mut RedisModuleCtx) -> c_int {
        unsafe {
            if self.0.is_null() {
                // Only a malformed format string gets here (EBADF).
                return rm!(RedisModule_ReplyWithError)(ctx, INTERNAL.as_ptr());
            }
            if rm!(RedisModule_CallReplyType)(self.0) == raw::REDISMODULE_REPLY_ERROR as c_int {
                let mut len = 0usize;
                let p = rm!(RedisModule_CallReplyStringPtr)(self.0, &mut len);
                let text = if p.is_null() { &[][..] } else { std::slice::from_raw_parts(p.cast::<u8>(), len) };
                if let Some(noperm) = legacy_acl_error(text) {
                    return rm!(RedisModule_ReplyWithError)(ctx, noperm.as_ptr().cast::<c_char>());
                }
            }
            if rm!(RedisModule_ReplyWithCallReply)(ctx, self.0) != raw::REDISMODULE_OK as c_int {
                // A RESP3 reply for a RESP2 caller: `0` rules it out.
                return rm!(RedisModule_ReplyWithError)(ctx, INTERNAL.as_ptr());
            }
            raw::REDISMODULE_OK as c_int
        }
    }
}

impl Drop for CallReply {
    fn drop(&mut self) {
        if !self.0.is_null() {
            unsafe { rm!(RedisModule_FreeCallReply)(self.0) };
        }
    }
}
