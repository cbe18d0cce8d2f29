//! The holds being timed (`lock.hold-timing`, issue 23): which grant of
//! the module is still held, since when and, for a semaphore's or
//! read-write lock's holder, until when its lease runs; and what a hold's
//! end records. Pure: the module hashes database, key and token names to
//! the `u64`s this table is keyed by, and reads the clock.
//!
//! Every operation is O(1) (hash-table lookups), except the end of a
//! whole key ([`HoldTable::key_expired`], [`HoldTable::key_deleted`]),
//! which walks that key's holders only: they are being freed with it.
//!
//! The table never holds more than its bound of holds in all (an exclusive
//! key counts one, a holders' key one per holder); grants beyond it are
//! not timed.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// How a timed hold ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Its holder released it (`LOCK.RELEASE`, `SEM.RELEASE`, …).
    Released,
    /// Its lease ran out while held.
    Expired,
    /// `LOCK.TAKEOVER` replaced its holder.
    TakenOver,
    /// Its key was deleted, overwritten or moved by something other than
    /// the module (`DEL`, `RENAME`, `MOVE`, `RESTORE`, `COPY … REPLACE`,
    /// eviction, a native command that emptied it).
    Deleted,
}

/// Passes an already mixed 64-bit hash through (keys of the tables are
/// hashes the module computed).
#[derive(Default)]
pub struct Pass(u64);

impl Hasher for Pass {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Map<V> = HashMap<u64, V, BuildHasherDefault<Pass>>;

/// A held exclusive key (a plain lock or an election).
#[derive(Clone, Copy, Debug)]
struct Lock<F> {
    since: i64,
    family: F,
}

/// One holder of a semaphore or read-write lock: granted at `since`, its
/// lease (not its place: the lock-delay is not held) ends at `lease_end`.
#[derive(Clone, Copy, Debug)]
struct Hold {
    since: i64,
    lease_end: i64,
}

/// A holders' key: its family, and its timed holders by token hash.
#[derive(Debug)]
struct Holders<F> {
    family: F,
    holds: Holds,
}

/// A key's timed holders: one inline (a writer, a one-permit semaphore, a
/// quiet key: no allocation), or a table.
#[derive(Debug)]
enum Holds {
    One(u64, Hold),
    Many(Map<Hold>),
}

impl Holds {
    fn len(&self) -> usize {
        match self {
            Holds::One(..) => 1,
            Holds::Many(m) => m.len(),
        }
    }

    fn contains(&self, token: u64) -> bool {
        match self {
            Holds::One(t, _) => *t == token,
            Holds::Many(m) => m.contains_key(&token),
        }
    }

    fn get_mut(&mut self, token: u64) -> Option<&mut Hold> {
        match self {
            Holds::One(t, h) => (*t == token).then_some(h),
            Holds::Many(m) => m.get_mut(&token),
        }
    }

    /// Whether `token` is new.
    fn insert(&mut self, token: u64, hold: Hold) -> bool {
        match self {
            Holds::One(t, h) if *t == token => {
                *h = hold;
                false
            }
            Holds::One(t, h) => {
                let mut m = Map::default();
                m.insert(*t, *h);
                m.insert(token, hold);
                *self = Holds::Many(m);
                true
            }
            Holds::Many(m) => m.insert(token, hold).is_none(),
        }
    }

    /// Removes `token`; `None` if it is not here. The key's entry goes
    /// when this leaves it empty (the caller checks [`Holds::len`]).
    fn remove(&mut self, token: u64) -> Option<Hold> {
        match self {
            Holds::One(t, h) if *t == token => {
                let h = *h;
                *self = Holds::Many(Map::default());
                Some(h)
            }
            Holds::One(..) => None,
            Holds::Many(m) => m.remove(&token),
        }
    }

    fn into_holds(self) -> Vec<Hold> {
        match self {
            Holds::One(_, h) => vec![h],
            Holds::Many(m) => m.into_values().collect(),
        }
    }
}

/// A hold that ended: its family, how, and how long it was held (ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended<F> {
    pub family: F,
    pub end: End,
    pub ms: u64,
}

fn span(since: i64, until: i64) -> u64 {
    until.saturating_sub(since).max(0) as u64
}

#[derive(Debug)]
pub struct HoldTable<F> {
    locks: Map<Lock<F>>,
    keys: Map<Holders<F>>,
    len: usize,
    max: usize,
}

impl<F: Copy + PartialEq> HoldTable<F> {
    /// An empty table that times at most `max` holds at once.
    pub fn new(max: usize) -> Self {
        HoldTable { locks: Map::default(), keys: Map::default(), len: 0, max }
    }

