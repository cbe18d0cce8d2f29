//! WAIT outside the calm steady state: paused writes, deadlines near the
//! end of the clock, huge timeouts, many short waits, and the cap on
//! waiters. Each test reproduces a way the server once crashed, hung,
//! leaked or granted when it must not.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;
use redis_lock_harness::Server;

mod support;
use support::*;

fn ping_within(server: &Server, limit: Duration) -> bool {
    let mut c = server.client().get_connection_with_timeout(limit).expect("connect");
    c.set_read_timeout(Some(limit)).unwrap();
    redis::cmd("PING").query::<String>(&mut c).is_ok()
}

fn used_memory(c: &mut redis::Connection) -> i64 {
    let text: String = redis::cmd("INFO").arg("memory").query(c).unwrap();
    text.lines().find_map(|l| l.strip_prefix("used_memory:")).and_then(|v| v.trim().parse().ok()).expect("used_memory")
}

#[test]
fn a_lock_that_expires_while_writes_are_paused_goes_to_its_waiter_only_after_the_pause() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h = waiter(&server, "k", "next", 0, tx);
    until_waiting(&mut c, 1);
    // The lease is cut to 100 ms in the step that pauses writes, so it ends
    // inside the pause however slowly this test runs.
    let paused_at = Instant::now();
    let _: () = redis::pipe()
        .atomic()
        .cmd("LOCK.RENEW")
        .arg("k")
        .arg("holder")
        .arg(100)
        .ignore()
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(600)
        .arg("WRITE")
        .ignore()
        .query(&mut c)
        .unwrap();
    let (token, reply, at) = rx.recv_timeout(Duration::from_secs(30)).expect("granted after the pause");
    assert_eq!((token.as_str(), reply), ("next", Value::Int(1)));
    assert!(
        at.duration_since(paused_at) >= Duration::from_millis(550),
        "granted {:?} into a 600 ms pause",
        at.duration_since(paused_at)
    );
    assert!(ping_within(&server, Duration::from_secs(2)), "the server survived");
    assert_eq!(get(&mut c, "k").as_deref(), Some("next"));
    h.join().unwrap();
}

#[test]
fn a_lock_deleted_in_the_transaction_that_pauses_writes_waits_for_the_pause_to_end() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h = waiter(&server, "k", "next", 0, tx);
    until_waiting(&mut c, 1);
    let started = Instant::now();
    let _: Value = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg("k")
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(400)
        .arg("WRITE")
        .query(&mut c)
        .unwrap();
    let (_, reply, at) = rx.recv_timeout(Duration::from_secs(30)).expect("granted after the pause");
    assert_eq!(reply, Value::Int(1));
    assert!(
        at.duration_since(started) >= Duration::from_millis(350),
        "granted {:?} into a 400 ms pause",
        at.duration_since(started)
    );
    assert!(ping_within(&server, Duration::from_secs(2)));
    h.join().unwrap();
}

