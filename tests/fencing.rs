//! Fencing tokens: `FENCE` grants reply with a token that strictly
//! increases for every key, across release, expiry, restarts from RDB and
//! AOF, and promotion of a replica.
//!
//! The tests first raise the server's mark a day above the clock floor
//! (Unix µs; a day is as far as a client may push it), so that only the
//! persisted or replicated mark, not the clock, can keep the next fence
//! higher. States no client may bring about (a mark beyond that) come from
//! a replayed AOF, which, like the replication stream, always applies.

use std::time::{Duration, Instant};

use redis::Value;
use redis_lock_harness::Server;

/// How far past its clock floor a client may push a server's mark (24 h in µs).
const HORIZON: u64 = 86_400_000_000;
/// Far beyond any clock floor (Unix ms × 1000 ≈ 1.8e15 in 2026).
const FAR: u64 = 5_000_000_000_000_000_000;

fn fenced(conn: &mut redis::Connection, key: &str, token: &str) -> Option<u64> {
    match redis::cmd("LOCK.ACQUIRE").arg(key).arg(token).arg(60_000).arg("FENCE").query::<Value>(conn).expect("acquire")
    {
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

/// The server's clock floor now (its `TIME` in ms × 1000).
fn clock_floor(conn: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(conn).expect("time");
    (secs * 1000 + micros / 1000) * 1000
}

/// Raises the mark as far as a client may (a day past the clock floor)
/// and returns it.
fn raise_high(conn: &mut redis::Connection) -> u64 {
    let high = clock_floor(conn) + HORIZON;
    raise(conn, high);
    high
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
    let t: i64 =
        redis::cmd("LOCK.TAKEOVER").arg("e").arg("c").arg("run").arg(600_000).arg("FENCE").query(&mut c).unwrap();
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
fn no_client_may_push_the_mark_more_than_a_day_past_the_clock() {
    let server = Server::start();
    let mut c = server.conn();
    let high = raise_high(&mut c);
    for floor in [high + 2_000_000, i64::MAX as u64] {
        let err = redis::cmd("LOCK.FENCEFLOOR").arg(floor).query::<Value>(&mut c).unwrap_err();
        assert!(err.to_string().contains("more than 24 h ahead"), "{err}");
    }
    let fence = fenced(&mut c, "k", "a").expect("granted");
    assert_eq!(fence, high + 1, "the refused floors changed nothing");
}

#[test]
fn renew_with_floor_raises_the_mark_only_for_the_holder() {
    let server = Server::start();
    let mut c = server.conn();
    let first = fenced(&mut c, "k", "a").expect("granted");
    let floor = first + 1_000_000_000;
    let renew = |c: &mut redis::Connection, token: &str, floor: u64| {
        redis::cmd("LOCK.RENEW").arg("k").arg(token).arg(60_000).arg("FLOOR").arg(floor).query::<i64>(c)
    };
    assert_eq!(renew(&mut c, "intruder", floor).unwrap(), 0);
    let next = fenced(&mut c, "other", "x").expect("granted");
    assert!(next < floor, "a refused renewal left the mark alone: {next} < {floor}");
    // The TTL is read in the renewal's own transaction: no time passes.
    let (renewed, pttl): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("LOCK.RENEW")
        .arg("k")
        .arg("a")
        .arg(60_000)
        .arg("FLOOR")
        .arg(floor)
        .cmd("PTTL")
        .arg("k")
        .query(&mut c)
        .unwrap();
    assert_eq!(renewed, 1);
    assert!(pttl > 59_000, "and renewed: {pttl}");
    let after = fenced(&mut c, "third", "x").expect("granted");
    assert_eq!(after, floor + 1);
    let too_far = clock_floor(&mut c) + HORIZON + 5_000_000;
    let err = renew(&mut c, "a", too_far).unwrap_err();
    assert!(err.to_string().contains("more than 24 h ahead"), "{err}");
    let err = redis::cmd("LOCK.RENEW").arg("k").arg("a").arg(1000).arg("FLOOR").query::<Value>(&mut c).unwrap_err();
    assert!(err.to_string().contains("syntax error"), "{err}");
    let pttl: i64 = redis::cmd("PTTL").arg("k").query(&mut c).unwrap();
    assert!(pttl > 1_000, "refused renewals kept the TTL: {pttl}");
}

#[test]
fn a_replica_applies_its_masters_mark_however_far_past_its_own_clock() {
    let master = Server::builder().aof_commands(&[&["LOCK.FENCEFLOOR", &FAR.to_string()]]).start();
    let mut m = master.conn();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_synced(&mut r);
    let granted = fenced(&mut m, "k", "a").expect("granted");
    assert_eq!(granted, FAR + 1, "the AOF's mark applied at load");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let on_replica = fenced(&mut r, "k2", "b").expect("granted on the promoted replica");
    assert_eq!(on_replica, FAR + 2);
}

#[test]
fn an_exhausted_fence_space_refuses_without_granting() {
    // Only a replayed log (or a master) can bring the mark to the end.
    let server = Server::builder().aof_commands(&[&["LOCK.FENCEFLOOR", &i64::MAX.to_string()]]).start();
    let mut c = server.conn();
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
    raise_high(&mut c);
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
    raise_high(&mut c);
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
    let deadline = Instant::now() + Duration::from_secs(30);
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
    raise_high(&mut m);
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_synced(&mut r);
    let granted = fenced(&mut m, "k", "a").expect("granted");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let on_replica = fenced(&mut r, "k2", "b").expect("granted on the promoted replica");
    assert!(on_replica > granted, "{on_replica} > {granted}");
}

fn wait_synced(replica: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query(replica).unwrap();
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(Instant::now() < deadline, "replica did not sync");
        std::thread::sleep(Duration::from_millis(20));
    }
}
