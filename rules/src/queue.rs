//! The wait queues' bookkeeping, without Redis: one FIFO line per key, in
//! the one structure every kind of blocked client shares
//! ([`crate::blocked::Clients`]: the index from each blocked client to its
//! place, each key's check timer, the keys per slot), and the key's expiry
//! as the queue last saw it. Time comes in as arguments; what to do with
//! timers comes out as values. The module (`src/blocked/queue.rs`) keeps
//! Redis's handles (blocked clients, strings, timer ids) in `W` and `T`
//! and carries out what is returned, as quinn drives quinn-proto.
//!
//! A waiter may wait on several keys at once ([`Queues::enqueue_all`]): it
//! takes one place, its arrival, in every key's line (its waiter on its
//! first key, a mark on the others), so that one order, arrival, runs
//! through every line and no two waiters can each be ahead of the other.
//!
//! Cost, for W waiters on a key and C blocked clients in all: joining,
//! leaving from anywhere in the line (timeout, disconnect, `CLIENT
//! UNBLOCK`, `lock.max-waiters`) and taking the head are O(log W) (a
//! B-tree keyed by arrival) plus O(1) expected for the client index and the
//! key's line (hash maps); nothing scans a line. A waiter on N keys joins
//! and leaves in O(N log W).

use std::collections::BTreeMap;
use std::hash::Hash;

use crate::blocked::{Clients, Left, Lines, Marks};

/// One key's line: waiters by arrival (`seq` grows with every wait), each
/// with its client (none: the mark of a waiter whose waiter is on its
/// first key), and the key's expiry when last seen held (see
/// [`Queues::gone_in_last_ms`]).
pub struct Line<W> {
    line: BTreeMap<u64, (u64, Option<W>)>,
    expiry_seen: Option<i64>,
}

impl<W> Default for Line<W> {
    fn default() -> Self {
        Line { line: BTreeMap::new(), expiry_seen: None }
    }
}

impl<W> Lines for Line<W> {
    type Pos = u64;
    type Member = W;

    fn insert(&mut self, seq: u64, client: u64, waiter: W) {
        self.line.insert(seq, (client, Some(waiter)));
    }

    fn remove(&mut self, seq: u64) -> Option<(u64, W)> {
        if !matches!(self.line.get(&seq), Some((_, Some(_)))) {
            return None;
        }
        self.line.remove(&seq).and_then(|(c, w)| w.map(|w| (c, w)))
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut W> {
        self.line.get_mut(&seq).and_then(|(_, w)| w.as_mut())
    }

    fn len(&self) -> usize {
        self.line.len()
    }

    fn is_first(&self, seq: u64) -> bool {
        self.line.first_key_value().is_some_and(|(&s, _)| s == seq)
    }

    fn take_all(&mut self) -> Vec<(u64, W)> {
        std::mem::take(&mut self.line).into_values().filter_map(|(c, w)| w.map(|w| (c, w))).collect()
    }

    fn remove_mark(&mut self, seq: u64) -> bool {
        matches!(self.line.get(&seq), Some((_, None))) && self.line.remove(&seq).is_some()
    }

    fn take_marks(&mut self) -> Vec<u64> {
        let marks = self.line.values().filter(|(_, w)| w.is_none()).map(|&(c, _)| c).collect();
        self.line.retain(|_, (_, w)| w.is_some());
        marks
    }
}

impl<W> Marks for Line<W> {
    fn insert_mark(&mut self, seq: u64, client: u64) {
        self.line.insert(seq, (client, None));
    }
}

/// Every wait queue of the server. `K` names a key (database and name), `W`
/// is a waiter, `T` a timer handle.
pub type Queues<K, W, T> = Clients<K, Line<W>, T>;

impl<K: Hash + Eq + Clone, W, T> Clients<K, Line<W>, T> {
    /// How many wait on `key`.
    pub fn waiters_on(&self, key: &K) -> usize {
        self.on(key)
    }