#[test]
fn a_graceful_shutdown_waiting_for_a_lagging_replica_neither_grants_nor_crashes() {
    let dir = std::env::temp_dir().join(format!("redis-lock-shutdown-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut master = Server::builder().dir(&dir).arg("save", "3600 1").arg("shutdown-timeout", "5").start();
    let mut c = master.conn();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !redis::cmd("INFO").arg("replication").query::<String>(&mut c).unwrap().contains("connected_slaves:1") {
        assert!(Instant::now() < deadline, "replica did not connect");
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h = waiter(&master, "k", "next", 0, tx);
    until_waiting(&mut c, 1);
    // A stopped replica cannot catch up: SHUTDOWN pauses writes and waits
    // (shutdown-timeout, 5 s) while the holder's lease runs out. The lease
    // is cut to 1.5 s in the same write as the SHUTDOWN, so it ends inside
    // that wait however slowly this test runs.
    replica.set_paused(true);
    let _ = redis::cmd("LOCK.ACQUIRE").arg("other").arg("t").arg(60_000).query::<i64>(&mut c).unwrap();
    let _ = redis::pipe().cmd("LOCK.RENEW").arg("k").arg("holder").arg(1_500).cmd("SHUTDOWN").query::<Value>(&mut c);
    let status = master.wait_exit(Duration::from_secs(30)).expect("the master exits");
    replica.set_paused(false);
    assert!(status.success(), "clean exit, not an assertion: {status:?}\n{}", master.log());
    assert!(dir.join("dump.rdb").exists(), "the final RDB was saved");
    // The waiter was never granted: its connection closed without a grant.
    if let Ok((_, reply, _)) = rx.recv_timeout(Duration::from_secs(2)) {
        assert_ne!(reply, Value::Int(1), "no grant while writes were paused");
    }
    h.join().unwrap();
    drop(master);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_master_that_becomes_a_replica_answers_its_waiters_at_once() {
    let master = Server::start();
    let other = Server::start();
    let mut c = master.conn();
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h = waiter(&master, "k", "next", 0, tx);
    until_waiting(&mut c, 1);
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(other.port()).query(&mut c).unwrap();
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(30)).expect("answered at once");
    let Value::SimpleString(error) = reply else { panic!("expected an error, got {reply:?}") };
    assert!(error.contains("UNBLOCKED"), "{error}");
    assert_eq!(info_field(&mut c, "waiting"), 0);
    assert_eq!(info_field(&mut c, "waits_cancelled"), 1);
    h.join().unwrap();
}

#[test]
fn a_renewal_to_the_end_of_the_clock_leaves_the_server_responsive_and_the_waiter_waiting() {
    let server = Server::start();
    let mut c = server.conn();
    // The queue's check timer is armed at the first lease's end; the renewal
    // must come before that, and the timer then re-armed towards the end of
    // the clock. On a slow run the lease may end first (the waiter is then
    // granted): try a longer one.
    let mut renewed = None;
    for lease in [300, 1_200, 4_800] {
        let r: i64 = redis::cmd("LOCK.ACQUIRE").arg("k").arg("a").arg(lease).query(&mut c).unwrap();
        assert_eq!(r, 1);
        let (tx, rx) = mpsc::channel();
        let h = waiter(&server, "k", "b", 0, tx);
        until_waiting(&mut c, 1);
        let r: i64 = redis::cmd("LOCK.RENEW").arg("k").arg("a").arg("18446744073709551").query(&mut c).unwrap();
        if r == 1 {
            renewed = Some((lease, rx, h));
            break;
        }
        h.join().unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    }
    let (lease, rx, h) = renewed.expect("renewed before a 4.8 s lease ended");
    thread::sleep(Duration::from_millis(lease + 200));
    assert!(ping_within(&server, Duration::from_secs(10)), "PING answers");
    assert!(rx.try_recv().is_err(), "the waiter still waits");
    assert_eq!(info_field(&mut c, "waiting"), 1);
    // Still served when the lock is released.
    assert_eq!(release(&mut c, "k", "a"), 1);
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(reply, Value::Int(1));
    h.join().unwrap();
}

#[test]
fn a_holder_expiring_at_the_end_of_the_clock_leaves_other_timers_working() {
    let server = Server::start();
    let mut c = server.conn();
    // A timer that never fires would hang the wait: fail instead.
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let _: () = redis::cmd("SET").arg("h").arg("x").arg("PXAT").arg("18446744073709552").query(&mut c).unwrap();
    let r: i64 = redis::cmd("LOCK.ACQUIRE").arg("h").arg("t").arg(1000).arg("WAIT").arg(200).query(&mut c).unwrap();
    assert_eq!(r, 0, "the wait timed out");
    // Expiry timers of other keys still fire: with Redis's own expiry off,
    // only the module's timer at the holder's deadline frees the key within
    // the wait.
    without_active_expiry(&mut c);
    let (deadline,): (i64,) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("a")
        .arg(100)
        .ignore()
        .cmd("PEXPIRETIME")
        .arg("k")
        .query(&mut c)
        .unwrap();
    let r: i64 =
        redis::cmd("LOCK.ACQUIRE").arg("k").arg("b").arg(LEASE_MS).arg("WAIT").arg(20_000).query(&mut c).unwrap();
    assert_eq!(r, 1, "granted when the holder expired");
    assert!(granted_at_ms(&mut c, "k") >= deadline, "not before the holder's deadline");
}

#[test]
fn a_wait_timeout_past_the_end_of_the_clock_is_refused_like_blpops() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "a"), 1);
    let err = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("b")
        .arg(1000)
        .arg("WAIT")
        .arg(i64::MAX)
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("timeout is out of range"), "{err}");
    assert_eq!(info_field(&mut c, "waits_started"), 0, "nothing blocked");
}

