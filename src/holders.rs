//! A semaphore or read-write lock key: the sorted set described in
//! `redis_lock_rules::holders`, read and written through the module's
//! sorted-set API without walking its holders.
//!
//! [`HoldersKey::scan`] reads what a decision needs, each part by a lookup
//! that is O(log N) in the key's N holders: the kind from the tag member's
//! score, the caller's lease from its member's score, the live holders from
//! the set's cardinality minus the tag and the ended leases (those scored
//! below `now`, found by a score range), the last lease end from the last
//! member by score. [`HoldersKey::commit`] then writes only what the
//! command changes, and replicates it as the native commands would: `ZREM
//! key token…` (ended leases, a release), `ZADD key <lease end> token…`,
//! `PEXPIREAT key <last lease end>`, or `DEL key` when no holder is left —
//! absolute times only, so a replica or an AOF replay holds the same set
//! with the same deadlines. The key's own expiry is the last lease end, so
//! the key lives exactly as long as some lease does.
//!
//! The tag's score (a limit, 0 or -1) lies below every real lease end, so a
//! range over scores can meet it: every range here skips the member `""`.

use std::ffi::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_lock_rules::encode::decimal;
use redis_lock_rules::holders::{last_after, Change, Last, NotOurs, Summary, Tag, PRUNE_BOUND, TAG};
use redis_module::raw::{self, RedisModuleKey, RedisModuleString};

use crate::api::rm;
use crate::key::{bytes, Ctx};
use crate::stats::Counter;

/// What a command writes besides pruning ended leases.
#[derive(Clone, Copy)]
pub enum Edit {
    /// Nothing (a refusal).
    Keep,
    /// `token`'s place ends at `at` (a grant or a renewal: its lease end
    /// plus the key's delay); `tag`: the kind and delay to tag the key
    /// with, when they change (`tag_after_grant`).
    Put { token: *mut RedisModuleString, at: i64, tag: Option<Tag> },
    /// `token` leaves (a release of a live lease).
    Remove { token: *mut RedisModuleString },
}

impl Edit {
    fn change(self) -> Change {
        match self {
            Edit::Keep => Change::Keep,
            Edit::Put { at, .. } => Change::Put(at),
            Edit::Remove { .. } => Change::Remove,
        }
    }
}

/// An open key, closed on drop.
pub struct HoldersKey {
    ctx: Ctx,
    name: *mut RedisModuleString,
    key: *mut RedisModuleKey,
    mode: c_int,
    /// The time the last scan judged leases at.
    now: i64,
    /// Ended leases the last scan found, at most [`PRUNE_BOUND`], in score
    /// order; owned (freed on drop or once written).
    ended: Vec<*mut RedisModuleString>,
    /// Ended leases beyond those: left for later commands, but counted.
    left: u64,
}

/// `""`, created once (on the main thread) and never freed.
fn tag_member() -> *mut RedisModuleString {
    static TAG_STR: AtomicPtr<RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());
    let mut s = TAG_STR.load(Ordering::Relaxed);
    if s.is_null() {
        s = unsafe { rm!(RedisModule_CreateString)(std::ptr::null_mut(), c"".as_ptr(), 0) };
        TAG_STR.store(s, Ordering::Relaxed);
    }
    s
}

