//! LOCK.OBSERVE in a Redis Cluster: an observer whose key's slot moves to
//! another master is sent there (`MOVED` or `TRYAGAIN`), whether the slot
//! took an elected key with it (its deletion on the source is an event) or
//! moved with no key at all (found by the periodic check).

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

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
