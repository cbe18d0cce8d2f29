//! WAIT in a Redis Cluster (the module side): a waiter is granted only on a
//! master that serves the key's slot and is not moving it. MIGRATE deleting
//! a lock on its source is not a release: the waiter there is sent away
//! with `TRYAGAIN` and the lock lives on, once, on the target. A revoke
//! (LOCK.REVOKE) on each master ends its hold at the deadline for the
//! waiter there, a session's lock included, and a failover keeps it.

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

fn lock_field(c: &mut redis::Connection, key: &str, field: &str) -> Value {
    let Value::Array(f) = redis::cmd("LOCK.INFO").arg(key).query::<Value>(c).unwrap() else { panic!("LOCK.INFO") };
    let at = f.iter().position(|v| *v == Value::BulkString(field.as_bytes().to_vec())).expect("the field");
    f[at + 1].clone()
}

fn revoke_deadline(c: &mut redis::Connection, key: &str, grace: &str) -> i64 {
    let reply: Vec<Value> = redis::cmd("LOCK.REVOKE").arg(key).arg("GRACE").arg(grace).query(c).unwrap();
    assert_eq!(reply[1], Value::BulkString(b"revoked".to_vec()), "{reply:?}");
    let Value::Int(deadline) = reply[5] else { panic!("{reply:?}") };
    deadline
}

#[test]
fn a_revoke_on_each_master_ends_at_its_deadline_for_its_waiter_and_survives_a_failover() {
    let cluster = Cluster::start(3, 1);
    let masters = cluster.masters();
    let (tx, rx) = mpsc::channel();
    let mut deadlines = Vec::new();
    let mut waiters = Vec::new();
    for (i, &m) in masters.iter().enumerate() {
        let key = cluster.key_on("revoked:", m);
        let mut c = cluster.node(m).conn();
        if i == 1 {
            // A session's lock: revoked alone, heard by the keepalive.
            let id: String = redis::cmd("SESSION.GRANT").arg(600_000).query(&mut c).unwrap();
            let taken: i64 = redis::cmd("LOCK.ACQUIRE")
                .arg(&key)
                .arg("t")
                .arg(600_000)
                .arg("SESSION")
                .arg(&id)
                .query(&mut c)
                .unwrap();
            assert_eq!(taken, 1);
            deadlines.push(revoke_deadline(&mut c, &key, "4000"));
            let kept: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(&id).query(&mut c).unwrap();
            assert_eq!(kept, vec![-600_000]);
        } else {
            assert_eq!(acquire(&mut c, &key, "t"), 1);
            deadlines.push(revoke_deadline(&mut c, &key, "4000"));
        }
        assert_eq!(lock_field(&mut c, &key, "hold-until"), Value::Int(deadlines[i]));
        if i > 0 {
            waiters.push(waiter(cluster.node(m), &key, &format!("next-{i}"), 60_000, tx.clone()));
            until_waiting(&mut c, 1);
        }
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut c).unwrap();
        assert_eq!(acked, 1, "the replica has the revoke");
    }
    // The first master fails over: its replica ends the hold at the same deadline.
    let first = cluster.key_on("revoked:", masters[0]);
    let promoted = cluster.failover(masters[0], "");
    let mut p = cluster.node(promoted).conn();
    // (A failover slower than the grace leaves the end to the old master.)
    if server_ms(&mut p) < deadlines[0] - 100 {
        assert_eq!(lock_field(&mut p, &first, "hold-until"), Value::Int(deadlines[0]));
    }
    for _ in 0..2 {
        let (who, reply, _) = rx.recv_timeout(Duration::from_secs(60)).expect("a waiter is granted");
        assert_eq!(reply, Value::Int(1), "{who}");
    }
    for (i, &m) in masters.iter().enumerate().skip(1) {
        let mut c = cluster.node(m).conn();
        let now = server_ms(&mut c);
        assert!(now >= deadlines[i], "granted before the deadline on master {m}");
        assert_eq!(get(&mut c, &cluster.key_on("revoked:", m)).as_deref(), Some(format!("next-{i}").as_str()));
        assert_eq!(info_field(&mut c, "revoked_ends"), 1, "master {m}");
    }
    while server_ms(&mut p) < deadlines[0] {
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..1_000 {
        if !redis::cmd("EXISTS").arg(&first).query::<bool>(&mut p).unwrap() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(acquire(&mut p, &first, "after"), 1, "free after the deadline on the promoted replica");
    // Counted once: by the promoted replica, or by the old master if it
    // ended the hold before the failover.
    let old = info_field(&mut cluster.node(masters[0]).conn(), "revoked_ends");
    assert_eq!(info_field(&mut p, "revoked_ends") + old, 1, "counted once");
    for w in waiters {
        w.join().unwrap();
    }
}

fn server_ms(c: &mut redis::Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(c).unwrap();
    s * 1_000 + us / 1_000
}
