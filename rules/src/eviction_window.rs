//! The eviction window (issue 29's last gap): holds the module gave while
//! the server could not evict are in no table ([`crate::eviction::Tracker`]
//! tracks only what it wrote while eviction was possible), and a
//! bare-token lock value is indistinguishable from any string. So instead
//! of tracking each such hold, the module keeps one number, the latest
//! lease end it gave while untracked ([`extend`]): while a later eviction
//! happens before it ([`open`]), an evicted key the table does not know
//! may have been such a lock, and is counted, logged and remembered
//! ([`Unverified`]) — over-counting a cache key evicted then, never
//! missing a lock.
//!
//! A session-held hold's lease is its session's deadline, moved by each
//! keepalive: [`Sessions`] remembers the sessions that held something
//! while the settings could not evict, so that their keepalives go on
//! extending the window afterwards.

use std::collections::{HashMap, VecDeque};

use crate::eviction::Evicted;

/// A lease end at or beyond this is a session's hold (a session-held
/// holder's place is scored 2^53, a persistent key's end is `i64::MAX`):
/// its session's deadline is its lease ([`Sessions`]), not this number.
pub const SESSION_HELD: i64 = 1 << 53;

/// How long after the window's end an evicted key is still answered for
/// (`LOCK.EVICTED`): a holder asks after its renewal or release failed,
/// which may come a little after its lease end.
pub const GRACE_MS: i64 = 60_000;

/// The window's new end once a hold with lease end `at` was given
/// untracked: `None` when it does not move (an earlier end, or a
/// session's hold).
#[inline(always)]
pub fn extend(until: i64, at: i64) -> Option<i64> {
    (at > until && at < SESSION_HELD).then_some(at)
}

/// Whether an eviction at `now` may have taken an untracked live hold.
pub fn open(until: i64, now: i64) -> bool {
    now < until
}

/// Whether the keys evicted in the window are old news at `now`: every
/// hold they may have taken ended [`GRACE_MS`] ago.
pub fn stale(until: i64, now: i64) -> bool {
    now >= until.saturating_add(GRACE_MS)
}

/// Tokens granted an evicted key since, per key, at most; beyond, the key
/// is forgotten (its holder is then told a plain loss, never a wrong one).
const GRANTED_CAP: usize = 16;

/// Keys (database and name hash) evicted while the window was open and
/// not known to the table: any token's hold of one was lost to that
/// eviction, unless the token was granted the key again since. Each is
/// answered for until [`GRACE_MS`] after its horizon (the window's end
/// at its eviction: every hold it may have taken had ended by then), and
/// only the last `cap` are kept.
#[derive(Debug)]
pub struct Unverified {
    /// Key → tokens granted it since, and its horizon.
    keys: HashMap<u64, (Vec<u64>, i64)>,
    /// (key, horizon) in eviction order, so horizons never decrease; a
    /// key evicted again has a later entry (the earlier one is skipped).
    order: VecDeque<(u64, i64)>,
    cap: usize,
}

impl Unverified {
    pub fn new(cap: usize) -> Unverified {
        Unverified { keys: HashMap::new(), order: VecDeque::new(), cap }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// `key` was evicted in the window, whose end is `horizon` (again:
    /// who was granted it since the last time holds it no more).
    pub fn evicted(&mut self, key: u64, horizon: i64) {
        if self.cap == 0 {
            return;
        }
        self.keys.insert(key, (Vec::new(), horizon));
        self.order.push_back((key, horizon));
        while self.keys.len() > self.cap || self.order.len() > 2 * self.cap {
            self.pop();
        }
    }

    fn pop(&mut self) {
        if let Some((key, horizon)) = self.order.pop_front() {
            if self.keys.get(&key).is_some_and(|e| e.1 == horizon) {
                self.keys.remove(&key);
            }
        }
    }

    /// Forgets the keys whose horizon is [`GRACE_MS`] past at `now`.
    pub fn prune(&mut self, now: i64) {
        while self.order.front().is_some_and(|&(_, horizon)| stale(horizon, now)) {
            self.pop();
        }
    }

    /// `token` was granted `key` after its eviction: a later loss of that
    /// hold is not the eviction's.
    pub fn granted(&mut self, key: u64, token: u64) {
        let Some((granted, _)) = self.keys.get_mut(&key) else { return };
        if granted.contains(&token) {
            return;
        }
        if granted.len() < GRANTED_CAP {
            granted.push(token);
        } else {
            // Its order entry is skipped when it comes first.
            self.keys.remove(&key);
        }
    }

    /// Whether `token`'s hold of `key` may have been lost to an eviction
    /// in the window, asked at `now`.
    pub fn was_evicted(&self, key: u64, token: u64, now: i64) -> bool {
        self.keys.get(&key).is_some_and(|(g, horizon)| !stale(*horizon, now) && !g.contains(&token))
    }
}

/// Sessions that held something while the settings could not evict, with
/// their deadline: a keepalive of one extends the window even once the
/// server can evict (its holds are in no table). Ended ones are pruned
/// when the map doubles.
#[derive(Debug, Default)]
pub struct Sessions {
    deadlines: HashMap<u128, i64>,
    pruned_len: usize,
}

impl Sessions {
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }

