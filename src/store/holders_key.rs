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
//!
//! Hold limits (`MAXHOLD`) are members `"\0" + token` scored `-holdUntil`,
//! below [`HOLD_FLOOR`]: ranges over places start at `now` (live) or at the
//! floor (ended), so they never meet one. A key that has any (one O(log N)
//! look at its lowest score) counts them once per scan with `ZCOUNT`, so the
//! live count stays exact; a key without any pays that one look only. A
//! hold member goes in the same `ZREM` as its place (pruned or released),
//! and comes in the same `ZADD` as its grant.

use std::ffi::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_lock_rules::encode::decimal;
use redis_lock_rules::held::{session_from_score, session_member};
use redis_lock_rules::holders::{
    hold_from_score, hold_member, Change, NotOurs, Summary, Tag, HOLD_FLOOR, PRUNE_BOUND, TAG,
};
use redis_lock_rules::revoke::is_revoked_score;
use redis_module::raw::{self, RedisModuleKey, RedisModuleString};

use crate::boundary::api::rm;
use crate::boundary::ctx::{bytes, Ctx};
use crate::server::timings::HolderEdit;

/// What a command writes besides pruning ended leases.
#[derive(Clone, Copy)]
pub enum Edit {
    /// Nothing (a refusal).
    Keep,
    /// `token`'s place ends at `at` (a grant or a renewal: its lease end
    /// plus the key's delay); `tag`: the kind and delay to tag the key
    /// with, when they change (`tag_after_grant`); `hold`: its hold limit.
    Put { token: *mut RedisModuleString, at: i64, tag: Option<Tag>, hold: Hold },
    /// `token` leaves (a release of a live lease).
    Remove { token: *mut RedisModuleString },
}

/// What a [`Edit::Put`] does to the caller's hold-limit member.
#[derive(Clone, Copy)]
pub enum Hold {
    /// A renewal: it stays.
    Keep,
    /// A grant with `MAXHOLD`: the limit (Unix ms).
    Set(i64),
    /// A grant without: none, and none left over from an earlier grant.
    Clear,
    /// A revocation (`LOCK.REVOKE`): the limit becomes its deadline, marked.
    Revoked(i64),
}

/// What a commit does to the caller's session member
/// (`redis_lock_rules::held::session_member`), set by
/// [`HoldersKey::mark_session`] before it.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub enum Mark {
    /// A renewal keeps it; a grant (its place was not live) drops any
    /// left over; a release drops it.
    #[default]
    Keep,
    /// A grant held by the session of this short id.
    Set(u64),
    /// Its session ended: the place stays (its lock-delay), unheld.
    Clear,
}

impl Hold {
    pub fn of(hold_until: Option<i64>) -> Hold {
        hold_until.map_or(Hold::Clear, Hold::Set)
    }
}

impl Edit {
    /// The edit as hold timing sees it.
    pub(super) fn timed<'a>(self) -> HolderEdit<'a> {
        match self {
            Edit::Keep => HolderEdit::Keep,
            Edit::Put { token, at, tag, .. } => HolderEdit::Put { token: bytes(token), at, tag },
            Edit::Remove { token } => HolderEdit::Remove { token: bytes(token) },
        }
    }

    pub(super) fn change(self) -> Change {
        match self {
            Edit::Keep => Change::Keep,
            Edit::Put { at, .. } => Change::Put(at),
            Edit::Remove { .. } => Change::Remove,
        }
    }
}

/// An open key, closed on drop.
pub struct HoldersKey {
    pub(super) ctx: Ctx,
    pub(super) name: *mut RedisModuleString,
    pub(super) key: *mut RedisModuleKey,
    pub(super) mode: c_int,
    /// The time the last scan judged leases at.
    pub(super) now: i64,
    /// Ended leases the last scan found, at most [`PRUNE_BOUND`], in score
    /// order; owned (freed on drop or once written).
    pub(super) ended: Vec<*mut RedisModuleString>,
    /// Ended leases beyond those: left for later commands, but counted.
    pub(super) left: u64,
    /// Hold-limit and session members the last scan counted (0: the key
    /// has none).
    pub(super) holds: u64,
    /// What the next commit does to the caller's session member.
    pub(super) session: Mark,
}

