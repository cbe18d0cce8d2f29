//! LOCK.OBSERVE in a Redis Cluster: an observer whose key's slot moves to
//! another master is sent there (`MOVED` or `TRYAGAIN`), whether the slot
//! took an elected key with it (its deletion on the source is an event) or
//! moved with no key at all (found by the once-a-second slot check), on
//! the master and on its replicas (`READONLY`); and that check costs one
//! `CLUSTER NODES` a second however many keys are observed.

use std::io::Write;
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;
use redis_lock_harness::Cluster;

mod support;
use support::*;

fn observe_on(c: redis::Connection, key: &str, after: i64) -> mpsc::Receiver<redis::RedisResult<Value>> {
    let (tx, rx) = mpsc::channel();
    let key = key.to_string();
    let mut c = c;
    thread::spawn(move || {
        let r = redis::cmd("LOCK.OBSERVE").arg(&key).arg("AFTER").arg(after).arg("WAIT").arg(60_000).query(&mut c);
        let _ = tx.send(r);
    });
    rx
}

fn until_observing(c: &mut redis::Connection, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while info_field(c, "observing") != n {
        assert!(std::time::Instant::now() < deadline, "expected {n} observers");
        thread::sleep(Duration::from_millis(2));
    }
}

fn redirected(rx: &mpsc::Receiver<redis::RedisResult<Value>>) {
    let reply = rx.recv_timeout(Duration::from_secs(30)).expect("the observer is answered");
    let err = reply.expect_err("a redirection").to_string();
    assert!(["Moved", "MOVED", "TryAgain", "TRYAGAIN"].iter().any(|w| err.contains(w)), "{err}");
}

#[test]
fn observers_are_sent_where_the_slot_moved() {
    let cluster = Cluster::start(3, 0);
    let led = cluster.key_on("elect:", 0);
    let empty = cluster.key_on("elect-empty:", 0);
    let mut source = cluster.node(0).conn();
    let term: i64 = redis::cmd("LOCK.ELECT").arg(&led).arg("lead").arg(LEASE_MS).arg("v").query(&mut source).unwrap();
    let on_led = observe_on(cluster.node(0).conn(), &led, term);
    let on_empty = observe_on(cluster.node(0).conn(), &empty, 0);
    until_observing(&mut source, 2);
    // Renewals change no revision: their checks read no topology (only
    // the once-a-second slot check does).
    let (checks, started) = (info_field(&mut source, "observer_slot_checks"), Instant::now());
    for _ in 0..50 {
        let renewed: i64 = redis::cmd("LOCK.RENEW").arg(&led).arg("lead").arg(LEASE_MS).query(&mut source).unwrap();
        assert_eq!(renewed, 1);
    }
    let read = info_field(&mut source, "observer_slot_checks") - checks;
    assert!(read <= started.elapsed().as_secs() + 2, "{read} readings for 50 renewals in {:?}", started.elapsed());
    cluster.move_slot(cluster.slot_of(&led), 1);
    redirected(&on_led);
    if cluster.slot_of(&empty) != cluster.slot_of(&led) {
        cluster.move_slot(cluster.slot_of(&empty), 1);
    }
    redirected(&on_empty);
    assert_eq!(info_field(&mut source, "observing"), 0);
    assert_eq!(info_field(&mut source, "observer_wakes"), 0, "nobody was told of a change that did not happen");
    // The leader lives on, once, on the target.
    let mut target = cluster.node(1).conn();
    let v: Value = redis::cmd("LOCK.LEADER").arg(&led).query(&mut target).unwrap();
    let Value::Array(items) = v else { panic!("a leader on the target: {v:?}") };
    assert_eq!(items.get(3), Some(&Value::Int(term)));
}

fn readonly(c: &mut redis::Connection) {
    let _: () = redis::cmd("READONLY").query(c).expect("READONLY");
}

