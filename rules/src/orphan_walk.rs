//! The keys of semaphores and read-write locks an orphan walk looks
//! through (docs/sessions.md, "A key moved to another node"), pure and
//! taking `now`: which key is next, where in its session members the walk
//! stands, and which keys were walked lately (not walked again before
//! their interval passed).
//!
//! A walk is asked for a key when someone is refused a place there (or
//! queues for one) and the key holds session members; the module's timer
//! then reads the key's session members a bounded number at a time, by
//! session, from [`crate::held::SESSIONS_LOW`] up: a session this node
//! knows is stepped over at once (one lookup for all its places), each
//! place of one it does not know is given its end and its member moved
//! below the range, so the walk never meets it again. Every part here is
//! O(1) per call (amortized); the lists are bounded ([`MAX_PENDING`],
//! [`MAX_WALKED`], [`MAX_BYTES`] of key names each).

use std::collections::{HashMap, HashSet, VecDeque};

/// A key: its database and name.
pub type Key = (i32, Vec<u8>);

/// Keys waiting for a walk, at most (a request beyond is dropped: the
/// next refusal there asks again).
pub const MAX_PENDING: usize = 65_536;

/// Keys remembered as walked, at most (the oldest is forgotten first: it
/// may then be walked again sooner).
pub const MAX_WALKED: usize = 65_536;

/// Key-name bytes each list keeps, at most (long names: fewer keys).
pub const MAX_BYTES: usize = 4 << 20;

/// The shortest time between two walks of one key (ms).
pub const MIN_INTERVAL_MS: i64 = 1_000;

/// Where the walk of the current key resumes: the score of the session
/// members it reads next, and whether that score's are done (a session
/// this node knows: stepped over).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cursor {
    pub from: f64,
    pub after: bool,
}

/// The walk's state.
#[derive(Default)]
pub struct Walks {
    pending: VecDeque<Key>,
    queued: HashSet<Key>,
    /// When each key's last walk ended, oldest first in `order`.
    walked: HashMap<Key, i64>,
    order: VecDeque<(Key, i64)>,
    /// Key-name bytes in `pending` and in `order`.
    pending_bytes: usize,
    walked_bytes: usize,
    /// The current key's cursor (`None`: it has not started).
    cursor: Option<Cursor>,
}

/// Between two walks of a key: the orphans' grace, at least [`MIN_INTERVAL_MS`].
pub fn interval(grace: i64) -> i64 {
    grace.max(MIN_INTERVAL_MS)
}

impl Walks {
    /// Asks for a walk of `key` at `now`, unless it is queued, or walked
    /// less than `every` ms ago; whether it was queued now.
    pub fn want(&mut self, key: &[u8], db: i32, now: i64, every: i64) -> bool {
        let k = (db, key.to_vec());
        let full = self.pending.len() >= MAX_PENDING || self.pending_bytes + key.len() > MAX_BYTES;
        if full || self.queued.contains(&k) {
            return false;
        }
        if self.walked.get(&k).is_some_and(|&at| now.saturating_sub(at) < every) {
            return false;
        }
        self.pending_bytes += key.len();
        self.queued.insert(k.clone());
        self.pending.push_back(k);
        true
    }

    /// The key being walked, and where it resumes (`None`: not started).
    pub fn current(&self) -> Option<(&Key, Option<Cursor>)> {
        self.pending.front().map(|k| (k, self.cursor))
    }

    /// The current key's walk goes on from `cursor`.
    pub fn resume_at(&mut self, cursor: Cursor) {
        self.cursor = Some(cursor);
    }

