//! The wait queues' bookkeeping, without Redis: one FIFO queue per key, an
//! index from each blocked client to its place, each queue's check timer
//! (one at a time, told apart by generation), and the key's expiry as the
//! queue last saw it. Time comes in as arguments; what to do with timers
//! comes out as values. The module (`src/wait.rs`) keeps Redis's handles
//! (blocked clients, strings, timer ids) in `W` and `T` and carries out
//! what is returned, as quinn drives quinn-proto.
//!
//! Cost, for W waiters on a key and C blocked clients in all: joining,
//! leaving from anywhere in the line (timeout, disconnect, `CLIENT
//! UNBLOCK`, `lock.max-waiters`) and taking the head are O(log W) (a
//! B-tree keyed by arrival) plus O(1) expected for the client index and the
//! key's queue (hash maps); nothing scans a line.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Redis turns a timer's milliseconds into microseconds in 64 bits
/// (`ustime() + period * 1000`): a delay beyond ~2^53 ms wraps into the
/// past, and the timer fires at once, forever, or sorts after every other
/// module timer. No timer is asked for more than this (~24.8 days); a
/// longer delay is cut into pieces.
pub const MAX_TIMER_MS: i64 = 1 << 31;

/// The delay of a timer meant to fire at `at` (Unix ms), seen at `now`:
/// never negative, never above [`MAX_TIMER_MS`].
pub fn timer_delay(at: i64, now: i64) -> i64 {
    at.saturating_sub(now).clamp(0, MAX_TIMER_MS)
}

/// A wait's timeout timer fired at `now`: the next piece of a long wait
/// (`Some(delay)`), or its end (`None`: the wait times out).
pub fn next_piece(deadline: Option<i64>, now: i64) -> Option<i64> {
    deadline.filter(|&at| at > now).map(|at| timer_delay(at, now))
}

/// Where a client waits: its key and its place in that key's line.
struct Place<K> {
    key: K,
    seq: u64,
}

struct Queue<W, T> {
    /// Waiters by arrival (`seq` grows with every wait), each with its client.
    line: BTreeMap<u64, (u64, W)>,
    check: Option<Check<T>>,
    /// The key's expiry when last seen held (see [`Queues::gone_in_last_ms`]).
    expiry_seen: Option<i64>,
}

/// A queue's check timer.
struct Check<T> {
    /// The timer, once started (see [`Queues::armed`]).
    timer: Option<T>,
    /// When it fires (Unix ms).
    at: i64,
    gen: u64,
}

/// A check timer to start: after `delay` ms, carrying `gen` (hand it back to
/// [`Queues::check_fired`]); `stop` is the timer it replaces.
#[derive(Debug, PartialEq, Eq)]
pub struct Arm<T> {
    pub delay: i64,
    pub gen: u64,
    pub stop: Option<T>,
}

/// A waiter taken out of its line.
#[derive(Debug, PartialEq, Eq)]
pub struct Left<W, T> {
    pub waiter: W,
    /// The line is now empty and gone: stop its check timer.
    pub stop: Option<T>,
    /// The head left and others wait: check the key now (readers behind a
    /// writer that gave up may be admitted at once).
    pub new_head: bool,
}

/// Every wait queue of the server. `K` names a key (database and name), `W`
/// is a waiter, `T` a timer handle.
pub struct Queues<K, W, T> {
    queues: HashMap<K, Queue<W, T>>,
    by_client: HashMap<u64, Place<K>>,
    next_gen: u64,
}

impl<K: Hash + Eq + Clone, W, T> Default for Queues<K, W, T> {
    fn default() -> Self {
        Queues { queues: HashMap::new(), by_client: HashMap::new(), next_gen: 0 }
    }
}

