//! WAIT in a Redis Cluster (the module side): a waiter is granted only on a
//! master that serves the key's slot and is not moving it. MIGRATE deleting
//! a lock on its source is not a release: the waiter there is sent away
//! with `TRYAGAIN` and the lock lives on, once, on the target.

use std::sync::mpsc;
use std::time::Duration;

use redis::Value;
use redis_lock_harness::Cluster;

mod support;
use support::*;

#[test]
fn a_lock_migrated_away_is_not_granted_to_a_waiter_on_its_source() {
    let cluster = Cluster::start(3, 0);
    let key = cluster.key_on("lock:", 0);
    let slot = cluster.slot_of(&key);
    let mut source = cluster.node(0).conn();
    assert_eq!(acquire(&mut source, &key, "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h = waiter(cluster.node(0), &key, "next", 10_000, tx);
    until_waiting(&mut source, 1);

    cluster.open_slot_move(slot, 0, 1);
    cluster.migrate_slot_keys(slot, 0, 1);
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(30)).expect("the waiter is answered at once");
    let Value::SimpleString(error) = reply else { panic!("expected a redirection, got {reply:?}") };
    assert!(error.starts_with("TryAgain") || error.contains("TRYAGAIN"), "{error}");
    assert_eq!(info_field(&mut source, "waits_granted"), 0, "no grant on the source");
    // A migrating node answers for keys it still has and sends the rest on.
    let err = redis::cmd("EXISTS").arg(&key).query::<i64>(&mut source).unwrap_err();
    assert!(err.to_string().starts_with("Ask"), "the source holds no copy: {err}");
    let mut target = cluster.node(1).conn();
    let _: () = redis::cmd("ASKING").query(&mut target).unwrap();
    assert_eq!(get(&mut target, &key).as_deref(), Some("holder"), "the one copy, with its holder");
    h.join().unwrap();

    // The move completes (a later MIGRATE of the slot finds nothing to
    // clash with, as redis-cli's reshard needs).
    cluster.close_slot_move(slot, 0, 1);
    assert_eq!(cluster.owner_of(&key), 1);
    assert_eq!(get(&mut target, &key).as_deref(), Some("holder"));
}
