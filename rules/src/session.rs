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
use std::collections::{BinaryHeap, VecDeque};

use crate::held::SessionState;
use crate::hold_key::{HoldKey, HoldRef};
use crate::hold_set::HoldSet;

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
pub struct Session {
    pub id: Id,
    pub ttl: i64,
    pub lock_delay: i64,
    /// As granted or last kept alive.
    pub deadline: i64,
    pub ended: Option<Ended>,
    /// The keys it holds.
    pub holds: HoldSet,
}

/// One session as [`Sessions::iter`] shows it.
#[derive(Debug)]
pub struct View<'a> {
    pub ttl: i64,
    pub lock_delay: i64,
    /// Its effective deadline (see [`Sessions::info`]).
    pub deadline: i64,
    pub ended: Option<Ended>,
    /// The keys it holds (in key order: slices and listings take the first).
    pub holds: &'a HoldSet,
}

/// One session in the table, in 40 bytes: a node keeps one per client.
/// The table keeps them in chunks of [`CHUNK`] (no slack beyond the last
/// chunk's), found by an index of 4-byte slot numbers.
#[derive(Clone, Copy, Debug)]
struct Slot {
    lo: u64,
    hi: u64,
    ttl: i64,
    /// As granted or last kept alive; once ended, when it ended.
    deadline: i64,
    /// The lock-delay (16 bits: at most 60,000 ms) and how it ended (2
    /// bits: 0 alive, 1 expired, 2 revoked, 3 a free slot).
    bits: u32,
    /// 1 + the index of its holds in `Sessions::holds` (0: none yet); in
    /// a free slot, 1 + the next free slot (0: none).
    holds: u32,
}

const STATE_SHIFT: u32 = 16;
const FREE: u32 = 3;
/// Slots per chunk: 40 KiB.
const CHUNK: usize = 1024;

impl Slot {
    fn new(id: Id, ttl: i64, lock_delay: i64, deadline: i64) -> Slot {
        let delay = lock_delay.clamp(0, i64::from(u16::MAX)) as u32;
        Slot { lo: id as u64, hi: (id >> 64) as u64, ttl, deadline, bits: delay, holds: 0 }
    }

    fn id(&self) -> Id {
        (u128::from(self.hi) << 64) | u128::from(self.lo)
    }

    fn short(&self) -> u64 {
        short(u128::from(self.lo))
    }

    fn lock_delay(&self) -> i64 {
        i64::from(self.bits & 0xffff)
    }

    fn free(&self) -> bool {
        self.bits >> STATE_SHIFT == FREE
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
pub struct Sessions {
    /// The sessions' slots, in chunks of [`CHUNK`] (the first grows up to
    /// it), and 1 + the first free slot (0: none).
    slots: Vec<Vec<Slot>>,
    vacant: u32,
    /// Open addressing by [`short`] (linear probing, at most 3/4 full):
    /// 1 + a slot's number, 0 empty. A lookup compares the whole id.
    index: Vec<u32>,
    count: usize,
    /// The holds of the sessions that have any (`Slot::holds`), in
    /// chunks as the slots, and the free places.
    holds: Vec<Vec<HoldSet>>,
    free: Vec<u32>,
    /// What a session without holds shows.
    none: HoldSet,
    /// Deadlines and short ids: lazy (see [`Sessions::expire_due`]).
    due: BinaryHeap<Reverse<(i64, u64)>>,
    /// Ended sessions whose holds are still to release, in end order.
    ending: VecDeque<Id>,
    /// When this node was last promoted to master: every deadline is then
    /// at least that plus its TTL (a lease is a lower bound).
    promoted_at: i64,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            slots: Vec::new(),
            vacant: 0,
            index: Vec::new(),
            count: 0,
            holds: Vec::new(),
            free: Vec::new(),
            none: HoldSet::default(),
            due: BinaryHeap::new(),
            ending: VecDeque::new(),
            promoted_at: i64::MIN,
        }
    }
}

/// A step of [`Sessions::walk_from`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotWalk {
    /// The session `id`, in `slot` (the next step starts after it).
    At { slot: usize, id: Id },
    /// Free slots only, up to `next` (where the next step starts).
    Skipped { next: usize },
    /// No slot after.
    End,
}

/// What [`Sessions::info`] tells of one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info<'a> {
    pub ttl: i64,
    pub lock_delay: i64,
    pub deadline: i64,
    pub ended: Option<Ended>,
    pub holds: usize,
    pub first: Vec<HoldRef<'a>>,
}

