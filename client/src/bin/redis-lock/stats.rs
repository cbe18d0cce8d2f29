//! What `top` reads from each server, and what it computes from two
//! readings: `INFO lock`'s counters and wait histograms
//! (`lock_wait_hist_ms_F:B=C,…`, docs/observability.md), and `LOCK.TOP`'s
//! contended keys. Pure: no I/O, time given.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::Value;

/// The families of `INFO lock`'s per-family fields.
pub const FAMILIES: [&str; 4] = ["exclusive", "semaphore", "rwlock", "election"];

/// One server's `INFO lock` at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    /// Every numeric `lock_NAME:N`, by NAME.
    pub counters: BTreeMap<String, u64>,
    /// `lock_wait_hist_ms_F`, by family F: bucket upper bound (ms) → count.
    pub hists: BTreeMap<String, BTreeMap<u64, u64>>,
}

/// `INFO lock`'s text: `lock_NAME:VALUE` lines (others ignored).
pub fn parse_info(text: &str) -> Reading {
    let mut r = Reading::default();
    for line in text.lines() {
        let Some((name, value)) = line.trim().strip_prefix("lock_").and_then(|l| l.split_once(':')) else { continue };
        if let Some(family) = name.strip_prefix("wait_hist_ms_") {
            let buckets = value
                .split(',')
                .filter_map(|b| b.split_once('='))
                .filter_map(|(b, c)| Some((b.parse().ok()?, c.parse().ok()?)))
                .collect();
            r.hists.insert(family.to_string(), buckets);
        } else if let Ok(n) = value.parse() {
            r.counters.insert(name.to_string(), n);
        }
    }
    r
}

/// What happened between two readings of all the servers: counts (not
/// yet rates) and the merged wait histogram.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Delta {
    pub grants: u64,
    pub waits: u64,
    pub timeouts: u64,
    pub expired: u64,
    /// Waits ended in the interval: bucket upper bound (ms) → count.
    pub wait_hist: BTreeMap<u64, u64>,
    /// Clients waiting now (`lock_waiting`, summed).
    pub waiting: u64,
}

/// A counter's growth: a counter that went down was reset (`CONFIG
/// RESETSTAT`, a restart), so all of its new value is new.
fn grew(old: u64, new: u64) -> u64 {
    if new >= old {
        new - old
    } else {
        new
    }
}

impl Delta {
    /// Adds one server's change from `old` (`None`: its first reading,
    /// which adds nothing but its gauge) to `new`.
    pub fn add(&mut self, old: Option<&Reading>, new: &Reading) {
        self.waiting += new.counters.get("waiting").copied().unwrap_or(0);
        let Some(old) = old else { return };
        let d = |name: &str| {
            grew(old.counters.get(name).copied().unwrap_or(0), new.counters.get(name).copied().unwrap_or(0))
        };
        self.grants +=
            ["grants", "sem_grants", "rw_read_grants", "rw_write_grants", "elections"].map(d).iter().sum::<u64>();
        let per_family = |prefix: &str| FAMILIES.iter().map(|f| d(&format!("{prefix}_{f}"))).sum::<u64>();
        // lock_waits_F: every wait that ended (granted, timed out, cancelled).
        self.waits += if new.counters.keys().any(|k| k.starts_with("waits_") && FAMILIES.iter().any(|f| k.ends_with(f)))
        {
            per_family("waits")
        } else {
            ["waits_granted", "waits_timed_out", "waits_cancelled"].map(d).iter().sum()
        };
        self.timeouts += d("waits_timed_out");
        self.expired += per_family("holds_expired");
        for (family, hist) in &new.hists {
            let before = old.hists.get(family);
            // A histogram with a bucket that shrank was reset: all of it is new.
            let reset = before.is_some_and(|b| b.iter().any(|(bound, c)| hist.get(bound).copied().unwrap_or(0) < *c));
            for (bound, c) in hist {
                let was = if reset { 0 } else { before.and_then(|b| b.get(bound)).copied().unwrap_or(0) };
                if *c > was {
                    *self.wait_hist.entry(*bound).or_default() += c - was;
                }
            }
        }
    }

