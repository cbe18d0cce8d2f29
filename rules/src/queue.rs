//! The wait queues' bookkeeping, without Redis: one FIFO line per key, in
//! the one structure every kind of blocked client shares
//! ([`crate::blocked::Clients`]: the index from each blocked client to its
//! place, each key's check timer, the keys per slot), and the key's expiry
//! as the queue last saw it. Time comes in as arguments; what to do with
//! timers comes out as values. The module (`src/blocked/queue.rs`) keeps
//! Redis's handles (blocked clients, strings, timer ids) in `W` and `T`
//! and carries out what is returned, as quinn drives quinn-proto.
//!
//! Cost, for W waiters on a key and C blocked clients in all: joining,
//! leaving from anywhere in the line (timeout, disconnect, `CLIENT
//! UNBLOCK`, `lock.max-waiters`) and taking the head are O(log W) (a
//! B-tree keyed by arrival) plus O(1) expected for the client index and the
//! key's line (hash maps); nothing scans a line.

use std::collections::BTreeMap;
use std::hash::Hash;

use crate::blocked::{Clients, Left, Lines};

/// One key's line: waiters by arrival (`seq` grows with every wait), each
/// with its client, and the key's expiry when last seen held (see
/// [`Queues::gone_in_last_ms`]).
pub struct Line<W> {
    line: BTreeMap<u64, (u64, W)>,
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
        self.line.insert(seq, (client, waiter));
    }

    fn remove(&mut self, seq: u64) -> Option<(u64, W)> {
        self.line.remove(&seq)
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut W> {
        self.line.get_mut(&seq).map(|(_, w)| w)
    }

    fn len(&self) -> usize {
        self.line.len()
    }

    fn is_first(&self, seq: u64) -> bool {
        self.line.first_key_value().is_some_and(|(&s, _)| s == seq)
    }

    fn take_all(&mut self) -> Vec<(u64, W)> {
        std::mem::take(&mut self.line).into_values().collect()
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
    /// queues (LOCK.TOP): no lookup by key.
    pub fn heads(&self) -> impl Iterator<Item = (&K, &W, usize)> {
        self.all_lines().filter_map(|(k, l)| l.line.first_key_value().map(|(_, (_, w))| (k, w, l.line.len())))
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

    /// The head of `key`'s line.
    pub fn head(&self, key: &K) -> Option<&W> {
        self.lines(key)?.line.first_key_value().map(|(_, (_, w))| w)
    }

    /// Takes the head of `key`'s line out.
    pub fn pop_head(&mut self, key: &K) -> Option<Left<W, T>> {
        self.take_one(key, |l| l.line.pop_first().map(|(_, cw)| cw))
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
}
