//! A session's holds (`crate::session`): an ordered set of hold entries
//! (`crate::hold_key`), kept back to back in leaves of at most [`LEAF`]
//! bytes, in key order. A session with few holds has one leaf (one
//! allocation); more are kept in a B-tree of leaves keyed by a lower bound
//! of each (the first leaf's is empty). Attaching, detaching and taking
//! the first are O(log n) in the leaves plus a scan of one leaf (bounded by
//! [`LEAF`]); a leaf split in two, or merged with its neighbour once under
//! a quarter full, touches one other leaf. An entry costs its own bytes
//! (a hold of a 9-byte key name in database 0: 11) plus the leaves' slack
//! and the tree's share: docs/sessions.md has the measured cost.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included, Unbounded};

use crate::hold_key::{next_entry, HoldKey, HoldRef};

/// A leaf's bytes, at most (an entry longer than that has a leaf of its own).
pub const LEAF: usize = 256;

/// A session's holds: see the module's documentation. 24 bytes (a
/// node keeps one per session holding anything).
#[derive(Default)]
pub struct HoldSet(Repr);

enum Repr {
    One(Vec<u8>),
    Tree(Box<Tree>),
}

struct Tree {
    len: usize,
    /// Leaves by a lower bound of their entries' bodies.
    leaves: BTreeMap<Box<[u8]>, Vec<u8>>,
}

impl Default for Repr {
    fn default() -> Self {
        Repr::One(Vec::new())
    }
}

/// Where `body` is in `leaf`: its entry's bounds, or where it would go.
fn find(leaf: &[u8], body: &[u8]) -> Result<(usize, usize), usize> {
    let mut at = 0;
    while at < leaf.len() {
        let (b, rest) = next_entry(&leaf[at..]);
        let end = leaf.len() - rest.len();
        match b.cmp(body) {
            std::cmp::Ordering::Less => at = end,
            std::cmp::Ordering::Equal => return Ok((at, end)),
            std::cmp::Ordering::Greater => return Err(at),
        }
    }
    Err(at)
}

/// The first entry boundary of `leaf` at or after `target`.
fn boundary(leaf: &[u8], target: usize) -> usize {
    let mut at = 0;
    while at < target && at < leaf.len() {
        at = leaf.len() - next_entry(&leaf[at..]).1.len();
    }
    at
}

/// Inserts `entry` at `at` of `leaf`.
fn put(leaf: &mut Vec<u8>, at: usize, entry: &[u8]) {
    let (old, n) = (leaf.len(), entry.len());
    leaf.resize(old + n, 0);
    leaf.copy_within(at..old, at + n);
    leaf[at..at + n].copy_from_slice(entry);
}

/// Inserts `entry` at `at` of a full `leaf`, split in two: the new right
/// leaf and its lower bound. An entry past the end gets a leaf of its own
/// (keys taken in order fill their leaves); otherwise the leaf is cut
/// near its middle.
fn split(leaf: &mut Vec<u8>, at: usize, entry: &[u8], body: &[u8]) -> (Box<[u8]>, Vec<u8>) {
    if at == leaf.len() {
        return (body.into(), entry.to_vec());
    }
    let mut mid = boundary(leaf, leaf.len() / 2);
    if mid == leaf.len() {
        mid = at;
    }
    let mut right = leaf.split_off(mid);
    if at <= mid {
        put(leaf, at, entry);
    } else {
        put(&mut right, at - mid, entry);
    }
    (next_entry(&right).0.into(), right)
}

