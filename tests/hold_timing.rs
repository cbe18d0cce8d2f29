//! `lock.hold-timing` for semaphores and read-write locks, and the ends of
//! timed holds the module does not make itself (`DEL`, `RENAME`, …), with
//! `lock_holds_timed` (issue 23), against a real server.
//!
//! A released hold is bounded as the waits of `tests/observability.rs`
//! are: at least the pause the test made between the grant's reply and the
//! release, at most what the test measured from sending the grant to the
//! release's reply, each give or take the server clock's 1 ms; percentiles
//! are compared by histogram bucket. An expired hold is exact: the server
//! records the lease it granted (lease end − grant), whenever it notices.

mod support;

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis_lock_harness::Server;
use redis_lock_rules::histogram::bucket_of;
use support::{count, lock_info as info, LEASE_MS};

/// `p50=…,p99=…,p99.9=…` → the three values.
fn percentiles(i: &HashMap<String, String>, field: &str) -> Vec<(String, u64)> {
    let text = i.get(field).unwrap_or_else(|| panic!("no lock_{field}: {i:?}"));
    let p: Vec<(String, u64)> = text
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().expect("a number")))
        .collect();
    assert_eq!(p.len(), 3, "{field}:{text}");
    p
}

/// Every percentile of `lock_hold_ms_<family>` lies between the buckets of
/// `low` and `high` (the server clock's 1 ms either side).
fn assert_holds_between(i: &HashMap<String, String>, family: &str, low: u64, high: u64) {
    let (low, high) = (low.saturating_sub(1), high + 1);
    for (name, v) in percentiles(i, &format!("hold_ms_{family}")) {
        assert!(
            bucket_of(low) <= bucket_of(v) && bucket_of(v) <= bucket_of(high),
            "{family} {name}={v} outside the buckets of [{low}, {high}] ms"
        );
    }
}

/// Every percentile of `lock_hold_ms_<family>` is in the bucket of `ms`.
fn assert_holds_in_bucket_of(i: &HashMap<String, String>, family: &str, ms: u64) {
    for (name, v) in percentiles(i, &format!("hold_ms_{family}")) {
        assert_eq!(bucket_of(v), bucket_of(ms), "{family} {name}={v}, expected the bucket of {ms} ms");
    }
}

fn timing_holds() -> Server {
    Server::builder().arg("lock.hold-timing", "yes").start()
}

