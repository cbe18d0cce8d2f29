//! Eviction (issue 29): whether a server's memory settings let it evict
//! lock keys, the refusal a grant gets under `lock.eviction refuse`, and
//! the table of holds the module tracks so that an eviction can be
//! counted, logged and told to the holder it took.
//!
//! A lock key carries a TTL, so every `volatile-*` policy may take it as
//! readily as the `allkeys-*` ones: the only settings under which Redis
//! never evicts a lock key are `maxmemory 0` or `maxmemory-policy
//! noeviction`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

/// The policies Redis 7.0 to 8.2 and Valkey 8.1 to 9.1 accept, in the
/// order of [`REFUSALS`].
pub const POLICIES: [&str; 8] = [
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
];

/// What a grant is refused with under `lock.eviction refuse` while the
/// server may evict lock keys, per policy of [`POLICIES`] (the first,
/// `noeviction`, never refuses); [`REFUSAL_OTHER`] for a policy this list
/// does not know. Stable texts: clients may match on their start,
/// `ERR lock.eviction is refuse`.
pub const REFUSALS: [&str; 8] = [
    "",
    "ERR lock.eviction is refuse and maxmemory-policy allkeys-lru may evict lock keys: set maxmemory-policy noeviction or maxmemory 0, or CONFIG SET lock.eviction allow",
    "ERR lock.eviction is refuse and maxmemory-policy allkeys-lfu may evict lock keys: set maxmemory-policy noeviction or maxmemory 0, or CONFIG SET lock.eviction allow",
    "ERR lock.eviction is refuse and maxmemory-policy allkeys-random may evict lock keys: set maxmemory-policy noeviction or maxmemory 0, or CONFIG SET lock.eviction allow",
    "ERR lock.eviction is refuse and maxmemory-policy volatile-lru may evict lock keys: set maxmemory-policy noeviction or maxmemory 0, or CONFIG SET lock.eviction allow",
    "ERR lock.eviction is refuse and maxmemory-policy volatile-lfu may evict lock keys: set maxmemory-policy noeviction or maxmemory 0, or CONFIG SET lock.eviction allow",
    "ERR lock.eviction is refuse and maxmemory-policy volatile-random may evict lock keys: set maxmemory-policy noeviction or maxmemory 0, or CONFIG SET lock.eviction allow",
    "ERR lock.eviction is refuse and maxmemory-policy volatile-ttl may evict lock keys: set maxmemory-policy noeviction or maxmemory 0, or CONFIG SET lock.eviction allow",
];

/// The refusal under a policy [`POLICIES`] does not name.
pub const REFUSAL_OTHER: &str = "ERR lock.eviction is refuse and the server's maxmemory-policy may evict lock keys: set maxmemory-policy noeviction or maxmemory 0, or CONFIG SET lock.eviction allow";

/// The server's memory settings, as `INFO memory` shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    pub maxmemory: u64,
    /// Index in [`POLICIES`]; `None`: a policy it does not know.
    pub policy: Option<usize>,
}

impl Memory {
    /// Reads `maxmemory` and `maxmemory_policy` as INFO gives them.
    pub fn of(maxmemory: u64, policy: &[u8]) -> Memory {
        Memory { maxmemory, policy: POLICIES.iter().position(|p| p.as_bytes() == policy) }
    }

    /// Whether Redis may evict a lock key under these settings: a memory
    /// limit, and any policy but `noeviction` (an unknown one counts as
    /// evicting: better a refusal the user can lift than a silent loss).
    pub fn may_evict(self) -> bool {
        self.maxmemory > 0 && self.policy != Some(0)
    }

    /// The policy's name (`other` for one [`POLICIES`] lacks).
    pub fn policy_name(self) -> &'static str {
        self.policy.map_or("other", |i| POLICIES[i])
    }

    /// The refusal a grant gets under `lock.eviction refuse` (None: these
    /// settings evict nothing).
    pub fn refusal(self) -> Option<&'static str> {
        if !self.may_evict() {
            return None;
        }
        Some(self.policy.map_or(REFUSAL_OTHER, |i| REFUSALS[i]))
    }
}

