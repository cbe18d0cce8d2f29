//! The holds of a node's sessions lost to an eviction (docs/eviction.md,
//! "How a session's holder hears it"): Redis evicted a key a session held,
//! so the session no longer holds it, and its holder must hear it at its
//! next keepalive, not at its release. Each such hold is kept here with
//! its session until its holder has surely kept the session alive since
//! ([`kept_until`]): a keepalive (O(1): a count) replies `-ttl` while the
//! session has one, and `SESSION.INFO` lists them (key, database, token,
//! when). The table is the revoked holds' ([`RevokedHolds`]), with what
//! an eviction needs kept instead of a revocation.

use crate::session_revoked::{Dated, RevokedHolds};

/// One hold lost to an eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    /// When Redis evicted its key (Unix ms).
    pub at: i64,
    /// When the note is dropped ([`kept_until`]).
    pub until: i64,
}

impl Dated for Eviction {
    fn due(&self) -> i64 {
        self.until
    }
}

/// The evicted holds of every session of a node, by session; each key is
/// the hold's database, name and token (a lock's too: the holder tells
/// its lock by key and token, so a lock granted to the session again
/// since, with another token, is not taken for the lost one).
pub type EvictedHolds<K> = RevokedHolds<K, Eviction>;

/// At least this long a note is kept (ms): a minute, as the ends of
/// sessions are told (`crate::session_gone`).
pub const KEPT_MS: i64 = 60_000;

/// The most notes kept: beyond, a new one is not kept, and its holder
/// hears the loss at its release (`LOCK.EVICTED`), as before.
pub const MAX_NOTES: usize = 100_000;

/// Until when the note of a hold evicted at `at` from a session of `ttl`
/// ms is kept: the session's TTL (its holder keeps it alive every third of
/// it, so by then it has heard), at least [`KEPT_MS`].
pub fn kept_until(at: i64, ttl: i64) -> i64 {
    at.saturating_add(ttl.max(KEPT_MS))
}

/// Notes at most this many dropped per look ([`drop_due`]): the table's
/// own pruning stays bounded per command.
pub const DROP_PER_LOOK: usize = 4;

/// Drops up to [`DROP_PER_LOOK`] notes whose time is over at `now`.
pub fn drop_due<K: Ord + Clone>(t: &mut EvictedHolds<K>, now: i64) {
    t.take_due(now, DROP_PER_LOOK);
}

/// Notes session `id`'s hold `key` evicted at `at` from a session of
/// `ttl` ms, unless the table is full (false).
pub fn note<K: Ord + Clone>(t: &mut EvictedHolds<K>, id: u128, key: K, at: i64, ttl: i64) -> bool {
    if t.len() >= MAX_NOTES {
        return false;
    }
    t.put(id, key, Eviction { at, until: kept_until(at, ttl) });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn a_note_is_kept_for_the_sessions_ttl_and_at_least_a_minute() {
        assert_eq!(kept_until(NOW, 10_000), NOW + KEPT_MS);
        assert_eq!(kept_until(NOW, 300_000), NOW + 300_000);
        let mut t: EvictedHolds<u32> = EvictedHolds::default();
        assert!(note(&mut t, 1, 10, NOW, 5_000));
        assert!(note(&mut t, 1, 11, NOW + 1, 5_000));
        assert!(note(&mut t, 2, 10, NOW, 600_000));
        assert_eq!((t.count(1), t.count(2)), (2, 1));
        let listed: Vec<_> = t.list(1, 10).into_iter().map(|(k, e)| (*k, e.at)).collect();
        assert_eq!(listed, vec![(10, NOW), (11, NOW + 1)]);
        drop_due(&mut t, NOW + KEPT_MS - 1);
        assert_eq!(t.count(1), 2, "not before its time");
        drop_due(&mut t, NOW + KEPT_MS + 1);
        assert_eq!((t.count(1), t.count(2)), (0, 1), "the long session's note stays");
        t.forget_session(2);
        assert!(t.is_empty());
    }

    #[test]
    fn the_table_is_bounded_and_drops_a_bounded_number_per_look() {
        let mut t: EvictedHolds<u32> = EvictedHolds::default();
        for k in 0..MAX_NOTES as u32 {
            assert!(note(&mut t, 1, k, NOW, 0));
        }
        assert!(!note(&mut t, 1, u32::MAX, NOW, 0), "full");
        drop_due(&mut t, NOW + KEPT_MS);
        assert_eq!(t.len(), MAX_NOTES - DROP_PER_LOOK);
        // A second eviction of the same hold replaces its note.
        assert!(note(&mut t, 1, 0, NOW + 5, 0) || t.len() == MAX_NOTES);
    }
}