    /// Session `id`, holding something (`holds`) until `deadline`, was
    /// kept alive or attached a hold at `now`; `evictable`: the settings
    /// can evict now (holds attached then are tracked). Whether its
    /// deadline extends the window.
    pub fn lease(&mut self, id: u128, deadline: i64, holds: bool, evictable: bool, now: i64) -> bool {
        if !holds {
            self.deadlines.remove(&id);
            return false;
        }
        if let Some(d) = self.deadlines.get_mut(&id) {
            *d = deadline;
            return true;
        }
        if evictable {
            return false;
        }
        self.deadlines.insert(id, deadline);
        if self.deadlines.len() > 64.max(2 * self.pruned_len) {
            self.deadlines.retain(|_, &mut d| d > now);
            self.pruned_len = self.deadlines.len();
        }
        true
    }
}

const FAMILY_NAMES: [&str; 4] = ["lock", "leader", "semaphore holder", "read-write holder"];

/// The log line of one evicted key `name` (db `db`, under `policy`): the
/// tracked holds it took (`lost`), and `unverified`: the window's end when
/// it may also have taken holds given untracked.
pub fn lost_line(name: &str, db: i32, policy: &str, lost: &Evicted, unverified: Option<i64>) -> String {
    let what: Vec<String> = lost
        .holds
        .iter()
        .zip(FAMILY_NAMES)
        .filter(|(&n, _)| n > 0)
        .map(|(n, f)| format!("{n} {f}{}", if *n == 1 { "" } else { "s" }))
        .collect();
    let head = format!("lock: key {name:?} (db {db}) was evicted (maxmemory-policy {policy})");
    let maybe = |until: i64| {
        format!(
            "holds granted while Redis could not evict, which no table tracks, may have been live until {until} (Unix ms): if this key held one, its holder lost mutual exclusion; counted in lock_evicted_unverified, and LOCK.EVICTED answers 1 for the key to any token not granted it since"
        )
    };
    match (what.is_empty(), unverified) {
        (false, None) => format!(
            "{head} while held: {} lost mutual exclusion; the next caller can acquire it at once",
            what.join(", ")
        ),
        (false, Some(until)) => {
            format!("{head} while held: {} lost mutual exclusion, and other {}", what.join(", "), maybe(until))
        }
        (true, Some(until)) => format!("{head}, not a hold the module tracks, but {}", maybe(until)),
        (true, None) => format!("{head}: no hold lost"),
    }
}

