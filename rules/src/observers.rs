//! LOCK.OBSERVE's blocked clients, without Redis: per key, grouped by the
//! revision each last saw (its `AFTER`), in the one structure every kind of
//! blocked client shares ([`crate::blocked::Clients`]: the index from each
//! client to its place, one check timer per key, the keys per slot). The
//! module (`src/blocked/observers.rs`) keeps Redis's handles in `O` and `T`
//! and carries out what is returned.
//!
//! An observer is not in the key's line of waiters (`crate::queue`): it
//! never takes the key, and every observer whose revision differs from the
//! key's is answered at once, in any order. Grouping by revision is what
//! makes a change cost O(1) per observer answered: the observers still up
//! to date (those whose `AFTER` is the current revision) form one range of
//! the map and are not looked at. A renewal, a `PEXPIRE` or any other event
//! that changes no revision costs O(log N) for N observers of the key.
//!
//! Keys with observers are grouped by hash slot (by `Clients`), so that a
//! cluster's once-a-second slot check looks at the slots that have
//! observers, not at every key.

use std::collections::BTreeMap;
use std::hash::Hash;

use crate::blocked::{Clients, Lines, Taken};

/// One key's observers by (the revision they saw, arrival), each with its
/// client.
pub struct ByRev<O>(BTreeMap<(u64, u64), (u64, O)>);

impl<O> Default for ByRev<O> {
    fn default() -> Self {
        ByRev(BTreeMap::new())
    }
}

impl<O> Lines for ByRev<O> {
    /// (the revision it saw, its wait number)
    type Pos = (u64, u64);
    type Member = O;

    fn insert(&mut self, pos: (u64, u64), client: u64, o: O) {
        self.0.insert(pos, (client, o));
    }

    fn remove(&mut self, pos: (u64, u64)) -> Option<(u64, O)> {
        self.0.remove(&pos)
    }

    fn get_mut(&mut self, pos: (u64, u64)) -> Option<&mut O> {
        self.0.get_mut(&pos).map(|(_, o)| o)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    /// Observers are answered in any order: nobody is behind anybody.
    fn is_first(&self, _: (u64, u64)) -> bool {
        false
    }

    fn take_all(&mut self) -> Vec<(u64, O)> {
        std::mem::take(&mut self.0).into_values().collect()
    }
}

/// Every observer of the server. `K` names a key, `O` is an observer, `T`
/// a timer handle.
pub type Observers<K, O, T> = Clients<K, ByRev<O>, T>;

impl<K: Hash + Eq + Clone, O, T> Clients<K, ByRev<O>, T> {
    pub fn observers_on(&self, key: &K) -> usize {
        self.on(key)
    }

    /// `client`'s observation number `seq` of `key` (in hash slot `slot`),
    /// which last saw `after`.
    pub fn observe(&mut self, key: K, slot: u16, client: u64, seq: u64, after: u64, observer: O) {
        self.push(key, || slot, client, seq, (after, seq), observer);
    }

