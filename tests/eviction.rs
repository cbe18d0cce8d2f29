//! Eviction never takes a held lock silently (issue 29), per policy: the
//! warning at load and on `CONFIG SET`, `INFO lock`'s fields, the refusal
//! under `lock.eviction refuse` (the default), and under `allow` every
//! hold Redis evicts counted, logged and answered by `LOCK.EVICTED`.
//! Run on every server of the matrix with `REDIS_SERVER`.

use redis::{Connection, Value};
use redis_lock_harness::Server;

mod support;
use support::eviction::{config_set, fill, info, num, run, used_memory};

const POLICIES: [&str; 6] =
    ["allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-ttl", "noeviction"];

fn refusal(policy: &str) -> String {
    format!("lock.eviction is refuse and maxmemory-policy {policy} may evict lock keys")
}

/// Every grant command, on keys nobody holds.
fn grants(tag: &str) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|a| a.replace("{t}", tag)).collect::<Vec<_>>();
    vec![
        s(&["LOCK.ACQUIRE", "g:{t}:lock", "tok", "60000"]),
        s(&["LOCK.ACQUIRE", "g:{t}:fenced", "tok", "60000", "FENCE", "WAIT", "100"]),
        s(&["LOCK.TAKEOVER", "g:{t}:takeover", "tok", "run", "60000"]),
        s(&["LOCK.ELECT", "g:{t}:elect", "tok", "60000", "v"]),
        s(&["SEM.ACQUIRE", "g:{t}:sem", "tok", "3", "60000"]),
        s(&["RWLOCK.ACQUIRE", "g:{t}:rw", "tok", "READ", "60000"]),
    ]
}

/// At load: the warning and the INFO fields; under `refuse` every grant is
/// refused with the policy's error and changes nothing, while `noeviction`
/// grants as before.
#[test]
fn at_load_each_policy_is_warned_about_and_refused_by_default() {
    for policy in POLICIES {
        let server = Server::builder().arg("maxmemory", "64mb").arg("maxmemory-policy", policy).start();
        let mut c = server.conn();
        let evicts = policy != "noeviction";
        let i = info(&mut c);
        assert_eq!(num(&i, "evictable"), u64::from(evicts), "{policy}");
        let log = server.log();
        assert_eq!(
            log.contains(&format!("with maxmemory-policy {policy} lets Redis evict lock keys")),
            evicts,
            "{policy}: {log}"
        );
        let mode: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("lock.eviction").query(&mut c).unwrap();
        assert_eq!(mode, ["lock.eviction", "refuse"]);
        for args in grants("a") {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = run(&mut c, &args);
            if evicts {
                let e = r.expect_err(&format!("{policy}: {args:?}")).to_string();
                assert!(e.contains(&refusal(policy)), "{policy}: {args:?}: {e}");
                let exists: i64 = redis::cmd("EXISTS").arg(args[1]).query(&mut c).unwrap();
                assert_eq!(exists, 0, "{policy}: a refused grant changes nothing");
            } else {
                assert!(matches!(r, Ok(Value::Int(n)) if n >= 1), "{policy}: {args:?}: {r:?}");
            }
        }
        assert_eq!(num(&info(&mut c), "eviction_refusals"), if evicts { 6 } else { 0 }, "{policy}");
        // allow: the same grants go through.
        config_set(&mut c, "lock.eviction", "allow");
        for args in grants("b") {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = run(&mut c, &args);
            assert!(matches!(r, Ok(Value::Int(n)) if n >= 1), "{policy} allow: {args:?}: {r:?}");
        }
    }
}

/// A server that could not evict, then `CONFIG SET` so that it can: the
/// warning then, grants refused, a holder still renews and releases, and
/// back to `noeviction` grants again.
#[test]
fn config_set_that_lets_redis_evict_is_warned_about_and_refuses_grants() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(run(&mut c, &["LOCK.ACQUIRE", "held", "t", "60000"]).unwrap(), Value::Int(1));
    assert_eq!(num(&info(&mut c), "evictable"), 0);
    config_set(&mut c, "maxmemory", "64mb");
    assert_eq!(num(&info(&mut c), "evictable"), 0, "noeviction still");
    config_set(&mut c, "maxmemory-policy", "volatile-lru");
    assert_eq!(num(&info(&mut c), "evictable"), 1);
    assert!(server.log().contains("with maxmemory-policy volatile-lru lets Redis evict lock keys"));
    let e = run(&mut c, &["LOCK.ACQUIRE", "new", "t", "60000"]).unwrap_err().to_string();
    assert!(e.contains(&refusal("volatile-lru")), "{e}");
    assert_eq!(run(&mut c, &["LOCK.RENEW", "held", "t", "60000"]).unwrap(), Value::Int(1));
    assert_eq!(num(&info(&mut c), "eviction_tracked"), 1, "tracked from its renewal");
    assert_eq!(run(&mut c, &["LOCK.RELEASE", "held", "t"]).unwrap(), Value::Int(1));
    assert_eq!(num(&info(&mut c), "eviction_tracked"), 0);
    config_set(&mut c, "maxmemory-policy", "noeviction");
    assert!(server.log().contains("Redis can no longer evict lock keys"));
    assert_eq!(run(&mut c, &["LOCK.ACQUIRE", "new", "t", "60000"]).unwrap(), Value::Int(1));
}