#[test]
fn observers_on_a_replica_are_sent_where_the_slot_moved() {
    let cluster = Cluster::start(3, 1);
    let master = cluster.owner_of(&cluster.key_on("elect-r:", 0));
    let replica = *cluster.replicas_of(master).first().expect("a replica");
    let target = cluster.masters().into_iter().find(|&m| m != master).expect("another master");
    let moved = cluster.key_on("elect-r:", master);
    // A key of another slot of the same master: its observer stays.
    let stays = (0u64..)
        .map(|n| cluster.key_in_slot(&format!("stay{n}:"), cluster.slot_of(&moved).wrapping_add(1)))
        .find(|k| cluster.owner_of(k) == master)
        .expect("the next slot is the same master's");
    let led = cluster.key_in_slot("elect-led:", cluster.slot_of(&moved));
    let mut on_master = cluster.node(master).conn();
    let term: i64 =
        redis::cmd("LOCK.ELECT").arg(&led).arg("lead").arg(LEASE_MS).arg("v").query(&mut on_master).unwrap();
    let _: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut on_master).unwrap();
    let mut watch = cluster.node(replica).conn();
    let observer = |key: &str, after: i64| {
        let mut c = cluster.node(replica).conn();
        readonly(&mut c);
        observe_on(c, key, after)
    };
    let on_moved = observer(&moved, 0);
    let on_stays = observer(&stays, 0);
    let on_led = observer(&led, term);
    until_observing(&mut watch, 3);
    assert_eq!(info_field(&mut watch, "observer_slot_checks"), 0, "nothing moved, nothing blocked long enough");

    cluster.move_slot(cluster.slot_of(&moved), target);
    // move_slot returned once the replica too sees the new owner.
    let want = format!("127.0.0.1:{}", cluster.node(target).port());
    let reply = on_moved.recv_timeout(Duration::from_secs(10)).expect("answered within 10 s of the move");
    let err = reply.expect_err("a redirection").to_string();
    assert!(err.contains(&want), "MOVED to the new owner: {err}");
    // The led key's deletion reached the replica as a DEL, maybe before it
    // saw the slot leave its master: then it reads as leaderless there,
    // as a GET on the replica would (docs/cluster.md). Either way it is
    // answered, and not with a made-up leader.
    match on_led.recv_timeout(Duration::from_secs(10)).expect("answered within 10 s of the move") {
        Err(e) => assert!(e.to_string().contains(&want), "MOVED to the new owner: {e}"),
        Ok(v) => assert_eq!(v, Value::Nil, "leaderless, never another state"),
    }
    // Two more slot checks later the other slot's observer still waits.
    let checks = info_field(&mut watch, "observer_slot_checks");
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field(&mut watch, "observer_slot_checks") < checks + 2 {
        assert!(Instant::now() < deadline, "the slot check runs on the replica");
        thread::sleep(Duration::from_millis(50));
    }
    assert!(on_stays.try_recv().is_err(), "its master still serves the slot: it waits");
    assert_eq!(info_field(&mut watch, "observing"), 1);
}

/// `field` of `INFO commandstats`'s `cmdstat_<cmd>` line, if the server has it.
fn cmdstat_calls(c: &mut redis::Connection, cmd: &str) -> Option<u64> {
    let text: String = redis::cmd("INFO").arg("commandstats").query(c).expect("info");
    let line = text.lines().find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:")))?;
    line.split(',').find_map(|f| f.strip_prefix("calls=")).and_then(|v| v.parse().ok())
}

#[test]
fn the_slot_check_costs_one_cluster_nodes_a_second_however_many_keys_are_observed() {
    const KEYS: usize = 200;
    let cluster = Cluster::start(3, 0);
    let slots = cluster.view(0).slots;
    let keys: Vec<String> = (0u64..)
        .map(|n| format!("many:{n}"))
        .filter(|k| slots.binary_search(&cluster.slot_of(k)).is_ok())
        .take(KEYS)
        .collect();
    // One connection per observer, written to and never read: a blocked
    // LOCK.OBSERVE each, no thread each.
    let _observers: Vec<TcpStream> = keys
        .iter()
        .map(|k| {
            let mut s = TcpStream::connect(("127.0.0.1", cluster.node(0).port())).expect("connect");
            let args = ["LOCK.OBSERVE", k.as_str(), "AFTER", "0", "WAIT", "120000"];
            let mut resp = format!("*{}\r\n", args.len());
            for a in args {
                resp.push_str(&format!("${}\r\n{a}\r\n", a.len()));
            }
            s.write_all(resp.as_bytes()).expect("send");
            s
        })
        .collect();
    let mut c = cluster.node(0).conn();
    until_observing(&mut c, KEYS as u64);
    // The check runs (once a second; allow a loaded machine 30 s)...
    let first = info_field(&mut c, "observer_slot_checks");
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field(&mut c, "observer_slot_checks") == first {
        assert!(Instant::now() < deadline, "the slot check runs");
        thread::sleep(Duration::from_millis(50));
    }
    // ...and over a few seconds costs about one reading a second, not one
    // per key (which was 200 a second). Nothing else reads CLUSTER NODES
    // on this node meanwhile: no key changes, no harness call.
    let (checks, calls, started) =
        (info_field(&mut c, "observer_slot_checks"), cmdstat_calls(&mut c, "cluster|nodes"), Instant::now());
    thread::sleep(Duration::from_secs(3));
    let (checks2, calls2) = (info_field(&mut c, "observer_slot_checks"), cmdstat_calls(&mut c, "cluster|nodes"));
    let bound = started.elapsed().as_secs() + 2;
    assert!(checks2 - checks <= bound, "{} slot checks in {:?} for {KEYS} keys", checks2 - checks, started.elapsed());
    if let (Some(a), Some(b)) = (calls, calls2) {
        assert!(b - a <= bound, "{} CLUSTER NODES calls in {:?}", b - a, started.elapsed());
    }
    assert_eq!(info_field(&mut c, "observing"), KEYS as u64, "nobody was sent away");
}