/// The line summing, a second later, the evictions not logged one by one:
/// `held` tracked holds, and `keys` evicted in the window.
pub fn suppressed_line(held: u64, keys: u64, policy: &str) -> String {
    format!(
        "lock: {held} more held locks or holders were evicted in the last second (maxmemory-policy {policy}), each counted in INFO lock (lock_evicted_*) and known to LOCK.EVICTED but not logged one by one; and {keys} more evicted keys may have been locks granted before Redis could evict (lock_evicted_unverified)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_the_latest_finite_lease_given_untracked() {
        assert_eq!(extend(0, 1_000), Some(1_000));
        assert_eq!(extend(1_000, 900), None, "an earlier end moves nothing");
        assert_eq!(extend(1_000, SESSION_HELD), None, "a session's place: its deadline is the lease");
        assert_eq!(extend(1_000, i64::MAX), None, "a persistent session-held key");
        assert!(open(1_000, 999) && !open(1_000, 1_000));
        assert!(!stale(1_000, 1_000 + GRACE_MS - 1) && stale(1_000, 1_000 + GRACE_MS));
        assert!(!stale(i64::MAX, 0), "no overflow");
    }

    #[test]
    fn an_evicted_key_answers_for_every_token_but_those_granted_since() {
        let mut u = Unverified::new(3);
        u.evicted(1, 100);
        assert!(u.was_evicted(1, 10, 0) && u.was_evicted(1, 11, 0));
        assert!(!u.was_evicted(2, 10, 0));
        u.granted(1, 11);
        assert!(u.was_evicted(1, 10, 0) && !u.was_evicted(1, 11, 0), "11's hold came after the eviction");
        u.evicted(1, 100);
        assert!(u.was_evicted(1, 11, 0), "evicted again: 11's new hold was lost too");
        assert_eq!(u.len(), 1);
        for k in 2..5 {
            u.evicted(k, 100);
        }
        assert_eq!(u.len(), 3);
        assert!(!u.was_evicted(1, 10, 0), "the oldest went first");
        // Past the cap of tokens granted since, the key is forgotten: a
        // plain loss, never a wrong "evicted".
        for t in 0..=GRANTED_CAP as u64 {
            u.granted(4, t);
        }
        assert!(!u.was_evicted(4, 1_000, 0));
        assert_eq!(u.len(), 2);
        u.granted(9, 1);
        assert_eq!(u.len(), 2, "a key never evicted is not added");
    }

    #[test]
    fn an_evicted_key_is_answered_for_until_its_horizon_is_long_past() {
        let mut u = Unverified::new(10);
        u.evicted(1, 1_000);
        u.evicted(2, 5_000);
        assert!(u.was_evicted(1, 7, 1_000 + GRACE_MS - 1));
        assert!(!u.was_evicted(1, 7, 1_000 + GRACE_MS), "every hold it may have taken ended a minute ago");
        u.prune(1_000 + GRACE_MS);
        assert_eq!(u.len(), 1);
        assert!(u.was_evicted(2, 7, 1_000 + GRACE_MS));
        // Evicted again later: its new horizon counts, its old entry is skipped.
        u.evicted(2, 9_000);
        u.prune(5_000 + GRACE_MS);
        assert!(u.was_evicted(2, 7, 5_000 + GRACE_MS));
        u.prune(9_000 + GRACE_MS);
        assert!(u.is_empty());
        // Re-evicting one key never grows the order past twice the cap.
        for h in 0..100 {
            u.evicted(3, h);
        }
        assert!(u.order.len() <= 20 && u.len() == 1);
    }

    #[test]
    fn sessions_holding_before_eviction_keep_the_window_open() {
        let mut s = Sessions::default();
        assert!(s.lease(1, 500, true, false, 0), "a hold attached while nothing could be evicted");
        assert!(!s.lease(2, 500, true, true, 0), "attached while evictable: tracked, not in the window");
        assert!(!s.lease(3, 500, false, false, 0), "a session holding nothing");
        assert!(s.lease(1, 900, true, true, 100), "its keepalives go on extending it");
        assert!(!s.lease(1, 900, false, true, 200), "released everything");
        assert!(!s.lease(1, 1_000, true, true, 300), "and is forgotten");
        // Ended sessions do not accumulate.
        for id in 0..10_000u128 {
            s.lease(100 + id, 10, true, false, 20);
        }
        assert!(s.len() <= 200, "{}", s.len());
    }

    #[test]
    fn the_lines_say_what_was_lost_and_what_may_have_been() {
        let mut lost = Evicted::default();
        lost.holds[2] = 2;
        let l = lost_line("s", 0, "allkeys-lru", &lost, None);
        assert!(l.starts_with("lock: key \"s\" (db 0) was evicted (maxmemory-policy allkeys-lru) while held: 2 semaphore holders lost mutual exclusion"), "{l}");
        let l = lost_line("s", 0, "allkeys-lru", &lost, Some(1_234));
        assert!(
            l.contains(
                "2 semaphore holders lost mutual exclusion, and other holds granted while Redis could not evict"
            ),
            "{l}"
        );
        assert!(l.contains("until 1234 (Unix ms)") && l.contains("lock_evicted_unverified"), "{l}");
        let l = lost_line("k", 3, "volatile-ttl", &Evicted::default(), Some(9));
        assert!(l.starts_with("lock: key \"k\" (db 3) was evicted (maxmemory-policy volatile-ttl), not a hold the module tracks, but holds granted"), "{l}");
        let l = suppressed_line(4, 7, "allkeys-lru");
        assert!(
            l.starts_with("lock: 4 more held locks") && l.contains("and 7 more evicted keys may have been locks"),
            "{l}"
        );
    }
}