impl<K: Hash + Eq + Clone, W, T> Queues<K, W, T> {
    /// Blocked clients, all keys together.
    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }

    /// How many wait on `key`.
    pub fn waiters_on(&self, key: &K) -> usize {
        self.queues.get(key).map_or(0, |q| q.line.len())
    }

    pub fn has_queue(&self, key: &K) -> bool {
        self.queues.contains_key(key)
    }

    /// Every key with a queue.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.queues.keys()
    }

    /// Every line with its head and its length, in one pass over the
    /// queues (LOCK.TOP): no lookup by key.
    pub fn lines(&self) -> impl Iterator<Item = (&K, &W, usize)> {
        self.queues.iter().filter_map(|(k, q)| q.line.first_key_value().map(|(_, (_, w))| (k, w, q.line.len())))
    }

    /// Puts `client`'s wait number `seq` at the end of `key`'s line
    /// (`seq` must grow from one wait to the next); `expiry` is the key's
    /// expiry as seen now.
    pub fn push(&mut self, key: K, client: u64, seq: u64, waiter: W, expiry: Option<i64>) {
        let q = self.queues.entry(key.clone()).or_insert_with(|| Queue {
            line: BTreeMap::new(),
            check: None,
            expiry_seen: None,
        });
        q.line.insert(seq, (client, waiter));
        q.expiry_seen = expiry;
        // A client blocks once at a time; a stale place would only point
        // at a wait that no longer matches its seq.
        self.by_client.insert(client, Place { key, seq });
    }

    /// The head of `key`'s line.
    pub fn head(&self, key: &K) -> Option<&W> {
        self.queues.get(key)?.line.first_key_value().map(|(_, (_, w))| w)
    }

    /// Takes the head of `key`'s line out.
    pub fn pop_head(&mut self, key: &K) -> Option<Left<W, T>> {
        let q = self.queues.get_mut(key)?;
        let (_, (client, waiter)) = q.line.pop_first()?;
        self.by_client.remove(&client);
        Some(Left { waiter, stop: self.drop_if_empty(key), new_head: false })
    }

    /// Takes `client`'s wait out, wherever it is in its line; with `seq`,
    /// only if it is still that wait.
    pub fn remove(&mut self, client: u64, seq: Option<u64>) -> Option<Left<W, T>> {
        let place = self.by_client.get(&client)?;
        if seq.is_some_and(|s| s != place.seq) {
            return None;
        }
        let Place { key, seq } = self.by_client.remove(&client)?;
        let q = self.queues.get_mut(&key)?;
        let was_head = q.line.first_key_value().is_some_and(|(&s, _)| s == seq);
        let (_, waiter) = q.line.remove(&seq)?;
        let new_head = was_head && !q.line.is_empty();
        Some(Left { waiter, stop: self.drop_if_empty(&key), new_head })
    }

    /// The wait `seq` of `client`, if it still waits.
    pub fn waiter_mut(&mut self, client: u64, seq: u64) -> Option<&mut W> {
        let place = self.by_client.get(&client).filter(|p| p.seq == seq)?;
        self.queues.get_mut(&place.key)?.line.get_mut(&seq).map(|(_, w)| w)
    }

    /// The key of `client`'s wait.
    pub fn key_of(&self, client: u64) -> Option<&K> {
        self.by_client.get(&client).map(|p| &p.key)
    }

    /// Removes `key`'s line if it is empty: the check timer to stop.
    fn drop_if_empty(&mut self, key: &K) -> Option<T> {
        if self.queues.get(key).is_some_and(|q| q.line.is_empty()) {
            return self.queues.remove(key).and_then(|q| q.check).and_then(|c| c.timer);
        }
        None
    }

    /// Makes `key`'s check fire no later than `at` (Unix ms), seen at `now`:
    /// an earlier timer is kept (`None`), a later one replaced. Hand the
    /// started timer to [`Queues::armed`].
    pub fn check_by(&mut self, key: &K, at: i64, now: i64) -> Option<Arm<T>> {
        let q = self.queues.get_mut(key)?;
        let delay = timer_delay(at, now);
        let fire_at = now.saturating_add(delay);
        if q.check.as_ref().is_some_and(|c| c.at <= fire_at) {
            return None;
        }
        self.next_gen += 1;
        let stop = q.check.replace(Check { timer: None, at: fire_at, gen: self.next_gen }).and_then(|c| c.timer);
        Some(Arm { delay, gen: self.next_gen, stop })
    }

    /// The check timer started for [`Arm::gen`].
    pub fn armed(&mut self, key: &K, gen: u64, timer: T) {
        if let Some(c) = self.queues.get_mut(key).and_then(|q| q.check.as_mut()).filter(|c| c.gen == gen) {
            c.timer = Some(timer);
        }
    }

    /// A check timer fired: whether it is `key`'s current one (then the
    /// queue has none until the next [`Queues::check_by`]). Its handle is
    /// forgotten, not stopped: the timer that fires is freed by Redis.
    pub fn check_fired(&mut self, key: &K, gen: u64) -> bool {
        match self.queues.get_mut(key) {
            Some(q) if q.check.as_ref().is_some_and(|c| c.gen == gen) => {
                q.check = None;
                true
            }
            _ => false,
        }
    }

    /// Remembers `key`'s expiry, as just seen on a held key or granted.
    pub fn saw_expiry(&mut self, key: &K, at: Option<i64>) {
        if let Some(q) = self.queues.get_mut(key) {
            q.expiry_seen = at;
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
        self.queues.get(key).and_then(|q| q.expiry_seen) == Some(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Q = Queues<&'static str, &'static str, u32>;

    fn line(q: &mut Q, key: &'static str) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Some(l) = q.pop_head(&key) {
            out.push(l.waiter);
        }
        out
    }

    #[test]
    fn first_in_first_out_per_key() {
        let mut q = Q::default();
        q.push("k", 1, 10, "a", None);
        q.push("j", 2, 11, "x", None);
        q.push("k", 3, 12, "b", None);
        q.push("k", 4, 13, "c", None);
        assert_eq!((q.len(), q.waiters_on(&"k"), q.waiters_on(&"j")), (4, 3, 1));
        assert_eq!(q.head(&"k"), Some(&"a"));
        assert_eq!(line(&mut q, "k"), ["a", "b", "c"]);
        assert!(!q.has_queue(&"k"), "an empty line goes away");
        assert_eq!((q.len(), q.key_of(2)), (1, Some(&"j")));
    }

    #[test]
    fn every_line_with_its_head_and_length() {
        let mut q = Q::default();
        assert_eq!(q.lines().count(), 0);
        q.push("k", 1, 10, "a", None);
        q.push("j", 2, 11, "x", None);
        q.push("k", 3, 12, "b", None);
        q.push("k", 4, 13, "c", None);
        let mut lines: Vec<_> = q.lines().map(|(k, w, n)| (*k, *w, n)).collect();
        lines.sort();
        assert_eq!(lines, [("j", "x", 1), ("k", "a", 3)]);
        // The head leaving: the next in line heads it; the last leaving: no line.
        q.remove(1, None).expect("a waits");
        q.remove(2, None).expect("x waits");
        assert_eq!(q.lines().map(|(k, w, n)| (*k, *w, n)).collect::<Vec<_>>(), [("k", "b", 2)]);
    }

    #[test]
    fn leaving_from_the_middle_keeps_the_order_and_answers_once() {
        let mut q = Q::default();
        for (client, w) in [(1, "a"), (2, "b"), (3, "c"), (4, "d")] {
            q.push("k", client, 100 + client, w, None);
        }
        let left = q.remove(3, None).expect("c waits");
        assert_eq!((left.waiter, left.new_head, left.stop), ("c", false, None));
        // Gone means gone: a second removal (timeout after disconnect) finds nothing.
        assert_eq!(q.remove(3, None), None);
        // A later wait of the same client is not ended by an old wait's timer.
        q.push("k", 3, 200, "c2", None);
        assert_eq!(q.remove(3, Some(103)), None);
        assert_eq!(q.waiter_mut(3, 103), None);
        assert_eq!(q.waiter_mut(3, 200), Some(&mut "c2"));
        // The head leaving with others behind it: check the key again.
        let left = q.remove(1, Some(101)).expect("a waits");
        assert!(left.new_head);
        assert_eq!(line(&mut q, "k"), ["b", "d", "c2"]);
        assert!(q.is_empty());
    }

    #[test]
    fn the_last_waiter_leaving_stops_the_check_timer() {
        let mut q = Q::default();
        q.push("k", 1, 1, "a", None);
        let arm = q.check_by(&"k", 1_100, 1_000).expect("first timer");
        assert_eq!((arm.delay, arm.stop), (100, None));
        q.armed(&"k", arm.gen, 7);
        let left = q.remove(1, None).expect("waits");
        assert_eq!((left.stop, left.new_head), (Some(7), false));
        assert_eq!(q.check_by(&"k", 0, 0), None, "no queue, no timer");
    }

    #[test]
    fn one_check_timer_per_queue_the_earliest_wins() {
        let mut q = Q::default();
        q.push("k", 1, 1, "a", None);
        let first = q.check_by(&"k", 5_000, 1_000).expect("armed");
        q.armed(&"k", first.gen, 1);
        // Later than the armed one: kept.
        assert_eq!(q.check_by(&"k", 6_000, 1_000), None);
        assert_eq!(q.check_by(&"k", 5_000, 1_000), None);
        // Earlier: replaces it, and says which to stop.
        let second = q.check_by(&"k", 2_000, 1_500).expect("re-armed");
        assert_eq!((second.delay, second.stop), (500, Some(1)));
        q.armed(&"k", second.gen, 2);
        // The replaced timer, had it fired anyway, is stale.
        assert!(!q.check_fired(&"k", first.gen));
        assert!(q.check_fired(&"k", second.gen));
        assert!(!q.check_fired(&"k", second.gen), "fires once");
        // With none armed, any time arms one; the past is now.
        let third = q.check_by(&"k", 10, 1_000).expect("armed again");
        assert_eq!((third.delay, third.stop), (0, None));
    }

    #[test]
    fn timers_are_cut_into_pieces() {
        assert_eq!(timer_delay(5, 10), 0);
        assert_eq!(timer_delay(i64::MAX, 0), MAX_TIMER_MS);
        assert_eq!(timer_delay(i64::MAX, i64::MIN), MAX_TIMER_MS);
        assert_eq!(next_piece(None, 0), None);
        assert_eq!(next_piece(Some(100), 100), None, "due: the wait ends");
        assert_eq!(next_piece(Some(150), 100), Some(50));
        assert_eq!(next_piece(Some(i64::MAX), 0), Some(MAX_TIMER_MS));
        let mut q = Q::default();
        q.push("k", 1, 1, "a", None);
        assert_eq!(q.check_by(&"k", i64::MAX, 0).map(|a| a.delay), Some(MAX_TIMER_MS));
    }

    #[test]
    fn a_key_gone_in_its_last_millisecond_is_not_free_yet() {
        let mut q = Q::default();
        q.push("k", 1, 1, "a", Some(500));
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
