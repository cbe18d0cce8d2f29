//! A semaphore's or read-write lock's session members, as an orphan walk
//! reads them (`crate::blocked::orphan_walk`, docs/sessions.md, "A key
//! moved to another node"): the next one by score from a point, in
//! O(log N), and a stale one (its place gone) dropped.

use redis_lock_rules::held::{session_member, SESSIONS_HIGH, SESSIONS_LOW};
use redis_module::raw;

use crate::boundary::api::rm;
use crate::boundary::ctx::bytes;
use crate::store::holders_key::HoldersKey;

impl HoldersKey {
    /// Whether the last scan counted members below the places (hold limits
    /// or sessions' members): a key without any holds no session's place.
    pub fn may_hold_sessions(&self) -> bool {
        self.holds > 0
    }

    /// The first session member scored from `from` (after it, if `after`)
    /// up to the sessions' highest score, with its score
    /// (`redis_lock_rules::held::session_token` reads its token). O(log N).
    /// `None` on an absent key or another type.
    pub fn next_session_member(&self, from: f64, after: bool) -> Option<(Vec<u8>, f64)> {
        if self.key_type() != raw::REDISMODULE_KEYTYPE_ZSET as u32 {
            return None;
        }
        let from = from.max(SESSIONS_LOW);
        let mut found = None;
        unsafe {
            rm!(RedisModule_ZsetFirstInScoreRange)(self.key, from, SESSIONS_HIGH, i32::from(after), 0);
            if rm!(RedisModule_ZsetRangeEndReached)(self.key) == 0 {
                let mut score = 0.0;
                let s = rm!(RedisModule_ZsetRangeCurrentElement)(self.key, &mut score);
                if !s.is_null() {
                    found = Some((bytes(s).to_vec(), score));
                    self.ctx.free(s);
                }
            }
            rm!(RedisModule_ZsetRangeStop)(self.key);
        }
        found
    }

    /// Removes `token`'s session member, left without a place (replicated
    /// as `ZREM`).
    pub fn drop_session_member(&mut self, token: &[u8]) {
        let member = self.ctx.string(&session_member(token));
        if self.score(member).is_some() {
            unsafe { rm!(RedisModule_ZsetRem)(self.key, member, std::ptr::null_mut()) };
            self.replicate(c"ZREM", &[member]);
            self.changed(c"zrem", raw::REDISMODULE_NOTIFY_ZSET);
        }
        self.ctx.free(member);
    }
}
