//! The sessions of one node (docs/sessions.md): who is alive until when,
//! and which locks each holds. Pure bookkeeping, taking `now`; the module
//! keeps one table, replicates its changes and releases the holds.
//!
//! - A keepalive is O(1) whatever the session holds: a lookup and a new
//!   deadline. The expiry order is a lazy heap: a keepalive does not touch
//!   it; [`Sessions::expire_due`] pushes back a session whose deadline moved.
//! - Ending a session is O(1): it is marked ended and queued;
//!   [`Sessions::next_holds`] then hands out its holds a bounded slice at a
//!   time. [`Sessions::state`] tells an ended session from the moment its
//!   deadline passes, before any slice reached its holds.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};

use crate::held::SessionState;

/// A session's id: 128 random bits, issued by the server.
pub type Id = u128;

pub use crate::held::{short, SHORT_BITS};

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Its deadline passed: its locks get its lock-delay.
    Expired,
    /// `SESSION.REVOKE`: a voluntary end, no lock-delay.
    Revoked,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub at: i64,
    pub reason: Reason,
}

/// One session as [`Sessions::restore`] takes it back (from the RDB).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session<K: Ord> {
    pub id: Id,
    pub ttl: i64,
    pub lock_delay: i64,
    /// As granted or last kept alive.
    pub deadline: i64,
    pub ended: Option<Ended>,
    /// The keys it holds.
    pub holds: BTreeSet<K>,
}

/// One session as [`Sessions::iter`] shows it.
#[derive(Debug)]
pub struct View<'a, K: Ord> {
    pub ttl: i64,
    pub lock_delay: i64,
    /// Its effective deadline (see [`Sessions::info`]).
    pub deadline: i64,
    pub ended: Option<Ended>,
    /// The keys it holds (ordered: slices and listings take the first).
    pub holds: &'a BTreeSet<K>,
}

/// One session in the table, in 32 bytes (its key, the id's [`short`]
/// bits, is the map's): a node keeps one per client.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The id's high 64 bits (its bits 51 to 63 are in `bits`).
    hi: u64,
    ttl: i64,
    /// As granted or last kept alive; once ended, when it ended.
    deadline: i64,
    /// The lock-delay (16 bits: at most 60,000 ms), the id's bits 51 to
    /// 63 (13 bits) and how it ended (2 bits: 0 alive, 1 expired, 2 revoked).
    bits: u32,
    /// 1 + the index of its holds in `Sessions::holds` (0: none yet).
    holds: u32,
}

const MID_SHIFT: u32 = 16;
const STATE_SHIFT: u32 = 29;

impl Slot {
    fn new(id: Id, ttl: i64, lock_delay: i64, deadline: i64) -> Slot {
        let mid = ((id as u64) >> SHORT_BITS) as u32;
        let delay = lock_delay.clamp(0, i64::from(u16::MAX)) as u32;
        Slot { hi: (id >> 64) as u64, ttl, deadline, bits: delay | (mid << MID_SHIFT), holds: 0 }
    }

    fn id(&self, short: u64) -> Id {
        let mid = u64::from((self.bits >> MID_SHIFT) & ((1 << (64 - SHORT_BITS)) - 1));
        (u128::from(self.hi) << 64) | u128::from(short | (mid << SHORT_BITS))
    }

    fn lock_delay(&self) -> i64 {
        i64::from(self.bits & 0xffff)
    }

    fn ended(&self) -> Option<Ended> {
        let reason = match self.bits >> STATE_SHIFT {
            0 => return None,
            1 => Reason::Expired,
            _ => Reason::Revoked,
        };
        Some(Ended { at: self.deadline, reason })
    }

    fn set_ended(&mut self, at: i64, reason: Reason) {
        let state = match reason {
            Reason::Expired => 1,
            Reason::Revoked => 2,
        };
        self.bits = (self.bits & ((1 << STATE_SHIFT) - 1)) | (state << STATE_SHIFT);
        self.deadline = at;
    }
}

/// A node's sessions.
#[derive(Debug)]
pub struct Sessions<K: Ord> {
    /// Keyed by [`short`]: a lookup compares the whole id.
    map: HashMap<u64, Slot>,
    /// The holds of the sessions that have any (`Slot::holds`), and the
    /// free places.
    holds: Vec<BTreeSet<K>>,
    free: Vec<u32>,
    /// What a session without holds shows.
    none: BTreeSet<K>,
    /// Deadlines and short ids: lazy (see [`Sessions::expire_due`]).
    due: BinaryHeap<Reverse<(i64, u64)>>,
    /// Ended sessions whose holds are still to release, in end order.
    ending: VecDeque<Id>,
    /// When this node was last promoted to master: every deadline is then
    /// at least that plus its TTL (a lease is a lower bound).
    promoted_at: i64,
}

