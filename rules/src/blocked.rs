//! Blocked clients' bookkeeping, without Redis: the one structure every
//! kind of blocked client shares (the wait queues, [`crate::queue`]; the
//! observers, [`crate::observers`]; and any later kind). Per key: the
//! clients blocked on it, kept in an order of the kind's choosing
//! ([`Lines`]), and one check timer; per client: where it is blocked,
//! under the number of its wait (so that a timer of an earlier wait never
//! ends a later one); per hash slot: the keys that have blocked clients
//! (a cluster's slot checks and slot moves look at those keys only).
//!
//! Time comes in as arguments; what to do with timers comes out as values
//! ([`Arm`], and the timers to stop in [`Left`] and [`Taken`]). The module
//! (`src/blocked/`) keeps Redis's handles (blocked clients, strings, timer
//! ids) in the members and `T`, and carries out what is returned, as quinn
//! drives quinn-proto.
//!
//! A client may wait on several keys at once ([`Clients::push_all`], a
//! kind whose [`Lines`] are [`Marks`]): its member is kept on its first key
//! and a mark holds its place on each other one; it leaves, or is taken
//! out, from all of them together.
//!
//! Cost, for M clients on a key: joining and leaving from anywhere
//! (timeout, disconnect, `CLIENT UNBLOCK`) are O(log M) in the kind's
//! [`Lines`] plus O(1) expected for the hash maps, per key waited on; a
//! key's first client and its last also touch the slot index, O(1)
//! expected.

use std::collections::{HashMap, HashSet};
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

/// How a kind keeps the clients blocked on one key.
pub trait Lines: Default {
    /// A client's place among them.
    type Pos: Copy;
    type Member;
    fn insert(&mut self, pos: Self::Pos, client: u64, member: Self::Member);
    fn remove(&mut self, pos: Self::Pos) -> Option<(u64, Self::Member)>;
    fn get_mut(&mut self, pos: Self::Pos) -> Option<&mut Self::Member>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether `pos` is the first place, whose leaving matters to those
    /// behind it (a queue's head); `false` where order does not matter.
    fn is_first(&self, pos: Self::Pos) -> bool;
    /// Every client, taken out in the kind's order (its marks are taken
    /// out first, by [`Lines::take_marks`]).
    fn take_all(&mut self) -> Vec<(u64, Self::Member)>;
    /// Takes out the mark at `pos` (see [`Marks`]): whether there was one.
    /// Lines that never hold marks keep the default.
    fn remove_mark(&mut self, _pos: Self::Pos) -> bool {
        false
    }
    /// Takes out every mark: their clients.
    fn take_marks(&mut self) -> Vec<u64> {
        Vec::new()
    }
}

/// Lines that can hold a client's place without its member: a client
/// waiting on several keys at once keeps its member on its first key and a
/// mark at the same place on each other one.
pub trait Marks: Lines {
    fn insert_mark(&mut self, pos: Self::Pos, client: u64);
}

/// A key that a client waiting on several keys left along with its first
/// one: stop `stop` (the key has nobody left); `new_head`: check the key
/// (the client was first there, and others remain).
#[derive(Debug, PartialEq, Eq)]
pub struct Also<K, T> {
    pub key: K,
    pub stop: Option<T>,
    pub new_head: bool,
}

/// A key's blocked clients and its check timer.
struct Key<L, T> {
    lines: L,
    check: Option<Check<T>>,
    slot: u16,
}

/// A key's check timer.
struct Check<T> {
    /// The timer, once started (see [`Clients::armed`]).
    timer: Option<T>,
    /// When it fires (Unix ms).
    at: i64,
    gen: u64,
}

/// A check timer to start: after `delay` ms, carrying `gen` (hand it back
/// to [`Clients::check_fired`]); `stop` is the timer it replaces.
#[derive(Debug, PartialEq, Eq)]
pub struct Arm<T> {
    pub delay: i64,
    pub gen: u64,
    pub stop: Option<T>,
}

/// A client taken out (of the key [`Clients::remove`] names with it).
#[derive(Debug, PartialEq, Eq)]
pub struct Left<M, T, K> {
    pub member: M,
    /// Its key has no client left: stop its check timer.
    pub stop: Option<T>,
    /// It was first and others remain: check the key now (readers behind
    /// a writer that gave up may be admitted at once).
    pub new_head: bool,
    /// The other keys it waited on, where that changed something.
    pub also: Vec<Also<K, T>>,
}