    /// The holds timed now.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every hold (unrecorded) and frees the memory.
    pub fn clear(&mut self) {
        self.locks = Map::default();
        self.keys = Map::default();
        self.len = 0;
    }

    /// Forgets (unrecorded) every hold of each key for which `gone` is
    /// true: keys that left this node with their slot. O(keys timed).
    pub fn forget_where(&mut self, gone: impl Fn(u64) -> bool) {
        let before = self.locks.len();
        self.locks.retain(|k, _| !gone(*k));
        let mut dropped = before - self.locks.len();
        self.keys.retain(|k, h| {
            let keep = !gone(*k);
            if !keep {
                dropped += h.holds.len();
            }
            keep
        });
        self.len -= dropped;
    }

    /// The exclusive `key` was granted at `now`; false if it is not timed
    /// (the table is full). A grant over a timed hold replaces it.
    pub fn lock_granted(&mut self, key: u64, family: F, now: i64) -> bool {
        if self.len >= self.max && !self.locks.contains_key(&key) {
            return false;
        }
        if self.locks.insert(key, Lock { since: now, family }).is_none() {
            self.len += 1;
        }
        true
    }

    /// The exclusive `key`'s hold ended at `now` as `end`, if timed.
    pub fn lock_ended(&mut self, key: u64, end: End, now: i64) -> Option<Ended<F>> {
        let Lock { since, family } = self.locks.remove(&key)?;
        self.len -= 1;
        Some(Ended { family, end, ms: span(since, now) })
    }

    /// `token` was granted a place on the holders' `key` at `now`, its
    /// lease ending at `lease_end`; false if not timed (the table is full).
    /// A key timed under another family (it was replaced unseen) loses its
    /// old holders, unrecorded.
    pub fn holder_granted(&mut self, key: u64, token: u64, family: F, now: i64, lease_end: i64) -> bool {
        let stale = self.keys.get(&key).is_some_and(|k| k.family != family);
        if stale {
            if let Some(old) = self.keys.remove(&key) {
                self.len -= old.holds.len();
            }
        }
        let known = self.keys.get(&key).is_some_and(|k| k.holds.contains(token));
        if self.len >= self.max && !known {
            return false;
        }
        let hold = Hold { since: now, lease_end };
        match self.keys.get_mut(&key) {
            Some(k) => {
                if k.holds.insert(token, hold) {
                    self.len += 1;
                }
            }
            None => {
                self.keys.insert(key, Holders { family, holds: Holds::One(token, hold) });
                self.len += 1;
            }
        }
        true
    }

    /// `token`'s lease on `key` now ends at `lease_end` (a renewal); a
    /// holder not timed stays untimed.
    pub fn holder_renewed(&mut self, key: u64, token: u64, lease_end: i64) {
        if let Some(h) = self.keys.get_mut(&key).and_then(|k| k.holds.get_mut(token)) {
            h.lease_end = lease_end;
        }
    }

    /// `token` left `key` at `now`: released (held until now), or its
    /// place was found ended (expired: held until its lease end).
    pub fn holder_ended(&mut self, key: u64, token: u64, end: End, now: i64) -> Option<Ended<F>> {
        let k = self.keys.get_mut(&key)?;
        let Hold { since, lease_end } = k.holds.remove(token)?;
        let family = k.family;
        if k.holds.len() == 0 {
            self.keys.remove(&key);
        }
        self.len -= 1;
        let until = match end {
            End::Expired => lease_end.min(now),
            _ => now,
        };
        Some(Ended { family, end, ms: span(since, until) })
    }

    /// The whole `key` ended at `now` as `end`: its exclusive hold (held
    /// until now) and every timed holder (held until its lease end, or now
    /// if that came first), each passed to `record`.
    pub fn key_ended(&mut self, key: u64, end: End, now: i64, mut record: impl FnMut(Ended<F>)) {
        if let Some(e) = self.lock_ended(key, end, now) {
            record(e);
        }
        let Some(k) = self.keys.remove(&key) else { return };
        self.len -= k.holds.len();
        for Hold { since, lease_end } in k.holds.into_holds() {
            record(Ended { family: k.family, end, ms: span(since, lease_end.min(now)) });
        }
    }

    /// The whole `key` expired at `now` (Redis deleted it at its
    /// deadline): [`HoldTable::key_ended`] as expired.
    pub fn key_expired(&mut self, key: u64, now: i64, record: impl FnMut(Ended<F>)) {
        self.key_ended(key, End::Expired, now, record);
    }

