//! The sessions a node ended lately, remembered after the session table
//! forgot them (docs/sessions.md, "What the holder learns"): a session is
//! forgotten as soon as its locks are released (within milliseconds of
//! its end), while its holder hears of the end at its next keepalive, up
//! to TTL/3 later. So that `SESSION.INFO` can still tell that holder why
//! (`expired` or `revoked`, not merely unknown), each end is kept here
//! for [`keep_until`]: the session's TTL after its end, at least
//! [`MIN_KEEP_MS`], and at most [`MAX_GONE`] of them (the ones noted
//! first go first). Pure bookkeeping taking `now`; the module
//! keeps one per node (`crate::store::session_gone` there).
//!
//! Work: O(1) per end noted (plus at most [`PRUNE`] entries whose time is
//! up, dropped on the way from the oldest), O(1) per lookup. Memory: one
//! 32-byte slot and an 8-byte key per end in a hash map, 8 bytes in the
//! order, and the reason of a revoke that gave one.

use std::collections::{HashMap, VecDeque};

use crate::error::ArgError;
use crate::revoke::MAX_REASON;
use crate::session::{Ended, Id, Reason};

/// How long an ended session is remembered at least (ms): a holder whose
/// keepalives come every TTL/3 hears of its end well within this.
pub const MIN_KEEP_MS: i64 = 60_000;
/// How many ended sessions a node remembers at most.
pub const MAX_GONE: usize = 65_536;
/// Entries whose time is up dropped per end noted, at most.
const PRUNE: usize = 2;

/// An ended session as remembered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gone {
    pub ended: Ended,
    pub ttl: i64,
    pub lock_delay: i64,
    /// Why it was revoked (`SESSION.REVOKE id REASON text`), if told.
    pub why: Option<Box<str>>,
}

/// `SESSION.REVOKE id [REASON text]`'s options: the reason, if given
/// (UTF-8 of at most [`MAX_REASON`] bytes, as `LOCK.REVOKE`'s).
pub fn parse_revoke_options<'a>(options: &[&'a [u8]]) -> Result<Option<&'a str>, ArgError> {
    match options {
        [] => Ok(None),
        [name, text] if name.eq_ignore_ascii_case(b"REASON") => {
            std::str::from_utf8(text).ok().filter(|r| r.len() <= MAX_REASON).map(Some).ok_or(ArgError::ReasonInvalid)
        }
        _ => Err(ArgError::Syntax),
    }
}

/// Until when the end of a session of `ttl` at `at` is remembered.
pub fn keep_until(at: i64, ttl: i64) -> i64 {
    at.saturating_add(ttl.max(MIN_KEEP_MS))
}

/// One remembered end, in 32 bytes (its key is the id's low 64 bits).
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The id's high 64 bits.
    hi: u64,
    at: i64,
    ttl: i64,
    /// The lock-delay (16 bits: at most 60,000 ms) and how it ended (bit
    /// 16: revoked).
    bits: u32,
}

const REVOKED: u32 = 1 << 16;

impl Slot {
    fn until(&self) -> i64 {
        keep_until(self.at, self.ttl)
    }
}

/// A node's lately ended sessions.
#[derive(Debug, Default)]
pub struct GoneSessions {
    /// By the id's low 64 bits (a lookup compares the high ones too).
    map: HashMap<u64, Slot>,
    /// The reasons of the revokes that gave one, by the same key.
    why: HashMap<u64, Box<str>>,
    /// The keys in the order noted, oldest first; lazy: a key no longer
    /// in `map` is skipped.
    order: VecDeque<u64>,
}

impl GoneSessions {
    /// Notes that `id` ended as `gone` says, at `now`. Nothing when its
    /// time is already up (an old end replayed from an AOF).
    pub fn note(&mut self, id: Id, gone: Gone, now: i64) {
        self.prune(now, PRUNE);
        if keep_until(gone.ended.at, gone.ttl) <= now {
            return;
        }
        while self.map.len() >= MAX_GONE && self.pop().is_some() {}
        let revoked = if gone.ended.reason == Reason::Revoked { REVOKED } else { 0 };
        let delay = gone.lock_delay.clamp(0, i64::from(u16::MAX)) as u32;
        let slot = Slot { hi: (id >> 64) as u64, at: gone.ended.at, ttl: gone.ttl, bits: delay | revoked };
        let key = id as u64;
        self.map.insert(key, slot);
        match gone.why {
            Some(why) => self.why.insert(key, why),
            None => self.why.remove(&key),
        };
        self.order.push_back(key);
    }

    /// Drops the entry noted first (or a stale key): `None` when none.
    fn pop(&mut self) -> Option<()> {
        let key = self.order.pop_front()?;
        self.map.remove(&key);
        self.why.remove(&key);
        Some(())
    }

