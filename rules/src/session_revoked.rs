//! The revoked holds of a node's sessions (`LOCK.REVOKE` of a
//! session-held lock, docs/revocation.md): per session, which of its holds
//! are revoked, until when and why, and all of them in deadline order.
//! Pure bookkeeping, taking `now`; kept beside the session table
//! ([`crate::session`]) rather than in it, so that a session that has no
//! revoked hold pays nothing for them.
//!
//! - A keepalive asks [`RevokedHolds::count`]: O(1), a lookup.
//! - The module's timer takes the holds whose deadline has come
//!   ([`RevokedHolds::take_due`], bounded), ends each and detaches it from
//!   its session, so the session forgets the hold.
//! - A release before the deadline, or the session's end, forgets it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::session::Id;

/// One revoked hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revocation {
    /// When the server ends the hold (Unix ms).
    pub deadline: i64,
    pub reason: String,
}

/// What the table keeps of one hold: it is taken out at its [`Dated::due`].
pub trait Dated {
    fn due(&self) -> i64;
}

impl Dated for Revocation {
    fn due(&self) -> i64 {
        self.deadline
    }
}

/// The revoked holds of every session of a node (`V`: what is kept of
/// each; the holds lost to an eviction are kept the same way,
/// `crate::session_evicted`).
#[derive(Debug)]
pub struct RevokedHolds<K: Ord + Clone, V = Revocation> {
    by_session: HashMap<Id, BTreeMap<K, V>>,
    due: BTreeSet<(i64, Id, K)>,
}

impl<K: Ord + Clone, V> Default for RevokedHolds<K, V> {
    fn default() -> Self {
        RevokedHolds { by_session: HashMap::new(), due: BTreeSet::new() }
    }
}

impl<K: Ord + Clone> RevokedHolds<K> {
    /// Notes that session `id`'s hold `key` is revoked until `deadline`
    /// (a second revoke replaces the first: the caller never extends it).
    /// O(log n).
    pub fn revoke(&mut self, id: Id, key: K, deadline: i64, reason: String) {
        self.put(id, key, Revocation { deadline, reason });
    }
}

impl<K: Ord + Clone, V: Dated> RevokedHolds<K, V> {
    /// Whether no hold of any session is revoked.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }

    /// How many holds are revoked, over every session.
    pub fn len(&self) -> usize {
        self.due.len()
    }

    /// Notes `v` for session `id`'s hold `key` (replacing an earlier
    /// note of it). O(log n).
    pub fn put(&mut self, id: Id, key: K, v: V) {
        self.forget(id, &key);
        self.due.insert((v.due(), id, key.clone()));
        self.by_session.entry(id).or_default().insert(key, v);
    }

    /// Forgets session `id`'s revoked hold `key` (released, or ended).
    /// O(log n).
    pub fn forget(&mut self, id: Id, key: &K) -> Option<V> {
        let holds = self.by_session.get_mut(&id)?;
        let r = holds.remove(key)?;
        if holds.is_empty() {
            self.by_session.remove(&id);
        }
        self.due.remove(&(r.due(), id, key.clone()));
        Some(r)
    }

    /// Forgets every revoked hold of session `id` (it is forgotten).
    /// O(r log n) for its r revoked holds.
    pub fn forget_session(&mut self, id: Id) {
        for (key, r) in self.by_session.remove(&id).unwrap_or_default() {
            self.due.remove(&(r.due(), id, key));
        }
    }

    /// Forgets every revoked hold (FLUSHALL, an RDB load).
    pub fn clear(&mut self) {
        *self = RevokedHolds::default();
    }

    /// Takes out at most `max` holds whose deadline is at or before `now`,
    /// earliest first: the caller ends them and detaches them.
    pub fn take_due(&mut self, now: i64, max: usize) -> Vec<(Id, K)> {
        let mut out = Vec::new();
        while out.len() < max {
            match self.due.first() {
                Some(&(at, id, ref key)) if at <= now => {
                    let key = key.clone();
                    self.forget(id, &key);
                    out.push((id, key));
                }
                _ => break,
            }
        }
        out
    }

    /// The earliest deadline.
    pub fn next_due(&self) -> Option<i64> {
        self.due.first().map(|&(at, _, _)| at)
    }

    /// What is kept of session `id`'s hold `key`. O(1) + O(log n).
    pub fn get(&self, id: Id, key: &K) -> Option<&V> {
        self.by_session.get(&id)?.get(key)
    }

    /// How many holds of session `id` are revoked. O(1).
    pub fn count(&self, id: Id) -> usize {
        self.by_session.get(&id).map_or(0, BTreeMap::len)
    }

