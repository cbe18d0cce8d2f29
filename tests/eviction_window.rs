//! Eviction of holds the module gave while the server could not evict
//! (issue 29's last gap): granted under `maxmemory 0`, never written after
//! the settings changed, so in no table. Every such hold Redis evicts is
//! still counted (`lock_evicted_unverified`), logged, and answered 1 by
//! `LOCK.EVICTED`, while the window of their leases is open; once it has
//! passed, nothing more is. Run on every server of the matrix with
//! `REDIS_SERVER`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{Connection, Value};
use redis_lock_harness::Server;

mod support;
use support::eviction::{config_set, fill, info, num, run, used_memory};

fn int(c: &mut Connection, args: &[&str]) -> i64 {
    match run(c, args) {
        Ok(Value::Int(n)) => n,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// `SESSION.KEEPALIVE id`: the session's TTL (one id, one answer).
fn keepalive(c: &mut Connection, id: &str) -> i64 {
    let ttls: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(id).query(c).unwrap();
    ttls[0]
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// 8 MB of keys (for `volatile-*` with a TTL longer than the locks', so
/// that a lock key is the likeliest to go).
fn fill_for(c: &mut Connection, policy: &str) {
    fill(c, 8000, policy.starts_with("volatile").then_some(3600));
}

/// A hold and how to renew it (`None`: a session's, kept by its session).
struct Hold {
    key: String,
    token: String,
    renew: Option<Vec<String>>,
}

fn hold(key: &str, token: &str, renew: &[&str]) -> Hold {
    Hold { key: key.into(), token: token.into(), renew: Some(renew.iter().map(|s| s.to_string()).collect()) }
}

/// Holds of every kind, granted while nothing can be evicted: exclusive
/// locks, leaders, semaphore and read-write holders (10-minute leases),
/// and a lock held by a session (15 minutes). The session's id.
fn grant_all(c: &mut Connection) -> (Vec<Hold>, String) {
    let mut holds = vec![];
    for i in 0..12 {
        let (k, t) = (format!("lk:{i}"), format!("tok{i}"));
        assert_eq!(int(c, &["LOCK.ACQUIRE", &k, &t, "600000"]), 1);
        holds.push(hold(&k, &t, &["LOCK.RENEW", &k, &t, "600000"]));
    }
    for i in 0..3 {
        let (k, t) = (format!("ldr:{i}"), format!("tok{i}"));
        int(c, &["LOCK.ELECT", &k, &t, "600000", "v"]);
        holds.push(hold(&k, &t, &["LOCK.RENEW", &k, &t, "600000"]));
    }
    for i in 0..3 {
        let k = format!("sem:{i}");
        for j in 0..2 {
            let t = format!("tok{j}");
            assert_eq!(int(c, &["SEM.ACQUIRE", &k, &t, "3", "600000"]), 1);
            holds.push(hold(&k, &t, &["SEM.RENEW", &k, &t, "600000"]));
        }
        let k = format!("rw:{i}");
        for j in 0..2 {
            let t = format!("tok{j}");
            assert_eq!(int(c, &["RWLOCK.ACQUIRE", &k, &t, "READ", "600000"]), 1);
            holds.push(hold(&k, &t, &["RWLOCK.RENEW", &k, &t, "600000"]));
        }
    }
    let id: String = redis::cmd("SESSION.GRANT").arg(900_000).query(c).unwrap();
    assert_eq!(int(c, &["LOCK.ACQUIRE", "sess:lk", "stok", "600000", "SESSION", &id]), 1);
    holds.push(Hold { key: "sess:lk".into(), token: "stok".into(), renew: None });
    (holds, id)
}

/// Whether `h` is still held: its renewal succeeds (a session's lock: its
/// key is still there, nobody else wrote it).
fn still_held(c: &mut Connection, h: &Hold) -> bool {
    match &h.renew {
        Some(args) => {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            int(c, &args) == 1
        }
        None => int(c, &["EXISTS", &h.key]) == 1,
    }
}

/// Keys (with their evictions) in the log's per-key and summed lines of
/// keys evicted in the window.
fn logged_unverified(log: &str) -> u64 {
    let single = log.lines().filter(|l| l.contains("not a hold the module tracks, but holds granted")).count() as u64;
    let also = log.lines().filter(|l| l.contains("lost mutual exclusion, and other holds granted")).count() as u64;
    let summed: u64 = log
        .lines()
        .filter_map(|l| {
            l.split("; and ").nth(1)?.split(" more evicted keys may have been locks").next()?.parse::<u64>().ok()
        })
        .sum();
    single + also + summed
}

/// Granted under `maxmemory 0`, then the settings let Redis evict (an
/// `allkeys` and a `volatile` policy, under `allow` and `refuse`), and
/// nothing is written to the holds before memory fills: every hold is
/// either still held or answered `LOCK.EVICTED 1`, every evicted one is
/// among `lock_evicted_unverified` and its log lines, and a token granted
/// the key since is not told an eviction of its own.
#[test]
fn holds_granted_before_eviction_was_possible_are_never_lost_in_silence() {
    for (policy, mode) in
        [("allkeys-lru", "allow"), ("allkeys-lru", "refuse"), ("volatile-ttl", "allow"), ("volatile-lru", "refuse")]
    {
        let what = format!("{policy}, lock.eviction {mode}");
        let server = Server::builder().arg("lock.eviction", mode).start();
        let mut c = server.conn();
        let before = now_ms();
        let (holds, session) = grant_all(&mut c);
        let i = info(&mut c);
        assert_eq!(num(&i, "eviction_tracked"), 0, "{what}");
        let until = num(&i, "eviction_window_until");
        // Our clock and the server's, each read to the millisecond: 1 ms
        // either side.
        assert!(until + 1 >= before + 600_000 && until <= now_ms() + 900_000 + 1, "{what}: {until}");
        // The session's keepalive moves the window to its deadline (15 min).
        assert_eq!(keepalive(&mut c, &session), 900_000);
        let until = num(&info(&mut c), "eviction_window_until");
        assert!(until >= before + 900_000, "{what}: {until}");
        let limit = used_memory(&mut c) + 1_500_000;
        config_set(&mut c, "maxmemory-policy", policy);
        config_set(&mut c, "maxmemory", &limit.to_string());
        assert!(server.log().contains("holds granted while Redis could not evict are in no table"), "{what}");
        // The keepalive goes on extending it once the server can evict.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(keepalive(&mut c, &session), 900_000);
        assert!(num(&info(&mut c), "eviction_window_until") > until, "{what}");
        fill_for(&mut c, policy);
        config_set(&mut c, "maxmemory", "0");
        let mut lost = vec![];
        for h in &holds {
            let held = still_held(&mut c, h);
            let told = int(&mut c, &["LOCK.EVICTED", &h.key, &h.token]) == 1;
            assert!(held != told, "{what}: {}/{}: held {held}, told evicted {told}", h.key, h.token);
            if told {
                lost.push(h);
            }
        }
        assert!(!lost.is_empty(), "{what}: 8 MB over a 1.5 MB margin evicted no hold");
        if policy.starts_with("volatile") {
            assert!(lost.iter().all(|h| h.key != "sess:lk"), "{what}: a session's lock key has no TTL");
        }
        let i = info(&mut c);
        let mut keys: Vec<&str> = lost.iter().map(|h| h.key.as_str()).collect();
        keys.dedup();
        let unverified = num(&i, "evicted_unverified");
        eprintln!("{what}: {} holds on {} keys lost, {unverified} counted", lost.len(), keys.len());
        assert!(unverified >= keys.len() as u64, "{what}: {unverified} counted, {} hold keys lost", keys.len());
        let exact: u64 = ["evicted_locks", "evicted_leaders", "evicted_sem_holders", "evicted_rw_holders"]
            .map(|f| num(&i, f))
            .iter()
            .sum();
        assert_eq!(exact, 0, "{what}: no hold was tracked");
        // Logged one by one, or summed a second later.
        std::thread::sleep(Duration::from_millis(1100));
        let log = server.log();
        assert_eq!(logged_unverified(&log), unverified, "{what}: {log}");
        // A token granted a lost key since is not told an eviction.
        let lock = lost.iter().find(|h| h.key.starts_with("lk:")).map(|h| h.key.clone());
        if let Some(k) = lock {
            if mode == "allow" {
                assert_eq!(int(&mut c, &["LOCK.ACQUIRE", &k, "newcomer", "600000"]), 1, "{what}");
                assert_eq!(int(&mut c, &["LOCK.RELEASE", &k, "newcomer"]), 1);
                assert_eq!(int(&mut c, &["LOCK.EVICTED", &k, "newcomer"]), 0, "{what}");
            }
        }
    }
}

/// Once the last lease given untracked has passed, an eviction is no
/// longer counted as a possible lock: a cache keeps its quiet log.
#[test]
fn after_the_window_evictions_are_not_counted() {
    for policy in ["allkeys-lru", "volatile-lru"] {
        let server = Server::builder().arg("lock.eviction", "allow").start();
        let mut c = server.conn();
        assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "short", "t", "300"]), 1);
        assert_eq!(int(&mut c, &["SEM.ACQUIRE", "short:sem", "t", "2", "300"]), 1);
        let until = num(&info(&mut c), "eviction_window_until");
        assert!(until > 0 && until <= now_ms() + 300 + 1, "{policy}: {until} (1 ms for the two clocks)");
        // A session that never held anything does not extend it.
        let id: String = redis::cmd("SESSION.GRANT").arg(900_000).query(&mut c).unwrap();
        keepalive(&mut c, &id);
        assert_eq!(num(&info(&mut c), "eviction_window_until"), until, "{policy}");
        std::thread::sleep(Duration::from_millis(until.saturating_sub(now_ms()) + 100));
        let limit = used_memory(&mut c) + 1_500_000;
        config_set(&mut c, "maxmemory-policy", policy);
        config_set(&mut c, "maxmemory", &limit.to_string());
        assert!(!server.log().contains("holds granted while Redis could not evict"), "{policy}");
        fill_for(&mut c, policy);
        config_set(&mut c, "maxmemory", "0");
        let evicted: i64 = redis::cmd("INFO")
            .arg("stats")
            .query::<String>(&mut c)
            .map(|t| t.lines().find_map(|l| l.strip_prefix("evicted_keys:")).unwrap().trim().parse().unwrap())
            .unwrap();
        assert!(evicted > 0, "{policy}: nothing evicted");
        assert_eq!(num(&info(&mut c), "evicted_unverified"), 0, "{policy}");
        assert!(!server.log().contains("not a hold the module tracks"), "{policy}");
    }
}