    /// Every line with its head and its length, in one pass over the
    /// queues (LOCK.TOP): no lookup by key but a mark's, for its waiter.
    pub fn heads(&self) -> impl Iterator<Item = (&K, &W, usize)> {
        self.all_lines().filter_map(|(k, l)| {
            let (_, (client, w)) = l.line.first_key_value()?;
            let w = match w {
                Some(w) => w,
                None => self.waiter_of(*client)?,
            };
            Some((k, w, l.line.len()))
        })
    }

    /// `client`'s waiter, on its first key.
    fn waiter_of(&self, client: u64) -> Option<&W> {
        let (key, seq) = self.place_of(client)?;
        self.lines(key)?.line.get(&seq)?.1.as_ref()
    }

    /// Puts `client`'s wait number `seq` at the end of `key`'s line (`seq`
    /// must grow from one wait to the next); `slot` is the key's hash slot,
    /// asked for when the line is new; `expiry` is the key's expiry as
    /// seen now.
    pub fn enqueue(
        &mut self,
        key: K,
        slot: impl FnOnce() -> u16,
        client: u64,
        seq: u64,
        waiter: W,
        expiry: Option<i64>,
    ) {
        self.push(key.clone(), slot, client, seq, seq, waiter);
        self.saw_expiry(&key, expiry);
    }

    /// Puts `client`'s wait number `seq` at the end of every line of
    /// `keys` (distinct) at once: its waiter on the first, a mark on each
    /// other one; `slot` gives a key's hash slot when its line is new.
    pub fn enqueue_all(&mut self, keys: Vec<K>, slot: impl Fn(&K) -> u16, client: u64, seq: u64, waiter: W) {
        self.push_all(keys, slot, client, seq, seq, waiter);
    }

    /// The head of `key`'s line (a waiter on several keys that heads it
    /// with a mark: its waiter, from its first key).
    pub fn head(&self, key: &K) -> Option<&W> {
        self.first(key).map(|(_, _, w)| w)
    }

    /// The head of `key`'s line: its client, its wait number and its waiter.
    pub fn first(&self, key: &K) -> Option<(u64, u64, &W)> {
        let (&seq, (client, w)) = self.lines(key)?.line.first_key_value()?;
        let w = match w {
            Some(w) => w,
            None => self.waiter_of(*client)?,
        };
        Some((*client, seq, w))
    }

    /// Takes the head of `key`'s line out, if it waits on `key` alone or
    /// first (a mark is never taken here: see [`Clients::remove`]).
    pub fn pop_head(&mut self, key: &K) -> Option<Left<W, T, K>> {
        self.take_one(key, |l| match l.line.first_entry() {
            Some(e) if e.get().1.is_some() => {
                let (c, w) = e.remove();
                w.map(|w| (c, w))
            }
            _ => None,
        })
    }

    /// Remembers `key`'s expiry, as just seen on a held key or granted.
    pub fn saw_expiry(&mut self, key: &K, at: Option<i64>) {
        if let Some(l) = self.lines_mut(key) {
            l.expiry_seen = at;
        }
    }