    /// Drops up to `max` entries from the oldest on, while their time is
    /// up at `now` (or they are stale).
    fn prune(&mut self, now: i64, max: usize) {
        for _ in 0..max {
            match self.order.front().map(|k| self.map.get(k)) {
                Some(Some(slot)) if slot.until() > now => break,
                Some(_) => drop(self.pop()),
                None => break,
            }
        }
    }

    /// How `id` ended, if it ended here lately.
    pub fn get(&self, id: Id, now: i64) -> Option<Gone> {
        let key = id as u64;
        let slot = self.map.get(&key).filter(|s| s.hi == (id >> 64) as u64 && s.until() > now)?;
        let reason = if slot.bits & REVOKED != 0 { Reason::Revoked } else { Reason::Expired };
        Some(Gone {
            ended: Ended { at: slot.at, reason },
            ttl: slot.ttl,
            lock_delay: i64::from(slot.bits & 0xffff),
            why: self.why.get(&key).cloned(),
        })
    }

    /// Forgets them all (`FLUSHALL`).
    pub fn clear(&mut self) {
        *self = GoneSessions::default();
    }

    /// How many it remembers (some of them possibly up already).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    fn gone(at: i64, ttl: i64, reason: Reason) -> Gone {
        Gone { ended: Ended { at, reason }, ttl, lock_delay: 7, why: None }
    }

    #[test]
    fn an_end_is_remembered_for_the_sessions_ttl_and_at_least_a_minute() {
        let mut g = GoneSessions::default();
        g.note(1, gone(NOW, 1_000, Reason::Revoked), NOW);
        g.note(2, gone(NOW, 300_000, Reason::Expired), NOW);
        assert_eq!(g.get(1, NOW + MIN_KEEP_MS - 1), Some(gone(NOW, 1_000, Reason::Revoked)));
        let twin = 1 | (1u128 << 100);
        assert_eq!(g.get(twin, NOW), None, "the same low bits, another id");
        let why = Gone { why: Some("drain".into()), ..gone(NOW, 1, Reason::Revoked) };
        g.note(5, why.clone(), NOW);
        assert_eq!(g.get(5, NOW), Some(why));
        assert_eq!(g.get(1, NOW + MIN_KEEP_MS), None);
        assert_eq!(g.get(2, NOW + 299_999).map(|g| g.ended.reason), Some(Reason::Expired));
        assert_eq!(g.get(2, NOW + 300_000), None);
        assert_eq!(g.get(3, NOW), None, "never ended here");
        // An end long past (an AOF replayed later) is not kept.
        g.note(4, gone(NOW - 10 * MIN_KEEP_MS, 1, Reason::Expired), NOW);
        assert_eq!(g.get(4, NOW), None);
        assert_eq!(g.len(), 3);
        g.clear();
        assert!(g.is_empty() && g.get(2, NOW).is_none());
    }

    #[test]
    fn a_revokes_reason_is_checked_as_lock_revokes() {
        assert_eq!(parse_revoke_options(&[]), Ok(None));
        assert_eq!(parse_revoke_options(&[b"reason", b"drain"]), Ok(Some("drain")));
        assert_eq!(parse_revoke_options(&[b"REASON"]), Err(ArgError::Syntax));
        assert_eq!(parse_revoke_options(&[b"GRACE", b"5"]), Err(ArgError::Syntax));
        assert_eq!(parse_revoke_options(&[b"REASON", b"\xff"]), Err(ArgError::ReasonInvalid));
        let long = "x".repeat(MAX_REASON + 1);
        assert_eq!(parse_revoke_options(&[b"REASON", long.as_bytes()]), Err(ArgError::ReasonInvalid));
    }

    #[test]
    fn ends_whose_time_is_up_are_dropped_as_new_ones_come() {
        let mut g = GoneSessions::default();
        for id in 0..10 {
            g.note(id, gone(NOW, 1, Reason::Revoked), NOW);
        }
        let later = NOW + MIN_KEEP_MS;
        for id in 10..15 {
            g.note(id, gone(later, 1, Reason::Revoked), later);
        }
        assert_eq!(g.len(), 5, "two dropped per end noted: the ten old ones are gone");
    }

    #[test]
    fn at_most_max_gone_are_kept_the_first_noted_going_first() {
        let mut g = GoneSessions::default();
        for id in 0..MAX_GONE as u128 + 3 {
            g.note(id, gone(NOW + id as i64, 1, Reason::Expired), NOW);
        }
        assert_eq!(g.len(), MAX_GONE);
        assert_eq!(g.get(0, NOW), None, "the first noted went first");
        assert!(g.get(3, NOW).is_some() && g.get(MAX_GONE as u128 + 2, NOW).is_some());
    }
}
