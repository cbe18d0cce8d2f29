//! A lock key opened through the low-level key API, and the effects of
//! changing it.
//!
//! Every change here does what the scripts' native command would do next to
//! the write itself: the same keyspace notification, a WATCH invalidation,
//! and replication of the *effect* with an absolute expiry (`SET ... PXAT`,
//! `PEXPIREAT`, `DEL`), so replicas and the AOF never re-evaluate a relative
//! TTL. A key that is only read is never signalled: the module is loaded
//! with `NO_IMPLICIT_SIGNAL_MODIFIED`, so a refused command leaves WATCH
//! alone.

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_lock_rules::encode::decimal;
use redis_lock_rules::{Entry, Remaining};
use redis_module::raw::{self, RedisModuleCtx, RedisModuleKey, RedisModuleString};

use crate::api::rm;

/// The command's context: replies, replication and the clock go through it.
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

    /// Whether the command comes from the master's replication stream or
    /// the AOF: effects decided elsewhere, to apply as they are.
    pub fn replaying(self) -> bool {
        let flags = unsafe { rm!(RedisModule_GetContextFlags)(self.0) } as u32;
        flags & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0
    }

    /// A new string owned by the caller (free it with [`Ctx::free`]).
    pub fn string(self, bytes: &[u8]) -> *mut RedisModuleString {
        unsafe { rm!(RedisModule_CreateString)(self.0, bytes.as_ptr().cast(), bytes.len()) }
    }

    pub fn free(self, s: *mut RedisModuleString) {
        unsafe { rm!(RedisModule_FreeString)(self.0, s) }
    }

    /// `LOCK.FENCEFLOOR fence` to replicas and the AOF.
    pub fn replicate_fence_floor(self, fence: u64) {
        if crate::migration::hold_fence_floor(fence) {
            return;
        }
        let mut digits = [0u8; 20];
        // Fences stay below 2^63 (redis_lock_rules::fence), so the cast is exact.
        let fence = decimal(fence as i64, &mut digits);
        unsafe {
            rm!(RedisModule_Replicate)(self.0, c"LOCK.FENCEFLOOR".as_ptr(), c"b".as_ptr(), fence.as_ptr(), fence.len());
        }
    }

    fn notify(self, class: c_int, event: &CStr, key: *mut RedisModuleString) {
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

// Replication arguments. RM_Replicate's "l" format costs ~600 instructions
// (sdsfromlonglong into a separate object) and "c" a strlen and a copy; the
// digits as a "b" buffer and a retained "PXAT" string as "s" cost a fraction
// of that, on every write.

/// `PXAT`, created once (on the main thread) and never freed.
fn pxat() -> *mut RedisModuleString {
    static PXAT: AtomicPtr<RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());
    let mut s = PXAT.load(Ordering::Relaxed);
    if s.is_null() {
        s = unsafe { rm!(RedisModule_CreateString)(std::ptr::null_mut(), c"PXAT".as_ptr(), 4) };
        PXAT.store(s, Ordering::Relaxed);
    }
    s
}

/// A lock's new value.
#[derive(Clone, Copy)]
pub enum NewValue<'a> {
    /// A command argument (the token): replicated by reference.
    Arg(*mut RedisModuleString),
    /// Bytes the module composed (a structured value).
    Composed(&'a [u8]),
}

/// An open key, closed on drop.
pub struct LockKey {
    ctx: Ctx,
    name: *mut RedisModuleString,
    key: *mut RedisModuleKey,
}

impl LockKey {
    /// The context and key name it was opened with.
    pub fn ctx_and_name(&self) -> (Ctx, *mut RedisModuleString) {
        (self.ctx, self.name)
    }

    /// Opens `name` for reading and writing. An expired key is deleted here,
    /// as any write command's lookup would.
    pub fn open(ctx: Ctx, name: *mut RedisModuleString) -> LockKey {
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        let key = unsafe { rm!(RedisModule_OpenKey)(ctx.0, name, mode) };
        LockKey { ctx, name, key }
    }

    /// Opens `name` for reading only: no expired-key deletion on a replica,
    /// no write side effects.
    pub fn open_read(ctx: Ctx, name: *mut RedisModuleString) -> LockKey {
        let key = unsafe { rm!(RedisModule_OpenKey)(ctx.0, name, raw::REDISMODULE_READ as c_int) };
        LockKey { ctx, name, key }
    }

    /// Whether the key is absent. Redis 8.2's expiry getters dereference
    /// the value without checking, so they must never see an empty key.
    fn is_empty(&self) -> bool {
        self.key.is_null()
            || unsafe { rm!(RedisModule_KeyType)(self.key) } as u32 == raw::REDISMODULE_KEYTYPE_EMPTY as u32
    }

