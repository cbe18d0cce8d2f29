//! LOCK.OBSERVE's blocked clients, without Redis: per key, grouped by the
//! revision each last saw (its `AFTER`), with an index from each client to
//! its place and one check timer per key. The module (`src/observe.rs`)
//! keeps Redis's handles in `O` and `T` and carries out what is returned.
//!
//! An observer is not in the key's line of waiters (`crate::queue`): it
//! never takes the key, and every observer whose revision differs from the
//! key's is answered at once, in any order. Grouping by revision is what
//! makes a change cost O(1) per observer answered: the observers still up
//! to date (those whose `AFTER` is the current revision) form one range of
//! the map and are not looked at. A renewal, a `PEXPIRE` or any other event
//! that changes no revision costs O(log N) for N observers of the key.
//!
//! Keys with observers are also grouped by hash slot, so that a cluster's
//! once-a-second slot check looks at the slots that have observers, not
//! at every key.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;

use crate::queue::timer_delay;

struct Place<K> {
    key: K,
    after: u64,
    seq: u64,
}

struct Watch<O, T> {
    /// Observers by (the revision they saw, arrival), each with its client.
    by_rev: BTreeMap<(u64, u64), (u64, O)>,
    check: Option<Check<T>>,
    slot: u16,
}

struct Check<T> {
    timer: Option<T>,
    at: i64,
    gen: u64,
}

/// Observers taken out: answer each; stop `stop` (the key has none left).
#[derive(Debug, PartialEq, Eq)]
pub struct Taken<O, T> {
    pub observers: Vec<O>,
    pub stop: Option<T>,
}

/// A check timer to start after `delay` ms, carrying `gen`; `stop` is the
/// timer it replaces.
#[derive(Debug, PartialEq, Eq)]
pub struct Arm<T> {
    pub delay: i64,
    pub gen: u64,
    pub stop: Option<T>,
}

/// Every observer of the server. `K` names a key, `O` is an observer, `T`
/// a timer handle.
pub struct Observers<K, O, T> {
    keys: HashMap<K, Watch<O, T>>,
    by_client: HashMap<u64, Place<K>>,
    /// Keys with observers, by hash slot.
    by_slot: HashMap<u16, HashSet<K>>,
    next_gen: u64,
}

impl<K: Hash + Eq + Clone, O, T> Default for Observers<K, O, T> {
    fn default() -> Self {
        Observers { keys: HashMap::new(), by_client: HashMap::new(), by_slot: HashMap::new(), next_gen: 0 }
    }
}