/// `""`, created once (on the main thread) and never freed.
pub(super) fn tag_member() -> *mut RedisModuleString {
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

    pub(super) fn open_mode(ctx: Ctx, name: *mut RedisModuleString, mode: c_int) -> HoldersKey {
        let key = unsafe { rm!(RedisModule_OpenKey)(ctx.0, name, mode) };
        HoldersKey { ctx, name, key, mode, now: 0, ended: Vec::new(), left: 0, holds: 0, session: Mark::Keep }
    }

    pub(super) fn key_type(&self) -> u32 {
        if self.key.is_null() {
            return raw::REDISMODULE_KEYTYPE_EMPTY as u32;
        }
        unsafe { rm!(RedisModule_KeyType)(self.key) as u32 }
    }

    /// `member`'s score, if it is in the set (O(1)).
    pub(super) fn score(&self, member: *mut RedisModuleString) -> Option<f64> {
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
        let has_holds = self.any_hold();
        if self.collect_ended(now) && !self.count_left(now, tag) {
            // The key expired while it was counted: absent now.
            return Ok(None);
        }
        if has_holds {
            // "(-2": the hold members, below the floor.
            let Some(holds) = self.zcount(b"-inf", b"(-2", tag) else { return Ok(None) };
            self.holds = holds;
        }
        let members = unsafe { rm!(RedisModule_ValueLength)(self.key) } as u64;
        let live = members.saturating_sub(1 + self.ended.len() as u64 + self.left + self.holds);
        // A score is live while `now` has not passed it (integer part, as
        // the rules read a hand-edited fraction: the same test for now >= 0).
        let own = token.and_then(|t| self.score(t)).filter(|&s| s >= now as f64).map(|s| s as i64);
        let hold = token.filter(|_| self.holds > 0).and_then(|t| self.hold_score(bytes(t)));
        let (hold, revoked) = (hold.and_then(hold_from_score), hold.is_some_and(is_revoked_score));
        let session = token.filter(|_| self.holds > 0).and_then(|t| self.session_of(bytes(t)));
        let last = if live > 0 { self.edge_live(now, true) } else { None };
        Ok(Some(Summary { kind: tag.kind, delay: tag.delay, live, own, last, hold, revoked, session }))
    }

    /// Sets what the next commit does to the caller's session member.
    pub fn mark_session(&mut self, mark: Mark) {
        self.session = mark;
    }

    /// The short id of the session holding `token`'s place, if its session
    /// member is there (O(1)).
    pub fn session_of(&self, token: &[u8]) -> Option<u64> {
        let member = self.ctx.string(&session_member(token));
        let score = self.score(member);
        self.ctx.free(member);
        score.and_then(session_from_score)
    }

    /// `token`'s session member, owned, if it is in the set.
    pub(super) fn session_member_of(&self, token: &[u8]) -> Option<*mut RedisModuleString> {
        let member = self.ctx.string(&session_member(token));
        if self.score(member).is_some() {
            return Some(member);
        }
        self.ctx.free(member);
        None
    }

    /// Whether any member scores below [`HOLD_FLOOR`] (a hold limit): the
    /// lowest score is read, O(log N) at most.
    pub fn any_hold(&self) -> bool {
        if self.key_type() != raw::REDISMODULE_KEYTYPE_ZSET as u32 {
            return false;
        }
        unsafe {
            rm!(RedisModule_ZsetFirstInScoreRange)(self.key, f64::NEG_INFINITY, HOLD_FLOOR, 0, 1);
            let found = rm!(RedisModule_ZsetRangeEndReached)(self.key) == 0;
            rm!(RedisModule_ZsetRangeStop)(self.key);
            found
        }
    }

    /// `token`'s hold limit, if its member is there (O(1)).
    pub(super) fn hold_of(&self, token: &[u8]) -> Option<i64> {
        self.hold_score(token).and_then(hold_from_score)
    }

    /// The score of `token`'s hold member, if it is there (O(1)).
    pub(super) fn hold_score(&self, token: &[u8]) -> Option<f64> {
        let member = self.ctx.string(&hold_member(token));
        let score = self.score(member);
        self.ctx.free(member);
        score
    }

    /// The listed holders whose hold was revoked, with their deadline
    /// (O(1) each; nothing looked up on a key without hold members).
    pub fn revoked_of(&self, holders: &[(Vec<u8>, i64)]) -> Vec<(Vec<u8>, i64)> {
        if !self.any_hold() {
            return Vec::new();
        }
        let revoked = |token: &Vec<u8>| {
            let score = self.hold_score(token).filter(|&s| is_revoked_score(s))?;
            hold_from_score(score)
        };
        holders.iter().filter_map(|(token, _)| Some((token.clone(), revoked(token)?))).collect()
    }

    /// `token`'s hold member, owned, if it is in the set.
    pub(super) fn hold_member_of(&self, token: &[u8]) -> Option<*mut RedisModuleString> {
        let member = self.ctx.string(&hold_member(token));
        if self.score(member).is_some() {
            return Some(member);
        }
        self.ctx.free(member);
        None
    }

    /// The hold limits of `holders` that have one (O(1) each; nothing
    /// looked up on a key without any), in their order: SEM.INFO's.
    pub fn hold_limits(&self, holders: &[(Vec<u8>, i64)]) -> Vec<(Vec<u8>, i64)> {
        if !self.any_hold() {
            return Vec::new();
        }
        holders.iter().filter_map(|(token, _)| Some((token.clone(), self.hold_of(token)?))).collect()
    }

    /// Collects up to [`PRUNE_BOUND`] ended leases (scores below `now`),
    /// skipping the tag; whether more remain.
    pub(super) fn collect_ended(&mut self, now: i64) -> bool {
        let mut more = false;
        unsafe {
            // From the floor: hold members are no places.
            rm!(RedisModule_ZsetFirstInScoreRange)(self.key, HOLD_FLOOR, now as f64, 0, 1);
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

    /// Counts the ended leases beyond the collected ones into `left`.
    /// False if the key is gone.
    pub(super) fn count_left(&mut self, now: i64, tag: Tag) -> bool {
        let mut digits = [0u8; 20];
        // "-2" to "(now": the range that collected the rest.
        let below = [&b"("[..], decimal(now, &mut digits)].concat();
        let Some(count) = self.zcount(b"-2", &below, tag) else { return false };
        let tag_ended = u64::from(tag.score() < now as f64);
        self.left = count.saturating_sub(tag_ended + self.ended.len() as u64);
        true
    }

    /// `ZCOUNT key min max` (O(log N); the module API has no rank). The key
    /// is closed around the call: a lookup outside a command may expire the
    /// key, which must not happen under an open handle. `None` (and nothing
    /// collected) if the key is gone or changed tag meanwhile.
    pub(super) fn zcount(&mut self, min: &[u8], max: &[u8], tag: Tag) -> Option<u64> {
        unsafe { rm!(RedisModule_CloseKey)(self.key) };
        let count = count_scores(self.ctx, self.name, min, max);
        self.key = unsafe { rm!(RedisModule_OpenKey)(self.ctx.0, self.name, self.mode) };
        if self.tag() != Ok(Some(tag)) {
            self.forget_ended();
            return None;
        }
        Some(count)
    }

    pub(super) fn forget_ended(&mut self) {
        for s in std::mem::take(&mut self.ended) {
            self.ctx.free(s);
        }
        self.left = 0;
        self.holds = 0;
    }

    /// The earliest (`last` false) or the last live lease end: the first
    /// member by score from `now` on, or the last one, that is not the tag.
    pub(super) fn edge_live(&self, now: i64, last: bool) -> Option<i64> {
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
}

/// `ZCOUNT name min max` through `RedisModule_Call` (O(log N)): 0 when the
/// key is absent or the call fails. No key of it may be open here.
pub fn count_scores(ctx: Ctx, name: *mut RedisModuleString, min: &[u8], max: &[u8]) -> u64 {
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx.0,
            c"ZCOUNT".as_ptr(),
            c"sbb".as_ptr(),
            name,
            min.as_ptr(),
            min.len(),
            max.as_ptr(),
            max.len(),
        )
    };
    let mut count = 0u64;
    if !reply.is_null() {
        if unsafe { rm!(RedisModule_CallReplyType)(reply) } == raw::REDISMODULE_REPLY_INTEGER as c_int {
            count = unsafe { rm!(RedisModule_CallReplyInteger)(reply) }.max(0) as u64;
        }
        unsafe { rm!(RedisModule_FreeCallReply)(reply) };
    }
    count
}

impl Drop for HoldersKey {
    fn drop(&mut self) {
        self.forget_ended();
        if !self.key.is_null() {
            unsafe { rm!(RedisModule_CloseKey)(self.key) };
        }
    }
}