    /// The current key's walk ended at `now` (it is not walked again for
    /// the interval).
    pub fn done(&mut self, now: i64) {
        let Some(k) = self.next() else { return };
        self.walked.insert(k.clone(), now);
        self.walked_bytes += k.1.len();
        self.order.push_back((k, now));
        while self.order.len() > MAX_WALKED || self.walked_bytes > MAX_BYTES {
            let Some((old, at)) = self.order.pop_front() else { break };
            self.walked_bytes -= old.1.len();
            // Forgotten unless walked again since (a later entry then stands).
            if self.walked.get(&old) == Some(&at) {
                self.walked.remove(&old);
            }
        }
    }

    /// The current key is left unwalked (its slot not served here, no
    /// walk possible now): the next refusal there asks again.
    pub fn skip(&mut self) {
        self.next();
    }

    fn next(&mut self) -> Option<Key> {
        self.cursor = None;
        let k = self.pending.pop_front()?;
        self.pending_bytes -= k.1.len();
        self.queued.remove(&k);
        Some(k)
    }

    /// Whether a walk is under way or waiting.
    pub fn busy(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Forgets everything (a flush: the keys are gone; a demotion: a
    /// replica walks nothing).
    pub fn clear(&mut self) {
        *self = Walks::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn a_key_is_walked_once_then_not_before_its_interval() {
        let mut w = Walks::default();
        assert!(w.want(b"a", 0, NOW, 60_000));
        assert!(!w.want(b"a", 0, NOW, 60_000), "already queued");
        assert!(w.want(b"a", 1, NOW, 60_000), "another database, another key");
        assert_eq!(w.current(), Some((&(0, b"a".to_vec()), None)));
        let c = Cursor { from: -3.0, after: true };
        w.resume_at(c);
        assert_eq!(w.current().map(|(_, c)| c), Some(Some(c)));
        w.done(NOW);
        assert_eq!(w.current(), Some((&(1, b"a".to_vec()), None)), "the next starts afresh");
        assert!(!w.want(b"a", 0, NOW + 59_999, 60_000), "walked lately");
        assert!(w.want(b"a", 0, NOW + 60_000, 60_000));
        w.skip();
        w.skip();
        assert!(!w.busy());
        assert!(w.want(b"b", 0, NOW, 60_000));
        w.skip();
        assert!(w.want(b"b", 0, NOW, 60_000), "skipped: asked again at once");
        assert_eq!(interval(300), MIN_INTERVAL_MS);
        assert_eq!(interval(60_000), 60_000);
    }

    #[test]
    fn both_lists_are_bounded() {
        let mut w = Walks::default();
        for i in 0..MAX_PENDING + 5 {
            w.want(&i.to_le_bytes(), 0, NOW, 1);
        }
        assert_eq!(w.pending.len(), MAX_PENDING);
        for _ in 0..MAX_PENDING {
            w.done(NOW);
        }
        assert!(!w.busy());
        assert!(w.want(b"x", 0, NOW, 1));
        w.done(NOW);
        assert_eq!((w.walked.len(), w.order.len()), (MAX_WALKED, MAX_WALKED), "the oldest forgotten");
        assert!(w.want(&0usize.to_le_bytes(), 0, NOW, 60_000), "forgotten: walked again");
        w.clear();
        assert!(!w.busy() && w.walked.is_empty());
    }

    #[test]
    fn long_names_are_bounded_by_their_bytes() {
        let mut w = Walks::default();
        let long = |i: u8| vec![i; MAX_BYTES / 4];
        for i in 0..4 {
            assert!(w.want(&long(i), 0, NOW, 1));
        }
        assert!(!w.want(b"x", 0, NOW, 1), "pending: full of bytes");
        w.done(NOW);
        assert!(w.want(b"x", 0, NOW, 1));
        for _ in 0..4 {
            w.done(NOW);
        }
        assert!(w.want(&long(9), 0, NOW, 1));
        w.done(NOW);
        assert!(w.walked_bytes <= MAX_BYTES, "{}", w.walked_bytes);
        assert!(w.want(&long(0), 0, NOW, 60_000), "the oldest long name forgotten");
        assert!(!w.want(&long(9), 0, NOW, 60_000));
    }
}
