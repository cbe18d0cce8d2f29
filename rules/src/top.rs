//! LOCK.TOP's order: the keys with waiters, most contended first. Only
//! keys with a queue are ever looked at, so the cost follows contention,
//! never the size of the keyspace.

use crate::args::{parse_ttl, ArgError};

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
        count = parse_ttl(n)
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= MAX_COUNT)
            .ok_or(ArgError::TopCountInvalid)?;
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

/// The `count` most contended of `keys`: more waiters first, then the
/// older oldest wait, then the key's bytes (so equal keys list the same way
/// on every call). O(K + count log count) for K contended keys.
pub fn most_contended<K: Ord>(mut keys: Vec<Contended<K>>, count: usize) -> Vec<Contended<K>> {
    let order = |a: &Contended<K>, b: &Contended<K>| {
        b.waiters.cmp(&a.waiters).then(a.oldest_since.cmp(&b.oldest_since)).then_with(|| a.key.cmp(&b.key))
    };
    if count == 0 {
        return Vec::new();
    }
    if keys.len() > count {
        keys.select_nth_unstable_by(count - 1, order);
        keys.truncate(count);
    }
    keys.sort_unstable_by(order);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(key: &str, waiters: usize, oldest_since: i64) -> Contended<String> {
        Contended { key: key.into(), waiters, oldest_since }
    }

    #[test]
    fn more_waiters_then_the_oldest_wait_then_the_name() {
        let keys = vec![c("a", 1, 10), c("b", 5, 50), c("c", 5, 20), c("d", 2, 1), c("e", 5, 20)];
        let names = |v: Vec<Contended<String>>| v.into_iter().map(|c| c.key).collect::<Vec<_>>();
        assert_eq!(names(most_contended(keys.clone(), 10)), ["c", "e", "b", "d", "a"]);
        assert_eq!(names(most_contended(keys.clone(), 2)), ["c", "e"]);
        assert_eq!(names(most_contended(keys.clone(), 4)), ["c", "e", "b", "d"]);
        assert!(most_contended(keys, 0).is_empty());
        assert!(most_contended(Vec::<Contended<String>>::new(), 3).is_empty());
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
        let full = most_contended(keys.clone(), usize::MAX);
        for n in [1, 7, 100, 499, 500, 501] {
            assert_eq!(most_contended(keys.clone(), n), full[..n.min(500)]);
        }
    }
}
