//! `LockClient::lock_all`: several locks for one token, all or none, within
//! one cumulative wait — on one server (one `LOCK.ACQUIREALL` per 64 keys)
//! and on a cluster (one per slot, in a global order, rolled back when a
//! later group is not granted).

mod support;

use std::thread;

use redis_lock_client::{Error, LockClient, LockOptions};
use redis_lock_harness::{Cluster, Server};
use support::{client, get, ms, rt};

#[test]
fn all_or_none_on_one_server_with_a_rollback_across_groups() {
    let s = Server::start();
    let c = client(&s);
    let locks = c.lock_all(&["b", "a", "c"], ms(10_000), ms(0)).expect("all free");
    assert_eq!(locks.iter().map(|l| l.key()).collect::<Vec<_>>(), ["b", "a", "c"], "in the order named");
    let token = locks[0].token().to_string();
    assert!(locks.iter().all(|l| l.token() == token && l.fence().is_some()));
    for k in ["a", "b", "c"] {
        assert_eq!(get(&s, k).as_deref(), Some(token.as_str()));
    }
    // Another caller waits for all of them, and gets them when they are let go.
    let other = c.clone();
    let waiter = thread::spawn(move || other.lock_all(&["c", "a"], ms(10_000), ms(20_000)));
    thread::sleep(ms(100));
    for l in &locks {
        l.release().unwrap();
    }
    let got = waiter.join().unwrap().expect("granted after the release");
    assert_eq!(get(&s, "a").as_deref(), Some(got[0].token()));
    drop(got);

    // 70 keys: two groups. A key of the second held elsewhere: the first
    // group is granted, then rolled back when the second times out.
    let keys: Vec<String> = (0..70).map(|i| format!("k{i:02}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let blocker = c.try_acquire("k69", ms(30_000)).unwrap();
    match c.lock_all(&keys, ms(10_000), ms(300)) {
        Err(Error::NotAcquired { key }) => assert_eq!(key, "k64"),
        other => panic!("expected NotAcquired, got {other:?}"),
    }
    assert!(keys[..69].iter().all(|k| get(&s, k).is_none()), "rolled back");
    blocker.release().unwrap();
    let all = rt().block_on(c.lock_all_async(&keys, ms(10_000), ms(5_000))).expect("all 70");
    assert_eq!(all.len(), 70);
    // Bad lists are refused before anything is sent.
    assert!(matches!(c.lock_all(&["x", "x"], ms(1000), ms(0)), Err(Error::InvalidArgument(_))));
    assert!(matches!(c.lock_all(&[], ms(1000), ms(0)), Err(Error::InvalidArgument(_))));
    let opts = LockOptions::default().wait_for_replicas(1, ms(100));
    assert!(matches!(c.lock_all_with(&["x"], ms(1000), ms(0), &opts), Err(Error::InvalidArgument(_))));
}

#[test]
fn keys_in_several_slots_of_a_cluster_all_or_none() {
    let cluster = Cluster::start(3, 0);
    let masters = cluster.masters();
    let keys: Vec<String> = masters.iter().map(|&m| cluster.key_on("acct:", m)).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let c = LockClient::open_cluster(&[cluster.node(0).url()]).unwrap();
    let locks = c.lock_all(&keys, ms(10_000), ms(5_000)).expect("every slot");
    for (l, &m) in locks.iter().zip(&masters) {
        assert_eq!(support::cluster::get(&cluster, m, l.key()).as_deref(), Some(l.token()));
    }
    // One key held by another caller: the others are rolled back.
    let other = LockClient::open_cluster(&[cluster.node(1).url()]).unwrap();
    for l in &locks {
        l.release().unwrap();
    }
    let blocker = other.try_acquire(keys[1], ms(30_000)).unwrap();
    assert!(matches!(c.lock_all(&keys, ms(10_000), ms(300)), Err(Error::NotAcquired { .. })));
    for (k, &m) in keys.iter().zip(&masters) {
        let held = support::cluster::get(&cluster, m, k);
        assert!(held.is_none() || held.as_deref() == Some(blocker.token()), "{k}: {held:?}");
    }
    blocker.release().unwrap();
    assert_eq!(c.lock_all(&keys, ms(10_000), ms(5_000)).expect("free again").len(), 3);
}

/// A master killed while a group waits on it: the wait is re-sent to the
/// promoted replica (or fails and rolls back); never a partial hold.
#[test]
fn a_failover_during_the_wait_leaves_all_or_none() {
    let mut cluster = Cluster::start(3, 1);
    let m = cluster.masters();
    let (k0, k1) = (cluster.key_on("fo-a:", m[0]), cluster.key_on("fo-b:", m[1]));
    // A holder with no watchdog: its lease ends a few seconds in.
    let mut owner = cluster.node(m[1]).conn();
    let _: () = redis::cmd("SET").arg(&k1).arg("other").arg("PX").arg(4000).query(&mut owner).unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut owner).unwrap();
    assert_eq!(acked, 1);
    let client = LockClient::open_cluster(&cluster.urls()).unwrap();
    let (c, keys) = (client.clone(), [k0.clone(), k1.clone()]);
    let waiting = thread::spawn(move || c.lock_all(&[&keys[0], &keys[1]], ms(20_000), ms(40_000)));
    thread::sleep(ms(500));
    let promoted = cluster.kill_master(m[1]);
    let outcome = waiting.join().unwrap();
    eprintln!("lock_all through a failover: {:?}", outcome.as_ref().map(Vec::len));
    let held = |k: &str, node: usize| support::cluster::get(&cluster, node, k);
    match outcome {
        Ok(locks) => {
            assert_eq!(held(&k0, m[0]).as_deref(), Some(locks[0].token()));
            assert_eq!(held(&k1, promoted).as_deref(), Some(locks[0].token()));
        }
        Err(e) => {
            let token_free = |v: Option<String>| v.is_none() || v.as_deref() == Some("other");
            assert!(token_free(held(&k0, m[0])) && token_free(held(&k1, promoted)), "{e}: a partial hold");
        }
    }
}