/// Where a short id's search starts in an index of `len` (a power of two).
fn home(short: u64, len: usize) -> usize {
    (short.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - len.trailing_zeros())) as usize
}

impl Sessions {
    fn slot(&self, i: u32) -> &Slot {
        &self.slots[i as usize / CHUNK][i as usize % CHUNK]
    }

    fn slot_mut(&mut self, i: u32) -> &mut Slot {
        &mut self.slots[i as usize / CHUNK][i as usize % CHUNK]
    }

    /// The index position and slot of the session named by `short`.
    fn find(&self, short: u64) -> Option<(usize, u32)> {
        if self.index.is_empty() {
            return None;
        }
        let mask = self.index.len() - 1;
        let mut at = home(short, self.index.len());
        loop {
            let i = self.index[at].checked_sub(1)?;
            if self.slot(i).short() == short {
                return Some((at, i));
            }
            at = (at + 1) & mask;
        }
    }

    /// The slot of `id` (its whole id compared).
    fn get(&self, id: Id) -> Option<u32> {
        self.find(short(id)).map(|(_, i)| i).filter(|&i| self.slot(i).id() == id)
    }

    fn place(&mut self, i: u32) {
        let len = self.index.len();
        if (self.count + 1) * 4 > len * 3 {
            let old = std::mem::replace(&mut self.index, vec![0; (len * 2).max(8)]);
            for e in old.into_iter().filter(|&e| e > 0) {
                self.put(e);
            }
        }
        self.put(i + 1);
        self.count += 1;
    }

    fn put(&mut self, e: u32) {
        let mask = self.index.len() - 1;
        let mut at = home(self.slot(e - 1).short(), self.index.len());
        while self.index[at] != 0 {
            at = (at + 1) & mask;
        }
        self.index[at] = e;
    }

    /// Empties index position `at`, moving back the entries after it
    /// that their search would no longer reach.
    fn unplace(&mut self, at: usize) {
        let mask = self.index.len() - 1;
        let (mut hole, mut j) = (at, at);
        loop {
            j = (j + 1) & mask;
            let e = self.index[j];
            if e == 0 {
                break;
            }
            let h = home(self.slot(e - 1).short(), self.index.len());
            if j.wrapping_sub(h) & mask >= j.wrapping_sub(hole) & mask {
                self.index[hole] = e;
                hole = j;
            }
        }
        self.index[hole] = 0;
        self.count -= 1;
    }

    /// A slot for a new session: a free one, or one more.
    fn new_slot(&mut self, slot: Slot) -> u32 {
        if let Some(i) = self.vacant.checked_sub(1) {
            self.vacant = self.slot(i).holds;
            *self.slot_mut(i) = slot;
            return i;
        }
        if self.slots.last().map_or(true, |c| c.len() == CHUNK) {
            let first = self.slots.is_empty();
            self.slots.push(if first { Vec::new() } else { Vec::with_capacity(CHUNK) });
        }
        let n = self.slots.len() - 1;
        let chunk = &mut self.slots[n];
        chunk.push(slot);
        (n * CHUNK + chunk.len() - 1) as u32
    }

    /// Drops the session at index position `at`, slot `i`: its slot is free.
    fn vacate(&mut self, at: usize, i: u32) {
        self.drop_holds(i);
        self.unplace(at);
        let vacant = self.vacant;
        let s = self.slot_mut(i);
        s.bits = FREE << STATE_SHIFT;
        s.holds = vacant;
        self.vacant = i + 1;
    }

    /// The holds at place `h` (1-based).
    fn set(&self, h: u32) -> &HoldSet {
        let h = h as usize - 1;
        &self.holds[h / CHUNK][h % CHUNK]
    }

    fn set_mut(&mut self, h: u32) -> &mut HoldSet {
        let h = h as usize - 1;
        &mut self.holds[h / CHUNK][h % CHUNK]
    }

    fn holds_of(&self, s: &Slot) -> &HoldSet {
        match s.holds {
            0 => &self.none,
            h => self.set(h),
        }
    }

    /// Whether a session here has the same [`short`] id as `id` (a new id
    /// must not).
    pub fn taken(&self, id: Id) -> bool {
        self.find(short(id)).is_some()
    }