/// What an evicted hold was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// An exclusive lock (`LOCK.ACQUIRE`, `LOCK.TAKEOVER`).
    Lock = 0,
    /// An election's leader (`LOCK.ELECT`).
    Leader = 1,
    /// A semaphore's holder.
    Semaphore = 2,
    /// A read-write lock's holder.
    ReadWrite = 3,
}

/// One evicted key's live holds, by family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Evicted {
    pub holds: [u64; 4],
    /// The table knew the key as an exclusive one's (a lock, a leader),
    /// live or not: it had no other holder.
    pub exclusive: bool,
}

impl Evicted {
    pub fn total(&self) -> u64 {
        self.holds.iter().sum()
    }
}

/// A hold of a session, as the table keeps it beside the hold: the
/// session's short id and the hold's token, so that an eviction can be
/// told to the session (`crate::session_evicted`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionHold {
    pub short: u64,
    pub token: Box<[u8]>,
}

/// The holds of keys a server may evict: key (database and name) hash and
/// token hash → until when the key keeps others out (Unix ms: the key's
/// expiry for an exclusive lock, the place's end for a holder; lock-delay
/// included), and the hold's family. An eviction of a key with a hold
/// whose end has not passed is a hold lost to eviction; its (key, token)
/// is then remembered among the last [`Tracker::recent_cap`] such, so that
/// its holder can ask.
///
/// Every operation is O(log N) in the holds tracked (one key's holders:
/// O(log N + M) on its eviction). Stale holds (their end passed without a
/// write the module saw: an expiry, a native `DEL`) go two per call to
/// [`Tracker::hold`], oldest end first, so the table stays bounded by the
/// holds whose end is still ahead plus what was written since.
#[derive(Debug)]
pub struct Tracker {
    holds: BTreeMap<(u64, u64), (i64, Family)>,
    by_end: BTreeSet<(i64, u64, u64)>,
    /// The session of each hold a session holds (only those).
    sessions: HashMap<(u64, u64), SessionHold>,
    recent: HashSet<(u64, u64)>,
    recent_order: VecDeque<(u64, u64)>,
    cap: usize,
    recent_cap: usize,
}

/// Stale holds dropped per [`Tracker::hold`]: more than the one it adds,
/// so the table shrinks back once holds stop being written.
const PRUNE_PER_HOLD: usize = 2;

impl Tracker {
    /// At most `cap` holds tracked (beyond, a new hold is not tracked), and
    /// the last `recent_cap` evicted holds remembered.
    pub fn new(cap: usize, recent_cap: usize) -> Tracker {
        Tracker {
            holds: BTreeMap::new(),
            by_end: BTreeSet::new(),
            sessions: HashMap::new(),
            recent: HashSet::new(),
            recent_order: VecDeque::new(),
            cap,
            recent_cap,
        }
    }

    pub fn len(&self) -> usize {
        self.holds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.holds.is_empty()
    }

    /// How many evicted holds are remembered at most.
    pub fn recent_cap(&self) -> usize {
        self.recent_cap
    }

    /// `token` holds `key` until `until`. `exclusive`: the key has one
    /// holder, so any other hold of it ends (a new owner, a takeover).
    /// Returns whether it is tracked (false: the table is full).
    pub fn hold(&mut self, key: u64, token: u64, until: i64, family: Family, exclusive: bool, now: i64) -> bool {
        self.hold_in(key, token, (until, family), exclusive, None, now)
    }