/// Waits until `c`'s module has read the cluster `n` more times for its
/// observers (each tick of the slot check is one reading).
fn slot_checks_pass(c: &mut redis::Connection, n: u64) {
    let from = info_field(c, "observer_slot_checks");
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field(c, "observer_slot_checks") < from + n {
        assert!(Instant::now() < deadline, "the slot check runs");
        thread::sleep(Duration::from_millis(50));
    }
}

fn tryagain(rx: &mpsc::Receiver<redis::RedisResult<Value>>) {
    let reply = rx.recv_timeout(Duration::from_secs(30)).expect("the observer is answered");
    let err = reply.expect_err("a redirection").to_string();
    assert!(err.contains("TryAgain") || err.contains("TRYAGAIN"), "{err}");
}

#[test]
fn while_a_slot_migrates_observers_of_a_key_still_here_wait_and_importers_keep_theirs() {
    let cluster = Cluster::start(3, 0);
    let led = cluster.key_on("elect-m:", 0);
    let slot = cluster.slot_of(&led);
    let empty = cluster.key_in_slot("elect-m-empty:", slot);
    let mut source = cluster.node(0).conn();
    let mut target = cluster.node(1).conn();
    let term: i64 = redis::cmd("LOCK.ELECT").arg(&led).arg("lead").arg(LEASE_MS).arg("v").query(&mut source).unwrap();
    let on_led = observe_on(cluster.node(0).conn(), &led, term);
    let on_empty = observe_on(cluster.node(0).conn(), &empty, 0);
    until_observing(&mut source, 2);

    cluster.open_slot_move(slot, 0, 1);
    // The absent key's observers are sent on; the present key's stay and
    // still see its changes, made here.
    tryagain(&on_empty);
    slot_checks_pass(&mut source, 2);
    assert_eq!(info_field(&mut source, "observing"), 1, "the led key is still here");
    let _: i64 = redis::cmd("LOCK.PROCLAIM").arg(&led).arg("lead").arg("v2").query(&mut source).unwrap();
    let v = on_led.recv_timeout(Duration::from_secs(30)).expect("woken").expect("the new state");
    let Value::Array(items) = v else { panic!("a leader: {v:?}") };
    // value V term T rev R ttl-ms L, as LOCK.LEADER replies.
    let Some(&Value::Int(rev)) = items.get(5) else { panic!("a rev: {items:?}") };
    assert!(rev > term, "a proclaim takes a new revision: {items:?}");
    let on_led = observe_on(cluster.node(0).conn(), &led, rev);
    // An observer sent to the importing node (ASKING) waits there.
    let mut asking = cluster.node(1).conn();
    let _: () = redis::cmd("ASKING").query(&mut asking).unwrap();
    let on_target = observe_on(asking, &empty, 0);
    until_observing(&mut source, 1);
    until_observing(&mut target, 1);
    slot_checks_pass(&mut target, 2);
    assert_eq!(info_field(&mut target, "observing"), 1, "importing: it waits");

    // MIGRATE takes the led key: its observers are sent on, not told "no leader".
    cluster.migrate_slot_keys(slot, 0, 1);
    tryagain(&on_led);
    cluster.close_slot_move(slot, 0, 1);
    slot_checks_pass(&mut target, 2);
    assert_eq!(info_field(&mut target, "observing"), 1, "the target now serves it");
    let term2: i64 =
        redis::cmd("LOCK.ELECT").arg(&empty).arg("next").arg(LEASE_MS).arg("w").query(&mut target).unwrap();
    let v = on_target.recv_timeout(Duration::from_secs(30)).expect("woken").expect("the leader");
    let Value::Array(items) = v else { panic!("a leader: {v:?}") };
    assert_eq!(items.get(3), Some(&Value::Int(term2)), "{items:?}");
    assert_eq!(info_field(&mut source, "observer_wakes"), 1, "the proclaim, nothing else");
}

