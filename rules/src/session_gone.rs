//! The sessions a node ended lately, remembered after the session table
//! forgot them (docs/sessions.md, "What the holder learns"): a session is
//! forgotten as soon as its locks are released (within milliseconds of
//! its end), while its holder hears of the end at its next keepalive, up
//! to TTL/3 later. So that `SESSION.INFO` can still tell that holder why
//! (`expired` or `revoked`, not merely unknown), each end is kept here
//! for [`keep_until`]: the session's TTL after its end, at least
//! [`MIN_KEEP_MS`], and at most [`MAX_GONE`] of them (the ones whose time
//! is nearest up go first). Pure bookkeeping taking `now`; the module
//! keeps one per node (`crate::store::session_gone` there).
//!
//! Work: O(log n) per end noted (plus at most [`PRUNE`] entries whose
//! time is up, dropped on the way), O(1) per lookup.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::error::ArgError;
use crate::revoke::MAX_REASON;
use crate::session::{Ended, Id};

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

/// A node's lately ended sessions.
#[derive(Debug, Default)]
pub struct GoneSessions {
    /// Each one, with until when it is kept.
    map: HashMap<Id, (Gone, i64)>,
    /// (until, id), earliest first; lazy: an entry whose id is gone or
    /// kept until another time is skipped.
    order: BinaryHeap<Reverse<(i64, Id)>>,
}

impl GoneSessions {
    /// Notes that `id` ended as `gone` says, at `now`. Nothing when its
    /// time is already up (an old end replayed from an AOF).
    pub fn note(&mut self, id: Id, gone: Gone, now: i64) {
        self.prune(now, PRUNE);
        let until = keep_until(gone.ended.at, gone.ttl);
        if until <= now {
            return;
        }
        while self.map.len() >= MAX_GONE && self.pop().is_some() {}
        self.map.insert(id, (gone, until));
        self.order.push(Reverse((until, id)));
    }

    /// Drops the entry that is up first (or a stale one): false when none.
    fn pop(&mut self) -> Option<()> {
        let Reverse((until, id)) = self.order.pop()?;
        if self.map.get(&id).is_some_and(|&(_, u)| u == until) {
            self.map.remove(&id);
        }
        Some(())
    }

    /// Drops up to `max` entries whose time is up at `now`.
    fn prune(&mut self, now: i64, max: usize) {
        for _ in 0..max {
            match self.order.peek() {
                Some(&Reverse((until, _))) if until <= now => drop(self.pop()),
                _ => break,
            }
        }
    }

    /// How `id` ended, if it ended here lately.
    pub fn get(&self, id: Id, now: i64) -> Option<&Gone> {
        self.map.get(&id).filter(|&&(_, until)| until > now).map(|(g, _)| g)
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
    use crate::session::Reason;

    const NOW: i64 = 1_700_000_000_000;

    fn gone(at: i64, ttl: i64, reason: Reason) -> Gone {
        Gone { ended: Ended { at, reason }, ttl, lock_delay: 7, why: None }
    }

    #[test]
    fn an_end_is_remembered_for_the_sessions_ttl_and_at_least_a_minute() {
        let mut g = GoneSessions::default();
        g.note(1, gone(NOW, 1_000, Reason::Revoked), NOW);
        g.note(2, gone(NOW, 300_000, Reason::Expired), NOW);
        assert_eq!(g.get(1, NOW + MIN_KEEP_MS - 1), Some(&gone(NOW, 1_000, Reason::Revoked)));
        assert_eq!(g.get(1, NOW + MIN_KEEP_MS), None);
        assert_eq!(g.get(2, NOW + 299_999).map(|g| g.ended.reason), Some(Reason::Expired));
        assert_eq!(g.get(2, NOW + 300_000), None);
        assert_eq!(g.get(3, NOW), None, "never ended here");
        // An end long past (an AOF replayed later) is not kept.
        g.note(4, gone(NOW - 10 * MIN_KEEP_MS, 1, Reason::Expired), NOW);
        assert_eq!(g.get(4, NOW), None);
        assert_eq!(g.len(), 2);
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
    fn at_most_max_gone_are_kept_the_nearest_up_going_first() {
        let mut g = GoneSessions::default();
        for id in 0..MAX_GONE as u128 + 3 {
            g.note(id, gone(NOW + id as i64, 1, Reason::Expired), NOW);
        }
        assert_eq!(g.len(), MAX_GONE);
        assert_eq!(g.get(0, NOW), None, "the first up went first");
        assert!(g.get(3, NOW).is_some() && g.get(MAX_GONE as u128 + 2, NOW).is_some());
    }
}