    /// [`Tracker::hold`] by a session's hold (`session`; `None`: no
    /// session holds it).
    pub fn hold_in(
        &mut self,
        key: u64,
        token: u64,
        (until, family): (i64, Family),
        exclusive: bool,
        session: Option<SessionHold>,
        now: i64,
    ) -> bool {
        self.prune(now);
        if exclusive {
            self.drop_key_except(key, token);
        }
        if let Some(old) = self.holds.get_mut(&(key, token)) {
            self.by_end.remove(&(old.0, key, token));
            *old = (until, family);
        } else if self.holds.len() >= self.cap {
            return false;
        } else {
            self.holds.insert((key, token), (until, family));
        }
        self.by_end.insert((until, key, token));
        match session {
            Some(s) => self.sessions.insert((key, token), s),
            None if self.sessions.is_empty() => None,
            None => self.sessions.remove(&(key, token)),
        };
        true
    }

    /// Removes one hold from both indexes (and its session's entry).
    fn remove(&mut self, key: u64, token: u64, until: i64) {
        self.holds.remove(&(key, token));
        self.by_end.remove(&(until, key, token));
        if !self.sessions.is_empty() {
            self.sessions.remove(&(key, token));
        }
    }

    /// `token` no longer holds `key` (released, its place ended).
    pub fn drop_hold(&mut self, key: u64, token: u64) {
        if let Some(&(until, _)) = self.holds.get(&(key, token)) {
            self.remove(key, token, until);
        }
    }

    /// Nobody holds `key` (deleted, or settled to its tombstone).
    pub fn drop_key(&mut self, key: u64) {
        for (token, until) in self.holds_of(key) {
            self.remove(key, token, until);
        }
    }

    fn drop_key_except(&mut self, key: u64, keep: u64) {
        for (token, until) in self.holds_of(key) {
            if token != keep {
                self.remove(key, token, until);
            }
        }
    }

    fn holds_of(&self, key: u64) -> Vec<(u64, i64)> {
        self.holds.range((key, 0)..=(key, u64::MAX)).map(|(&(_, t), &(until, _))| (t, until)).collect()
    }

    /// Drops up to [`PRUNE_PER_HOLD`] holds whose end has passed.
    fn prune(&mut self, now: i64) {
        for _ in 0..PRUNE_PER_HOLD {
            match self.by_end.first() {
                Some(&(until, key, token)) if until <= now => self.remove(key, token, until),
                _ => return,
            }
        }
    }

    /// Redis evicted `key` at `now`: its holds whose end had not passed
    /// were lost (returned, by family, and remembered for their holders);
    /// all of its holds go.
    pub fn evicted(&mut self, key: u64, now: i64) -> Evicted {
        self.evicted_from(key, now, &mut Vec::new())
    }

    /// [`Tracker::evicted`], and the live holds among them that sessions
    /// held, with their families, added to `sessions`.
    pub fn evicted_from(&mut self, key: u64, now: i64, sessions: &mut Vec<(Family, SessionHold)>) -> Evicted {
        let mut out = Evicted::default();
        let holds: Vec<_> =
            self.holds.range((key, 0)..=(key, u64::MAX)).map(|(&(_, t), &(until, f))| (t, until, f)).collect();
        for (token, until, family) in holds {
            out.exclusive |= matches!(family, Family::Lock | Family::Leader);
            let session = if self.sessions.is_empty() { None } else { self.sessions.remove(&(key, token)) };
            self.remove(key, token, until);
            if until > now {
                out.holds[family as usize] += 1;
                self.remember(key, token);
                sessions.extend(session.map(|s| (family, s)));
            }
        }
        out
    }

    fn remember(&mut self, key: u64, token: u64) {
        if self.recent_cap == 0 || !self.recent.insert((key, token)) {
            return;
        }
        self.recent_order.push_back((key, token));
        while self.recent_order.len() > self.recent_cap {
            if let Some(old) = self.recent_order.pop_front() {
                self.recent.remove(&old);
            }
        }
    }

    /// Whether `token`'s hold of `key` was among the last evicted.
    pub fn was_evicted(&self, key: u64, token: u64) -> bool {
        self.recent.contains(&(key, token))
    }