/// `LOCK.OBSERVE key AFTER after WAIT 60000` on `c` from a new thread; the
/// reply comes back with the connection.
fn observe_keeping(
    mut c: redis::Connection,
    key: &str,
    after: i64,
) -> mpsc::Receiver<(redis::RedisResult<Value>, redis::Connection)> {
    let (tx, rx) = mpsc::channel();
    let key = key.to_string();
    thread::spawn(move || {
        let r = redis::cmd("LOCK.OBSERVE").arg(&key).arg("AFTER").arg(after).arg("WAIT").arg(60_000).query(&mut c);
        let _ = tx.send((r, c));
    });
    rx
}

/// Every observation that started ended once: as woken, timed out or
/// cancelled, or still blocks.
fn observations_add_up(c: &mut redis::Connection) {
    let started = info_field(c, "observes_started");
    let ended =
        info_field(c, "observer_wakes") + info_field(c, "observer_timeouts") + info_field(c, "observers_cancelled");
    assert_eq!(started, ended + info_field(c, "observing"));
}

#[test]
fn a_failover_answers_each_observer_and_waiter_once() {
    let cluster = Cluster::start(3, 1);
    let master = cluster.owner_of(&cluster.key_on("elect-f:", 0));
    let replica = *cluster.replicas_of(master).first().expect("a replica");
    let led = cluster.key_on("elect-f:", master);
    let mut on_master = cluster.node(master).conn();
    let term: i64 =
        redis::cmd("LOCK.ELECT").arg(&led).arg("lead").arg(LEASE_MS).arg("v").query(&mut on_master).unwrap();
    let _: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut on_master).unwrap();
    let on_old_master = observe_keeping(cluster.node(master).conn(), &led, term);
    let mut ro = cluster.node(replica).conn();
    readonly(&mut ro);
    let on_promoted = observe_keeping(ro, &led, term);
    let mut promoted = cluster.node(replica).conn();
    until_observing(&mut on_master, 1);
    until_observing(&mut promoted, 1);
    // A waiter for the led key on the old master.
    let (tx, waiter) = mpsc::channel();
    let mut w = cluster.node(master).conn();
    let wkey = led.clone();
    std::thread::spawn(move || {
        let r: redis::RedisResult<Value> =
            redis::cmd("LOCK.ACQUIRE").arg(&wkey).arg("w").arg(LEASE_MS).arg("WAIT").arg(120_000).query(&mut w);
        let _ = tx.send(r);
    });
    while info_field(&mut on_master, "waiting") != 1 {
        std::thread::sleep(Duration::from_millis(10));
    }

    assert_eq!(cluster.failover(master, ""), replica);
    // The old master, now a replica, unblocked its observer (Redis does,
    // when a master becomes a replica); valkey may send it to the new one.
    let (r, _) = on_old_master.recv_timeout(Duration::from_secs(30)).expect("answered");
    let err = r.expect_err("unblocked or sent on").to_string();
    assert!(["UNBLOCKED", "Moved", "MOVED"].iter().any(|w| err.contains(w)), "{err}");
    // Its waiter too (valkey 9.1 leaves module-blocked clients blocked on
    // a demoted master: the module answers them), never granted there.
    let r = waiter.recv_timeout(Duration::from_secs(30)).expect("the waiter answered");
    let err = r.expect_err("not granted on a replica").to_string();
    assert!(["UNBLOCKED", "Moved", "MOVED", "TRYAGAIN", "TryAgain"].iter().any(|w| err.contains(w)), "{err}");
    // The promoted replica serves the slot: its observer stays, through
    // slot checks, and is woken by the next change, once.
    slot_checks_pass(&mut promoted, 2);
    assert_eq!(info_field(&mut promoted, "observing"), 1);
    let _: i64 = redis::cmd("LOCK.PROCLAIM").arg(&led).arg("lead").arg("v2").query(&mut promoted).unwrap();
    let (r, mut c) = on_promoted.recv_timeout(Duration::from_secs(30)).expect("woken");
    let Value::Array(items) = r.expect("the new state") else { panic!("a leader") };
    assert_eq!(items.get(3), Some(&Value::Int(term)), "the same leader: {items:?}");
    assert_eq!(items.get(1), Some(&Value::BulkString(b"v2".to_vec())), "{items:?}");
    // A second answer would be read here in place of PONG.
    let pong: String = redis::cmd("PING").query(&mut c).expect("ping");
    assert_eq!(pong, "PONG");
    for i in [master, replica] {
        observations_add_up(&mut cluster.node(i).conn());
    }
    assert_eq!(info_field(&mut promoted, "observing"), 0);
}