    /// The `p`-th quantile (0 < p ≤ 1) of the waits that ended: the upper
    /// bound of the bucket that holds it; `None` when none ended.
    pub fn wait_quantile(&self, p: f64) -> Option<u64> {
        let total: u64 = self.wait_hist.values().sum();
        if total == 0 {
            return None;
        }
        let rank = ((p * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (bound, c) in &self.wait_hist {
            seen += c;
            if seen >= rank {
                return Some(*bound);
            }
        }
        self.wait_hist.keys().next_back().copied()
    }
}

/// Per second over `elapsed`.
pub fn rate(n: u64, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        0.0
    } else {
        n as f64 / elapsed.as_secs_f64()
    }
}

/// One entry of `LOCK.TOP`, with the server it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct TopKey {
    pub server: String,
    pub key: Vec<u8>,
    pub family: String,
    pub waiters: u64,
    pub oldest_wait_ms: u64,
    pub holders: u64,
    pub owner: Option<Vec<u8>>,
    /// -1: no expiry, -2: no holder.
    pub ttl_ms: i64,
}

/// A `LOCK.TOP` reply: an array of field lists (flat arrays, or maps
/// under RESP3). Unknown fields are skipped, so the server may add some.
pub fn parse_top(server: &str, v: Value) -> Result<Vec<TopKey>, String> {
    let Value::Array(entries) = v else { return Err(format!("LOCK.TOP: not an array: {v:?}")) };
    entries.into_iter().map(|e| entry(server, e)).collect()
}

fn entry(server: &str, v: Value) -> Result<TopKey, String> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Map(m) => m,
        Value::Array(items) if items.len() % 2 == 0 => {
            let mut it = items.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        other => return Err(format!("LOCK.TOP entry: {other:?}")),
    };
    let mut k = TopKey {
        server: server.to_string(),
        key: Vec::new(),
        family: String::new(),
        waiters: 0,
        oldest_wait_ms: 0,
        holders: 0,
        owner: None,
        ttl_ms: -2,
    };
    for (name, value) in pairs {
        let int = || match value {
            Value::Int(n) => n,
            _ => 0,
        };
        match bytes(&name).as_deref() {
            Some(b"key") => k.key = bytes(&value).unwrap_or_default(),
            Some(b"family") => k.family = String::from_utf8_lossy(&bytes(&value).unwrap_or_default()).into_owned(),
            Some(b"waiters") => k.waiters = u64::try_from(int()).unwrap_or(0),
            Some(b"oldest-wait-ms") => k.oldest_wait_ms = u64::try_from(int()).unwrap_or(0),
            Some(b"holders") => k.holders = u64::try_from(int()).unwrap_or(0),
            Some(b"owner") => k.owner = bytes(&value),
            Some(b"ttl-ms") => k.ttl_ms = int(),
            _ => {}
        }
    }
    Ok(k)
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::VerbatimString { text, .. } => Some(text.clone().into_bytes()),
        _ => None,
    }
}

/// How `top` orders its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Sort {
    /// Most waiters first, then the oldest wait (LOCK.TOP's own order).
    Waiters,
    /// The oldest wait first.
    Wait,
    /// Most holders first.
    Holders,
    /// By key name.
    Key,
}