fn call(c: &mut redis::Connection, args: &[&str]) -> i64 {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn semaphore_and_rwlock_holds_released_fall_in_the_buckets_the_test_measured() {
    let server = timing_holds();
    let mut c = server.conn();
    let lease = LEASE_MS.to_string();
    for (family, acquire, release) in [
        ("semaphore", [["SEM.ACQUIRE", "s", "a", "2", &lease], ["SEM.ACQUIRE", "s", "b", "2", &lease]], "SEM.RELEASE"),
        (
            "rwlock",
            [["RWLOCK.ACQUIRE", "r", "a", "READ", &lease], ["RWLOCK.ACQUIRE", "r", "b", "READ", &lease]],
            "RWLOCK.RELEASE",
        ),
    ] {
        let key = acquire[0][1];
        let started = Instant::now();
        for a in &acquire {
            assert_eq!(call(&mut c, a), 1, "{a:?}");
        }
        assert_eq!(count(&info(&mut c), "holds_timed"), 2);
        thread::sleep(Duration::from_millis(150));
        // A renewal moves the lease, not the grant.
        let renew = if family == "semaphore" { "SEM.RENEW" } else { "RWLOCK.RENEW" };
        assert_eq!(call(&mut c, &[renew, key, "a", &lease]), 1);
        thread::sleep(Duration::from_millis(150));
        assert_eq!(call(&mut c, &[release, key, "a"]), 1);
        // The last holder's release deletes the key (the module's own
        // `del`): still a release, not a deletion.
        assert_eq!(call(&mut c, &[release, key, "b"]), 1);
        let held = started.elapsed().as_millis() as u64;
        let i = info(&mut c);
        assert_eq!(count(&i, &format!("holds_released_{family}")), 2);
        assert_eq!(count(&i, &format!("holds_deleted_{family}")), 0);
        assert_eq!(count(&i, "holds_timed"), 0);
        assert_holds_between(&i, family, 300, held);
    }
    // A writer granted to a waiter is timed from that grant, not from when
    // it queued (400 ms before). Counted from a reset: the reader's hold
    // and the writer's.
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    assert!(!info(&mut c).contains_key("hold_ms_rwlock"), "reset");
    let reader_started = Instant::now();
    assert_eq!(call(&mut c, &["RWLOCK.ACQUIRE", "w", "reader", "READ", &lease]), 1);
    let port = server.port();
    let (granted_tx, granted) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let waiter = thread::spawn(move || {
        let mut w = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
        let r = call(&mut w, &["RWLOCK.ACQUIRE", "w", "writer", "WRITE", &LEASE_MS.to_string(), "WAIT", "60000"]);
        assert_eq!(r, 1, "granted after the reader left");
        granted_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        assert_eq!(call(&mut w, &["RWLOCK.RELEASE", "w", "writer"]), 1);
        Instant::now()
    });
    support::until_waiting(&mut c, 1);
    thread::sleep(Duration::from_millis(400));
    let before_grant = Instant::now();
    assert_eq!(call(&mut c, &["RWLOCK.RELEASE", "w", "reader"]), 1);
    let reader_held = reader_started.elapsed().as_millis() as u64;
    granted.recv().expect("the waiter's grant");
    assert_eq!(count(&info(&mut c), "holds_timed"), 1, "the waiter's grant is timed");
    thread::sleep(Duration::from_millis(300));
    go.send(()).unwrap();
    let released = waiter.join().expect("the waiter");
    let writer_held = released.duration_since(before_grant).as_millis() as u64;
    let i = info(&mut c);
    assert_eq!(count(&i, "holds_released_rwlock"), 2);
    assert_eq!(count(&i, "holds_timed"), 0);
    // The reader held at least 400 ms, the writer at least 300.
    assert_holds_between(&i, "rwlock", 300, reader_held.max(writer_held));
}

#[test]
fn an_ended_lease_counts_as_expired_with_the_lease_it_was_granted() {
    let server = timing_holds();
    let mut c = server.conn();
    let lease = LEASE_MS.to_string();
    // A 200 ms permit nobody renews, pruned by a later command on its key.
    assert_eq!(call(&mut c, &["SEM.ACQUIRE", "s", "short", "2", "200"]), 1);
    assert_eq!(call(&mut c, &["SEM.ACQUIRE", "s", "long", "2", &lease]), 1);
    thread::sleep(Duration::from_millis(400));
    assert_eq!(call(&mut c, &["SEM.ACQUIRE", "s", "next", "2", &lease]), 1);
    let i = info(&mut c);
    assert_eq!(count(&i, "holds_expired_semaphore"), 1);
    assert_eq!(count(&i, "holds_timed"), 2);
    assert_holds_in_bucket_of(&i, "semaphore", 200);
    // A whole key that expires (Redis's `expired` event): every holder's
    // lease, not the key's life; with a lock-delay the hold ends at the
    // lease end, not the place's (150 ms, not 150 + 300).
    for token in ["r1", "r2"] {
        assert_eq!(call(&mut c, &["RWLOCK.ACQUIRE", "r", token, "READ", "150", "LOCKDELAY", "300"]), 1);
    }
    thread::sleep(Duration::from_millis(700));
    assert_eq!(call(&mut c, &["EXISTS", "r"]), 0, "expired by now");
    let i = info(&mut c);
    assert_eq!(count(&i, "holds_expired_rwlock"), 2);
    assert_eq!(count(&i, "holds_timed"), 2);
    assert_holds_in_bucket_of(&i, "rwlock", 150);
    // A renewed lease that ends: held from the grant to the renewed end
    // (renewed to a shorter lease, so the test need not wait the first).
    let started = Instant::now();
    assert_eq!(call(&mut c, &["SEM.ACQUIRE", "t", "x", "1", "5000"]), 1);
    thread::sleep(Duration::from_millis(50));
    assert_eq!(call(&mut c, &["SEM.RENEW", "t", "x", "300"]), 1);
    let renewed = started.elapsed().as_millis() as u64;
    thread::sleep(Duration::from_millis(500));
    assert_eq!(call(&mut c, &["EXISTS", "t"]), 0, "expired by now");
    let i = info(&mut c);
    assert_eq!(count(&i, "holds_expired_semaphore"), 2);
    let p999 = percentiles(&i, "hold_ms_semaphore")[2].1;
    assert!(
        bucket_of(349) <= bucket_of(p999) && bucket_of(p999) <= bucket_of(300 + renewed + 1),
        "renewed hold p99.9={p999}, expected 300 + [50, {renewed}] ms"
    );
}

#[test]
fn deleting_a_timed_key_frees_its_holds() {
    let server = timing_holds();
    let mut c = server.conn();
    let lease = LEASE_MS.to_string();
    assert_eq!(call(&mut c, &["LOCK.ACQUIRE", "x", "t", &lease]), 1);
    for token in ["a", "b", "c"] {
        assert_eq!(call(&mut c, &["SEM.ACQUIRE", "s", token, "5", &lease]), 1);
    }
    assert_eq!(count(&info(&mut c), "holds_timed"), 4);
    assert_eq!(call(&mut c, &["DEL", "x"]), 1);
    let i = info(&mut c);
    assert_eq!(count(&i, "holds_timed"), 3);
    assert_eq!(count(&i, "holds_deleted_exclusive"), 1);
    assert_eq!(count(&i, "holds_released_exclusive"), 0);
    assert_eq!(call(&mut c, &["UNLINK", "s"]), 1);
    let i = info(&mut c);
    assert_eq!(count(&i, "holds_timed"), 0);
    assert_eq!(count(&i, "holds_deleted_semaphore"), 3);
    // Deleted holds are counted, not timed.
    assert!(!i.contains_key("hold_ms_semaphore"), "{i:?}");
    assert!(!i.contains_key("hold_ms_exclusive"), "{i:?}");
    // Renamed away, moved to another database, overwritten by a rename.
    assert_eq!(call(&mut c, &["RWLOCK.ACQUIRE", "r", "a", "WRITE", &lease]), 1);
    let _: () = redis::cmd("RENAME").arg("r").arg("r2").query(&mut c).unwrap();
    assert_eq!(count(&info(&mut c), "holds_timed"), 0);
    assert_eq!(call(&mut c, &["LOCK.ACQUIRE", "m", "t", &lease]), 1);
    assert_eq!(call(&mut c, &["MOVE", "m", "1"]), 1);
    // Valkey 8.1 leaves the caller in db 1 (docs/compatibility.md).
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    assert_eq!(count(&info(&mut c), "holds_timed"), 0);
    assert_eq!(call(&mut c, &["SEM.ACQUIRE", "d", "t", "1", &lease]), 1);
    let _: () = redis::cmd("RENAME").arg("r2").arg("d").query(&mut c).unwrap();
    let i = info(&mut c);
    assert_eq!(count(&i, "holds_timed"), 0);
    assert_eq!(count(&i, "holds_deleted_rwlock"), 1);
    assert_eq!(count(&i, "holds_deleted_exclusive"), 2);
    assert_eq!(count(&i, "holds_deleted_semaphore"), 4);
    // The module's own writes end nothing as deleted: a release that
    // deletes the key, a renewal that moves its expiry (`expire`).
    assert_eq!(call(&mut c, &["LOCK.ACQUIRE", "x", "t", &lease]), 1);
    assert_eq!(call(&mut c, &["SEM.ACQUIRE", "s", "a", "1", &lease]), 1);
    assert_eq!(call(&mut c, &["LOCK.RENEW", "x", "t", &lease]), 1);
    assert_eq!(call(&mut c, &["SEM.RENEW", "s", "a", &(LEASE_MS * 2).to_string()]), 1);
    assert_eq!(count(&info(&mut c), "holds_timed"), 2);
    assert_eq!(call(&mut c, &["LOCK.RELEASE", "x", "t"]), 1);
    assert_eq!(call(&mut c, &["SEM.RELEASE", "s", "a"]), 1);
    let i = info(&mut c);
    assert_eq!(count(&i, "holds_timed"), 0);
    assert_eq!(count(&i, "holds_released_exclusive"), 1);
    assert_eq!(count(&i, "holds_released_semaphore"), 1);
    assert_eq!(count(&i, "holds_deleted_exclusive"), 2);
    assert_eq!(count(&i, "holds_deleted_semaphore"), 4);
    // A flush forgets every hold (unrecorded).
    assert_eq!(call(&mut c, &["SEM.ACQUIRE", "s", "a", "1", &lease]), 1);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let i = info(&mut c);
    assert_eq!(count(&i, "holds_timed"), 0);
    assert_eq!(count(&i, "holds_deleted_semaphore"), 4);
}

#[test]
fn with_hold_timing_off_nothing_is_tracked() {
    let server = Server::start();
    let mut c = server.conn();
    let lease = LEASE_MS.to_string();
    assert_eq!(call(&mut c, &["SEM.ACQUIRE", "s", "a", "2", &lease]), 1);
    assert_eq!(call(&mut c, &["SEM.ACQUIRE", "s", "b", "2", "100"]), 1);
    assert_eq!(call(&mut c, &["RWLOCK.ACQUIRE", "r", "a", "READ", &lease]), 1);
    assert_eq!(call(&mut c, &["LOCK.ACQUIRE", "x", "t", &lease]), 1);
    assert_eq!(count(&info(&mut c), "holds_timed"), 0);
    thread::sleep(Duration::from_millis(250));
    assert_eq!(call(&mut c, &["SEM.RELEASE", "s", "a"]), 1);
    assert_eq!(call(&mut c, &["DEL", "r", "x"]), 2);
    let i = info(&mut c);
    assert_eq!(count(&i, "holds_timed"), 0);
    // The module's own counters count either way; nothing is timed.
    assert_eq!(count(&i, "holds_released_semaphore"), 1);
    assert_eq!(count(&i, "holds_expired_semaphore"), 1);
    for family in ["exclusive", "semaphore", "rwlock", "election"] {
        assert!(!i.contains_key(&format!("hold_ms_{family}")), "{i:?}");
        assert_eq!(count(&i, &format!("holds_deleted_{family}")), 0, "{family}");
    }
}

/// The randomized workload of `tests/semaphore.rs` and `tests/rwlock.rs`
/// (grants, waits, handovers, renewals, releases, leases that end and are
/// pruned, the queue's timer) with hold timing on: the table times exactly
/// the places the key holds, whatever happened, and a `DEL` ends them all.
#[test]
fn a_randomized_workload_keeps_the_timed_holds_in_step_with_the_key() {
    for (family, name) in [
        (support::holders::Family::Semaphore { limit: 3 }, "semaphore"),
        (support::holders::Family::ReadWrite, "rwlock"),
    ] {
        let server = timing_holds();
        support::holders::random_run(&server, family, 1500, 7);
        let mut c = server.conn();
        let (timed, places) = timed_and_places(&mut c);
        assert_eq!(timed, places, "{name}: every place of the key is timed, nothing else");
        let i = info(&mut c);
        assert!(count(&i, &format!("holds_released_{name}")) > 0, "{name}: {i:?}");
        assert!(i.contains_key(&format!("hold_ms_{name}")), "{name}: {i:?}");
        // The DEL ends every timed hold as deleted; waiters still in line
        // may be granted the key right after, and are timed anew. The
        // places are counted in the same EXEC as the DEL: between two
        // round trips the queue's timer may grant a waiter.
        let (members, _, text): (u64, i64, String) = redis::pipe()
            .atomic()
            .cmd("ZCARD")
            .arg("rand")
            .cmd("DEL")
            .arg("rand")
            .cmd("INFO")
            .arg("lock")
            .query(&mut c)
            .unwrap();
        let deleted = support::parse_lock_info(&text);
        assert_eq!(count(&deleted, &format!("holds_deleted_{name}")), members - 1, "{name}");
        let (timed, places) = timed_and_places(&mut c);
        assert_eq!(timed, places, "{name}: after the DEL");
    }
}

/// `lock_holds_timed` and the places of the key `rand`, read at once (no
/// timer or expiry runs inside `EXEC`).
fn timed_and_places(c: &mut redis::Connection) -> (u64, u64) {
    let (members, text): (u64, String) =
        redis::pipe().atomic().cmd("ZCARD").arg("rand").cmd("INFO").arg("lock").query(c).unwrap();
    let timed = text
        .lines()
        .find_map(|l| l.strip_prefix("lock_holds_timed:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("lock_holds_timed");
    (timed, members.saturating_sub(1))
}
