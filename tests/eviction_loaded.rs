//! Holds loaded rather than written (docs/eviction.md, "Holds loaded
//! rather than written"): after a restart from an RDB the holds it carried
//! are in no table of the new process, so the window opens until the
//! latest lease end the saving process gave (its RDB's aux data), and an
//! eviction of one of them is counted (`lock_evicted_unverified`) and
//! answered by `LOCK.EVICTED`; a session loaded holding something keeps
//! the window open with its keepalives. Run on every server of the matrix
//! with `REDIS_SERVER`.

use redis::{Connection, Value};
use redis_lock_harness::Server;

mod support;
use support::eviction::{config_set as set, fill, info, limit_memory, num, run};
use support::wait_for_link;

fn now_ms(c: &mut Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(c).unwrap();
    s * 1000 + us / 1000
}

/// 20 locks of 600 s and a session (900 s) holding one more.
fn grant(c: &mut Connection) -> (Vec<(String, String)>, String) {
    let mut locks = Vec::new();
    for i in 0..20 {
        let (k, t) = (format!("lk:{i}"), format!("tok{i}"));
        assert_eq!(run(c, &["LOCK.ACQUIRE", &k, &t, "600000"]).unwrap(), Value::Int(1));
        locks.push((k, t));
    }
    let id: String = redis::cmd("SESSION.GRANT").arg(900_000).query(c).unwrap();
    assert_eq!(run(c, &["LOCK.ACQUIRE", "sess:lk", "stok", "600000", "SESSION", &id]).unwrap(), Value::Int(1));
    (locks, id)
}

/// Saved, then a restart that loads the RDB: the window opens until the
/// leases' end (and the session's keepalive moves it on); then 8 MB
/// written over a 1.5 MB margin under `allkeys-lru`: every hold is still
/// held or answered `LOCK.EVICTED 1`, and each lost one is counted. Both
/// for holds given while nothing could be evicted (the saving process's
/// window) and for holds its table tracked (it could evict from its start).
#[test]
fn holds_loaded_from_an_rdb_are_counted_when_evicted() {
    for evicting_from_start in [false, true] {
        let mut b = Server::builder().arg("lock.eviction", "allow");
        if evicting_from_start {
            b = b.arg("maxmemory", "256mb").arg("maxmemory-policy", "allkeys-lru");
        }
        let mut server = b.start();
        let mut c = server.conn();
        let (locks, id) = grant(&mut c);
        let tracked = num(&info(&mut c), "eviction_tracked");
        assert_eq!(tracked, if evicting_from_start { 21 } else { 0 });
        let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
        server.restart();
        let mut c = server.conn();
        let i = info(&mut c);
        let now = now_ms(&mut c);
        assert_eq!(num(&i, "eviction_tracked"), 0, "{evicting_from_start}: loaded, not written");
        let until = num(&i, "eviction_window_until");
        assert!(until + 1_000 >= now + 590_000, "{evicting_from_start}: window until {until}, now {now}");
        // The loaded session's keepalive moves the window to its deadline.
        let ttl: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(&id).query(&mut c).unwrap();
        assert_eq!(ttl, [900_000]);
        let until = num(&info(&mut c), "eviction_window_until");
        assert!(until >= now + 890_000, "{evicting_from_start}: the session's deadline: {until}, now {now}");
        limit_memory(&mut c, 1_500_000, "allkeys-lru");
        fill(&mut c, 8000, None);
        set(&mut c, "maxmemory", "0");
        let mut lost = 0;
        for (k, t) in locks.iter().map(|(k, t)| (k.as_str(), t.as_str())).chain([("sess:lk", "stok")]) {
            let value: Option<String> = redis::cmd("GET").arg(k).query(&mut c).unwrap();
            let held = value.is_some_and(|v| v.contains(t));
            let told = run(&mut c, &["LOCK.EVICTED", k, t]).unwrap() == Value::Int(1);
            assert!(held != told, "{evicting_from_start}: {k}: held {held}, told evicted {told}");
            lost += u64::from(told);
        }
        eprintln!("evicting from start {evicting_from_start}: {lost} of 21 loaded holds evicted");
        assert!(lost > 0, "{evicting_from_start}: 8 MB over a 1.5 MB margin evicted no lock");
        assert!(num(&info(&mut c), "evicted_unverified") >= lost, "{evicting_from_start}");
    }
}

/// A replica that synced the holds (its master's RDB), then promoted:
/// the window covers them, also a lock its master's session took after
/// the sync (its replicated `ATTACH`), and their evictions are counted.
#[test]
fn a_promoted_replica_counts_the_evictions_of_the_holds_it_synced() {
    let master = Server::builder().arg("lock.eviction", "allow").arg("repl-diskless-sync", "no").start();
    let mut m = master.conn();
    let (locks, id) = grant(&mut m);
    let replica = Server::builder()
        .arg("lock.eviction", "allow")
        .arg("replicaof", &format!("127.0.0.1 {}", master.port()))
        .start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    assert_eq!(run(&mut m, &["LOCK.ACQUIRE", "sess:late", "late", "600000", "SESSION", &id]).unwrap(), Value::Int(1));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let now = now_ms(&mut r);
    let until = num(&info(&mut r), "eviction_window_until");
    assert!(until + 1_000 >= now + 590_000, "window until {until}, now {now}");
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let ttl: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(&id).query(&mut r).unwrap();
    assert_eq!(ttl, [900_000]);
    let until = num(&info(&mut r), "eviction_window_until");
    assert!(until >= now + 890_000, "the session's deadline: {until}, now {now}");
    limit_memory(&mut r, 1_500_000, "allkeys-lru");
    fill(&mut r, 8000, None);
    set(&mut r, "maxmemory", "0");
    let mut lost = 0;
    let all = locks.iter().map(|(k, t)| (k.as_str(), t.as_str())).chain([("sess:lk", "stok"), ("sess:late", "late")]);
    for (k, t) in all {
        let value: Option<String> = redis::cmd("GET").arg(k).query(&mut r).unwrap();
        let held = value.is_some_and(|v| v.contains(t));
        let told = run(&mut r, &["LOCK.EVICTED", k, t]).unwrap() == Value::Int(1);
        assert!(held != told, "{k}: held {held}, told evicted {told}");
        lost += u64::from(told);
    }
    eprintln!("promoted: {lost} of 22 synced holds evicted");
    assert!(lost > 0, "8 MB over a 1.5 MB margin evicted no lock");
    assert!(num(&info(&mut r), "evicted_unverified") >= lost);
}
