//! LOCK.TOP's order: the keys with waiters, most contended first. Only
//! keys with a queue are ever looked at, so the cost follows contention,
//! never the size of the keyspace.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::error::ArgError;
use crate::number::parse_count;

/// LOCK.TOP lists this many keys unless told otherwise.
pub const DEFAULT_COUNT: usize = 10;
/// And never more than this many (its reply is built in one piece).
pub const MAX_COUNT: usize = 1000;

/// LOCK.TOP's options: `[COUNT n]`, n from 1 to [`MAX_COUNT`].
pub fn parse_top_options<'a>(options: impl IntoIterator<Item = &'a [u8]>) -> Result<usize, ArgError> {
    let mut it = options.into_iter();
    let mut count = DEFAULT_COUNT;
    while let Some(option) = it.next() {
        if !option.eq_ignore_ascii_case(b"COUNT") {
            return Err(ArgError::Syntax);
        }
        let n = it.next().ok_or(ArgError::Syntax)?;
        count = parse_count(n).filter(|&n| n <= MAX_COUNT).ok_or(ArgError::TopCountInvalid)?;
    }
    Ok(count)
}

/// One contended key as the queues see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contended<K> {
    pub key: K,
    pub waiters: usize,
    /// When the longest-waiting client started waiting (Unix ms).
    pub oldest_since: i64,
}

/// LOCK.TOP's order: more waiters first, then the older oldest wait, then
/// the key's bytes (so equal keys list the same way on every call).
pub fn order<K: Ord>(a: &Contended<K>, b: &Contended<K>) -> Ordering {
    b.waiters.cmp(&a.waiters).then(a.oldest_since.cmp(&b.oldest_since)).then_with(|| a.key.cmp(&b.key))
}

/// A stretch of LOCK.TOP's order.
#[derive(Debug, PartialEq, Eq)]
pub struct Page<K> {
    /// Best first.
    pub keys: Vec<Contended<K>>,
    /// Whether other keys come after them.
    pub more: bool,
}

impl<K> Default for Page<K> {
    fn default() -> Self {
        Page { keys: Vec::new(), more: false }
    }
}

/// Pages up to this long are chosen with a bounded heap: one comparison
/// per key with the worst one kept, for keys in no particular order (the
/// module's hash map). Longer ones with a partial selection, linear in any
/// order.
const HEAP_MAX: usize = 64;

/// The first `n` of `keys` in [`order`] among those that come after
/// `after` (all of them without it). The keys may be borrowed (the module
/// passes references into its queues and copies only what it keeps), and
/// the next page starts after the last key of this one, so a caller that
/// drops some (LOCK.TOP's ACL) reads on without ranking what it saw twice.
/// O(K + n log n) for K keys: up to 64 kept in a bounded heap (about one
/// comparison per key in no particular order, as the module's hash map
/// gives them; O(K log n) if they came least contended first), more by a
/// partial selection, linear in any order.
pub fn most_contended<K: Ord>(
    keys: impl IntoIterator<Item = Contended<K>>,
    after: Option<&Contended<K>>,
    n: usize,
) -> Page<K> {
    let keys = keys.into_iter().filter(|c| after.map_or(true, |a| order(a, c).is_lt()));
    if n <= HEAP_MAX {
        return best_in_heap(keys, n);
    }
    let mut left = Vec::with_capacity(keys.size_hint().1.unwrap_or(0));
    left.extend(keys);
    let more = left.len() > n;
    if more {
        left.select_nth_unstable_by(n - 1, order);
        left.truncate(n);
    }
    left.sort_unstable_by(order);
    Page { keys: left, more }
}

/// The best `n` kept in a max-heap whose top is the worst of them.
fn best_in_heap<K: Ord>(keys: impl Iterator<Item = Contended<K>>, n: usize) -> Page<K> {
    let mut kept = BinaryHeap::with_capacity(n);
    let mut more = false;
    for c in keys {
        if kept.len() < n {
            kept.push(Ranked(c));
            continue;
        }
        more = true;
        if let Some(mut worst) = kept.peek_mut() {
            if order(&c, &worst.0).is_lt() {
                *worst = Ranked(c);
            }
        }
    }
    Page { keys: kept.into_sorted_vec().into_iter().map(|r| r.0).collect(), more }
}

/// A key ordered as LOCK.TOP lists it: the greatest is the least contended.
struct Ranked<K>(Contended<K>);

impl<K: Ord> Ord for Ranked<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        order(&self.0, &other.0)
    }
}