impl<K: Ord> Default for Sessions<K> {
    fn default() -> Self {
        Sessions {
            map: HashMap::new(),
            holds: Vec::new(),
            free: Vec::new(),
            none: BTreeSet::new(),
            due: BinaryHeap::new(),
            ending: VecDeque::new(),
            promoted_at: i64::MIN,
        }
    }
}

/// What [`Sessions::info`] tells of one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info<'a, K> {
    pub ttl: i64,
    pub lock_delay: i64,
    pub deadline: i64,
    pub ended: Option<Ended>,
    pub holds: usize,
    pub first: Vec<&'a K>,
}

impl<K: Ord> Sessions<K> {
    fn get(&self, id: Id) -> Option<&Slot> {
        self.map.get(&short(id)).filter(|s| s.id(short(id)) == id)
    }

    fn get_mut(&mut self, id: Id) -> Option<&mut Slot> {
        self.map.get_mut(&short(id)).filter(|s| s.id(short(id)) == id)
    }

    fn holds_of(&self, s: &Slot) -> &BTreeSet<K> {
        match s.holds {
            0 => &self.none,
            i => &self.holds[i as usize - 1],
        }
    }

    /// Whether a session here has the same [`short`] id as `id` (a new id
    /// must not).
    pub fn taken(&self, id: Id) -> bool {
        self.map.contains_key(&short(id))
    }

    /// The whole id of the session named by `short` here, if any.
    pub fn by_short(&self, short: u64) -> Option<Id> {
        self.map.get(&short).map(|s| s.id(short))
    }

    /// A live session's effective deadline.
    fn deadline(&self, s: &Slot) -> i64 {
        match s.ended() {
            Some(e) => e.at,
            None => s.deadline.max(self.promoted_at.saturating_add(s.ttl)),
        }
    }

    /// How many sessions this node has (ended ones still releasing included).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Adds a session, or (replaying a keepalive) moves its deadline.
    pub fn grant(&mut self, id: Id, ttl: i64, lock_delay: i64, deadline: i64) {
        match self.get_mut(id) {
            Some(s) if s.ended().is_none() => s.deadline = deadline,
            Some(_) => {}
            None => {
                self.drop_holds(short(id));
                self.map.insert(short(id), Slot::new(id, ttl, lock_delay, deadline));
                self.due.push(Reverse((deadline, short(id))));
            }
        }
    }

    /// Frees the holds of the session in place `short` (replaced or gone).
    fn drop_holds(&mut self, short: u64) {
        if let Some(i) = self.map.get(&short).map(|s| s.holds).filter(|&i| i > 0) {
            self.holds[i as usize - 1] = BTreeSet::new();
            self.free.push(i);
        }
    }

    /// Whether `id` is a session here (alive or ending).
    pub fn contains(&self, id: Id) -> bool {
        self.get(id).is_some()
    }

    /// Keeps `id` alive at `now`: its new deadline, or `None` when it is
    /// unknown or ended (also when its deadline has passed and no timer
    /// ended it yet). O(1).
    pub fn keepalive(&mut self, id: Id, now: i64) -> Option<i64> {
        let floor = self.promoted_at;
        let s = self.get_mut(id)?;
        let current = s.deadline.max(floor.saturating_add(s.ttl));
        if s.ended().is_some() || current <= now {
            return None;
        }
        s.deadline = now.checked_add(s.ttl)?.max(current);
        Some(s.deadline)
    }

    /// What this node knows of `id` at `now`.
    pub fn state(&self, id: Id, now: i64) -> SessionState {
        let Some(s) = self.get(id) else { return SessionState::Unknown };
        let lock_delay = s.lock_delay();
        match s.ended() {
            Some(e) => SessionState::Ended { at: e.at, lock_delay, revoked: e.reason == Reason::Revoked },
            None => {
                let at = self.deadline(s);
                if at <= now {
                    SessionState::Ended { at, lock_delay, revoked: false }
                } else {
                    SessionState::Alive { lock_delay }
                }
            }
        }
    }

    /// Ends `id` at `at`: O(1); its holds are handed out by
    /// [`Sessions::next_holds`]. False when it is unknown or ended already.
    pub fn end(&mut self, id: Id, at: i64, reason: Reason) -> bool {
        let Some(s) = self.get_mut(id) else { return false };
        if s.ended().is_some() {
            return false;
        }
        s.set_ended(at, reason);
        self.ending.push_back(id);
        true
    }

