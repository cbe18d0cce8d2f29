//! `LockOptions::wait_for_replicas`: a lock is handed out only once its
//! grant reached that many replicas; otherwise it is released and the
//! acquisition fails with `Error::NotReplicated`.

mod support;

use std::time::{Duration, Instant};

use redis_lock_client::{Error, LockClient, LockOptions};
use redis_lock_harness::{Cluster, Server};
use support::{get, ms};

fn replica_of(master: &Server) -> Server {
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !redis::cmd("INFO")
        .arg("replication")
        .query::<String>(&mut replica.conn())
        .unwrap()
        .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "replica did not sync");
        std::thread::sleep(ms(20));
    }
    replica
}

#[test]
fn a_lock_is_handed_out_once_its_replica_has_it_and_released_when_none_answers() {
    let master = Server::start();
    let replica = replica_of(&master);
    let client = LockClient::open(&master.url()).unwrap();
    let opts = LockOptions::new().wait_for_replicas(1, ms(1500));

    let lock = client.try_acquire_with("k", ms(30_000), &opts).unwrap();
    assert_eq!(
        get(&replica, "k").as_deref(),
        Some(lock.token()),
        "the replica has the grant when the lock is handed out"
    );
    lock.release().unwrap();

    // A grant from the server's wait queue, which this connection did not
    // write, is confirmed the same way.
    let holder = client.try_acquire("q", ms(30_000)).unwrap();
    let c2 = client.clone();
    let o2 = opts.clone();
    let waiter = std::thread::spawn(move || c2.acquire_with("q", ms(30_000), ms(20_000), &o2));
    std::thread::sleep(ms(100));
    holder.release().unwrap();
    let queued = waiter.join().unwrap().unwrap();
    assert_eq!(get(&replica, "q").as_deref(), Some(queued.token()));

    // A replica that cannot answer: the lock is released, not handed out.
    replica.set_paused(true);
    let err = client.try_acquire_with("k2", ms(30_000), &opts).unwrap_err();
    replica.set_paused(false);
    assert!(matches!(err, Error::NotReplicated { acked: 0, wanted: 1, .. }), "{err}");
    assert_eq!(get(&master, "k2"), None, "released again");

    // Asking more of a timeout than the response timeout allows is refused.
    let slow = LockOptions::new().wait_for_replicas(1, Duration::from_secs(5));
    assert!(matches!(client.try_acquire_with("k3", ms(30_000), &slow), Err(Error::InvalidArgument(_))));
}

#[test]
fn async_locks_wait_for_replicas_too() {
    let master = Server::start();
    let replica = replica_of(&master);
    let client = LockClient::open(&master.url()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let lock = rt
        .block_on(client.try_acquire_with_async("a", ms(30_000), &LockOptions::new().wait_for_replicas(1, ms(1500))))
        .unwrap();
    assert_eq!(get(&replica, "a").as_deref(), Some(lock.token()));
    // The one replica's ack must come within the wait (1.5 s, as above:
    // 200 ms was short for a loaded machine, then acked 0).
    let err = rt
        .block_on(client.try_acquire_with_async("b", ms(30_000), &LockOptions::new().wait_for_replicas(2, ms(1500))))
        .unwrap_err();
    assert!(matches!(err, Error::NotReplicated { acked: 1, wanted: 2, .. }), "{err}");
}

#[test]
fn in_a_cluster_the_owners_replica_has_the_grant() {
    let c = Cluster::start(3, 1);
    let client = LockClient::open_cluster(&c.urls()).unwrap();
    let opts = LockOptions::new().wait_for_replicas(1, ms(1500));
    for m in c.masters() {
        let key = c.key_on("rep:", m);
        let lock = client.try_acquire_with(&key, ms(30_000), &opts).unwrap();
        let replica = c.replicas_of(m)[0];
        let mut con = c.node(replica).conn();
        let _: () = redis::cmd("READONLY").query(&mut con).unwrap();
        let on_replica: Option<String> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        assert_eq!(on_replica.as_deref(), Some(lock.token()), "master {m}'s replica");
        lock.release().unwrap();
    }
    // Waited long enough for the one replica to ack on a loaded machine.
    let err =
        client.try_acquire_with("rep:x", ms(30_000), &LockOptions::new().wait_for_replicas(2, ms(1500))).unwrap_err();
    assert!(matches!(err, Error::NotReplicated { acked: 1, wanted: 2, .. }), "{err}");
}