    /// A later grant of `key` to `token` makes its earlier eviction old news.
    pub fn forget_evicted(&mut self, key: u64, token: u64) {
        if self.recent.remove(&(key, token)) {
            self.recent_order.retain(|&e| e != (key, token));
        }
    }

    /// The latest end below `limit` of a hold tracked (`limit`: where
    /// session-held holds, which have no end of their own, begin). O(log N).
    pub fn last_end_below(&self, limit: i64) -> Option<i64> {
        self.by_end.range(..(limit, 0, 0)).next_back().map(|&(until, _, _)| until)
    }

    /// Forgets every hold (a flush: the table cannot tell databases apart).
    pub fn clear_holds(&mut self) {
        self.holds.clear();
        self.by_end.clear();
        self.sessions.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_settings_evict_lock_keys() {
        assert!(!Memory::of(0, b"allkeys-lru").may_evict(), "no limit: nothing is evicted");
        assert!(!Memory::of(3 << 20, b"noeviction").may_evict());
        for p in &POLICIES[1..] {
            let m = Memory::of(3 << 20, p.as_bytes());
            assert!(m.may_evict(), "{p}: lock keys carry a TTL, so volatile-* takes them too");
            let r = m.refusal().unwrap();
            assert!(r.starts_with("ERR lock.eviction is refuse and maxmemory-policy "), "{r}");
            assert!(r.contains(p), "{r}");
            assert_eq!(m.policy_name(), *p);
        }
        let other = Memory::of(1, b"allkeys-something-new");
        assert!(other.may_evict());
        assert_eq!(other.refusal(), Some(REFUSAL_OTHER));
        assert_eq!(Memory::of(3, b"noeviction").refusal(), None);
    }

    #[test]
    fn an_eviction_counts_the_live_holds_of_its_key() {
        let mut t = Tracker::new(100, 10);
        assert!(t.hold(1, 10, 1_000, Family::Lock, true, 0));
        assert!(t.hold(2, 20, 1_000, Family::Semaphore, false, 0));
        assert!(t.hold(2, 21, 500, Family::Semaphore, false, 0));
        assert!(t.hold(2, 22, 1_000, Family::Semaphore, false, 0));
        let e = t.evicted(2, 600);
        assert_eq!(e.holds, [0, 0, 2, 0], "the place that ended at 500 was no hold any more");
        assert!(!e.exclusive);
        assert!(t.was_evicted(2, 20) && t.was_evicted(2, 22) && !t.was_evicted(2, 21));
        assert!(!t.was_evicted(1, 10));
        assert_eq!(t.len(), 1);
        assert_eq!(t.evicted(2, 600).total(), 0, "counted once");
        // An exclusive key has one holder: a new owner replaces the old one.
        assert!(t.hold(1, 11, 2_000, Family::Leader, true, 0));
        assert_eq!(t.evicted(1, 1_500).holds, [0, 1, 0, 0]);
        assert!(t.was_evicted(1, 11) && !t.was_evicted(1, 10));
        t.forget_evicted(1, 11);
        assert!(!t.was_evicted(1, 11));
    }

    #[test]
    fn released_expired_and_untracked_holds_are_not_counted() {
        let mut t = Tracker::new(2, 10);
        assert!(t.hold(1, 1, 100, Family::Lock, true, 0));
        t.drop_hold(1, 1);
        assert_eq!(t.evicted(1, 50).total(), 0, "released");
        assert!(t.hold(1, 1, 100, Family::Lock, true, 0));
        let ended = t.evicted(1, 100);
        assert_eq!(ended.total(), 0, "its end had come");
        assert!(ended.exclusive, "but the table knew the key had no other holder");
        assert!(t.hold(1, 1, 100, Family::Lock, true, 0));
        assert!(t.hold(2, 1, 100, Family::Lock, true, 0));
        assert!(!t.hold(3, 1, 100, Family::Lock, true, 0), "full");
        t.drop_key(1);
        assert_eq!(t.len(), 1);
        // A renewal moves the end and does not take a second place.
        assert!(t.hold(2, 1, 300, Family::Lock, true, 50));
        assert_eq!(t.len(), 1);
        assert_eq!(t.evicted(2, 200).total(), 1);
    }

    #[test]
    fn an_eviction_names_the_sessions_of_its_live_holds_and_their_ends_forget_them() {
        let mut t = Tracker::new(100, 10);
        let s = |short: u64, token: &[u8]| Some(SessionHold { short, token: token.into() });
        assert!(t.hold_in(1, 10, (i64::MAX, Family::Lock), true, s(7, b"a"), 0));
        assert!(t.hold_in(2, 20, (i64::MAX, Family::Semaphore), false, s(7, b"p"), 0));
        assert!(t.hold_in(2, 21, (i64::MAX, Family::Semaphore), false, s(8, b"q"), 0));
        assert!(t.hold(2, 22, 1_000, Family::Semaphore, false, 0));
        assert!(t.hold_in(2, 23, (500, Family::Semaphore), false, s(9, b"r"), 0));
        let mut lost = Vec::new();
        assert_eq!(t.evicted_from(2, 600, &mut lost).holds, [0, 0, 3, 0]);
        lost.sort_by_key(|(_, s)| s.short);
        assert_eq!(lost, vec![(Family::Semaphore, s(7, b"p").unwrap()), (Family::Semaphore, s(8, b"q").unwrap())]);
        // A release, a hold granted again without its session, a new owner: no session left behind.
        t.drop_hold(1, 10);
        assert!(t.sessions.is_empty());
        assert!(t.hold_in(1, 10, (i64::MAX, Family::Lock), true, s(7, b"a"), 0));
        assert!(t.hold(1, 10, 2_000, Family::Lock, true, 0));
        assert!(t.sessions.is_empty(), "the same token without its session");
        assert!(t.hold_in(1, 10, (i64::MAX, Family::Lock), true, s(7, b"a"), 0));
        assert!(t.hold_in(1, 11, (i64::MAX, Family::Leader), true, s(8, b"b"), 0));
        assert_eq!(t.sessions.len(), 1, "a new owner of an exclusive key");
        t.drop_key(1);
        assert!(t.sessions.is_empty() && t.is_empty());
        assert!(t.hold(3, 1, 700, Family::Lock, true, 0) && t.hold(4, 1, 900, Family::Lock, true, 0));
        assert!(t.hold_in(5, 1, (i64::MAX, Family::Lock), true, s(7, b"a"), 0));
        assert_eq!(t.last_end_below(1 << 53), Some(900), "a session's hold has no end of its own");
        assert_eq!(t.last_end_below(800), Some(700));
    }

    #[test]
    fn stale_holds_are_pruned_two_per_write_and_memory_stays_bounded() {
        let mut t = Tracker::new(1 << 20, 4);
        for k in 0..1_000 {
            t.hold(k, 0, 10, Family::Lock, true, 0);
        }
        assert_eq!(t.len(), 1_000);
        // Each later hold drops two ended ones.
        for k in 1_000..1_500 {
            t.hold(k, 0, 1_000_000, Family::Lock, true, 20);
        }
        assert_eq!(t.len(), 500, "500 live ones in, the thousand stale ones out");
        for k in 1_500..2_000 {
            t.hold(k, 0, 1_000_000, Family::Lock, true, 20);
        }
        assert_eq!(t.len(), 1_000, "nothing stale left: the live thousand stay");
        // Remembered evictions are bounded too.
        for k in 1_000..1_010 {
            t.evicted(k, 30);
        }
        assert!(t.was_evicted(1_009, 0) && !t.was_evicted(1_005, 0));
        assert_eq!(t.recent.len(), 4);
        assert_eq!(t.recent_order.len(), 4);
    }
}