/// A waiter queued before the server could evict is answered with the
/// refusal when the key frees, not granted.
#[test]
fn a_waiter_is_refused_when_its_turn_comes_while_redis_may_evict() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(run(&mut c, &["LOCK.ACQUIRE", "k", "a", "60000"]).unwrap(), Value::Int(1));
    let mut w = server.conn();
    let waiter = std::thread::spawn(move || run(&mut w, &["LOCK.ACQUIRE", "k", "b", "60000", "WAIT", "30000"]));
    while num(&info(&mut c), "waiting") == 0 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for (name, value) in [("maxmemory", "64mb"), ("maxmemory-policy", "allkeys-lru")] {
        config_set(&mut c, name, value);
    }
    assert_eq!(run(&mut c, &["LOCK.RELEASE", "k", "a"]).unwrap(), Value::Int(1));
    let e = waiter.join().unwrap().unwrap_err().to_string();
    assert!(e.contains(&refusal("allkeys-lru")), "{e}");
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut c).unwrap();
    assert_eq!(exists, 0);
    assert_eq!(num(&info(&mut c), "eviction_refusals"), 1);
}

/// What was granted, to check after the eviction.
struct Holds {
    locks: Vec<String>,
    leaders: Vec<String>,
    /// (key, token)
    sem: Vec<(String, String)>,
    rw: Vec<(String, String)>,
}

fn grant_many(c: &mut Connection) -> Holds {
    let mut h = Holds { locks: vec![], leaders: vec![], sem: vec![], rw: vec![] };
    for i in 0..20 {
        let k = format!("lk:{i}");
        assert_eq!(run(c, &["LOCK.ACQUIRE", &k, &format!("tok{i}"), "600000"]).unwrap(), Value::Int(1));
        h.locks.push(k);
    }
    for i in 0..4 {
        let k = format!("ldr:{i}");
        assert!(matches!(run(c, &["LOCK.ELECT", &k, &format!("tok{i}"), "600000", "v"]).unwrap(), Value::Int(_)));
        h.leaders.push(k);
    }
    for i in 0..4 {
        for j in 0..3 {
            let (k, t) = (format!("sem:{i}"), format!("tok{j}"));
            assert_eq!(run(c, &["SEM.ACQUIRE", &k, &t, "3", "600000"]).unwrap(), Value::Int(1));
            h.sem.push((k, t));
        }
        for j in 0..2 {
            let (k, t) = (format!("rw:{i}"), format!("tok{j}"));
            assert_eq!(run(c, &["RWLOCK.ACQUIRE", &k, &t, "READ", "600000"]).unwrap(), Value::Int(1));
            h.rw.push((k, t));
        }
    }
    h
}

/// Whether a renewal still finds the hold; if not, whether LOCK.EVICTED
/// says eviction took it.
fn check(c: &mut Connection, renew: &[&str], key: &str, token: &str) -> (bool, bool) {
    let held = run(c, renew).unwrap() == Value::Int(1);
    let evicted = run(c, &["LOCK.EVICTED", key, token]).unwrap() == Value::Int(1);
    (held, evicted)
}

