//! A lock key (a string) opened through the low-level key API, and the effects of
//! changing it.
//!
//! Every change here does what the scripts' native command would do next to
//! the write itself: the same keyspace notification, a WATCH invalidation,
//! and replication of the *effect* with an absolute expiry (`SET ... PXAT`,
//! `PEXPIREAT`, `DEL`), so replicas and the AOF never re-evaluate a relative
//! TTL. A key that is only read is never signalled: the module is loaded
//! with `NO_IMPLICIT_SIGNAL_MODIFIED`, so a refused command leaves WATCH
//! alone.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_lock_rules::encode::decimal;
use redis_lock_rules::{Entry, Remaining};
use redis_module::raw::{self, RedisModuleKey, RedisModuleString};

use crate::boundary::api::rm;
use crate::boundary::ctx::{bytes, Ctx};
use crate::server::eviction;

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
    /// What [`LockKey::entry`] read, until the next write: a command asks
    /// several times (settling a lease, the queue's check, its own
    /// decision), and each reading is two calls into the server.
    read: Cell<Option<Read>>,
}

/// A reading of the key: its type, and a string's bytes (valid until the
/// key changes, which needs `&mut self`).
#[derive(Clone, Copy)]
enum Read {
    Absent,
    Other,
    Str(*const u8, usize),
}

impl LockKey {
    /// The context and key name it was opened with.
    pub fn ctx_and_name(&self) -> (Ctx, *mut RedisModuleString) {
        (self.ctx, self.name)
    }

    /// Opens `name` for reading and writing. An expired key is deleted here,
    /// as any write command's lookup would.
    #[inline(always)]
    pub fn open(ctx: Ctx, name: *mut RedisModuleString) -> LockKey {
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        let key = unsafe { rm!(RedisModule_OpenKey)(ctx.0, name, mode) };
        LockKey { ctx, name, key, read: Cell::new(None) }
    }

    /// Opens `name` for reading only: no expired-key deletion on a replica,
    /// no write side effects.
    pub fn open_read(ctx: Ctx, name: *mut RedisModuleString) -> LockKey {
        let key = unsafe { rm!(RedisModule_OpenKey)(ctx.0, name, raw::REDISMODULE_READ as c_int) };
        LockKey { ctx, name, key, read: Cell::new(None) }
    }

    /// Whether the key is absent. Redis 8.2's expiry getters dereference
    /// the value without checking, so they must never see an empty key.
    fn is_empty(&self) -> bool {
        match self.read.get() {
            Some(read) => matches!(read, Read::Absent),
            None => {
                self.key.is_null()
                    || unsafe { rm!(RedisModule_KeyType)(self.key) } as u32 == raw::REDISMODULE_KEYTYPE_EMPTY as u32
            }
        }
    }

    /// What the key holds. The borrow ends before any change is made.
    #[inline(always)]
    pub fn entry(&self) -> Entry<'_> {
        let read = match self.read.get() {
            Some(read) => read,
            None => {
                let read = self.read_now();
                self.read.set(Some(read));
                read
            }
        };
        match read {
            Read::Absent => Entry::Absent,
            Read::Other => Entry::OtherType,
            // SAFETY: DMA gave `len` bytes valid until the key changes, and
            // changes need `&mut self` (which clears the reading), which
            // this borrow excludes.
            Read::Str(ptr, len) => Entry::Str(unsafe { std::slice::from_raw_parts(ptr, len) }),
        }
    }

    fn read_now(&self) -> Read {
        if self.key.is_null() {
            return Read::Absent;
        }
        let ty = unsafe { rm!(RedisModule_KeyType)(self.key) };
        match ty as u32 {
            t if t == raw::REDISMODULE_KEYTYPE_EMPTY as u32 => Read::Absent,
            t if t == raw::REDISMODULE_KEYTYPE_STRING as u32 => {
                let mut len = 0usize;
                // Read-only DMA. (Redis 7.0 converts an embstr/int-encoded
                // value to raw encoding on first DMA; contents, TTL and WATCH
                // are untouched.)
                let ptr = unsafe { rm!(RedisModule_StringDMA)(self.key, &mut len, raw::REDISMODULE_READ as c_int) };
                if ptr.is_null() {
                    Read::Other
                } else {
                    Read::Str(ptr.cast_const().cast(), len)
                }
            }
            _ => Read::Other,
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
        self.tell_eviction(at_ms);
    }

    /// Makes the key's string `value`, in a raw string object of exactly its
    /// size. Not RM_StringSet, for two measured reasons: it deletes and
    /// re-adds the key even when only the bytes change (~2 000 Ir per
    /// takeover), and a short value it stores is embedded, which Redis 7.0's
    /// RM_StringDMA converts on the next read (~890 Ir in that RENEW or
    /// RELEASE). The key holds a string or nothing here (callers checked).
    fn write(&mut self, value: &[u8]) {
        self.read.set(None);
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

    /// `SET key value PXAT at`, or without an expiry (`at` none: a lock
    /// held by a session; an expiry the key had goes, as with `SET`).
    pub fn set_maybe_expiring(&mut self, value: NewValue, at_ms: Option<i64>) {
        let Some(at) = at_ms else { return self.set_persistent(value) };
        self.set(value, at)
    }

    fn set_persistent(&mut self, value: NewValue) {
        // A grant finds the key absent; an adopted orphan had an end.
        if self.expires_at().is_some() {
            unsafe { rm!(RedisModule_SetAbsExpire)(self.key, raw::REDISMODULE_NO_EXPIRE as i64) };
        }
        self.write(match value {
            NewValue::Arg(arg) => bytes(arg),
            NewValue::Composed(v) => v,
        });
        unsafe {
            match value {
                NewValue::Arg(arg) => {
                    rm!(RedisModule_Replicate)(self.ctx.0, c"SET".as_ptr(), c"ss".as_ptr(), self.name, arg);
                }
                NewValue::Composed(v) => {
                    rm!(RedisModule_Replicate)(
                        self.ctx.0,
                        c"SET".as_ptr(),
                        c"sb".as_ptr(),
                        self.name,
                        v.as_ptr(),
                        v.len(),
                    );
                }
            }
        }
        self.changed();
        self.ctx.notify(raw::REDISMODULE_NOTIFY_STRING, c"set", self.name);
        self.tell_eviction(i64::MAX);
    }

    /// `PEXPIREAT key at`, with an `expire` notification.
    #[inline(always)]
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
        self.tell_eviction(at_ms);
    }

    /// `DEL key`, with a `del` notification.
    #[inline(always)]
    pub fn delete(&mut self) {
        self.read.set(None);
        unsafe {
            rm!(RedisModule_DeleteKey)(self.key);
            rm!(RedisModule_Replicate)(self.ctx.0, c"DEL".as_ptr(), c"s".as_ptr(), self.name);
        }
        self.changed();
        self.ctx.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del", self.name);
        eviction::lock_deleted(self.ctx, self.name);
    }

    /// Tells eviction's tracker (while it watches) who holds the key now,
    /// until `at_ms`; else its window how long an untracked hold may last.
    #[inline]
    fn tell_eviction(&self, at_ms: i64) {
        if eviction::watching() {
            self.tell_eviction_now(at_ms);
        } else {
            eviction::untracked(at_ms);
        }
    }

    #[inline(never)]
    fn tell_eviction_now(&self, at_ms: i64) {
        let value = match self.entry() {
            Entry::Str(v) => Some(v),
            _ => None,
        };
        eviction::lock_written(self.ctx, self.name, value, at_ms);
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