    /// Takes out every observer of `key` whose revision is not `rev` (the
    /// key's now): they are to be answered. O(log N + answered).
    pub fn take_changed(&mut self, key: &K, rev: u64) -> Taken<O, T, K> {
        self.take(key, |by_rev| {
            let mut changed = std::mem::take(&mut by_rev.0);
            let mut current = changed.split_off(&(rev, 0));
            if let Some(next) = rev.checked_add(1) {
                changed.append(&mut current.split_off(&(next, 0)));
            }
            by_rev.0 = current;
            changed.into_values().collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Obs = Observers<&'static str, &'static str, u32>;

    fn sorted(mut v: Vec<&'static str>) -> Vec<&'static str> {
        v.sort_unstable();
        v
    }

    #[test]
    fn a_change_answers_exactly_those_that_saw_another_revision() {
        let mut o = Obs::default();
        o.observe("k", 0, 1, 10, 5, "a5");
        o.observe("k", 0, 2, 11, 7, "b7");
        o.observe("k", 0, 3, 12, 7, "c7");
        o.observe("k", 0, 4, 13, 0, "d0");
        o.observe("k", 0, 5, 14, 9, "e9");
        o.observe("j", 0, 6, 15, 7, "x7");
        assert_eq!((o.len(), o.observers_on(&"k")), (6, 5));
        let t = o.take_changed(&"k", 7);
        assert_eq!(sorted(t.members), ["a5", "d0", "e9"]);
        assert_eq!(t.stop, None, "two still up to date");
        assert_eq!(o.take_changed(&"k", 7).members, Vec::<&str>::new(), "nothing changed: nobody");
        assert_eq!((o.observers_on(&"k"), o.key_of(1), o.key_of(2)), (2, None, Some(&"k")));
        let arm = o.check_by(&"k", 100, 0).expect("armed");
        o.armed(&"k", arm.gen, 42);
        let t = o.take_changed(&"k", 0);
        assert_eq!((sorted(t.members), t.stop), (vec!["b7", "c7"], Some(42)));
        assert!(!o.has(&"k"));
        assert_eq!(o.observers_on(&"j"), 1, "another key's observers stay");
    }

    #[test]
    fn the_largest_revision_and_zero_are_ordinary() {
        let mut o = Obs::default();
        o.observe("k", 0, 1, 1, u64::MAX, "max");
        o.observe("k", 0, 2, 2, 0, "zero");
        assert_eq!(o.take_changed(&"k", u64::MAX).members, ["zero"]);
        assert_eq!(o.take_changed(&"k", 0).members, ["max"]);
        assert!(o.is_empty());
    }

    #[test]
    fn an_observer_leaves_once_and_an_old_timer_cannot_end_a_later_observation() {
        let mut o = Obs::default();
        o.observe("k", 0, 1, 1, 3, "a");
        o.observe("k", 0, 2, 2, 3, "b");
        assert_eq!(o.remove(1, Some(1)).map(|(_, l)| (l.member, l.stop)), Some(("a", None)));
        assert_eq!(o.remove(1, None), None, "gone means gone");
        assert_eq!(
            o.remove(2, None).map(|(_, l)| (l.member, l.stop)),
            Some(("b", None)),
            "the timer waits for the last one"
        );
        // A client blocks once at a time: its next observation.
        o.observe("k", 0, 2, 9, 4, "b2");
        assert_eq!(o.remove(2, Some(2)), None, "the earlier observation's timer");
        assert_eq!(o.member_mut(2, 2), None);
        assert_eq!(o.member_mut(2, 9), Some(&mut "b2"));
        let arm = o.check_by(&"k", 50, 0).expect("armed");
        o.armed(&"k", arm.gen, 7);
        assert_eq!(
            o.remove(2, None).map(|(_, l)| (l.member, l.stop)),
            Some(("b2", Some(7))),
            "the last one stops the timer"
        );
        assert_eq!(o.check_by(&"k", 0, 0), None, "no observers, no timer");
    }

    #[test]
    fn take_all_answers_everyone() {
        let mut o = Obs::default();
        for (c, r) in [(1, 0), (2, 5), (3, 5)] {
            o.observe("k", 0, c, c, r, "o");
        }
        assert_eq!(o.take_all(&"k").members.len(), 3);
        assert!(o.is_empty() && !o.has(&"k"));
        assert_eq!(o.take_all(&"k").members.len(), 0);
    }

    #[test]
    fn keys_are_grouped_by_slot_while_they_have_observers() {
        let mut o = Obs::default();
        o.observe("a", 7, 1, 1, 0, "a1");
        o.observe("a", 7, 2, 2, 3, "a2");
        o.observe("b", 7, 3, 3, 0, "b");
        o.observe("c", 9, 4, 4, 0, "c");
        let mut slots = o.slots();
        slots.sort_unstable();
        assert_eq!(slots, [7, 9]);
        assert_eq!(sorted(o.keys_in_slot(7)), ["a", "b"]);
        assert_eq!(o.keys_in_slot(8), Vec::<&str>::new());
        assert_eq!(o.remove(1, None).map(|(_, l)| (l.member, l.stop)), Some(("a1", None)));
        assert_eq!(sorted(o.keys_in_slot(7)), ["a", "b"], "a still has an observer");
        assert_eq!(o.take_changed(&"a", 0).members, ["a2"]);
        assert_eq!(o.keys_in_slot(7), ["b"]);
        assert_eq!(o.take_all(&"c").members, ["c"]);
        assert_eq!(o.slots(), [7]);
        assert_eq!(o.remove(3, None).map(|(_, l)| (l.member, l.stop)), Some(("b", None)));
        assert!(o.slots().is_empty() && o.is_empty());
    }
}