    /// What the key holds. The borrow ends before any change is made.
    pub fn entry(&self) -> Entry<'_> {
        if self.key.is_null() {
            return Entry::Absent;
        }
        let ty = unsafe { rm!(RedisModule_KeyType)(self.key) };
        match ty as u32 {
            t if t == raw::REDISMODULE_KEYTYPE_EMPTY as u32 => Entry::Absent,
            t if t == raw::REDISMODULE_KEYTYPE_STRING as u32 => {
                let mut len = 0usize;
                // Read-only DMA. (Redis 7.0 converts an embstr/int-encoded
                // value to raw encoding on first DMA; contents, TTL and WATCH
                // are untouched.)
                let ptr = unsafe { rm!(RedisModule_StringDMA)(self.key, &mut len, raw::REDISMODULE_READ as c_int) };
                if ptr.is_null() {
                    return Entry::OtherType;
                }
                // SAFETY: DMA gives `len` bytes valid until the key changes,
                // and changes need `&mut self`, which this borrow excludes.
                Entry::Str(unsafe { std::slice::from_raw_parts(ptr.cast(), len) })
            }
            _ => Entry::OtherType,
        }
    }

    /// The remaining TTL, as `PTTL` reports it for an existing key.
    pub fn remaining(&self) -> Remaining {
        if self.is_empty() {
            return Remaining::Persistent;
        }
        let ms = unsafe { rm!(RedisModule_GetExpire)(self.key) };
        if ms == raw::REDISMODULE_NO_EXPIRE as i64 {
            Remaining::Persistent
        } else {
            Remaining::Ms(ms.max(0))
        }
    }

    /// The absolute expiry (Unix ms), if the key has one.
    pub fn expires_at(&self) -> Option<i64> {
        if self.is_empty() {
            return None;
        }
        let at = unsafe { rm!(RedisModule_GetAbsExpire)(self.key) };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    /// `SET key value PXAT at`, with `set` and `expire` notifications.
    pub fn set(&mut self, value: NewValue, at_ms: i64) {
        let mut digits = [0u8; 20];
        let at = decimal(at_ms, &mut digits);
        self.write(match value {
            NewValue::Arg(arg) => bytes(arg),
            NewValue::Composed(v) => v,
        });
        unsafe {
            rm!(RedisModule_SetAbsExpire)(self.key, at_ms);
            match value {
                NewValue::Arg(arg) => {
                    rm!(RedisModule_Replicate)(
                        self.ctx.0,
                        c"SET".as_ptr(),
                        c"sssb".as_ptr(),
                        self.name,
                        arg,
                        pxat(),
                        at.as_ptr(),
                        at.len(),
                    );
                }
                NewValue::Composed(v) => {
                    rm!(RedisModule_Replicate)(
                        self.ctx.0,
                        c"SET".as_ptr(),
                        c"sbsb".as_ptr(),
                        self.name,
                        v.as_ptr(),
                        v.len(),
                        pxat(),
                        at.as_ptr(),
                        at.len(),
                    );
                }
            }
        }
        self.changed();
        self.ctx.notify(raw::REDISMODULE_NOTIFY_STRING, c"set", self.name);
        self.ctx.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", self.name);
    }

    /// Makes the key's string `value`, in a raw string object of exactly its
    /// size. Not RM_StringSet, for two measured reasons: it deletes and
    /// re-adds the key even when only the bytes change (~2 000 Ir per
    /// takeover), and a short value it stores is embedded, which Redis 7.0's
    /// RM_StringDMA converts on the next read (~890 Ir in that RENEW or
    /// RELEASE). The key holds a string or nothing here (callers checked).
    fn write(&mut self, value: &[u8]) {
        unsafe {
            // Only a value of the same length is overwritten in place:
            // RM_StringTruncate grows a string greedily (up to twice its
            // size), while on an empty key it allocates exactly.
            if rm!(RedisModule_ValueLength)(self.key) != value.len() {
                rm!(RedisModule_DeleteKey)(self.key);
            }
            let mut len = 0usize;
            let ptr = if rm!(RedisModule_StringTruncate)(self.key, value.len()) == raw::REDISMODULE_OK as c_int {
                rm!(RedisModule_StringDMA)(self.key, &mut len, raw::REDISMODULE_WRITE as c_int)
            } else {
                std::ptr::null_mut()
            };
            if ptr.is_null() || len != value.len() {
                // Unreachable for a string or empty key; if it ever were
                // reached, the slower general call still stores the value.
                let s = self.ctx.string(value);
                rm!(RedisModule_StringSet)(self.key, s);
                self.ctx.free(s);
                return;
            }
            // SAFETY: DMA in write mode gave `len` writable bytes of an
            // object only the key holds (it unshares one with refcount > 1),
            // so they cannot overlap `value`, which the caller still holds.
            std::ptr::copy_nonoverlapping(value.as_ptr(), ptr.cast::<u8>(), len);
        }
    }

    /// `PEXPIREAT key at`, with an `expire` notification.
    pub fn expire_at(&mut self, at_ms: i64) {
        let mut digits = [0u8; 20];
        let at = decimal(at_ms, &mut digits);
        unsafe {
            rm!(RedisModule_SetAbsExpire)(self.key, at_ms);
            rm!(RedisModule_Replicate)(
                self.ctx.0,
                c"PEXPIREAT".as_ptr(),
                c"sb".as_ptr(),
                self.name,
                at.as_ptr(),
                at.len(),
            );
        }
        self.changed();
        self.ctx.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", self.name);
    }

    /// `DEL key`, with a `del` notification.
    pub fn delete(&mut self) {
        unsafe {
            rm!(RedisModule_DeleteKey)(self.key);
            rm!(RedisModule_Replicate)(self.ctx.0, c"DEL".as_ptr(), c"s".as_ptr(), self.name);
        }
        self.changed();
        self.ctx.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del", self.name);
    }

    /// Invalidates WATCH on the key, as a native write does.
    fn changed(&self) {
        unsafe {
            rm!(RedisModule_SignalModifiedKey)(self.ctx.0, self.name);
        }
    }
}

impl Drop for LockKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            unsafe { rm!(RedisModule_CloseKey)(self.key) };
        }
    }
}