/// A client taken out: the key of its member, and what it left.
pub type Removed<K, M, T> = (K, Left<M, T, K>);

/// Clients taken out of a key together: answer each; stop `stop` (the key
/// has none left).
#[derive(Debug, PartialEq, Eq)]
pub struct Taken<M, T, K> {
    pub members: Vec<M>,
    pub stop: Option<T>,
    /// The other keys they waited on, where that changed something.
    pub also: Vec<Also<K, T>>,
}

/// Where a client is blocked: its member's key and place, and the marks
/// it holds on other keys (none for a client waiting on one key).
struct Place<K, P> {
    key: K,
    pos: P,
    seq: u64,
    also: Vec<(K, P)>,
}

/// Every blocked client of one kind. `K` names a key (database and name),
/// `L` keeps a key's clients, `T` is a timer handle.
pub struct Clients<K, L: Lines, T> {
    keys: HashMap<K, Key<L, T>>,
    by_client: HashMap<u64, Place<K, L::Pos>>,
    /// Keys with clients, by hash slot.
    by_slot: HashMap<u16, HashSet<K>>,
    next_gen: u64,
}

impl<K: Hash + Eq + Clone, L: Lines, T> Default for Clients<K, L, T> {
    fn default() -> Self {
        Clients { keys: HashMap::new(), by_client: HashMap::new(), by_slot: HashMap::new(), next_gen: 0 }
    }
}