/// Under `allow`: holds of every family, then memory filled past the limit.
/// Every hold is either still held or was evicted, and each evicted one is
/// counted in its family's field, known to LOCK.EVICTED and logged; under
/// the evicting policies some are evicted; under `noeviction` none is.
#[test]
fn under_allow_every_hold_lost_to_eviction_is_counted_logged_and_told() {
    for policy in POLICIES {
        let server = Server::builder().arg("lock.eviction", "allow").start();
        let mut c = server.conn();
        let h = grant_many(&mut c);
        let limit = used_memory(&mut c) + 1_500_000;
        config_set(&mut c, "maxmemory", &limit.to_string());
        config_set(&mut c, "maxmemory-policy", policy);
        let evicts = policy != "noeviction";
        assert_eq!(num(&info(&mut c), "eviction_tracked"), 0, "{policy}: granted before: not yet tracked");
        // Renewed after the change: tracked (as a watchdog's renewal would).
        for (i, k) in h.locks.iter().enumerate() {
            assert_eq!(run(&mut c, &["LOCK.RENEW", k, &format!("tok{i}"), "600000"]).unwrap(), Value::Int(1));
        }
        for (i, k) in h.leaders.iter().enumerate() {
            assert_eq!(run(&mut c, &["LOCK.RENEW", k, &format!("tok{i}"), "600000"]).unwrap(), Value::Int(1));
        }
        for (k, t) in &h.sem {
            assert_eq!(run(&mut c, &["SEM.RENEW", k, t, "600000"]).unwrap(), Value::Int(1));
        }
        for (k, t) in &h.rw {
            assert_eq!(run(&mut c, &["RWLOCK.RENEW", k, t, "600000"]).unwrap(), Value::Int(1));
        }
        let total = (h.locks.len() + h.leaders.len() + h.sem.len() + h.rw.len()) as u64;
        assert_eq!(num(&info(&mut c), "eviction_tracked"), if evicts { total } else { 0 }, "{policy}");
        config_set(&mut c, "maxmemory", &limit.to_string());
        // Keys without a TTL (so under `volatile-*` only keys with one, the
        // locks, can go), or for `volatile-ttl` with a TTL longer than the
        // locks'.
        fill(&mut c, 8000, (policy == "volatile-ttl").then_some(3600));
        // Lift the limit so the checks below evict nothing more.
        config_set(&mut c, "maxmemory", "0");
        let mut lost = [0u64; 4];
        let mut tally = |family: usize, (held, evicted): (bool, bool), what: &str| {
            assert!(
                held != evicted,
                "{policy}: {what}: held {held}, told evicted {evicted}: every hold is one or the other"
            );
            if evicted {
                lost[family] += 1;
            }
        };
        for (i, k) in h.locks.iter().enumerate() {
            let t = format!("tok{i}");
            tally(0, check(&mut c, &["LOCK.RENEW", k, &t, "600000"], k, &t), k);
        }
        for (i, k) in h.leaders.iter().enumerate() {
            let t = format!("tok{i}");
            tally(1, check(&mut c, &["LOCK.RENEW", k, &t, "600000"], k, &t), k);
        }
        for (k, t) in &h.sem {
            tally(2, check(&mut c, &["SEM.RENEW", k, t, "600000"], k, t), k);
        }
        for (k, t) in &h.rw {
            tally(3, check(&mut c, &["RWLOCK.RENEW", k, t, "600000"], k, t), k);
        }
        let i = info(&mut c);
        let counted =
            ["evicted_locks", "evicted_leaders", "evicted_sem_holders", "evicted_rw_holders"].map(|f| num(&i, f));
        assert_eq!(counted, lost, "{policy}: counted per family = lost per family");
        let lost_total: u64 = lost.iter().sum();
        if evicts {
            assert!(lost_total > 0, "{policy}: 8 MB over a 1.5 MB margin evicted no lock");
            // Each is logged, at most 10 lines a second and a sum a second later.
            std::thread::sleep(std::time::Duration::from_millis(1100));
            let log = server.log();
            let summed: u64 = log
                .lines()
                .filter_map(|l| l.split("lock: ").nth(1)?.split(" more held locks").next()?.parse::<u64>().ok())
                .sum();
            // Every evicted hold is in a line of its own or in a sum.
            let logged_holds: u64 = log
                .lines()
                .filter(|l| l.contains("was evicted (maxmemory-policy"))
                .filter_map(|l| l.split("while held: ").nth(1))
                .map(|rest| {
                    rest.split(',').filter_map(|p| p.trim().split(' ').next()?.parse::<u64>().ok()).sum::<u64>()
                })
                .sum();
            assert!(logged_holds >= 1, "{policy}: {log}");
            assert_eq!(logged_holds + summed, lost_total, "{policy}: {log}");
        } else {
            assert_eq!(lost_total, 0, "{policy}");
            assert_eq!(num(&i, "evictable"), 0);
        }
    }
}