#[test]
fn a_wait_of_decades_blocks_until_granted() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "a"), 1);
    let (tx, rx) = mpsc::channel();
    // ~35 years: more than one timer may carry, so it is cut into pieces.
    let h = waiter(&server, "k", "b", 1 << 40, tx);
    until_waiting(&mut c, 1);
    thread::sleep(Duration::from_millis(300));
    assert!(rx.try_recv().is_err(), "still waiting");
    assert_eq!(release(&mut c, "k", "a"), 1);
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(reply, Value::Int(1));
    h.join().unwrap();
}

#[test]
fn waits_that_end_without_a_grant_leave_no_timer_or_key_copy_behind() {
    let server = Server::start();
    let mut c = server.conn();
    // Long key names make anything kept per wait visible in used_memory.
    let keys: Vec<String> = (0..100).map(|i| format!("{i}:{}", "k".repeat(100_000))).collect();
    for k in &keys {
        assert_eq!(acquire(&mut c, k, "holder"), 1);
    }
    let before = used_memory(&mut c);
    for k in &keys {
        let r: i64 = redis::cmd("LOCK.ACQUIRE").arg(k).arg("t").arg(1000).arg("WAIT").arg(1).query(&mut c).unwrap();
        assert_eq!(r, 0);
    }
    let grown = used_memory(&mut c) - before;
    assert!(grown < 2_000_000, "100 ended waits on 100 KB keys kept {grown} bytes");
    assert_eq!(info_field(&mut c, "waits_timed_out"), 100);
}

#[test]
fn max_waiters_caps_how_many_clients_may_block() {
    let server = Server::builder().arg("lock.max-waiters", "2").start();
    let mut c = server.conn();
    let got: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("lock.max-waiters").query(&mut c).unwrap();
    assert_eq!(got, ["lock.max-waiters", "2"], "set at load");
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h1 = waiter(&server, "k", "w1", 0, tx.clone());
    let h2 = waiter(&server, "k", "w2", 0, tx.clone());
    until_waiting(&mut c, 2);
    let err =
        redis::cmd("LOCK.ACQUIRE").arg("k").arg("w3").arg(1000).arg("WAIT").arg(0).query::<Value>(&mut c).unwrap_err();
    assert!(err.to_string().contains("lock.max-waiters"), "{err}");
    // A grant that needs no wait is not limited.
    let r: i64 = redis::cmd("LOCK.ACQUIRE").arg("free").arg("w3").arg(1000).arg("WAIT").arg(0).query(&mut c).unwrap();
    assert_eq!(r, 1);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("lock.max-waiters").arg(0).query(&mut c).unwrap();
    let h3 = waiter(&server, "k", "w3", 0, tx);
    until_waiting(&mut c, 3);
    let err = redis::cmd("CONFIG").arg("SET").arg("lock.max-waiters").arg(-1).query::<Value>(&mut c).unwrap_err();
    assert!(err.to_string().contains("max-waiters"), "{err}");
    for _ in 0..3 {
        let holder = get(&mut c, "k").unwrap();
        assert_eq!(release(&mut c, "k", &holder), 1);
        rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    for h in [h1, h2, h3] {
        h.join().unwrap();
    }
}