impl<K: Hash + Eq + Clone, L: Lines, T> Clients<K, L, T> {
    /// Blocked clients, all keys together.
    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }

    /// How many are blocked on `key`.
    pub fn on(&self, key: &K) -> usize {
        self.keys.get(key).map_or(0, |k| k.lines.len())
    }

    /// Whether anyone is blocked on `key`.
    pub fn has(&self, key: &K) -> bool {
        self.keys.contains_key(key)
    }

    /// Every key with blocked clients.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.keys.keys()
    }

    /// Every key with its clients, in one pass (no lookup by key).
    pub fn all_lines(&self) -> impl Iterator<Item = (&K, &L)> {
        self.keys.iter().map(|(k, e)| (k, &e.lines))
    }

    /// `key`'s clients.
    pub fn lines(&self, key: &K) -> Option<&L> {
        self.keys.get(key).map(|k| &k.lines)
    }

    pub fn lines_mut(&mut self, key: &K) -> Option<&mut L> {
        self.keys.get_mut(key).map(|k| &mut k.lines)
    }

    /// Slots with blocked clients (each once, in no order).
    pub fn slots(&self) -> Vec<u16> {
        self.by_slot.keys().copied().collect()
    }

    /// The keys of `slot` that have blocked clients.
    pub fn keys_in_slot(&self, slot: u16) -> Vec<K> {
        self.by_slot.get(&slot).map(|keys| keys.iter().cloned().collect()).unwrap_or_default()
    }

    /// Blocks `client`'s wait number `seq` (growing from one wait to the
    /// next) on `key`, at `pos`; `slot` is asked for only when the key had
    /// nobody. A client blocks once at a time.
    pub fn push(&mut self, key: K, slot: impl FnOnce() -> u16, client: u64, seq: u64, pos: L::Pos, member: L::Member) {
        self.entry(&key, slot).lines.insert(pos, client, member);
        self.by_client.insert(client, Place { key, pos, seq, also: Vec::new() });
    }

    /// Blocks `client`'s wait `seq` on every key of `keys` (distinct; none:
    /// nothing) at once, at `pos` in each: its member on the first, a mark
    /// on each other one. `slot` gives a key's slot when it had nobody.
    pub fn push_all(
        &mut self,
        keys: Vec<K>,
        slot: impl Fn(&K) -> u16,
        client: u64,
        seq: u64,
        pos: L::Pos,
        member: L::Member,
    ) where
        L: Marks,
    {
        let mut keys = keys.into_iter();
        let Some(key) = keys.next() else { return };
        let also = keys
            .map(|k| {
                self.entry(&k, || slot(&k)).lines.insert_mark(pos, client);
                (k, pos)
            })
            .collect();
        self.entry(&key, || slot(&key)).lines.insert(pos, client, member);
        self.by_client.insert(client, Place { key, pos, seq, also });
    }

    /// `key`'s entry, made (and indexed by slot) when it had nobody.
    fn entry(&mut self, key: &K, slot: impl FnOnce() -> u16) -> &mut Key<L, T> {
        self.keys.entry(key.clone()).or_insert_with(|| {
            let slot = slot();
            self.by_slot.entry(slot).or_default().insert(key.clone());
            Key { lines: L::default(), check: None, slot }
        })
    }

    /// Takes `client`'s wait out, wherever it is; with `seq`, only if it
    /// is still that wait.
    pub fn remove(&mut self, client: u64, seq: Option<u64>) -> Option<Removed<K, L::Member, T>> {
        let place = self.by_client.get(&client)?;
        if seq.is_some_and(|s| s != place.seq) {
            return None;
        }
        let Place { key, pos, also, .. } = self.by_client.remove(&client)?;
        let also = self.drop_marks(also);
        let k = self.keys.get_mut(&key)?;
        let was_first = k.lines.is_first(pos);
        let (_, member) = k.lines.remove(pos)?;
        let new_head = was_first && !k.lines.is_empty();
        let stop = self.drop_if_empty(&key);
        Some((key, Left { member, stop, new_head, also }))
    }

    /// Takes out the marks of a client that left: what that changed.
    fn drop_marks(&mut self, marks: Vec<(K, L::Pos)>) -> Vec<Also<K, T>> {
        let mut also = Vec::new();
        for (key, pos) in marks {
            let Some(k) = self.keys.get_mut(&key) else { continue };
            let was_first = k.lines.is_first(pos);
            if !k.lines.remove_mark(pos) {
                continue;
            }
            let new_head = was_first && !k.lines.is_empty();
            let stop = self.drop_if_empty(&key);
            if new_head || stop.is_some() {
                also.push(Also { key, stop, new_head });
            }
        }
        also
    }

    /// The wait `seq` of `client`, if it is still blocked.
    pub fn member_mut(&mut self, client: u64, seq: u64) -> Option<&mut L::Member> {
        let place = self.by_client.get(&client).filter(|p| p.seq == seq)?;
        let pos = place.pos;
        self.keys.get_mut(&place.key)?.lines.get_mut(pos)
    }

    /// The key `client` is blocked on (its first, waiting on several).
    pub fn key_of(&self, client: u64) -> Option<&K> {
        self.by_client.get(&client).map(|p| &p.key)
    }

    /// Where `client`'s member is: its key and place.
    pub fn place_of(&self, client: u64) -> Option<(&K, L::Pos)> {
        self.by_client.get(&client).map(|p| (&p.key, p.pos))
    }

    /// Every key `client`'s wait `seq` waits on, its first first.
    pub fn keys_of(&self, client: u64, seq: u64) -> Option<Vec<K>> {
        let p = self.by_client.get(&client).filter(|p| p.seq == seq)?;
        Some(std::iter::once(&p.key).chain(p.also.iter().map(|(k, _)| k)).cloned().collect())
    }

    /// Whether `pos` is the first place of `key`'s clients.
    pub fn is_first_on(&self, key: &K, pos: L::Pos) -> bool {
        self.keys.get(key).is_some_and(|k| k.lines.is_first(pos))
    }

    /// Takes out the clients of `key` that `pick` takes from its lines
    /// (all of them: [`Lines::take_all`]), and their marks on other keys.
    pub fn take(&mut self, key: &K, pick: impl FnOnce(&mut L) -> Vec<(u64, L::Member)>) -> Taken<L::Member, T, K> {
        let Some(k) = self.keys.get_mut(key) else {
            return Taken { members: Vec::new(), stop: None, also: Vec::new() };
        };
        let mut marks = Vec::new();
        let members = pick(&mut k.lines)
            .into_iter()
            .map(|(client, m)| {
                if let Some(p) = self.by_client.remove(&client) {
                    marks.extend(p.also);
                }
                m
            })
            .collect();
        let also = self.drop_marks(marks);
        Taken { members, stop: self.drop_if_empty(key), also }
    }

    /// Takes out the one client of `key` that `pick` takes from its lines
    /// (a queue's head): as [`Clients::take`], without a list.
    pub fn take_one(
        &mut self,
        key: &K,
        pick: impl FnOnce(&mut L) -> Option<(u64, L::Member)>,
    ) -> Option<Left<L::Member, T, K>> {
        let (client, member) = pick(&mut self.keys.get_mut(key)?.lines)?;
        let marks = self.by_client.remove(&client).map(|p| p.also).unwrap_or_default();
        let also = self.drop_marks(marks);
        Some(Left { member, stop: self.drop_if_empty(key), new_head: false, also })
    }

    /// Takes out every client of `key`: those with a mark here whole,
    /// from their first key too.
    pub fn take_all(&mut self, key: &K) -> Taken<L::Member, T, K> {
        let marked = self.keys.get_mut(key).map(|k| k.lines.take_marks()).unwrap_or_default();
        let mut taken = self.take(key, L::take_all);
        for client in marked {
            if let Some((home, left)) = self.remove(client, None) {
                taken.members.push(left.member);
                if left.new_head || left.stop.is_some() {
                    taken.also.push(Also { key: home, stop: left.stop, new_head: left.new_head });
                }
                taken.also.extend(left.also);
            }
        }
        taken
    }

    /// Removes `key` if nobody is left on it: its check timer to stop.
    fn drop_if_empty(&mut self, key: &K) -> Option<T> {
        if !self.keys.get(key).is_some_and(|k| k.lines.is_empty()) {
            return None;
        }
        let k = self.keys.remove(key)?;
        if let Some(keys) = self.by_slot.get_mut(&k.slot) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_slot.remove(&k.slot);
            }
        }
        k.check.and_then(|c| c.timer)
    }

    /// Makes `key`'s check fire no later than `at` (Unix ms), seen at `now`:
    /// an earlier timer is kept (`None`), a later one replaced; a key with
    /// nobody blocked gets none. Hand the started timer to [`Clients::armed`].
    pub fn check_by(&mut self, key: &K, at: i64, now: i64) -> Option<Arm<T>> {
        let k = self.keys.get_mut(key)?;
        let delay = timer_delay(at, now);
        let fire_at = now.saturating_add(delay);
        if k.check.as_ref().is_some_and(|c| c.at <= fire_at) {
            return None;
        }
        self.next_gen += 1;
        let stop = k.check.replace(Check { timer: None, at: fire_at, gen: self.next_gen }).and_then(|c| c.timer);
        Some(Arm { delay, gen: self.next_gen, stop })
    }

    /// The check timer started for [`Arm::gen`].
    pub fn armed(&mut self, key: &K, gen: u64, timer: T) {
        if let Some(c) = self.keys.get_mut(key).and_then(|k| k.check.as_mut()).filter(|c| c.gen == gen) {
            c.timer = Some(timer);
        }
    }

    /// A check timer fired: whether it is `key`'s current one (then the key
    /// has none until the next [`Clients::check_by`]). Its handle is
    /// forgotten, not stopped: the timer that fires is freed by Redis.
    pub fn check_fired(&mut self, key: &K, gen: u64) -> bool {
        match self.keys.get_mut(key) {
            Some(k) if k.check.as_ref().is_some_and(|c| c.gen == gen) => {
                k.check = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Arrival order, as a queue keeps it.
    #[derive(Default)]
    struct Fifo(BTreeMap<u64, (u64, &'static str)>);

    impl Lines for Fifo {
        type Pos = u64;
        type Member = &'static str;
        fn insert(&mut self, pos: u64, client: u64, m: &'static str) {
            self.0.insert(pos, (client, m));
        }
        fn remove(&mut self, pos: u64) -> Option<(u64, &'static str)> {
            self.0.remove(&pos)
        }
        fn get_mut(&mut self, pos: u64) -> Option<&mut &'static str> {
            self.0.get_mut(&pos).map(|(_, m)| m)
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn is_first(&self, pos: u64) -> bool {
            self.0.first_key_value().is_some_and(|(&p, _)| p == pos)
        }
        fn take_all(&mut self) -> Vec<(u64, &'static str)> {
            std::mem::take(&mut self.0).into_values().collect()
        }
    }

    type C = Clients<&'static str, Fifo, u32>;

    fn push(c: &mut C, key: &'static str, client: u64, seq: u64, m: &'static str) {
        c.push(key, || key.len() as u16, client, seq, seq, m);
    }

    #[test]
    fn a_client_leaves_once_and_an_old_timer_cannot_end_a_later_wait() {
        let mut c = C::default();
        push(&mut c, "k", 1, 10, "a");
        push(&mut c, "k", 2, 11, "b");
        assert_eq!((c.len(), c.on(&"k"), c.key_of(2)), (2, 2, Some(&"k")));
        let (key, left) = c.remove(1, Some(10)).expect("a waits");
        assert_eq!((key, left.member, left.stop, left.new_head), ("k", "a", None, true));
        assert_eq!(c.remove(1, None), None, "gone means gone");
        push(&mut c, "k", 1, 12, "a2");
        assert_eq!(c.remove(1, Some(10)), None, "the earlier wait's timer");
        assert_eq!(c.member_mut(1, 10), None);
        assert_eq!(c.member_mut(1, 12), Some(&mut "a2"));
        let (_, left) = c.remove(1, None).expect("a2 waits");
        assert!(!left.new_head, "not first");
    }

    #[test]
    fn the_last_client_leaving_stops_the_check_timer_and_forgets_the_slot() {
        let mut c = C::default();
        push(&mut c, "k", 1, 1, "a");
        push(&mut c, "jj", 2, 2, "x");
        let mut slots = c.slots();
        slots.sort_unstable();
        assert_eq!(slots, [1, 2]);
        let arm = c.check_by(&"k", 1_100, 1_000).expect("first timer");
        assert_eq!((arm.delay, arm.stop), (100, None));
        c.armed(&"k", arm.gen, 7);
        let (_, left) = c.remove(1, None).expect("waits");
        assert_eq!((left.stop, left.new_head), (Some(7), false));
        assert_eq!(c.check_by(&"k", 0, 0), None, "nobody, no timer");
        assert_eq!(c.slots(), [2]);
        assert_eq!(c.keys_in_slot(2), ["jj"]);
        let taken = c.take_all(&"jj");
        assert_eq!((taken.members, taken.stop), (vec!["x"], None));
        assert!(c.is_empty() && c.slots().is_empty() && !c.has(&"jj"));
    }

    #[test]
    fn one_check_timer_per_key_the_earliest_wins() {
        let mut c = C::default();
        push(&mut c, "k", 1, 1, "a");
        let first = c.check_by(&"k", 5_000, 1_000).expect("armed");
        c.armed(&"k", first.gen, 1);
        assert_eq!(c.check_by(&"k", 6_000, 1_000), None);
        assert_eq!(c.check_by(&"k", 5_000, 1_000), None);
        let second = c.check_by(&"k", 2_000, 1_500).expect("re-armed");
        assert_eq!((second.delay, second.stop), (500, Some(1)));
        c.armed(&"k", second.gen, 2);
        assert!(!c.check_fired(&"k", first.gen), "the replaced timer is stale");
        assert!(c.check_fired(&"k", second.gen));
        assert!(!c.check_fired(&"k", second.gen), "fires once");
        let third = c.check_by(&"k", 10, 1_000).expect("armed again");
        assert_eq!((third.delay, third.stop), (0, None), "the past is now");
    }

    #[test]
    fn take_picks_some_and_keeps_the_rest_indexed() {
        let mut c = C::default();
        for (client, m) in [(1, "a"), (2, "b"), (3, "c")] {
            push(&mut c, "k", client, client, m);
        }
        let taken = c.take(&"k", |l| l.0.pop_first().map(|(_, x)| x).into_iter().collect());
        assert_eq!((taken.members, taken.stop), (vec!["a"], None));
        assert_eq!((c.key_of(1), c.key_of(2), c.len()), (None, Some(&"k"), 2));
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
        let mut c = C::default();
        push(&mut c, "k", 1, 1, "a");
        assert_eq!(c.check_by(&"k", i64::MAX, 0).map(|a| a.delay), Some(MAX_TIMER_MS));
    }
}