    /// Drops `id` and whatever it still lists. The queues' entries of
    /// sessions no longer here are dropped from their fronts (a replica,
    /// which never expires or slices, would otherwise keep one of each per
    /// session ever granted or ended; ends and forgets come in order).
    pub fn forget(&mut self, id: Id) {
        if self.contains(id) {
            self.drop_holds(short(id));
            self.map.remove(&short(id));
        }
        while self.ending.front().is_some_and(|&id| !self.contains(id)) {
            self.ending.pop_front();
        }
        while self.due.peek().is_some_and(|&Reverse((_, s))| !self.map.contains_key(&s)) {
            self.due.pop();
        }
    }

    /// Forgets every session (FLUSHALL).
    pub fn clear(&mut self) {
        *self = Sessions { promoted_at: self.promoted_at, ..Sessions::default() };
    }

    /// This node became a master at `now`.
    pub fn promoted(&mut self, now: i64) {
        self.promoted_at = now;
    }

    /// Notes that `id` holds `key`. O(log n) in its holds.
    pub fn attach(&mut self, id: Id, key: K) -> bool {
        if !self.get(id).is_some_and(|s| s.ended().is_none()) {
            return false;
        }
        self.holds_mut(id).is_some_and(|h| h.insert(key) | true)
    }

    /// `id`'s holds, given a place if it had none.
    fn holds_mut(&mut self, id: Id) -> Option<&mut BTreeSet<K>> {
        let i = match self.get(id)?.holds {
            0 => {
                let i = self.free.pop().unwrap_or_else(|| {
                    self.holds.push(BTreeSet::new());
                    self.holds.len() as u32
                });
                self.get_mut(id)?.holds = i;
                i
            }
            i => i,
        };
        self.holds.get_mut(i as usize - 1)
    }

    /// Notes that `id` holds `key`, whether it is alive or ended: a hold
    /// restated by an AOF rewrite's walk (an ended session's holds are
    /// still to release). False when `id` is not here. O(log n).
    pub fn restate(&mut self, id: Id, key: K) -> bool {
        self.holds_mut(id).is_some_and(|h| h.insert(key) | true)
    }

    /// Up to `max` of `id`'s holds after `after` (from the first: `None`),
    /// in order: a walk's next slice. O(log n + max).
    pub fn holds_after(&self, id: Id, after: Option<&K>, max: usize) -> Vec<&K> {
        let Some(s) = self.get(id) else { return Vec::new() };
        let holds = self.holds_of(s);
        match after {
            None => holds.iter().take(max).collect(),
            Some(k) => holds.range((std::ops::Bound::Excluded(k), std::ops::Bound::Unbounded)).take(max).collect(),
        }
    }

    /// Notes that `id` no longer holds `key`. O(log n) in its holds.
    pub fn detach(&mut self, id: Id, key: &K) {
        if let Some(i) = self.get(id).map(|s| s.holds).filter(|&i| i > 0) {
            self.holds[i as usize - 1].remove(key);
        }
    }

    /// Ends (as [`Reason::Expired`], at their deadline) the sessions whose
    /// deadline is at or before `now`, at most `max` of them (and at most
    /// `max` heap entries looked at): their ids and end times.
    pub fn expire_due(&mut self, now: i64, max: usize) -> Vec<(Id, i64)> {
        let mut out = Vec::new();
        for _ in 0..max {
            let Some(&Reverse((at, short))) = self.due.peek() else { break };
            if at > now {
                break;
            }
            self.due.pop();
            let Some(s) = self.map.get(&short) else { continue };
            if s.ended().is_some() {
                continue;
            }
            let deadline = self.deadline(s);
            if deadline > now {
                self.due.push(Reverse((deadline, short)));
                continue;
            }
            let id = s.id(short);
            self.end(id, deadline, Reason::Expired);
            out.push((id, deadline));
        }
        out
    }

    /// When [`Sessions::expire_due`] has work next (a lower bound: a
    /// session kept alive is looked at and pushed back then).
    pub fn next_due(&self) -> Option<i64> {
        self.due.peek().map(|r| r.0 .0)
    }

    /// Whether ended sessions still have holds to hand out.
    pub fn ending(&self) -> bool {
        !self.ending.is_empty()
    }