impl Sort {
    pub fn name(self) -> &'static str {
        match self {
            Sort::Waiters => "waiters",
            Sort::Wait => "oldest wait",
            Sort::Holders => "holders",
            Sort::Key => "key",
        }
    }

    /// The next one (the `s` key).
    pub fn next(self) -> Sort {
        match self {
            Sort::Waiters => Sort::Wait,
            Sort::Wait => Sort::Holders,
            Sort::Holders => Sort::Key,
            Sort::Key => Sort::Waiters,
        }
    }

    pub fn apply(self, keys: &mut [TopKey]) {
        let name = |k: &TopKey| (k.key.clone(), k.server.clone());
        match self {
            Sort::Waiters => keys.sort_by(|a, b| {
                (b.waiters, b.oldest_wait_ms).cmp(&(a.waiters, a.oldest_wait_ms)).then_with(|| name(a).cmp(&name(b)))
            }),
            Sort::Wait => keys.sort_by(|a, b| {
                (b.oldest_wait_ms, b.waiters).cmp(&(a.oldest_wait_ms, a.waiters)).then_with(|| name(a).cmp(&name(b)))
            }),
            Sort::Holders => keys.sort_by(|a, b| b.holders.cmp(&a.holders).then_with(|| name(a).cmp(&name(b)))),
            Sort::Key => keys.sort_by_key(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO_A: &str =
        "# lock\r\nlock_grants:10\r\nlock_sem_grants:1\r\nlock_waits_timed_out:2\r\nlock_waiting:3\r\n\
        lock_wait_ms_exclusive:p50=8,p99=100,p99.9=100\r\nlock_wait_hist_ms_exclusive:8=4,100=1\r\n\
        lock_waits_exclusive:5\r\nlock_holds_expired_exclusive:1\r\n";
    const INFO_B: &str =
        "# lock\r\nlock_grants:30\r\nlock_sem_grants:1\r\nlock_waits_timed_out:3\r\nlock_waiting:1\r\n\
        lock_wait_hist_ms_exclusive:8=6,100=1,1024=8\r\nlock_wait_hist_ms_semaphore:2=2\r\n\
        lock_waits_exclusive:15\r\nlock_waits_semaphore:2\r\nlock_holds_expired_exclusive:4\r\n";

    #[test]
    fn info_is_read_and_deltas_add_up() {
        let (a, b) = (parse_info(INFO_A), parse_info(INFO_B));
        assert_eq!(a.counters["grants"], 10);
        assert_eq!(a.hists["exclusive"], BTreeMap::from([(8, 4), (100, 1)]));
        assert!(!a.counters.contains_key("wait_ms_exclusive"), "percentile text is not a counter");
        let mut d = Delta::default();
        d.add(Some(&a), &b);
        assert_eq!((d.grants, d.waits, d.timeouts, d.expired, d.waiting), (20, 12, 1, 3, 1));
        assert_eq!(d.wait_hist, BTreeMap::from([(2, 2), (8, 2), (1024, 8)]));
        assert_eq!(d.wait_quantile(0.5), Some(1024));
        assert_eq!(d.wait_quantile(0.01), Some(2));
        assert_eq!(d.wait_quantile(0.99), Some(1024));
        // A first reading: only the gauge.
        let mut first = Delta::default();
        first.add(None, &a);
        assert_eq!((first.grants, first.waiting, first.wait_quantile(0.5)), (0, 3, None));
    }

    #[test]
    fn a_reset_counts_everything_after_it() {
        let (a, b) = (parse_info(INFO_B), parse_info(INFO_A));
        let mut d = Delta::default();
        d.add(Some(&a), &b);
        assert_eq!(d.grants, 10, "grants went down: reset, all 10 new; sem_grants unchanged");
        assert_eq!(d.wait_hist, BTreeMap::from([(8, 4), (100, 1)]), "the histogram shrank: all of it is new");
    }

    #[test]
    fn top_replies_in_both_protocols() {
        let s = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        let flat = Value::Array(vec![Value::Array(vec![
            s("key"),
            s("k1"),
            s("family"),
            s("exclusive"),
            s("waiters"),
            Value::Int(3),
            s("oldest-wait-ms"),
            Value::Int(1500),
            s("holders"),
            Value::Int(1),
            s("owner"),
            s("tok"),
            s("ttl-ms"),
            Value::Int(2000),
            s("later-field"),
            Value::Int(7),
        ])]);
        let map = Value::Array(vec![Value::Map(vec![
            (s("key"), s("k2")),
            (s("family"), s("semaphore")),
            (s("waiters"), Value::Int(1)),
            (s("oldest-wait-ms"), Value::Int(10)),
            (s("holders"), Value::Int(2)),
            (s("owner"), Value::Nil),
            (s("ttl-ms"), Value::Int(-1)),
        ])]);
        let mut keys = parse_top("h:1", flat).unwrap();
        keys.extend(parse_top("h:2", map).unwrap());
        assert_eq!(keys[0].key, b"k1");
        assert_eq!((keys[0].waiters, keys[0].oldest_wait_ms, keys[0].ttl_ms), (3, 1500, 2000));
        assert_eq!(keys[0].owner.as_deref(), Some(&b"tok"[..]));
        assert_eq!((keys[1].family.as_str(), keys[1].holders, keys[1].owner.clone()), ("semaphore", 2, None));
        Sort::Holders.apply(&mut keys);
        assert_eq!(keys[0].key, b"k2");
        Sort::Waiters.apply(&mut keys);
        assert_eq!(keys[0].key, b"k1");
        assert!(parse_top("h", Value::Int(1)).is_err());
        assert_eq!(parse_top("h", Value::Array(vec![])), Ok(vec![]));
    }
}