    /// The whole `key` was deleted at `now` by someone else:
    /// [`HoldTable::key_ended`] as deleted.
    pub fn key_deleted(&mut self, key: u64, now: i64, record: impl FnMut(Ended<F>)) {
        self.key_ended(key, End::Deleted, now, record);
    }

    /// The timed holders of the holders' `key`.
    pub fn holders_of(&self, key: u64) -> usize {
        self.keys.get(&key).map_or(0, |k| k.holds.len())
    }
}

/// The map's key for `name` in database `db`: a multiply-rotate hash over
/// 8 bytes at a time (keys are short; this runs on every grant and release).
pub fn key_hash(db: i32, name: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (db as u64).wrapping_add(name.len() as u64).wrapping_mul(K);
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(23) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let mut w = [0u8; 8];
    let rest = chunks.remainder();
    w[..rest.len()].copy_from_slice(rest);
    h = (h.rotate_left(23) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    // hashbrown reads the top 7 bits too: fold the high half down and up.
    h ^ (h >> 29)
}

/// A token's hash, for a holders' key's table (a collision, ~M²/2⁶⁵ for M
/// holders of one key, can only swap two holders' grant times).
pub fn token_hash(token: &[u8]) -> u64 {
    key_hash(-1, token)
}

/// The table's key for the held key `name` of database `db`: its hash
/// with the key's hash slot in bits 36..50, so that the holds of slots
/// that left this node can be found without their names
/// (the module forgets them). The low bits (the map's bucket) and the top 7 (its
/// control byte) stay the hash's; 50 bits of hash are left.
pub fn held_key(db: i32, name: &[u8]) -> u64 {
    const SLOT: u64 = 0x3fff << 36;
    (key_hash(db, name) & !SLOT) | (u64::from(crate::cluster::key_slot(name)) << 36)
}

/// The slot of a table key made by [`held_key`].
pub fn slot_of(h: u64) -> u16 {
    ((h >> 36) & 0x3fff) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum F {
        Lock,
        Sem,
        Rw,
    }

    fn ends(t: &mut HoldTable<F>, key: u64, deleted: bool, now: i64) -> Vec<Ended<F>> {
        let mut out = Vec::new();
        if deleted {
            t.key_deleted(key, now, |e| out.push(e));
        } else {
            t.key_expired(key, now, |e| out.push(e));
        }
        out.sort_by_key(|e| e.ms);
        out
    }

    #[test]
    fn forgetting_keys_drops_their_holds_and_keeps_the_count_right() {
        let mut t = HoldTable::new(10);
        assert!(t.lock_granted(1, F::Lock, 0));
        assert!(t.lock_granted(2, F::Lock, 0));
        assert!(t.holder_granted(3, 10, F::Sem, 0, 100));
        assert!(t.holder_granted(3, 11, F::Sem, 0, 100));
        assert!(t.holder_granted(4, 12, F::Rw, 0, 100));
        assert_eq!(t.len(), 5);
        t.forget_where(|k| k == 1 || k == 3);
        assert_eq!(t.len(), 2);
        assert_eq!(t.lock_ended(1, End::Released, 5), None);
        assert_eq!(t.holders_of(3), 0);
        assert_eq!(t.holders_of(4), 1);
        assert!(t.lock_ended(2, End::Released, 5).is_some());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_lock_is_held_from_its_grant_to_its_end() {
        let mut t = HoldTable::new(10);
        assert!(t.lock_granted(1, F::Lock, 100));
        assert_eq!(t.len(), 1);
        assert_eq!(t.lock_ended(1, End::Released, 350), Some(Ended { family: F::Lock, end: End::Released, ms: 250 }));
        assert_eq!(t.lock_ended(1, End::Released, 400), None, "ended once");
        assert!(t.is_empty());
        // A grant over a timed hold restarts it without counting twice.
        t.lock_granted(2, F::Lock, 0);
        t.lock_granted(2, F::Lock, 50);
        assert_eq!(t.len(), 1);
        assert_eq!(t.lock_ended(2, End::TakenOver, 60).map(|e| e.ms), Some(10));
        // A clock that went back records 0, not a wrapped length.
        t.lock_granted(3, F::Lock, 500);
        assert_eq!(t.lock_ended(3, End::Expired, 400).map(|e| e.ms), Some(0));
    }

    #[test]
    fn a_holder_released_is_held_until_now_and_one_expired_until_its_lease_end() {
        let mut t = HoldTable::new(10);
        assert!(t.holder_granted(7, 1, F::Sem, 1000, 2000));
        assert!(t.holder_granted(7, 2, F::Sem, 1100, 2100));
        assert_eq!(t.len(), 2);
        assert_eq!(t.holders_of(7), 2);
        t.holder_renewed(7, 1, 5000);
        assert_eq!(
            t.holder_ended(7, 1, End::Released, 1600),
            Some(Ended { family: F::Sem, end: End::Released, ms: 600 })
        );
        // Pruned after its place ended: held until the lease end, whatever
        // the delay after it, however late the prune.
        assert_eq!(t.holder_ended(7, 2, End::Expired, 9000).map(|e| e.ms), Some(1000));
        assert!(t.is_empty());
        assert_eq!(t.holders_of(7), 0);
        // A renewal of an untimed holder does not start timing it.
        t.holder_renewed(7, 3, 5000);
        assert!(t.is_empty());
        assert_eq!(t.holder_ended(7, 3, End::Released, 6000), None);
    }

    #[test]
    fn a_key_ends_with_all_its_holders() {
        let mut t = HoldTable::new(10);
        t.holder_granted(7, 1, F::Rw, 0, 100);
        t.holder_granted(7, 2, F::Rw, 50, 300);
        t.holder_granted(8, 1, F::Rw, 0, 100);
        t.lock_granted(9, F::Lock, 0);
        let e = ends(&mut t, 7, false, 310);
        assert_eq!(e.iter().map(|e| (e.ms, e.end)).collect::<Vec<_>>(), [(100, End::Expired), (250, End::Expired)]);
        assert_eq!(t.len(), 2, "other keys stay");
        assert_eq!(ends(&mut t, 9, true, 40), [Ended { family: F::Lock, end: End::Deleted, ms: 40 }]);
        // Deleted before its lease end: held until the deletion.
        assert_eq!(ends(&mut t, 8, true, 60).iter().map(|e| e.ms).collect::<Vec<_>>(), [60]);
        assert!(t.is_empty());
        assert!(ends(&mut t, 8, true, 70).is_empty());
    }

    #[test]
    fn the_bound_counts_every_hold() {
        let mut t = HoldTable::new(3);
        assert!(t.lock_granted(1, F::Lock, 0));
        assert!(t.holder_granted(2, 1, F::Sem, 0, 10));
        assert!(t.holder_granted(2, 2, F::Sem, 0, 10));
        assert!(!t.holder_granted(2, 3, F::Sem, 0, 10), "full");
        assert!(!t.lock_granted(4, F::Lock, 0), "full");
        // A known holder re-granted is still timed at the bound.
        assert!(t.holder_granted(2, 2, F::Sem, 5, 20));
        assert!(t.lock_granted(1, F::Lock, 5));
        assert_eq!(t.len(), 3);
        t.holder_ended(2, 1, End::Released, 6);
        assert!(t.holder_granted(2, 3, F::Sem, 7, 20));
        t.clear();
        assert!(t.is_empty());
        assert_eq!(t.holders_of(2), 0);
    }

    #[test]
    fn a_key_of_one_holder_grows_and_shrinks() {
        let mut t = HoldTable::new(10);
        t.holder_granted(2, 1, F::Sem, 0, 10);
        t.holder_granted(2, 1, F::Sem, 4, 14);
        assert_eq!((t.len(), t.holders_of(2)), (1, 1), "re-granted in place");
        assert_eq!(t.holder_ended(2, 9, End::Released, 5), None, "another token");
        t.holder_renewed(2, 1, 30);
        t.holder_granted(2, 2, F::Sem, 5, 15);
        assert_eq!((t.len(), t.holders_of(2)), (2, 2));
        assert_eq!(t.holder_ended(2, 1, End::Expired, 99).map(|e| e.ms), Some(26), "kept its renewal");
        assert_eq!(t.holder_ended(2, 2, End::Released, 7).map(|e| e.ms), Some(2));
        assert!(t.is_empty());
        assert_eq!(t.holders_of(2), 0);
    }

    #[test]
    fn a_key_granted_under_another_family_forgets_its_old_holders() {
        let mut t = HoldTable::new(10);
        t.holder_granted(2, 1, F::Sem, 0, 10);
        t.holder_granted(2, 2, F::Sem, 0, 10);
        assert!(t.holder_granted(2, 1, F::Rw, 5, 20));
        assert_eq!(t.len(), 1);
        assert_eq!(t.holder_ended(2, 1, End::Released, 8), Some(Ended { family: F::Rw, end: End::Released, ms: 3 }));
    }
}