    /// Session `id`'s first `count` revoked holds (in key order).
    pub fn list(&self, id: Id, count: usize) -> Vec<(&K, &V)> {
        self.by_session.get(&id).map_or_else(Vec::new, |h| h.iter().take(count).collect())
    }

    /// Up to `max` revoked holds after `after` (a deadline, session and
    /// key; from the first: `None`), in deadline order: a walk's next
    /// slice. O(log n + max).
    pub fn after(&self, after: Option<&(i64, Id, K)>, max: usize) -> Vec<(i64, Id, &K, &V)> {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = after.map_or(Unbounded, Excluded);
        let found = self.due.range((from, Unbounded)).filter_map(|(at, id, key)| {
            let r = self.by_session.get(id)?.get(key)?;
            Some((*at, *id, key, r))
        });
        found.take(max).collect()
    }

    /// Every revoked hold: session, key, revocation (for the RDB).
    pub fn iter(&self) -> impl Iterator<Item = (Id, &K, &V)> {
        self.by_session.iter().flat_map(|(&id, h)| h.iter().map(move |(k, r)| (id, k, r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    fn r(t: &mut RevokedHolds<u32>, id: Id, key: u32, deadline: i64) {
        t.revoke(id, key, deadline, format!("r{key}"));
    }

    #[test]
    fn a_walk_reads_the_revoked_holds_in_deadline_order_from_a_cursor() {
        let mut t = RevokedHolds::default();
        r(&mut t, 1, 10, NOW + 30);
        r(&mut t, 2, 20, NOW + 10);
        r(&mut t, 1, 30, NOW + 20);
        let first = t.after(None, 2);
        let seen: Vec<(i64, Id, u32)> = first.iter().map(|&(at, id, &k, _)| (at, id, k)).collect();
        assert_eq!(seen, vec![(NOW + 10, 2, 20), (NOW + 20, 1, 30)]);
        assert_eq!(first[1].3.reason, "r30");
        let rest = t.after(Some(&(NOW + 20, 1, 30)), 9);
        assert_eq!(rest.len(), 1);
        assert_eq!((rest[0].0, rest[0].1, *rest[0].2), (NOW + 30, 1, 10));
        assert!(t.after(Some(&(NOW + 30, 1, 10)), 9).is_empty());
    }

    #[test]
    fn holds_are_counted_per_session_and_taken_in_deadline_order() {
        let mut t = RevokedHolds::default();
        r(&mut t, 1, 10, NOW + 30);
        r(&mut t, 1, 11, NOW + 10);
        r(&mut t, 2, 10, NOW + 20);
        assert_eq!((t.count(1), t.count(2), t.count(3), t.len()), (2, 1, 0, 3));
        assert_eq!(t.next_due(), Some(NOW + 10));
        let listed: Vec<_> = t.list(1, 10).into_iter().map(|(k, r)| (*k, r.deadline)).collect();
        assert_eq!(listed, vec![(10, NOW + 30), (11, NOW + 10)]);
        assert_eq!(t.list(1, 1).len(), 1);
        assert_eq!(t.take_due(NOW + 5, 10), vec![]);
        assert_eq!(t.take_due(NOW + 25, 1), vec![(1, 11)]);
        assert_eq!(t.take_due(NOW + 25, 10), vec![(2, 10)]);
        assert_eq!((t.count(1), t.count(2)), (1, 0));
        assert_eq!(t.take_due(NOW + 30, 10), vec![(1, 10)]);
        assert!(t.is_empty() && t.next_due().is_none() && t.count(1) == 0);
    }

    #[test]
    fn a_release_a_second_revoke_and_a_sessions_end_leave_nothing_behind() {
        let mut t = RevokedHolds::default();
        r(&mut t, 1, 10, NOW + 30);
        // A second revoke replaces the first (its caller keeps the earlier deadline).
        r(&mut t, 1, 10, NOW + 5);
        assert_eq!((t.len(), t.next_due()), (1, Some(NOW + 5)));
        assert_eq!(t.forget(1, &10).map(|r| r.deadline), Some(NOW + 5));
        assert_eq!(t.forget(1, &10), None);
        assert!(t.is_empty() && t.by_session.is_empty());
        r(&mut t, 1, 10, NOW);
        r(&mut t, 1, 11, NOW);
        r(&mut t, 2, 12, NOW);
        t.forget_session(1);
        assert_eq!(t.iter().map(|(id, k, _)| (id, *k)).collect::<Vec<_>>(), vec![(2, 12)]);
        t.clear();
        assert!(t.is_empty() && t.iter().next().is_none());
    }
}
