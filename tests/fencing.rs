//! Fencing tokens: `FENCE` grants reply with a token that strictly
//! increases for every key, across release, expiry, restarts from RDB and
//! AOF, and promotion of a replica.
//!
//! The tests first raise the server's mark far above the clock floor
//! (Unix µs), so that only the persisted or replicated mark, not the clock,
//! can keep the next fence higher.

use std::time::{Duration, Instant};

use redis::Value;
use redis_lock_harness::Server;

/// Well above any clock floor (Unix ms × 1000 ≈ 1.8e15 in 2026).
const HIGH: u64 = 100_000_000_000_000_000;

fn fenced(conn: &mut redis::Connection, key: &str, token: &str) -> Option<u64> {
    match redis::cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(60_000).arg("FENCE").query::<Value>(conn).expect("acquire") {
        Value::Int(n) => Some(u64::try_from(n).expect("positive fence")),
        Value::Nil => None,
        other => panic!("unexpected reply {other:?}"),
    }
}

fn release(conn: &mut redis::Connection, key: &str, token: &str) {
    let released: i64 = redis::cmd("LOCK.RELEASE").arg(key).arg(token).query(conn).expect("release");
    assert_eq!(released, 1);
}

fn raise(conn: &mut redis::Connection, floor: u64) {
    let _: () = redis::cmd("LOCK.FENCEFLOOR").arg(floor).query(conn).expect("fencefloor");
}

#[test]
fn successive_grants_of_a_key_get_increasing_fences() {
    let server = Server::start();
    let mut c = server.conn();
    let first = fenced(&mut c, "k", "a").expect("granted");
    assert!(first > 0);
    assert_eq!(fenced(&mut c, "k", "b"), None, "a refused FENCE grant replies nil");
    let renewed: i64 = redis::cmd("LOCK.RENEW").arg("k").arg("a").arg(60_000).query(&mut c).unwrap();
    assert_eq!(renewed, 1);
    release(&mut c, "k", "a");
    let second = fenced(&mut c, "k", "b").expect("granted after release");
    assert!(second > first, "{second} > {first}");
    // Expiry and re-grant.
    let _: Value = redis::cmd("LOCK.ACQUIRE").arg("e").arg("a").arg(30).arg("fence").query(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(80));
    let after_expiry = fenced(&mut c, "e", "b").expect("granted after expiry");
    assert!(after_expiry > second);
    // TAKEOVER hands out fences from the same sequence.
    // (The bare lock has ~60 s left: a 10-minute TTL makes it stale.)
    let t: i64 = redis::cmd("LOCK.TAKEOVER").arg("e").arg("c").arg("run").arg(600_000).arg("FENCE").query(&mut c).unwrap();
    assert!(t as u64 > after_expiry, "stale-legacy takeover fence {t} > {after_expiry}");
}

#[test]
fn without_fence_the_replies_stay_one_and_zero() {
    let server = Server::start();
    let mut c = server.conn();
    let r: i64 = redis::cmd("LOCK.ACQUIRE").arg("k").arg("a").arg(1000).query(&mut c).unwrap();
    assert_eq!(r, 1);
    let r: i64 = redis::cmd("LOCK.ACQUIRE").arg("k").arg("b").arg(1000).query(&mut c).unwrap();
    assert_eq!(r, 0);
}

#[test]
fn options_are_checked_before_anything_changes() {
    let server = Server::start();
    let mut c = server.conn();
    for (args, msg) in [
        (vec!["LOCK.ACQUIRE", "k", "a", "1000", "FENCES"], "syntax error"),
        (vec!["LOCK.ACQUIRE", "k", "a", "1000", "WAIT", "-1"], "WAIT timeout-ms must be"),
        (vec!["LOCK.ACQUIRE", "k", "a", "1000", "WAIT"], "syntax error"),
        (vec!["LOCK.TAKEOVER", "k", "a", "r", "1000", "WAIT", "10"], "syntax error"),
        (vec!["LOCK.TAKEOVER", "k", "a", "r", "1000", "fence", "x"], "syntax error"),
        (vec!["LOCK.FENCEFLOOR", "-1"], "fence must be a non-negative integer"),
        (vec!["LOCK.FENCEFLOOR"], "wrong number of arguments"),
    ] {
        let err = redis::cmd(args[0]).arg(&args[1..]).query::<Value>(&mut c).unwrap_err();
        assert!(err.to_string().contains(msg), "{args:?}: {err}");
    }
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut c).unwrap();
    assert_eq!(exists, 0);
}

#[test]
fn an_exhausted_fence_space_refuses_without_granting() {
    let server = Server::start();
    let mut c = server.conn();
    raise(&mut c, i64::MAX as u64);
    let err = redis::cmd("LOCK.ACQUIRE").arg("k").arg("a").arg(1000).arg("FENCE").query::<Value>(&mut c).unwrap_err();
    assert!(err.to_string().contains("exhausted"), "{err}");
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut c).unwrap();
    assert_eq!(exists, 0, "no lock without its fence");
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("redis-lock-fencing-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn fences_keep_increasing_after_save_and_restart() {
    let dir = temp_dir("rdb");
    let mut server = Server::builder().dir(&dir).start();
    let mut c = server.conn();
    raise(&mut c, HIGH);
    let before = fenced(&mut c, "k", "a").expect("granted");
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    server.restart();
    let mut c = server.conn();
    release(&mut c, "k", "a");
    let after = fenced(&mut c, "k", "b").expect("granted");
    assert!(after > before, "{after} > {before}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

fn aof_restart(preamble: &str) {
    let dir = temp_dir(&format!("aof-{preamble}"));
    let mut server = Server::builder()
        .arg("appendonly", "yes")
        .arg("appendfsync", "always")
        .arg("aof-use-rdb-preamble", preamble)
        .dir(&dir)
        .start();
    let mut c = server.conn();
    raise(&mut c, HIGH);
    let before = fenced(&mut c, "k", "a").expect("granted");
    // A rewrite puts the mark into the preamble (or drops it without one:
    // then the FENCEFLOOR records after the rewrite must carry it).
    let _: () = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
    wait_for(&mut c, "aof_rewrite_in_progress:0");
    let again = fenced(&mut c, "k2", "a").expect("granted");
    assert!(again > before);
    server.restart();
    let mut c = server.conn();
    let after = fenced(&mut c, "k3", "b").expect("granted");
    assert!(after > again, "preamble {preamble}: {after} > {again}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

fn wait_for(c: &mut redis::Connection, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
        if info.contains(needle) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {needle}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn fences_keep_increasing_after_an_aof_restart_with_rdb_preamble() {
    aof_restart("yes");
}

#[test]
fn fences_keep_increasing_after_an_aof_restart_without_rdb_preamble() {
    aof_restart("no");
}

#[test]
fn a_promoted_replica_continues_above_the_masters_fences() {
    let master = Server::start();
    let mut m = master.conn();
    raise(&mut m, HIGH);
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut r).unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "replica did not sync");
        std::thread::sleep(Duration::from_millis(20));
    }
    let granted = fenced(&mut m, "k", "a").expect("granted");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let on_replica = fenced(&mut r, "k2", "b").expect("granted on the promoted replica");
    assert!(on_replica > granted, "{on_replica} > {granted}");
}