impl<K: Hash + Eq + Clone, O, T> Observers<K, O, T> {
    /// Blocked observers, all keys together.
    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }

    pub fn observers_on(&self, key: &K) -> usize {
        self.keys.get(key).map_or(0, |w| w.by_rev.len())
    }

    pub fn has(&self, key: &K) -> bool {
        self.keys.contains_key(key)
    }

    /// Every key with observers.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.keys.keys()
    }

    /// Slots with observers (each once, in no order).
    pub fn slots(&self) -> Vec<u16> {
        self.by_slot.keys().copied().collect()
    }

    /// The keys of `slot` that have observers.
    pub fn keys_in_slot(&self, slot: u16) -> Vec<K> {
        self.by_slot.get(&slot).map(|keys| keys.iter().cloned().collect()).unwrap_or_default()
    }

    /// `client`'s observation number `seq` of `key` (in hash slot `slot`),
    /// which last saw `after`.
    pub fn push(&mut self, key: K, slot: u16, client: u64, seq: u64, after: u64, observer: O) {
        let w = self.keys.entry(key.clone()).or_insert_with(|| {
            self.by_slot.entry(slot).or_default().insert(key.clone());
            Watch { by_rev: BTreeMap::new(), check: None, slot }
        });
        w.by_rev.insert((after, seq), (client, observer));
        self.by_client.insert(client, Place { key, after, seq });
    }

    /// Takes `client`'s observation out; with `seq`, only if it is still
    /// that one. Returns it and the key's timer to stop if none are left.
    pub fn remove(&mut self, client: u64, seq: Option<u64>) -> Option<(O, Option<T>)> {
        let place = self.by_client.get(&client)?;
        if seq.is_some_and(|s| s != place.seq) {
            return None;
        }
        let Place { key, after, seq } = self.by_client.remove(&client)?;
        let (_, observer) = self.keys.get_mut(&key)?.by_rev.remove(&(after, seq))?;
        Some((observer, self.drop_if_empty(&key)))
    }

    /// The observation `seq` of `client`, if it still blocks.
    pub fn observer_mut(&mut self, client: u64, seq: u64) -> Option<&mut O> {
        let place = self.by_client.get(&client).filter(|p| p.seq == seq)?;
        self.keys.get_mut(&place.key)?.by_rev.get_mut(&(place.after, seq)).map(|(_, o)| o)
    }

    /// The key of `client`'s observation.
    pub fn key_of(&self, client: u64) -> Option<&K> {
        self.by_client.get(&client).map(|p| &p.key)
    }

    /// Takes out every observer of `key` whose revision is not `rev` (the
    /// key's now): they are to be answered. O(log N + answered).
    pub fn take_changed(&mut self, key: &K, rev: u64) -> Taken<O, T> {
        let Some(w) = self.keys.get_mut(key) else { return Taken { observers: Vec::new(), stop: None } };
        let mut changed = std::mem::take(&mut w.by_rev);
        let mut current = changed.split_off(&(rev, 0));
        if let Some(next) = rev.checked_add(1) {
            changed.append(&mut current.split_off(&(next, 0)));
        }
        w.by_rev = current;
        self.taken(key, changed)
    }

    /// Takes out every observer of `key` (its slot is served elsewhere).
    pub fn take_all(&mut self, key: &K) -> Taken<O, T> {
        let Some(w) = self.keys.get_mut(key) else { return Taken { observers: Vec::new(), stop: None } };
        let all = std::mem::take(&mut w.by_rev);
        self.taken(key, all)
    }

    fn taken(&mut self, key: &K, taken: BTreeMap<(u64, u64), (u64, O)>) -> Taken<O, T> {
        let observers = taken
            .into_values()
            .map(|(client, o)| {
                self.by_client.remove(&client);
                o
            })
            .collect();
        Taken { observers, stop: self.drop_if_empty(key) }
    }

    fn drop_if_empty(&mut self, key: &K) -> Option<T> {
        if self.keys.get(key).is_some_and(|w| w.by_rev.is_empty()) {
            let w = self.keys.remove(key)?;
            if let Some(keys) = self.by_slot.get_mut(&w.slot) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_slot.remove(&w.slot);
                }
            }
            return w.check.and_then(|c| c.timer);
        }
        None
    }

    /// Makes `key`'s check fire no later than `at` (Unix ms), seen at
    /// `now`: an earlier timer is kept (`None`), a later one replaced.
    pub fn check_by(&mut self, key: &K, at: i64, now: i64) -> Option<Arm<T>> {
        let w = self.keys.get_mut(key)?;
        let delay = timer_delay(at, now);
        let fire_at = now.saturating_add(delay);
        if w.check.as_ref().is_some_and(|c| c.at <= fire_at) {
            return None;
        }
        self.next_gen += 1;
        let stop = w.check.replace(Check { timer: None, at: fire_at, gen: self.next_gen }).and_then(|c| c.timer);
        Some(Arm { delay, gen: self.next_gen, stop })
    }

    /// The check timer started for [`Arm::gen`].
    pub fn armed(&mut self, key: &K, gen: u64, timer: T) {
        if let Some(c) = self.keys.get_mut(key).and_then(|w| w.check.as_mut()).filter(|c| c.gen == gen) {
            c.timer = Some(timer);
        }
    }

    /// A check timer fired: whether it is `key`'s current one (then the key
    /// has none until the next [`Observers::check_by`]).
    pub fn check_fired(&mut self, key: &K, gen: u64) -> bool {
        match self.keys.get_mut(key) {
            Some(w) if w.check.as_ref().is_some_and(|c| c.gen == gen) => {
                w.check = None;
                true
            }
            _ => false,
        }
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
        o.push("k", 0, 1, 10, 5, "a5");
        o.push("k", 0, 2, 11, 7, "b7");
        o.push("k", 0, 3, 12, 7, "c7");
        o.push("k", 0, 4, 13, 0, "d0");
        o.push("k", 0, 5, 14, 9, "e9");
        o.push("j", 0, 6, 15, 7, "x7");
        assert_eq!((o.len(), o.observers_on(&"k")), (6, 5));
        let t = o.take_changed(&"k", 7);
        assert_eq!(sorted(t.observers), ["a5", "d0", "e9"]);
        assert_eq!(t.stop, None, "two still up to date");
        assert_eq!(o.take_changed(&"k", 7).observers, Vec::<&str>::new(), "nothing changed: nobody");
        assert_eq!((o.observers_on(&"k"), o.key_of(1), o.key_of(2)), (2, None, Some(&"k")));
        let arm = o.check_by(&"k", 100, 0).expect("armed");
        o.armed(&"k", arm.gen, 42);
        let t = o.take_changed(&"k", 0);
        assert_eq!((sorted(t.observers), t.stop), (vec!["b7", "c7"], Some(42)));
        assert!(!o.has(&"k"));
        assert_eq!(o.observers_on(&"j"), 1, "another key's observers stay");
    }

    #[test]
    fn the_largest_revision_and_zero_are_ordinary() {
        let mut o = Obs::default();
        o.push("k", 0, 1, 1, u64::MAX, "max");
        o.push("k", 0, 2, 2, 0, "zero");
        assert_eq!(o.take_changed(&"k", u64::MAX).observers, ["zero"]);
        assert_eq!(o.take_changed(&"k", 0).observers, ["max"]);
        assert!(o.is_empty());
    }

    #[test]
    fn an_observer_leaves_once_and_an_old_timer_cannot_end_a_later_observation() {
        let mut o = Obs::default();
        o.push("k", 0, 1, 1, 3, "a");
        o.push("k", 0, 2, 2, 3, "b");
        assert_eq!(o.remove(1, Some(1)), Some(("a", None)));
        assert_eq!(o.remove(1, None), None, "gone means gone");
        assert_eq!(o.remove(2, None), Some(("b", None)), "the timer waits for the last one");
        // A client blocks once at a time: its next observation.
        o.push("k", 0, 2, 9, 4, "b2");
        assert_eq!(o.remove(2, Some(2)), None, "the earlier observation's timer");
        assert_eq!(o.observer_mut(2, 2), None);
        assert_eq!(o.observer_mut(2, 9), Some(&mut "b2"));
        let arm = o.check_by(&"k", 50, 0).expect("armed");
        o.armed(&"k", arm.gen, 7);
        assert_eq!(o.remove(2, None), Some(("b2", Some(7))), "the last one stops the timer");
        assert_eq!(o.check_by(&"k", 0, 0), None, "no observers, no timer");
    }

    #[test]
    fn take_all_answers_everyone() {
        let mut o = Obs::default();
        for (c, r) in [(1, 0), (2, 5), (3, 5)] {
            o.push("k", 0, c, c, r, "o");
        }
        assert_eq!(o.take_all(&"k").observers.len(), 3);
        assert!(o.is_empty() && !o.has(&"k"));
        assert_eq!(o.take_all(&"k").observers.len(), 0);
    }

    #[test]
    fn one_check_timer_per_key_the_earliest_wins() {
        let mut o = Obs::default();
        o.push("k", 0, 1, 1, 0, "a");
        let first = o.check_by(&"k", 5_000, 1_000).expect("armed");
        o.armed(&"k", first.gen, 1);
        assert_eq!(o.check_by(&"k", 6_000, 1_000), None);
        let second = o.check_by(&"k", 2_000, 1_000).expect("earlier");
        assert_eq!((second.delay, second.stop), (1_000, Some(1)));
        assert!(!o.check_fired(&"k", first.gen));
        assert!(o.check_fired(&"k", second.gen));
        assert!(!o.check_fired(&"k", second.gen), "fires once");
    }

    #[test]
    fn keys_are_grouped_by_slot_while_they_have_observers() {
        let mut o = Obs::default();
        o.push("a", 7, 1, 1, 0, "a1");
        o.push("a", 7, 2, 2, 3, "a2");
        o.push("b", 7, 3, 3, 0, "b");
        o.push("c", 9, 4, 4, 0, "c");
        let mut slots = o.slots();
        slots.sort_unstable();
        assert_eq!(slots, [7, 9]);
        assert_eq!(sorted(o.keys_in_slot(7)), ["a", "b"]);
        assert_eq!(o.keys_in_slot(8), Vec::<&str>::new());
        assert_eq!(o.remove(1, None), Some(("a1", None)));
        assert_eq!(sorted(o.keys_in_slot(7)), ["a", "b"], "a still has an observer");
        assert_eq!(o.take_changed(&"a", 0).observers, ["a2"]);
        assert_eq!(o.keys_in_slot(7), ["b"]);
        assert_eq!(o.take_all(&"c").observers, ["c"]);
        assert_eq!(o.slots(), [7]);
        assert_eq!(o.remove(3, None), Some(("b", None)));
        assert!(o.slots().is_empty() && o.is_empty());
    }
}
