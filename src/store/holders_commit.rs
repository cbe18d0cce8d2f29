//! A semaphore's or read-write lock's key, written: [`HoldersKey::commit`]
//! applies a command's decision (prune the ended leases the scan found,
//! then grant, renew, release or nothing) and replicates it as the native
//! commands would (`crate::store::holders_key` has the layout and the
//! reads).

use std::ffi::c_int;

use redis_lock_rules::encode::decimal;
use redis_lock_rules::held::{session_member, session_score};
use redis_lock_rules::holders::{hold_member, hold_score, last_after, Last, Summary};
use redis_lock_rules::revoke::{is_revoked_score, revoked_hold_score};
use redis_module::raw::{self, RedisModuleString};

use crate::boundary::api::rm;
use crate::boundary::ctx::bytes;
use crate::server::counters::{self as stats, Counter};
use crate::server::timings::{self, Commit};
use crate::server::{eviction, revoked};
use crate::store::holders_key::{tag_member, Edit, Hold, HoldersKey, Mark};

impl HoldersKey {
    /// Writes `edit` to the key `scan` summarized (`None`: absent), with
    /// the ended leases the scan found; counts those in `expired`. A
    /// refusal on a key without ended leases writes nothing.
    pub fn commit(&mut self, summary: Option<&Summary>, edit: Edit, expired: &Counter) {
        if matches!(edit, Edit::Keep) && self.ended.is_empty() {
            return;
        }
        let ctx = self.ctx;
        // Hold timing's hook: before anything is written or notified.
        let session = match self.session {
            Mark::Set(short) => Some(short),
            Mark::Clear => None,
            Mark::Keep => summary.and_then(|s| s.session),
        };
        let (name, ended, now) = (self.name, &self.ended, self.now);
        let commit = Commit { ctx, name, summary, edit: edit.timed(), ended, now, session };
        timings::holders_commit(&commit);
        eviction::holders_commit(&commit);
        let last = match last_after(summary, edit.change()) {
            Last::Gone => {
                if self.holds > 0 {
                    // The last places leave with the key: any revoked among them ended.
                    let revoked =
                        self.ended.iter().filter(|&&m| self.hold_score(bytes(m)).is_some_and(is_revoked_score));
                    stats::REVOKED_ENDS.add_n(revoked.count() as u64);
                }
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
        if self.holds > 0 {
            // A pruned place's hold limit goes with it (a revoked one's end
            // is counted: the server ended it at its deadline), and so
            // does its session member.
            let holds: Vec<_> = removed.iter().filter_map(|&m| self.hold_member_of(bytes(m))).collect();
            let ended = holds.iter().filter(|&&m| self.score(m).is_some_and(is_revoked_score)).count();
            if ended > 0 {
                stats::REVOKED_ENDS.add_n(ended as u64);
                revoked::forget(ctx, self.name);
                for &m in holds.iter().filter(|&&m| self.score(m).is_some_and(is_revoked_score)) {
                    revoked::forget_reason(ctx, bytes(self.name), bytes(m).get(1..).unwrap_or_default());
                }
            }
            let sessions: Vec<_> = removed.iter().filter_map(|&m| self.session_member_of(bytes(m))).collect();
            removed.extend(holds);
            removed.extend(sessions);
        }
        let own_hold = summary.and_then(|s| s.hold);
        // A release, or a grant without MAXHOLD to a token that had one
        // (its place ended): no hold limit of its may stay behind.
        let clears = match edit {
            Edit::Remove { token } | Edit::Put { token, hold: Hold::Clear, .. } => Some(token),
            _ => None,
        };
        if let Some(token) = clears.filter(|_| own_hold.is_some()) {
            removed.extend(self.hold_member_of(bytes(token)));
        }
        // The caller's session member: it leaves with its place, when its
        // session ended, and when a grant finds one left over.
        let mark = std::mem::take(&mut self.session);
        let own_session = summary.and_then(|s| s.session);
        let drops_session = match (edit, mark) {
            (Edit::Remove { token }, _) | (Edit::Put { token, .. }, Mark::Clear) => Some(token),
            (Edit::Put { token, .. }, Mark::Keep) if summary.is_some_and(|s| s.own.is_none()) => Some(token),
            _ => None,
        };
        if let Some(token) = drops_session.filter(|_| own_session.is_some()) {
            removed.extend(self.session_member_of(bytes(token)));
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
        if let Edit::Put { token, at, tag, hold } = edit {
            let mut digits = [0u8; 20];
            let mut args = Vec::with_capacity(6);
            let mut scores = Vec::with_capacity(3);
            let own = summary.and_then(|s| s.own);
            let hold = match hold {
                Hold::Set(h) if own_hold != Some(h) => Some((hold_score(h), ctx.string(&hold_member(bytes(token))))),
                Hold::Revoked(d) => Some((revoked_hold_score(d), ctx.string(&hold_member(bytes(token))))),
                _ => None,
            };
            let session = match mark {
                Mark::Set(short) if own_session != Some(short) => {
                    Some((session_score(short), ctx.string(&session_member(bytes(token)))))
                }
                _ => None,
            };
            let hold_string = hold.map(|(_, m)| m).into_iter().chain(session.map(|(_, m)| m));
            for (score, member) in tag
                .map(|t| (t.score(), tag_member()))
                .into_iter()
                .chain(
                    // A renewal to the same end writes nothing.
                    // Place ends are integers below 2^53 (place_end): exact as doubles.
                    (own != Some(at)).then_some((at as f64, token)),
                )
                .chain(hold)
                .chain(session)
            {
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
            for s in scores.into_iter().chain(hold_string) {
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
    pub(super) fn expires_at(&self) -> Option<i64> {
        // Redis 8.2's expiry getter must never see an empty key.
        if self.key_type() == raw::REDISMODULE_KEYTYPE_EMPTY as u32 {
            return None;
        }
        let at = unsafe { rm!(RedisModule_GetAbsExpire)(self.key) };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    /// `command key args…` to replicas and the AOF.
    pub(super) fn replicate(&self, command: &std::ffi::CStr, args: &[*mut RedisModuleString]) {
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
    pub(super) fn changed(&self, event: &std::ffi::CStr, class: c_int) {
        unsafe {
            rm!(RedisModule_SignalModifiedKey)(self.ctx.0, self.name);
            rm!(RedisModule_NotifyKeyspaceEvent)(self.ctx.0, class, event.as_ptr(), self.name);
        }
    }
}