    /// Up to `max` holds of ended sessions (oldest end first), taken out of
    /// their sessions, and the sessions whose holds are all handed out now
    /// (the caller releases the holds, then forgets them): `max` of both
    /// together, so that many sessions ending with nothing left to release
    /// are forgotten a bounded number at a time too. `weight` bounds
    /// the slice by another measure (a key's bytes): it stops once
    /// `budget` is spent.
    pub fn next_holds(&mut self, max: usize, budget: usize, weight: impl Fn(&K) -> usize) -> (Vec<(Id, K)>, Vec<Id>) {
        let (mut out, mut done, mut spent) = (Vec::new(), Vec::new(), 0);
        while out.len() + done.len() < max && spent < budget {
            let Some(&id) = self.ending.front() else { break };
            let Some(i) = self.get(id).map(|s| s.holds) else {
                // Forgotten meanwhile (the master said so).
                self.ending.pop_front();
                continue;
            };
            match (i > 0).then(|| self.holds[i as usize - 1].pop_first()).flatten() {
                Some(key) => {
                    spent += weight(&key);
                    out.push((id, key));
                }
                None => {
                    self.ending.pop_front();
                    done.push(id);
                }
            }
        }
        (out, done)
    }

    /// `id` described, with its first `count` holds.
    pub fn info(&self, id: Id, count: usize) -> Option<Info<'_, K>> {
        let s = self.get(id)?;
        let holds = self.holds_of(s);
        Some(Info {
            ttl: s.ttl,
            lock_delay: s.lock_delay(),
            deadline: self.deadline(s),
            ended: s.ended(),
            holds: holds.len(),
            first: holds.iter().take(count).collect(),
        })
    }

    /// Every session: id and what it is (for the RDB, and SESSION.LIST).
    pub fn iter(&self) -> impl Iterator<Item = (Id, View<'_, K>)> {
        self.map.iter().map(|(&short, s)| {
            let view = View {
                ttl: s.ttl,
                lock_delay: s.lock_delay(),
                deadline: self.deadline(s),
                ended: s.ended(),
                holds: self.holds_of(s),
            };
            (s.id(short), view)
        })
    }

    /// Puts back a session read from the RDB, as it was saved.
    pub fn restore(&mut self, id: Id, s: Session<K>) {
        let Session { ttl, lock_delay, deadline, ended, holds, .. } = s;
        self.forget(id);
        self.drop_holds(short(id));
        let mut slot = Slot::new(id, ttl, lock_delay, deadline);
        match ended {
            Some(e) => {
                slot.set_ended(e.at, e.reason);
                self.ending.push_back(id);
            }
            None => self.due.push(Reverse((deadline, short(id)))),
        }
        self.map.insert(short(id), slot);
        if let Some(h) = self.holds_mut(id) {
            h.extend(holds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    fn table() -> Sessions<u32> {
        let mut t = Sessions::default();
        t.grant(1, 1_000, 50, NOW + 1_000);
        t.grant(2, 5_000, 0, NOW + 5_000);
        t
    }

    #[test]
    fn a_slot_keeps_the_whole_id_and_the_table_tells_ids_apart_by_all_of_it() {
        for id in [1, u128::MAX, 0x0123456789abcdef0123456789abcdef] {
            let slot = Slot::new(id, 5, 60_000, NOW);
            assert_eq!(slot.id(short(id)), id);
            assert_eq!(slot.lock_delay(), 60_000);
        }
        let mut t = table();
        let twin = 1 | (1u128 << 100);
        assert!(t.taken(twin) && !t.contains(twin), "same short id, another session");
        assert_eq!(t.state(twin, NOW), SessionState::Unknown);
        assert_eq!(t.keepalive(twin, NOW), None);
        assert!(!t.attach(twin, 5));
        assert_eq!(t.by_short(1), Some(1));
    }

    #[test]
    fn a_restated_hold_is_kept_by_an_ended_session_and_holds_walk_in_slices() {
        let mut t = table();
        assert!(t.attach(1, 10));
        assert!(t.end(1, NOW, Reason::Expired));
        assert!(!t.attach(1, 20), "an ended session takes no new hold");
        assert!(t.restate(1, 20) && t.restate(1, 10), "a restated one, twice");
        assert!(!t.restate(7, 1), "unknown");
        for k in [30, 40, 50] {
            assert!(t.restate(1, k));
        }
        assert_eq!(t.holds_after(1, None, 2), vec![&10, &20]);
        assert_eq!(t.holds_after(1, Some(&20), 2), vec![&30, &40]);
        assert_eq!(t.holds_after(1, Some(&25), 9), vec![&30, &40, &50]);
        assert!(t.holds_after(1, Some(&50), 9).is_empty());
        assert!(t.holds_after(2, None, 9).is_empty() && t.holds_after(7, None, 9).is_empty());
        let (holds, _) = t.next_holds(9, usize::MAX, |_| 1);
        assert_eq!(holds.len(), 5, "the ended session's slices release the restated holds");
    }

    #[test]
    fn keepalive_moves_only_a_live_deadline() {
        let mut t = table();
        assert_eq!(t.keepalive(1, NOW + 500), Some(NOW + 1_500));
        assert_eq!(t.state(1, NOW + 1_499), SessionState::Alive { lock_delay: 50 });
        // Its deadline passed: ended, though no timer ran yet.
        assert_eq!(t.state(1, NOW + 1_500), SessionState::Ended { at: NOW + 1_500, lock_delay: 50, revoked: false });
        assert_eq!(t.keepalive(1, NOW + 1_500), None);
        assert_eq!(t.keepalive(9, NOW), None);
        assert_eq!(t.state(9, NOW), SessionState::Unknown);
    }

    #[test]
    fn the_lazy_heap_ends_only_what_is_due() {
        let mut t = table();
        t.keepalive(1, NOW + 900);
        assert_eq!(t.expire_due(NOW + 1_000, 10), vec![]);
        assert_eq!(t.next_due(), Some(NOW + 1_900));
        assert_eq!(t.expire_due(NOW + 6_000, 10), vec![(1, NOW + 1_900), (2, NOW + 5_000)]);
        assert_eq!(t.keepalive(2, NOW + 6_000), None);
        assert!(t.ending());
    }

    #[test]
    fn ending_hands_out_holds_in_bounded_slices() {
        let mut t = table();
        for k in 0..5 {
            assert!(t.attach(1, k));
        }
        t.attach(2, 100);
        t.detach(1, &4);
        assert_eq!(t.info(1, 2).map(|i| (i.holds, i.first)), Some((4, vec![&0, &1])));
        assert!(t.end(1, NOW, Reason::Revoked));
        assert!(!t.end(1, NOW, Reason::Revoked));
        assert!(!t.attach(1, 9), "an ended session takes no new hold");
        assert_eq!(t.state(1, NOW), SessionState::Ended { at: NOW, lock_delay: 50, revoked: true });
        assert_eq!(t.next_holds(3, usize::MAX, |_| 1), (vec![(1, 0), (1, 1), (1, 2)], vec![]));
        assert_eq!(t.next_holds(3, 1, |_| 1), (vec![(1, 3)], vec![]));
        assert_eq!(t.next_holds(3, usize::MAX, |_| 1), (vec![], vec![1]));
        assert!(t.contains(1) && !t.ending(), "forgotten by the caller, once its holds are released");
        t.forget(1);
        assert_eq!(t.state(1, NOW), SessionState::Unknown);
        assert!(t.contains(2));
    }

    #[test]
    fn a_replica_that_only_applies_keeps_no_stale_entry() {
        // Granted, ended and forgotten by the master's entries, in order.
        let mut t: Sessions<u32> = Sessions::default();
        for id in 0..100 {
            t.grant(id, 1_000, 0, NOW + id as i64);
            t.attach(id, 7);
            t.end(id, NOW + id as i64, Reason::Expired);
            t.forget(id);
        }
        assert!(t.is_empty() && !t.ending() && t.next_due().is_none());
    }

    #[test]
    fn sessions_done_with_nothing_to_release_count_against_a_slice() {
        let mut t: Sessions<u32> = Sessions::default();
        for id in 0..10 {
            t.grant(id, 1_000, 0, NOW);
            t.end(id, NOW, Reason::Revoked);
        }
        assert_eq!(t.next_holds(4, usize::MAX, |_| 1), (vec![], vec![0, 1, 2, 3]));
        assert!(t.ending());
    }

    #[test]
    fn a_promotion_restarts_every_deadline_at_its_full_ttl() {
        let mut t = table();
        t.promoted(NOW + 4_000);
        assert_eq!(t.state(1, NOW + 4_999), SessionState::Alive { lock_delay: 50 });
        assert_eq!(t.expire_due(NOW + 5_000, 10), vec![(1, NOW + 5_000)]);
        assert_eq!(t.info(2, 0).map(|i| i.deadline), Some(NOW + 9_000));
        assert_eq!(t.keepalive(2, NOW + 5_000), Some(NOW + 10_000));
    }

    #[test]
    fn expiry_work_per_call_is_bounded() {
        let mut t: Sessions<u32> = Sessions::default();
        for id in 0..10 {
            t.grant(id, 1, 0, NOW);
        }
        assert_eq!(t.expire_due(NOW, 4).len(), 4);
        assert_eq!(t.expire_due(NOW, 100).len(), 6);
        t.clear();
        assert!(t.is_empty() && t.next_due().is_none());
    }
}