impl<K: Ord> PartialOrd for Ranked<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Ord> PartialEq for Ranked<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl<K: Ord> Eq for Ranked<K> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(key: &str, waiters: usize, oldest_since: i64) -> Contended<String> {
        Contended { key: key.into(), waiters, oldest_since }
    }

    fn names<K: Clone>(p: Page<K>) -> Vec<K> {
        p.keys.into_iter().map(|c| c.key).collect()
    }

    #[test]
    fn more_waiters_then_the_oldest_wait_then_the_name() {
        let keys = vec![c("a", 1, 10), c("b", 5, 50), c("c", 5, 20), c("d", 2, 1), c("e", 5, 20)];
        let top = |n| most_contended(keys.clone(), None, n);
        assert_eq!(names(top(10)), ["c", "e", "b", "d", "a"]);
        assert_eq!(names(top(2)), ["c", "e"]);
        assert_eq!(names(top(4)), ["c", "e", "b", "d"]);
        assert_eq!((top(5).more, top(4).more, top(0).more), (false, true, true));
        assert!(top(0).keys.is_empty());
        assert_eq!(most_contended(Vec::<Contended<String>>::new(), None, 3), Page::default());
    }

    #[test]
    fn the_next_page_starts_after_the_last_key() {
        let keys = vec![c("a", 1, 10), c("b", 5, 50), c("c", 5, 20), c("d", 2, 1), c("e", 5, 20)];
        let first = most_contended(keys.clone(), None, 2);
        let after = first.keys.last().cloned();
        let second = most_contended(keys.clone(), after.as_ref(), 2);
        assert!(first.more && second.more);
        assert_eq!(names(second), ["b", "d"]);
        let last = most_contended(keys.clone(), Some(&c("d", 2, 1)), 2);
        assert!(!last.more);
        assert_eq!(names(last), ["a"]);
        // The key the cursor names need not be there any more.
        let gone = most_contended(keys.clone(), Some(&c("bb", 5, 50)), 9);
        assert_eq!(names(gone), ["d", "a"]);
        assert_eq!(most_contended(keys, Some(&c("a", 1, 10)), 3), Page::default());
    }

    #[test]
    fn borrowed_keys_rank_as_owned_ones() {
        let owned = [c("x", 3, 7), c("y", 3, 7), c("w", 4, 9)];
        let borrowed =
            owned.iter().map(|o| Contended { key: o.key.as_str(), waiters: o.waiters, oldest_since: o.oldest_since });
        assert_eq!(names(most_contended(borrowed, None, 2)), ["w", "x"]);
    }

    #[test]
    fn count_is_one_to_a_thousand() {
        let p = |opts: &[&str]| parse_top_options(opts.iter().map(|o| o.as_bytes()));
        assert_eq!(p(&[]), Ok(10));
        assert_eq!(p(&["count", "1"]), Ok(1));
        assert_eq!(p(&["COUNT", "1000"]), Ok(1000));
        for bad in ["0", "1001", "-1", "x", "1.5", "+3", " 3"] {
            assert_eq!(p(&["COUNT", bad]), Err(ArgError::TopCountInvalid), "{bad}");
        }
        assert_eq!(p(&["COUNT"]), Err(ArgError::Syntax));
        assert_eq!(p(&["LIMIT", "3"]), Err(ArgError::Syntax));
        assert_eq!(p(&["COUNT", "3", "x"]), Err(ArgError::Syntax));
    }

    #[test]
    fn a_cut_list_is_the_head_of_the_full_one() {
        let mut x: u64 = 7;
        let keys: Vec<_> = (0..500)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                c(&format!("k{i}"), (x >> 60) as usize, (x >> 40 & 0xff) as i64)
            })
            .collect();
        let full = most_contended(keys.clone(), None, usize::MAX).keys;
        let rising: Vec<_> = full.iter().rev().cloned().collect();
        for n in [1, 7, 64, 65, 100, 499, 500, 501] {
            assert_eq!(most_contended(keys.clone(), None, n).keys, full[..n.min(500)]);
            assert_eq!(most_contended(rising.clone(), None, n).keys, full[..n.min(500)]);
        }
        // Pages of any size, each after the last of the one before, read
        // the same order (LOCK.TOP reads on this way when the ACL hides keys).
        for n in [1, 3, 64, 65, 500] {
            let (mut read, mut after) = (Vec::new(), None);
            loop {
                let page = most_contended(keys.clone(), after.as_ref(), n);
                after = page.keys.last().cloned();
                read.extend(page.keys);
                if !page.more {
                    break;
                }
            }
            assert_eq!(read, full, "pages of {n}");
        }
    }
}
