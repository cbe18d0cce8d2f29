//! A semaphore or read-write lock key: the sorted set described in
//! `redis_lock_rules::holders`, read and written through the module's
//! sorted-set API.
//!
//! Every change is made by [`HoldersKey::store`], which writes the
//! difference between the set as read and the set the rules decided, and
//! replicates it as the native commands would: `ZREM key token…`, `ZADD key
//! <lease end> token…`, `PEXPIREAT key <last lease end>`, or `DEL key` when
//! no holder is left — absolute times only, so a replica or an AOF replay
//! holds the same set with the same deadlines. The key's own expiry is the
//! last lease end, so the key lives exactly as long as some lease does.

use std::ffi::c_int;

use redis_lock_rules::encode::decimal;
use redis_lock_rules::holders::{Holders, NotOurs, TAG};
use redis_module::raw::{self, RedisModuleKey, RedisModuleString};

use crate::api::rm;
use crate::key::{bytes, Ctx};
use crate::stats::Counter;

/// A key read for a decision: what is stored, and who of it still holds.
pub struct Loaded {
    pub stored: Option<Holders>,
    /// The stored holders whose lease has not ended (`None`: absent key).
    pub live: Option<Holders>,
    /// How many stored holders' leases have ended.
    pub expired: usize,
}

/// An open key, closed on drop.
pub struct HoldersKey {
    ctx: Ctx,
    name: *mut RedisModuleString,
    key: *mut RedisModuleKey,
}

impl HoldersKey {
    /// Opens `name` for reading and writing (an expired key is deleted here,
    /// as any write command's lookup would).
    pub fn open(ctx: Ctx, name: *mut RedisModuleString) -> HoldersKey {
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        HoldersKey { ctx, name, key: unsafe { rm!(RedisModule_OpenKey)(ctx.0, name, mode) } }
    }

    /// Opens `name` for reading only (works on replicas, writes nothing).
    pub fn open_read(ctx: Ctx, name: *mut RedisModuleString) -> HoldersKey {
        HoldersKey { ctx, name, key: unsafe { rm!(RedisModule_OpenKey)(ctx.0, name, raw::REDISMODULE_READ as c_int) } }
    }

    fn key_type(&self) -> u32 {
        if self.key.is_null() {
            return raw::REDISMODULE_KEYTYPE_EMPTY as u32;
        }
        unsafe { rm!(RedisModule_KeyType)(self.key) as u32 }
    }

    /// What the key holds, expired holders included: `None` when absent,
    /// `NotOurs` for another type or a sorted set without a valid tag.
    pub fn load(&self) -> Result<Option<Holders>, NotOurs> {
        match self.key_type() {
            t if t == raw::REDISMODULE_KEYTYPE_EMPTY as u32 => return Ok(None),
            t if t == raw::REDISMODULE_KEYTYPE_ZSET as u32 => {}
            _ => return Err(NotOurs),
        }
        let mut members = Vec::new();
        unsafe {
            rm!(RedisModule_ZsetFirstInScoreRange)(self.key, f64::NEG_INFINITY, f64::INFINITY, 0, 0);
            while rm!(RedisModule_ZsetRangeEndReached)(self.key) == 0 {
                let mut score = 0.0;
                let s = rm!(RedisModule_ZsetRangeCurrentElement)(self.key, &mut score);
                if s.is_null() {
                    break;
                }
                members.push((bytes(s).to_vec(), score));
                rm!(RedisModule_FreeString)(self.ctx.0, s);
                if rm!(RedisModule_ZsetRangeNext)(self.key) == 0 {
                    break;
                }
            }
            rm!(RedisModule_ZsetRangeStop)(self.key);
        }
        Holders::parse(members).map(Some)
    }

    /// [`HoldersKey::load`], split into live and expired holders at `now`.
    pub fn load_live(&self, now: i64) -> Result<Loaded, NotOurs> {
        let stored = self.load()?;
        let mut live = stored.clone();
        let expired = live.as_mut().map_or(0, |h| h.prune(now).len());
        Ok(Loaded { stored, live, expired })
    }

    /// Stores `after` in place of what `loaded` read; the holders whose
    /// lease had ended go with it (counted in `expired`).
    pub fn commit(&mut self, loaded: &Loaded, after: &Holders, expired: &Counter) {
        for _ in 0..loaded.expired {
            expired.add();
        }
        self.store(loaded.stored.as_ref(), after);
    }

    /// Removes the holders whose lease had ended, if any.
    pub fn prune(&mut self, loaded: &Loaded, expired: &Counter) {
        if let (Some(live), true) = (&loaded.live, loaded.expired > 0) {
            self.commit(loaded, live, expired);
        }
    }