impl HoldSet {
    /// How many holds (one leaf's are counted: at most [`LEAF`] bytes).
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::One(leaf) => Iter { leaves: None, cur: leaf }.count(),
            Repr::Tree(t) => t.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        matches!(&self.0, Repr::One(leaf) if leaf.is_empty())
    }

    /// Adds `key`: false when it was there already.
    pub fn insert(&mut self, key: &HoldKey) -> bool {
        let (entry, body) = (key.entry(), key.body());
        match &mut self.0 {
            Repr::One(leaf) => {
                let Err(at) = find(leaf, body) else { return false };
                if leaf.len() + entry.len() <= LEAF || leaf.is_empty() {
                    put(leaf, at, entry);
                } else {
                    let mut leaf = std::mem::take(leaf);
                    let len = Iter { leaves: None, cur: &leaf }.count() + 1;
                    let (sep, right) = split(&mut leaf, at, entry, body);
                    let leaves = BTreeMap::from([(Box::default(), leaf), (sep, right)]);
                    self.0 = Repr::Tree(Box::new(Tree { len, leaves }));
                }
            }
            Repr::Tree(t) => {
                let Some((_, leaf)) = t.leaves.range_mut::<[u8], _>((Unbounded, Included(body))).next_back() else {
                    return false;
                };
                let Err(at) = find(leaf, body) else { return false };
                if leaf.len() + entry.len() <= LEAF || leaf.is_empty() {
                    put(leaf, at, entry);
                } else {
                    let (sep, right) = split(leaf, at, entry, body);
                    t.leaves.insert(sep, right);
                }
                t.len += 1;
            }
        }
        true
    }

    /// Whether `key` is there.
    pub fn contains(&self, key: &HoldKey) -> bool {
        let body = key.body();
        match &self.0 {
            Repr::One(leaf) => find(leaf, body).is_ok(),
            Repr::Tree(t) => t
                .leaves
                .range::<[u8], _>((Unbounded, Included(body)))
                .next_back()
                .is_some_and(|(_, leaf)| find(leaf, body).is_ok()),
        }
    }

    /// Removes `key`: false when it was not there.
    pub fn remove(&mut self, key: &HoldKey) -> bool {
        let body = key.body();
        match &mut self.0 {
            Repr::One(leaf) => {
                let Ok((from, to)) = find(leaf, body) else { return false };
                leaf.drain(from..to);
                if leaf.is_empty() {
                    *leaf = Vec::new();
                }
            }
            Repr::Tree(t) => {
                let Some((sep, leaf)) = t.leaves.range_mut::<[u8], _>((Unbounded, Included(body))).next_back() else {
                    return false;
                };
                let Ok((from, to)) = find(leaf, body) else { return false };
                leaf.drain(from..to);
                let small = (leaf.len() < LEAF / 4).then(|| sep.clone());
                t.len -= 1;
                if let Some(sep) = small {
                    t.merge(&sep);
                    self.shrink();
                }
            }
        }
        true
    }

    /// Back to one leaf when only one is left.
    fn shrink(&mut self) {
        if let Repr::Tree(t) = &mut self.0 {
            if t.leaves.len() <= 1 {
                let leaf = t.leaves.pop_first().map(|(_, v)| v).unwrap_or_default();
                self.0 = Repr::One(leaf);
            }
        }
    }

    /// Takes out the first hold.
    pub fn pop_first(&mut self) -> Option<HoldKey> {
        let leaf = match &mut self.0 {
            Repr::One(leaf) => leaf,
            Repr::Tree(t) => t.leaves.first_entry()?.into_mut(),
        };
        if leaf.is_empty() {
            return None;
        }
        let n = leaf.len() - next_entry(leaf).1.len();
        let key = HoldKey::from_entry(&leaf[..n]);
        leaf.drain(..n);
        let emptied = leaf.is_empty();
        if let Repr::Tree(t) = &mut self.0 {
            t.len -= 1;
            if emptied {
                // The next leaf becomes the first (its bound: empty).
                t.leaves.pop_first();
                if let Some((_, next)) = t.leaves.pop_first() {
                    t.leaves.insert(Box::default(), next);
                }
                self.shrink();
            }
        }
        Some(key)
    }

    /// The holds in key order.
    pub fn iter(&self) -> Iter<'_> {
        match &self.0 {
            Repr::One(leaf) => Iter { leaves: None, cur: leaf },
            Repr::Tree(t) => Iter { leaves: Some(t.leaves.range::<[u8], _>((Unbounded, Unbounded))), cur: &[] },
        }
    }

    /// The holds after `key` (all of them: `None`) in key order: where a
    /// walk in slices resumes. O(log n) to start, plus a scan of one leaf.
    pub fn after(&self, key: Option<&HoldKey>) -> Iter<'_> {
        let Some(key) = key else { return self.iter() };
        let body = key.body();
        let past = |leaf: &[u8]| match find(leaf, body) {
            Ok((_, end)) => end,
            Err(at) => at,
        };
        match &self.0 {
            Repr::One(leaf) => Iter { leaves: None, cur: &leaf[past(leaf)..] },
            Repr::Tree(t) => match t.leaves.range::<[u8], _>((Unbounded, Included(body))).next_back() {
                Some((sep, leaf)) => Iter {
                    leaves: Some(t.leaves.range::<[u8], _>((Excluded(&**sep), Unbounded))),
                    cur: &leaf[past(leaf)..],
                },
                None => self.iter(),
            },
        }
    }
}

impl Tree {
    /// The leaf at `sep` is under a quarter full: merged into its
    /// neighbour (or dropped when empty) where they fit in one leaf.
    fn merge(&mut self, sep: &[u8]) {
        let map = &mut self.leaves;
        let next = map.range::<[u8], _>((Excluded(sep), Unbounded)).next().map(|(k, v)| (k.clone(), v.len()));
        let here = map.get(sep).map_or(0, Vec::len);
        if let Some((next, _)) = next.filter(|&(_, n)| here == 0 || here + n <= LEAF) {
            // (An empty leaf takes its next's entries: its bound is below them.)
            let moved = map.remove(&next).unwrap_or_default();
            if let Some(leaf) = map.get_mut(sep) {
                leaf.extend_from_slice(&moved);
            }
        } else if !sep.is_empty() {
            if here == 0 {
                map.remove(sep);
            } else if let Some((_, prev)) = map.range_mut::<[u8], _>((Unbounded, Excluded(sep))).next_back() {
                if prev.len() + here <= LEAF {
                    let moved = map.remove(sep).unwrap_or_default();
                    if let Some((_, prev)) = map.range_mut::<[u8], _>((Unbounded, Excluded(sep))).next_back() {
                        prev.extend_from_slice(&moved);
                    }
                }
            }
        }
    }
}