    /// The whole id of the session named by `short` here, if any.
    pub fn by_short(&self, short: u64) -> Option<Id> {
        self.find(short).map(|(_, i)| self.slot(i).id())
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
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds a session, or (replaying a keepalive) moves its deadline.
    pub fn grant(&mut self, id: Id, ttl: i64, lock_delay: i64, deadline: i64) {
        match self.find(short(id)) {
            Some((_, i)) if self.slot(i).id() == id => {
                let s = self.slot_mut(i);
                if s.ended().is_none() {
                    s.deadline = deadline;
                }
                return;
            }
            // Another session of the same short id: replaced.
            Some((_, i)) => {
                self.drop_holds(i);
                *self.slot_mut(i) = Slot::new(id, ttl, lock_delay, deadline);
            }
            None => {
                let i = self.new_slot(Slot::new(id, ttl, lock_delay, deadline));
                self.place(i);
            }
        }
        self.due.push(Reverse((deadline, short(id))));
    }

    /// Frees the holds of the session in slot `i` (replaced or gone).
    fn drop_holds(&mut self, i: u32) {
        let h = std::mem::take(&mut self.slot_mut(i).holds);
        if h > 0 {
            *self.set_mut(h) = HoldSet::default();
            self.free.push(h);
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
        let i = self.get(id)?;
        let s = self.slot_mut(i);
        let current = s.deadline.max(floor.saturating_add(s.ttl));
        if s.ended().is_some() || current <= now {
            return None;
        }
        s.deadline = now.checked_add(s.ttl)?.max(current);
        Some(s.deadline)
    }

    /// What this node knows of `id` at `now`.
    pub fn state(&self, id: Id, now: i64) -> SessionState {
        let Some(i) = self.get(id) else { return SessionState::Unknown };
        let s = self.slot(i);
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
        let Some(i) = self.get(id) else { return false };
        let s = self.slot_mut(i);
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
        if let Some((at, i)) = self.find(short(id)).filter(|&(_, i)| self.slot(i).id() == id) {
            self.vacate(at, i);
        }
        while self.ending.front().is_some_and(|&id| !self.contains(id)) {
            self.ending.pop_front();
        }
        while self.due.peek().is_some_and(|&Reverse((_, s))| self.find(s).is_none()) {
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
    pub fn attach(&mut self, id: Id, key: HoldKey) -> bool {
        let Some(i) = self.get(id).filter(|&i| self.slot(i).ended().is_none()) else { return false };
        self.holds_mut(i).insert(&key);
        true
    }

    /// The holds of slot `i`, given a place if it had none.
    fn holds_mut(&mut self, i: u32) -> &mut HoldSet {
        let h = match self.slot(i).holds {
            0 => {
                let h = match self.free.pop() {
                    Some(h) => h,
                    None => {
                        if self.holds.last().map_or(true, |c| c.len() == CHUNK) {
                            let first = self.holds.is_empty();
                            self.holds.push(if first { Vec::new() } else { Vec::with_capacity(CHUNK) });
                        }
                        let n = self.holds.len() - 1;
                        self.holds[n].push(HoldSet::default());
                        (n * CHUNK + self.holds[n].len()) as u32
                    }
                };
                self.slot_mut(i).holds = h;
                h
            }
            h => h,
        };
        self.set_mut(h)
    }

    /// Notes that `id` holds `key`, whether it is alive or ended: a hold
    /// restated by an AOF rewrite's walk (an ended session's holds are
    /// still to release). False when `id` is not here. O(log n).
    pub fn restate(&mut self, id: Id, key: HoldKey) -> bool {
        let Some(i) = self.get(id) else { return false };
        self.holds_mut(i).insert(&key);
        true
    }

    /// Up to `max` of `id`'s holds after `after` (from the first: `None`),
    /// in order: a walk's next slice. O(log n + max).
    pub fn holds_after(&self, id: Id, after: Option<&HoldKey>, max: usize) -> Vec<HoldRef<'_>> {
        let Some(i) = self.get(id) else { return Vec::new() };
        self.holds_of(self.slot(i)).after(after).take(max).collect()
    }

    /// Whether `id` holds `key`. O(log n) in its holds.
    pub fn holds(&self, id: Id, key: &HoldKey) -> bool {
        self.get(id).is_some_and(|i| self.holds_of(self.slot(i)).contains(key))
    }

    /// Notes that `id` no longer holds `key`. O(log n) in its holds.
    pub fn detach(&mut self, id: Id, key: &HoldKey) {
        if let Some(h) = self.get(id).map(|i| self.slot(i).holds).filter(|&h| h > 0) {
            self.set_mut(h).remove(key);
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
            let Some((_, i)) = self.find(short) else { continue };
            let s = self.slot(i);
            if s.ended().is_some() {
                continue;
            }
            let deadline = self.deadline(s);
            if deadline > now {
                self.due.push(Reverse((deadline, short)));
                continue;
            }
            let id = s.id();
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
    /// their sessions in key order, and the sessions whose holds are all
    /// handed out now (the caller releases the holds, then forgets them):
    /// `max` of both together, so that many sessions ending with nothing
    /// left to release are forgotten a bounded number at a time too.
    /// `weight` bounds the slice by another measure (a key's bytes): it
    /// stops once `budget` is spent.
    pub fn next_holds(
        &mut self,
        max: usize,
        budget: usize,
        weight: impl Fn(&HoldKey) -> usize,
    ) -> (Vec<(Id, HoldKey)>, Vec<Id>) {
        let (mut out, mut done, mut spent) = (Vec::new(), Vec::new(), 0);
        while out.len() + done.len() < max && spent < budget {
            let Some(&id) = self.ending.front() else { break };
            let Some(h) = self.get(id).map(|i| self.slot(i).holds) else {
                // Forgotten meanwhile (the master said so).
                self.ending.pop_front();
                continue;
            };
            match (h > 0).then(|| self.set_mut(h).pop_first()).flatten() {
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

    /// `id` described, with its first `count` holds (in key order).
    pub fn info(&self, id: Id, count: usize) -> Option<Info<'_>> {
        let s = self.slot(self.get(id)?);
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
    pub fn iter(&self) -> impl Iterator<Item = (Id, View<'_>)> {
        self.slots.iter().flatten().filter(|s| !s.free()).map(|s| {
            let view = View {
                ttl: s.ttl,
                lock_delay: s.lock_delay(),
                deadline: self.deadline(s),
                ended: s.ended(),
                holds: self.holds_of(s),
            };
            (s.id(), view)
        })
    }

    /// The first session in slot `from` or after, looking at `max` slots
    /// at most (at least one): a walk over every session in bounded steps
    /// (an AOF rewrite's), whatever changes between them. A session keeps
    /// its slot while it is here, so one here before and after the walk
    /// passes its slot is found once; one dropped before is not found; one
    /// added meanwhile may be found or not (it may take a free slot behind
    /// the walk). O(`max`).
    pub fn walk_from(&self, from: usize, max: usize) -> SlotWalk {
        let end = self.slots.len().saturating_sub(1) * CHUNK + self.slots.last().map_or(0, Vec::len);
        let until = from.saturating_add(max.max(1)).min(end);
        for i in from..until {
            let s = &self.slots[i / CHUNK][i % CHUNK];
            if !s.free() {
                return SlotWalk::At { slot: i, id: s.id() };
            }
        }
        match until < end {
            true => SlotWalk::Skipped { next: until },
            false => SlotWalk::End,
        }
    }

    /// Puts back a session read from the RDB, as it was saved.
    pub fn restore(&mut self, id: Id, s: Session) {
        let Session { ttl, lock_delay, deadline, ended, holds, .. } = s;
        self.forget(id);
        // (Another session of the same short id is replaced.)
        if let Some((at, i)) = self.find(short(id)) {
            self.vacate(at, i);
        }
        let mut slot = Slot::new(id, ttl, lock_delay, deadline);
        match ended {
            Some(e) => {
                slot.set_ended(e.at, e.reason);
                self.ending.push_back(id);
            }
            None => self.due.push(Reverse((deadline, short(id)))),
        }
        let i = self.new_slot(slot);
        self.place(i);
        if !holds.is_empty() {
            *self.holds_mut(i) = holds;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    /// Hold `n`: key names in the order of `n`.
    fn k(n: u32) -> HoldKey {
        HoldKey::new(0, format!("{n:03}").as_bytes(), None)
    }

    fn table() -> Sessions {
        let mut t = Sessions::default();
        t.grant(1, 1_000, 50, NOW + 1_000);
        t.grant(2, 5_000, 0, NOW + 5_000);
        t
    }

    #[test]
    fn a_slot_keeps_the_whole_id_and_the_table_tells_ids_apart_by_all_of_it() {
        for id in [1, u128::MAX, 0x0123456789abcdef0123456789abcdef] {
            let slot = Slot::new(id, 5, 60_000, NOW);
            assert_eq!(slot.id(), id);
            assert_eq!(slot.lock_delay(), 60_000);
        }
        let mut t = table();
        let twin = 1 | (1u128 << 100);
        assert!(t.taken(twin) && !t.contains(twin), "same short id, another session");
        assert_eq!(t.state(twin, NOW), SessionState::Unknown);
        assert_eq!(t.keepalive(twin, NOW), None);
        assert!(!t.attach(twin, k(5)));
        assert_eq!(t.by_short(1), Some(1));
    }

    #[test]
    fn a_restated_hold_is_kept_by_an_ended_session_and_holds_walk_in_slices() {
        let mut t = table();
        assert!(t.attach(1, k(10)));
        assert!(t.end(1, NOW, Reason::Expired));
        assert!(!t.attach(1, k(20)), "an ended session takes no new hold");
        assert!(t.restate(1, k(20)) && t.restate(1, k(10)), "a restated one, twice");
        assert!(!t.restate(7, k(1)), "unknown");
        for n in [30, 40, 50] {
            assert!(t.restate(1, k(n)));
        }
        let after = |t: &Sessions, a: Option<u32>, max| -> Vec<HoldKey> {
            t.holds_after(1, a.map(k).as_ref(), max).iter().map(|h| h.to_key()).collect()
        };
        assert_eq!(after(&t, None, 2), vec![k(10), k(20)]);
        assert_eq!(after(&t, Some(20), 2), vec![k(30), k(40)]);
        assert_eq!(after(&t, Some(25), 9), vec![k(30), k(40), k(50)]);
        assert!(after(&t, Some(50), 9).is_empty());
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
        for n in (0..5).rev() {
            assert!(t.attach(1, k(n)));
        }
        t.attach(2, k(100));
        t.detach(1, &k(4));
        assert_eq!(t.info(1, 2).map(|i| (i.holds, i.first)), Some((4, vec![k(0).as_hold(), k(1).as_hold()])));
        assert!(t.end(1, NOW, Reason::Revoked));
        assert!(!t.end(1, NOW, Reason::Revoked));
        assert!(!t.attach(1, k(9)), "an ended session takes no new hold");
        assert_eq!(t.state(1, NOW), SessionState::Ended { at: NOW, lock_delay: 50, revoked: true });
        assert_eq!(t.next_holds(3, usize::MAX, |_| 1), (vec![(1, k(0)), (1, k(1)), (1, k(2))], vec![]));
        assert_eq!(t.next_holds(3, 1, |_| 1), (vec![(1, k(3))], vec![]));
        assert_eq!(t.next_holds(3, usize::MAX, |_| 1), (vec![], vec![1]));
        assert!(t.contains(1) && !t.ending(), "forgotten by the caller, once its holds are released");
        t.forget(1);
        assert_eq!(t.state(1, NOW), SessionState::Unknown);
        assert!(t.contains(2));
    }

    #[test]
    fn a_replica_that_only_applies_keeps_no_stale_entry() {
        // Granted, ended and forgotten by the master's entries, in order.
        let mut t: Sessions = Sessions::default();
        for id in 0..100 {
            t.grant(id, 1_000, 0, NOW + id as i64);
            t.attach(id, k(7));
            t.end(id, NOW + id as i64, Reason::Expired);
            t.forget(id);
        }
        assert!(t.is_empty() && !t.ending() && t.next_due().is_none());
    }

    #[test]
    fn sessions_done_with_nothing_to_release_count_against_a_slice() {
        let mut t: Sessions = Sessions::default();
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
        let mut t: Sessions = Sessions::default();
        for id in 0..10 {
            t.grant(id, 1, 0, NOW);
        }
        assert_eq!(t.expire_due(NOW, 4).len(), 4);
        assert_eq!(t.expire_due(NOW, 100).len(), 6);
        t.clear();
        assert!(t.is_empty() && t.next_due().is_none());
    }

    #[test]
    fn many_sessions_granted_and_forgotten_keep_their_index_and_slots_right() {
        let mut t = Sessions::default();
        let id = |n: u64| (u128::from(n) << 70) | u128::from(n.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 13);
        for n in 0..5_000 {
            t.grant(id(n), 1_000, 0, NOW);
        }
        for n in (0..5_000).filter(|n| n % 3 != 0) {
            t.forget(id(n));
        }
        // Holds in more than one chunk, their places freed and taken again.
        for n in 5_000..8_000 {
            t.grant(id(n), 1_000, 7, NOW);
            t.attach(id(n), k(n as u32));
        }
        for n in (5_000..8_000).filter(|n| n % 2 == 1) {
            t.forget(id(n));
        }
        for n in 8_000..9_000 {
            t.grant(id(n), 1_000, 7, NOW);
            t.attach(id(n), k(n as u32));
        }
        let alive: Vec<u64> =
            (0..9_000).filter(|&n| if n < 5_000 { n % 3 == 0 } else { n >= 8_000 || n % 2 == 0 }).collect();
        assert_eq!(t.len(), alive.len());
        for n in 0..9_000u64 {
            assert_eq!(t.contains(id(n)), alive.contains(&n), "{n}");
            if n >= 5_000 && alive.contains(&n) {
                assert_eq!(t.info(id(n), 5).map(|i| i.first), Some(vec![k(n as u32).as_hold()]), "{n}");
            }
        }
        assert_eq!(t.holds.iter().map(Vec::len).sum::<usize>(), 3_000, "places freed were taken again");
        assert_eq!(t.by_short(short(id(5_500))), Some(id(5_500)));
        let mut listed: Vec<Id> = t.iter().map(|(id, _)| id).collect();
        listed.sort_unstable();
        let mut want: Vec<Id> = alive.iter().map(|&n| id(n)).collect();
        want.sort_unstable();
        assert_eq!(listed, want);
        // Slots freed were taken again: never more than 5,000 sessions at once.
        assert_eq!(t.slots.len(), 5_000usize.div_ceil(CHUNK));
    }

    /// Every session by [`Sessions::walk_from`] steps of at most `max` slots.
    fn walked(t: &Sessions, from: usize, max: usize) -> (Vec<Id>, usize) {
        let (mut at, mut ids, mut steps) = (from, Vec::new(), 0);
        loop {
            steps += 1;
            match t.walk_from(at, max) {
                SlotWalk::At { slot, id } => {
                    assert!(slot >= at && slot < at + max, "{slot} within {max} of {at}");
                    ids.push(id);
                    at = slot + 1;
                }
                SlotWalk::Skipped { next } => {
                    assert_eq!(next, at + max, "a step looks at {max} slots");
                    at = next;
                }
                SlotWalk::End => return (ids, steps),
            }
        }
    }

    #[test]
    fn a_walk_over_the_slots_finds_each_session_once_in_bounded_steps() {
        let mut t = Sessions::default();
        assert_eq!(t.walk_from(0, 10), SlotWalk::End);
        for id in 1..=3_000 {
            t.grant(id, 1_000, 0, NOW);
        }
        // A long run of free slots across chunks.
        for id in 100..=2_900 {
            t.forget(id);
        }
        let (ids, steps) = walked(&t, 0, 64);
        assert_eq!(ids, (1..100).chain(2_901..=3_000).collect::<Vec<Id>>());
        assert!(steps <= 200 + 2_801 / 64 + 2, "{steps} steps");
        // Changes between steps: the walk is past slot 50 (session 51).
        t.forget(60);
        t.end(70, NOW, Reason::Revoked);
        t.grant(5_000, 1_000, 0, NOW);
        t.grant(5_001, 1_000, 0, NOW);
        let (rest, _) = walked(&t, 50, 1_000);
        assert!(!rest.contains(&60) && rest.contains(&70), "gone is not found, ended is");
        let expected: Vec<Id> = (51..100).filter(|&i| i != 60).chain(2_901..=3_000).collect();
        assert!(expected.iter().all(|id| rest.contains(id)), "every session still here");
        assert_eq!(rest.iter().filter(|&&i| i == 5_000 || i == 5_001).count(), 2, "new ones in free slots after");
        assert_eq!(t.walk_from(usize::MAX - 1, 5), SlotWalk::End, "past the end");
    }

    #[test]
    fn a_restored_session_takes_its_holds_and_replaces_its_short_twin() {
        let mut t = table();
        let twin = 1 | (1u128 << 100);
        let holds = [k(2), k(1)].into_iter().collect();
        let s = Session { id: twin, ttl: 10, lock_delay: 3, deadline: NOW, ended: None, holds };
        t.restore(twin, s.clone());
        assert!(t.contains(twin) && !t.contains(1) && t.len() == 2);
        let view = t.iter().find(|(id, _)| *id == twin).map(|(_, v)| v.holds.clone());
        assert_eq!(view, Some(s.holds));
    }
}