    /// Whether `key`, found gone at `now`, may have been deleted inside the
    /// last millisecond of the lease that held it: then nothing may be
    /// granted before `now + 1`.
    ///
    /// A lease is held through its last millisecond (`now <= deadline`), as
    /// Redis 7 and Valkey keep a key. Redis 8's active expiry deletes a key
    /// already at `now >= deadline` (redis/redis#13591:
    /// `activeExpireCycleTryExpire` tests `now < t`), so a key can vanish in
    /// its deadline's millisecond. No server deletes a key before its
    /// deadline by expiry, so a key gone in any other millisecond was
    /// deleted (free at once) or had ended.
    pub fn gone_in_last_ms(&self, key: &K, now: i64) -> bool {
        self.lines(key).and_then(|l| l.expiry_seen) == Some(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Q = Queues<&'static str, &'static str, u32>;

    fn line(q: &mut Q, key: &'static str) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Some(l) = q.pop_head(&key) {
            out.push(l.member);
        }
        out
    }

    #[test]
    fn first_in_first_out_per_key() {
        let mut q = Q::default();
        q.enqueue("k", || 0, 1, 10, "a", None);
        q.enqueue("j", || 0, 2, 11, "x", None);
        q.enqueue("k", || 0, 3, 12, "b", None);
        q.enqueue("k", || 0, 4, 13, "c", None);
        assert_eq!((q.len(), q.waiters_on(&"k"), q.waiters_on(&"j")), (4, 3, 1));
        assert_eq!(q.head(&"k"), Some(&"a"));
        assert_eq!(line(&mut q, "k"), ["a", "b", "c"]);
        assert!(!q.has(&"k"), "an empty line goes away");
        assert_eq!((q.len(), q.key_of(2)), (1, Some(&"j")));
    }

    #[test]
    fn every_line_with_its_head_and_length() {
        let mut q = Q::default();
        assert_eq!(q.heads().count(), 0);
        q.enqueue("k", || 0, 1, 10, "a", None);
        q.enqueue("j", || 0, 2, 11, "x", None);
        q.enqueue("k", || 0, 3, 12, "b", None);
        q.enqueue("k", || 0, 4, 13, "c", None);
        let mut lines: Vec<_> = q.heads().map(|(k, w, n)| (*k, *w, n)).collect();
        lines.sort();
        assert_eq!(lines, [("j", "x", 1), ("k", "a", 3)]);
        // The head leaving: the next in line heads it; the last leaving: no line.
        q.remove(1, None).expect("a waits");
        q.remove(2, None).expect("x waits");
        assert_eq!(q.heads().map(|(k, w, n)| (*k, *w, n)).collect::<Vec<_>>(), [("k", "b", 2)]);
    }

    #[test]
    fn leaving_from_the_middle_keeps_the_order_and_answers_once() {
        let mut q = Q::default();
        for (client, w) in [(1, "a"), (2, "b"), (3, "c"), (4, "d")] {
            q.enqueue("k", || 0, client, 100 + client, w, None);
        }
        let (_, left) = q.remove(3, None).expect("c waits");
        assert_eq!((left.member, left.new_head, left.stop), ("c", false, None));
        // Gone means gone: a second removal (timeout after disconnect) finds nothing.
        assert_eq!(q.remove(3, None), None);
        // A later wait of the same client is not ended by an old wait's timer.
        q.enqueue("k", || 0, 3, 200, "c2", None);
        assert_eq!(q.remove(3, Some(103)), None);
        assert_eq!(q.member_mut(3, 103), None);
        assert_eq!(q.member_mut(3, 200), Some(&mut "c2"));
        // The head leaving with others behind it: check the key again.
        let (_, left) = q.remove(1, Some(101)).expect("a waits");
        assert!(left.new_head);
        assert_eq!(line(&mut q, "k"), ["b", "d", "c2"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_key_gone_in_its_last_millisecond_is_not_free_yet() {
        let mut q = Q::default();
        q.enqueue("k", || 0, 1, 1, "a", Some(500));
        assert!(q.gone_in_last_ms(&"k", 500));
        assert!(!q.gone_in_last_ms(&"k", 501), "ended");
        assert!(!q.gone_in_last_ms(&"k", 499), "deleted before its end: free");
        q.saw_expiry(&"k", Some(900));
        assert!(!q.gone_in_last_ms(&"k", 500));
        assert!(q.gone_in_last_ms(&"k", 900));
        q.saw_expiry(&"k", None);
        assert!(!q.gone_in_last_ms(&"k", 900), "no expiry: gone means deleted");
        assert!(!q.gone_in_last_ms(&"j", 900), "no queue");
    }

    fn keys(v: &[&'static str]) -> Vec<&'static str> {
        v.to_vec()
    }

    #[test]
    fn a_waiter_on_several_keys_takes_one_place_in_every_line() {
        let mut q = Q::default();
        q.enqueue("b", || 0, 1, 10, "s", None);
        q.enqueue_all(keys(&["a", "b", "c"]), |_| 0, 2, 11, "j");
        q.enqueue_all(keys(&["c", "a"]), |_| 0, 3, 12, "k");
        q.enqueue("a", || 0, 4, 13, "t", None);
        // One client each; every line counts its marks.
        assert_eq!((q.len(), q.waiters_on(&"a"), q.waiters_on(&"b"), q.waiters_on(&"c")), (4, 3, 2, 2));
        assert_eq!(q.first(&"a"), Some((2, 11, &"j")));
        assert_eq!(q.first(&"b"), Some((1, 10, &"s")));
        assert_eq!(q.first(&"c"), Some((2, 11, &"j")), "a mark: the waiter from its first key");
        assert_eq!(q.keys_of(2, 11), Some(vec!["a", "b", "c"]));
        assert_eq!(q.keys_of(2, 99), None, "another wait");
        assert!(q.is_first_on(&"c", 11) && !q.is_first_on(&"b", 11));
        // Arrival is one order: the later waiter on the same keys is behind
        // in every line, whatever order it named them in.
        assert!(!q.is_first_on(&"a", 12) && !q.is_first_on(&"c", 12));
        let mut heads: Vec<_> = q.heads().map(|(k, w, n)| (*k, *w, n)).collect();
        heads.sort();
        assert_eq!(heads, [("a", "j", 3), ("b", "s", 2), ("c", "j", 2)]);
        // Leaving takes every place at once; where it was first with others
        // behind, the key is to be checked.
        let (key, left) = q.remove(2, Some(11)).expect("j waits");
        assert_eq!((key, left.member, left.new_head, left.stop), ("a", "j", true, None));
        let mut also: Vec<_> = left.also.iter().map(|a| (a.key, a.new_head, a.stop)).collect();
        also.sort();
        assert_eq!(also, [("c", true, None)], "b: not first there, nothing to do");
        assert_eq!((q.len(), q.waiters_on(&"a"), q.waiters_on(&"b"), q.waiters_on(&"c")), (3, 2, 1, 1));
        assert_eq!(q.first(&"a"), Some((3, 12, &"k")));
        assert_eq!(q.remove(2, None), None, "gone means gone");
    }

    #[test]
    fn the_head_is_popped_only_as_a_waiter_never_as_a_mark() {
        let mut q = Q::default();
        q.enqueue_all(keys(&["a", "b"]), |_| 0, 1, 10, "j");
        q.enqueue("b", || 0, 2, 11, "s", None);
        assert!(q.pop_head(&"b").is_none(), "b is headed by j's mark");
        // Its first key's pop takes it out of every line.
        let left = q.pop_head(&"a").expect("j heads a");
        assert_eq!((left.member, left.also.len()), ("j", 1));
        assert!(left.also[0].new_head);
        assert_eq!(q.first(&"b"), Some((2, 11, &"s")));
        assert!(!q.has(&"a"));
    }

    #[test]
    fn taking_every_waiter_of_a_key_takes_those_with_a_mark_there_whole() {
        let mut q = Q::default();
        q.enqueue_all(keys(&["a", "b"]), |k| k.len() as u16, 1, 10, "j");
        q.enqueue("a", || 1, 2, 11, "s", None);
        q.enqueue("b", || 1, 3, 12, "t", None);
        let taken = q.take_all(&"b");
        let mut members = taken.members.clone();
        members.sort();
        assert_eq!(members, ["j", "t"]);
        assert_eq!(taken.also.iter().map(|a| (a.key, a.new_head)).collect::<Vec<_>>(), [("a", true)]);
        assert_eq!((q.len(), q.key_of(1), q.first(&"a")), (1, None, Some((2, 11, &"s"))));
        assert!(!q.has(&"b"));
        // And the other way: its first key's waiters, with its marks elsewhere.
        q.enqueue_all(keys(&["c", "d"]), |_| 1, 4, 13, "k");
        let arm = q.check_by(&"d", 100, 0).expect("d has a line");
        q.armed(&"d", arm.gen, 7);
        let taken = q.take_all(&"c");
        assert_eq!(taken.members, ["k"]);
        assert_eq!(taken.also, [crate::blocked::Also { key: "d", stop: Some(7), new_head: false }], "d's timer stops");
        assert!(!q.has(&"d"), "its mark went too");
        assert_eq!(q.slots(), [1]);
    }
}