    /// The key's absolute expiry, if it has one.
    fn expires_at(&self) -> Option<i64> {
        // Redis 8.2's expiry getter must never see an empty key.
        if self.key_type() == raw::REDISMODULE_KEYTYPE_EMPTY as u32 {
            return None;
        }
        let at = unsafe { rm!(RedisModule_GetAbsExpire)(self.key) };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    /// Makes the stored set `after`, given that `before` is what
    /// [`HoldersKey::load`] read (`None`: absent). Writes and replicates
    /// only what differs; an `after` without holders deletes the key.
    pub fn store(&mut self, before: Option<&Holders>, after: &Holders) {
        let ctx = self.ctx;
        if after.holders.is_empty() {
            if before.is_some() {
                unsafe {
                    rm!(RedisModule_DeleteKey)(self.key);
                    rm!(RedisModule_Replicate)(ctx.0, c"DEL".as_ptr(), c"s".as_ptr(), self.name);
                }
                self.changed(c"del", raw::REDISMODULE_NOTIFY_GENERIC);
            }
            return;
        }
        let old = |token: &[u8]| before.and_then(|b| b.holders.iter().find(|h| h.token == token)).map(|h| h.deadline);
        let removed: Vec<&[u8]> = before
            .map_or(Vec::new(), |b| b.holders.iter().map(|h| h.token.as_slice()).filter(|t| !after.holds(t)).collect());
        let mut added: Vec<(i64, &[u8])> = Vec::new();
        if before.is_none_or(|b| b.kind != after.kind) {
            added.push((after.kind.score(), TAG));
        }
        added.extend(
            after
                .holders
                .iter()
                .filter(|h| old(&h.token) != Some(h.deadline))
                .map(|h| (h.deadline, h.token.as_slice())),
        );
        if !removed.is_empty() {
            let args: Vec<_> = removed.iter().map(|t| ctx.string(t)).collect();
            for &a in &args {
                unsafe { rm!(RedisModule_ZsetRem)(self.key, a, std::ptr::null_mut()) };
            }
            self.replicate(c"ZREM", &args);
            self.changed(c"zrem", raw::REDISMODULE_NOTIFY_ZSET);
        }
        if !added.is_empty() {
            let mut digits = [0u8; 20];
            let mut args = Vec::with_capacity(2 * added.len());
            for &(score, member) in &added {
                let (score_str, member_str) = (ctx.string(decimal(score, &mut digits)), ctx.string(member));
                // Scores are integers below 2^53 (lease_end, parse_limit): exact as doubles.
                unsafe { rm!(RedisModule_ZsetAdd)(self.key, score as f64, member_str, std::ptr::null_mut()) };
                args.extend([score_str, member_str]);
            }
            self.replicate(c"ZADD", &args);
            self.changed(c"zadd", raw::REDISMODULE_NOTIFY_ZSET);
        }
        // The key ends with its last lease, never before it.
        if let Some(last) = after.last_deadline().filter(|&last| self.expires_at() != Some(last)) {
            let mut digits = [0u8; 20];
            let at = decimal(last, &mut digits);
            unsafe {
                rm!(RedisModule_SetAbsExpire)(self.key, last);
                rm!(RedisModule_Replicate)(
                    ctx.0,
                    c"PEXPIREAT".as_ptr(),
                    c"sb".as_ptr(),
                    self.name,
                    at.as_ptr(),
                    at.len(),
                );
            }
            self.changed(c"expire", raw::REDISMODULE_NOTIFY_GENERIC);
        }
    }

    /// `command key args…` to replicas and the AOF; frees `args`.
    fn replicate(&self, command: &std::ffi::CStr, args: &[*mut RedisModuleString]) {
        unsafe {
            rm!(RedisModule_Replicate)(
                self.ctx.0,
                command.as_ptr(),
                c"sv".as_ptr(),
                self.name,
                args.as_ptr(),
                args.len(),
            );
        }
        for &a in args {
            self.ctx.free(a);
        }
    }

    /// The native command's keyspace notification and WATCH invalidation.
    fn changed(&self, event: &std::ffi::CStr, class: c_int) {
        unsafe {
            rm!(RedisModule_SignalModifiedKey)(self.ctx.0, self.name);
            rm!(RedisModule_NotifyKeyspaceEvent)(self.ctx.0, class, event.as_ptr(), self.name);
        }
    }
}

impl Drop for HoldersKey {
    fn drop(&mut self) {
        if !self.key.is_null() {
            unsafe { rm!(RedisModule_CloseKey)(self.key) };
        }
    }
}