impl HoldersKey {
    /// Opens `name` for reading and writing (an expired key is deleted here,
    /// as any write command's lookup would).
    pub fn open(ctx: Ctx, name: *mut RedisModuleString) -> HoldersKey {
        Self::open_mode(ctx, name, (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int)
    }

    /// Opens `name` for reading only (works on replicas, writes nothing).
    pub fn open_read(ctx: Ctx, name: *mut RedisModuleString) -> HoldersKey {
        Self::open_mode(ctx, name, raw::REDISMODULE_READ as c_int)
    }

    fn open_mode(ctx: Ctx, name: *mut RedisModuleString, mode: c_int) -> HoldersKey {
        let key = unsafe { rm!(RedisModule_OpenKey)(ctx.0, name, mode) };
        HoldersKey { ctx, name, key, mode, now: 0, ended: Vec::new(), left: 0 }
    }

    fn key_type(&self) -> u32 {
        if self.key.is_null() {
            return raw::REDISMODULE_KEYTYPE_EMPTY as u32;
        }
        unsafe { rm!(RedisModule_KeyType)(self.key) as u32 }
    }

    /// `member`'s score, if it is in the set (O(1)).
    fn score(&self, member: *mut RedisModuleString) -> Option<f64> {
        let mut score = 0.0;
        let found = unsafe { rm!(RedisModule_ZsetScore)(self.key, member, &mut score) } == raw::REDISMODULE_OK as c_int;
        found.then_some(score)
    }

    /// The tag (kind and delay): `None` for an absent key, `NotOurs` for
    /// another type or a sorted set without a valid tag.
    pub fn tag(&self) -> Result<Option<Tag>, NotOurs> {
        match self.key_type() {
            t if t == raw::REDISMODULE_KEYTYPE_EMPTY as u32 => Ok(None),
            t if t == raw::REDISMODULE_KEYTYPE_ZSET as u32 => {
                self.score(tag_member()).and_then(Tag::from_score).map(Some).ok_or(NotOurs)
            }
            _ => Err(NotOurs),
        }
    }

    /// What the rules decide on, at `now`: `None` for an absent key. With
    /// `token`, its live lease. Finds the ended leases a commit prunes.
    pub fn scan(&mut self, now: i64, token: Option<*mut RedisModuleString>) -> Result<Option<Summary>, NotOurs> {
        self.forget_ended();
        self.now = now;
        let Some(tag) = self.tag()? else { return Ok(None) };
        if self.collect_ended(now) && !self.count_left(now, tag) {
            // The key expired while it was counted: absent now.
            return Ok(None);
        }
        let members = unsafe { rm!(RedisModule_ValueLength)(self.key) } as u64;
        let live = members.saturating_sub(1 + self.ended.len() as u64 + self.left);
        // A score is live while `now` has not passed it (integer part, as
        // the rules read a hand-edited fraction: the same test for now >= 0).
        let own = token.and_then(|t| self.score(t)).filter(|&s| s >= now as f64).map(|s| s as i64);
        let last = if live > 0 { self.edge_live(now, true) } else { None };
        Ok(Some(Summary { kind: tag.kind, delay: tag.delay, live, own, last }))
    }

    /// Collects up to [`PRUNE_BOUND`] ended leases (scores below `now`),
    /// skipping the tag; whether more remain.
    fn collect_ended(&mut self, now: i64) -> bool {
        let mut more = false;
        unsafe {
            rm!(RedisModule_ZsetFirstInScoreRange)(self.key, f64::NEG_INFINITY, now as f64, 0, 1);
            while rm!(RedisModule_ZsetRangeEndReached)(self.key) == 0 {
                let mut score = 0.0;
                let s = rm!(RedisModule_ZsetRangeCurrentElement)(self.key, &mut score);
                if s.is_null() {
                    break;
                }
                if bytes(s) == TAG {
                    self.ctx.free(s);
                } else if self.ended.len() < PRUNE_BOUND {
                    self.ended.push(s);
                } else {
                    self.ctx.free(s);
                    more = true;
                    break;
                }
                if rm!(RedisModule_ZsetRangeNext)(self.key) == 0 {
                    break;
                }
            }
            rm!(RedisModule_ZsetRangeStop)(self.key);
        }
        more
    }

    /// Counts the ended leases beyond the collected ones into `left`, with
    /// `ZCOUNT` (O(log N); the module API has no rank). The key is closed
    /// around the call: a lookup outside a command may expire the key, which
    /// must not happen under an open handle. False if the key is gone.
    fn count_left(&mut self, now: i64, tag: Tag) -> bool {
        unsafe { rm!(RedisModule_CloseKey)(self.key) };
        let mut digits = [0u8; 20];
        // "(now": scores below now, as the range that collected the rest.
        let below = [&b"("[..], decimal(now, &mut digits)].concat();
        let reply = unsafe {
            rm!(RedisModule_Call)(
                self.ctx.0,
                c"ZCOUNT".as_ptr(),
                c"scb".as_ptr(),
                self.name,
                c"-inf".as_ptr(),
                below.as_ptr(),
                below.len(),
            )
        };
        let mut count = 0u64;
        if !reply.is_null() {
            if unsafe { rm!(RedisModule_CallReplyType)(reply) } == raw::REDISMODULE_REPLY_INTEGER as c_int {
                count = unsafe { rm!(RedisModule_CallReplyInteger)(reply) }.max(0) as u64;
            }
            unsafe { rm!(RedisModule_FreeCallReply)(reply) };
        }
        self.key = unsafe { rm!(RedisModule_OpenKey)(self.ctx.0, self.name, self.mode) };
        if self.tag() != Ok(Some(tag)) {
            self.forget_ended();
            return false;
        }
        let tag_ended = u64::from(tag.score() < now as f64);
        self.left = count.saturating_sub(tag_ended + self.ended.len() as u64);
        true
    }

    fn forget_ended(&mut self) {
        for s in std::mem::take(&mut self.ended) {
            self.ctx.free(s);
        }
        self.left = 0;
    }

    /// The earliest (`last` false) or the last live lease end: the first
    /// member by score from `now` on, or the last one, that is not the tag.
    fn edge_live(&self, now: i64, last: bool) -> Option<i64> {
        let mut found = None;
        unsafe {
            if last {
                rm!(RedisModule_ZsetLastInScoreRange)(self.key, now as f64, f64::INFINITY, 0, 0);
            } else {
                rm!(RedisModule_ZsetFirstInScoreRange)(self.key, now as f64, f64::INFINITY, 0, 0);
            }
            // At most two steps: the tag is one member.
            for _ in 0..2 {
                if rm!(RedisModule_ZsetRangeEndReached)(self.key) != 0 {
                    break;
                }
                let mut score = 0.0;
                let s = rm!(RedisModule_ZsetRangeCurrentElement)(self.key, &mut score);
                if s.is_null() {
                    break;
                }
                let is_tag = bytes(s) == TAG;
                self.ctx.free(s);
                if !is_tag {
                    // `as` saturates: +inf becomes i64::MAX (NaN cannot be stored).
                    found = Some(score as i64);
                    break;
                }
                let moved = if last {
                    rm!(RedisModule_ZsetRangePrev)(self.key)
                } else {
                    rm!(RedisModule_ZsetRangeNext)(self.key)
                };
                if moved == 0 {
                    break;
                }
            }
            rm!(RedisModule_ZsetRangeStop)(self.key);
        }
        found
    }

    /// The earliest live lease end at the last scan's `now`: when the next
    /// place frees up by itself.
    pub fn first_live(&self) -> Option<i64> {
        if self.key_type() != raw::REDISMODULE_KEYTYPE_ZSET as u32 {
            return None;
        }
        self.edge_live(self.now, false)
    }

    /// Up to `count` live holders with their lease end, earliest first
    /// (O(log N + count)).
    pub fn live_holders(&self, now: i64, count: usize) -> Vec<(Vec<u8>, i64)> {
        let mut out = Vec::new();
        if self.key_type() != raw::REDISMODULE_KEYTYPE_ZSET as u32 {
            return out;
        }
        unsafe {
            rm!(RedisModule_ZsetFirstInScoreRange)(self.key, now as f64, f64::INFINITY, 0, 0);
            while out.len() < count && rm!(RedisModule_ZsetRangeEndReached)(self.key) == 0 {
                let mut score = 0.0;
                let s = rm!(RedisModule_ZsetRangeCurrentElement)(self.key, &mut score);
                if s.is_null() {
                    break;
                }
                let member = bytes(s);
                if member != TAG {
                    out.push((member.to_vec(), score as i64));
                }
                self.ctx.free(s);
                if rm!(RedisModule_ZsetRangeNext)(self.key) == 0 {
                    break;
                }
            }
            rm!(RedisModule_ZsetRangeStop)(self.key);
        }
        out
    }

    /// Writes `edit` to the key `scan` summarized (`None`: absent), with
    /// the ended leases the scan found; counts those in `expired`. A
    /// refusal on a key without ended leases writes nothing.
    pub fn commit(&mut self, summary: Option<&Summary>, edit: Edit, expired: &Counter) {
        if matches!(edit, Edit::Keep) && self.ended.is_empty() {
            return;
        }
        let ctx = self.ctx;
        // Hold timing's hook: before anything is written or notified.
        crate::timings::holders_commit(ctx, self.name, summary, edit, &self.ended, self.now);
        let last = match last_after(summary, edit.change()) {
            Last::Gone => {
                if summary.is_some() {
                    expired.add_n(self.ended.len() as u64 + self.left);
                    self.forget_ended();
                    unsafe {
                        rm!(RedisModule_DeleteKey)(self.key);
                        rm!(RedisModule_Replicate)(ctx.0, c"DEL".as_ptr(), c"s".as_ptr(), self.name);
                    }
                    self.changed(c"del", raw::REDISMODULE_NOTIFY_GENERIC);
                }
                return;
            }
            other => other,
        };
        let mut removed = std::mem::take(&mut self.ended);
        expired.add_n(removed.len() as u64);
        if let Edit::Put { token, .. } = edit {
            // A lease that ended and is granted anew is overwritten by its
            // ZADD, not removed first (as the native commands would do it).
            let token = bytes(token);
            removed.retain(|&m| {
                bytes(m) != token || {
                    ctx.free(m);
                    false
                }
            });
        }
        let owned = removed.len();
        if let Edit::Remove { token } = edit {
            // Live, so after every ended lease in score order.
            removed.push(token);
        }
        if !removed.is_empty() {
            for &m in &removed {
                unsafe { rm!(RedisModule_ZsetRem)(self.key, m, std::ptr::null_mut()) };
            }
            self.replicate(c"ZREM", &removed);
            self.changed(c"zrem", raw::REDISMODULE_NOTIFY_ZSET);
        }
        for &m in &removed[..owned] {
            ctx.free(m);
        }
        if let Edit::Put { token, at, tag } = edit {
            let mut digits = [0u8; 20];
            let mut args = Vec::with_capacity(4);
            let mut scores = Vec::with_capacity(2);
            let own = summary.and_then(|s| s.own);
            for (score, member) in tag.map(|t| (t.score(), tag_member())).into_iter().chain(
                // A renewal to the same end writes nothing.
                // Place ends are integers below 2^53 (place_end): exact as doubles.
                (own != Some(at)).then_some((at as f64, token)),
            ) {
                let score_str = if score.fract() == 0.0 {
                    ctx.string(decimal(score as i64, &mut digits))
                } else {
                    // A tag with a delay: the shortest decimal that reads
                    // back as this very double, on replicas and in the AOF.
                    ctx.string(format!("{score}").as_bytes())
                };
                unsafe { rm!(RedisModule_ZsetAdd)(self.key, score, member, std::ptr::null_mut()) };
                args.extend([score_str, member]);
                scores.push(score_str);
            }
            if !args.is_empty() {
                self.replicate(c"ZADD", &args);
                self.changed(c"zadd", raw::REDISMODULE_NOTIFY_ZSET);
            }
            for s in scores {
                ctx.free(s);
            }
        }
        let last = match last {
            Last::At(at) => Some(at),
            _ => self.edge_live(self.now, true),
        };
        // The key ends with its last lease, never before it.
        if let Some(last) = last.filter(|&last| self.expires_at() != Some(last)) {
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

    /// The key's absolute expiry, if it has one.
    fn expires_at(&self) -> Option<i64> {
        // Redis 8.2's expiry getter must never see an empty key.
        if self.key_type() == raw::REDISMODULE_KEYTYPE_EMPTY as u32 {
            return None;
        }
        let at = unsafe { rm!(RedisModule_GetAbsExpire)(self.key) };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    /// `command key args…` to replicas and the AOF.
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
        self.forget_ended();
        if !self.key.is_null() {
            unsafe { rm!(RedisModule_CloseKey)(self.key) };
        }
    }
}