/// The holds of a [`HoldSet`] in key order.
pub struct Iter<'a> {
    leaves: Option<std::collections::btree_map::Range<'a, Box<[u8]>, Vec<u8>>>,
    cur: &'a [u8],
}

impl<'a> Iterator for Iter<'a> {
    type Item = HoldRef<'a>;

    fn next(&mut self) -> Option<HoldRef<'a>> {
        while self.cur.is_empty() {
            self.cur = self.leaves.as_mut()?.next()?.1;
        }
        let (body, rest) = next_entry(self.cur);
        self.cur = rest;
        Some(HoldRef(body))
    }
}

impl<'a> IntoIterator for &'a HoldSet {
    type Item = HoldRef<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl Extend<HoldKey> for HoldSet {
    fn extend<I: IntoIterator<Item = HoldKey>>(&mut self, keys: I) {
        for k in keys {
            self.insert(&k);
        }
    }
}

impl FromIterator<HoldKey> for HoldSet {
    fn from_iter<I: IntoIterator<Item = HoldKey>>(keys: I) -> HoldSet {
        let mut s = HoldSet::default();
        s.extend(keys);
        s
    }
}

impl std::fmt::Debug for HoldSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl PartialEq for HoldSet {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for HoldSet {}

impl Clone for HoldSet {
    fn clone(&self) -> HoldSet {
        self.iter().map(|h| h.to_key()).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rand::{Rng, SeedableRng};

    use super::*;

    fn key(n: u32) -> HoldKey {
        let token = (n % 3 == 0).then(|| n.to_be_bytes());
        HoldKey::new((n % 2) as i32, format!("k:{:07}", n / 7).as_bytes(), token.as_ref().map(|t| &t[..]))
    }

    fn check(s: &HoldSet, model: &BTreeSet<HoldKey>) {
        assert_eq!(s.len(), model.len());
        assert!(s.iter().map(|h| h.to_key()).eq(model.iter().cloned()));
        if let Repr::Tree(t) = &s.0 {
            let map = &t.leaves;
            assert!(map.len() > 1);
            assert!(map.keys().next().is_some_and(|k| k.is_empty()), "the first leaf's bound is empty");
            for (sep, leaf) in map {
                assert!(!leaf.is_empty());
                assert!(next_entry(leaf).0 >= &sep[..]);
            }
        }
    }

    #[test]
    fn it_keeps_what_an_ordered_set_keeps_through_random_changes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for round in 0..20 {
            let (mut s, mut model) = (HoldSet::default(), BTreeSet::new());
            let span = [50, 500, 5_000][round % 3];
            for step in 0..4_000 {
                let k = key(rng.gen_range(0..span));
                match rng.gen_range(0..10) {
                    0..=5 => assert_eq!(s.insert(&k), model.insert(k.clone())),
                    6..=7 => assert_eq!(s.remove(&k), model.remove(&k)),
                    8 => assert_eq!(s.contains(&k), model.contains(&k)),
                    _ => assert_eq!(s.pop_first(), model.pop_first()),
                }
                if step % 97 == 0 {
                    check(&s, &model);
                }
            }
            check(&s, &model);
            while let Some(k) = s.pop_first() {
                assert_eq!(Some(k), model.pop_first());
            }
            assert!(model.is_empty() && s.is_empty());
            assert!(matches!(&s.0, Repr::One(l) if l.is_empty()));
            assert_eq!(std::mem::size_of::<HoldSet>(), 24);
        }
    }

    #[test]
    fn keys_taken_in_order_fill_their_leaves_and_a_long_one_has_its_own() {
        let mut s = HoldSet::default();
        for n in 0..10_000u32 {
            s.insert(&HoldKey::new(0, format!("k:{n:07}").as_bytes(), None));
        }
        let Repr::Tree(t) = &s.0 else { panic!("one leaf for 10,000 keys") };
        let map = &t.leaves;
        // 11-byte entries: 23 to a leaf.
        assert_eq!(map.len(), 10_000usize.div_ceil(LEAF / 11));
        let long = HoldKey::new(0, &[b'z'; 1_000], None);
        assert!(s.insert(&long) && !s.insert(&long));
        assert!(s.iter().last().is_some_and(|h| h == long.as_hold()));
        assert!(s.remove(&long) && !s.remove(&long));
        assert_eq!(s.len(), 10_000);
        let mut s = HoldSet::default();
        assert!(s.insert(&long) && s.insert(&key(1)) && s.insert(&HoldKey::new(9, &[b'a'; 700], None)));
        assert_eq!(s.len(), 3);
        assert_eq!(s.pop_first(), Some(long));
        assert_eq!(s.pop_first(), Some(key(1)));
    }
}
