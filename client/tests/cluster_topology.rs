//! The client and the CLI while a real local Redis Cluster (3 masters, one
//! replica each) changes under them: locks held through slot moves (by hand
//! and `redis-cli --cluster reshard`) and failovers (manual and kill -9)
//! keep renewing or report their loss; waits follow `MOVED` and `ASK`.
//! One cluster, one test: each step changes the topology the next one
//! starts from.

mod cli_support;
mod support;

use std::process::{Command, Stdio};
use std::time::Instant;

use cli_support::BIN;
use redis_lock_client::{Error, Lock, LockClient, LockOptions, WatchdogOptions};
use redis_lock_harness::Cluster;
use support::cluster::{get, pttl};
use support::ms;

/// The lock is held, and its owner (wherever the slot is now) has its
/// token: as its own lease (a TTL), or as a session's lock (no TTL).
fn assert_held(c: &Cluster, lock: &Lock, what: &str) {
    assert!(lock.is_held(), "{what}: lost ({:?})", lock.loss_reason());
    let owner = c.owner_of(lock.key());
    let value = get(c, owner, lock.key()).unwrap_or_default();
    let by_session = value.contains("\"session\":") && value.contains(&format!("\"token\":\"{}\"", lock.token()));
    assert!(value == lock.token() || by_session, "{what}: token on node {owner}: {value}");
    assert!(by_session || pttl(c, owner, lock.key()) > 0, "{what}");
}

/// Waits until `client` sees a waiter queued on `key`.
fn until_queued(client: &LockClient, key: &str) {
    let deadline = Instant::now() + ms(5000);
    while client.info(key).unwrap().map_or(0, |i| i.waiters) == 0 {
        assert!(Instant::now() < deadline, "no waiter queued on {key}");
        std::thread::sleep(ms(10));
    }
}

#[test]
fn locks_survive_slot_moves_and_failovers() {
    let mut c = Cluster::start(3, 1);
    let m = c.masters();
    let client = LockClient::open_cluster(&c.urls()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let watchdog = LockOptions::new().watchdog(WatchdogOptions::new());

    // --- Slot moves under held locks (TTL 2 s, renewed every 667 ms). ---
    // A: the lowest slot of m0, which redis-cli --cluster reshard moves.
    let key_a = c.key_in_slot("held-a:", c.view(m[0]).slots[0]);
    let key_b = c.key_on("held-b:", m[1]);
    let key_c = c.key_on("held-c:", m[2]);
    let lock_a = client.try_acquire_with(&key_a, ms(2000), &watchdog).unwrap();
    let lock_b = rt.block_on(client.try_acquire_with_async(&key_b, ms(2000), &watchdog)).unwrap();
    let cli = Command::new(BIN)
        .args(["run", "--cluster", "--url", &c.node(m[1]).url(), "--ttl", "2000", &key_c, "--", "sleep", "9"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + ms(10_000);
    while get(&c, m[2], &key_c).is_none() {
        assert!(Instant::now() < deadline, "the CLI never took {key_c}");
        std::thread::sleep(ms(10));
    }

    let moved = c.reshard(m[0], m[1], 1);
    assert_eq!(moved, vec![c.slot_of(&key_a)]);
    c.move_slot(c.slot_of(&key_b), m[2]);
    c.move_slot(c.slot_of(&key_c), m[0]);
    assert_eq!((c.owner_of(&key_a), c.owner_of(&key_b), c.owner_of(&key_c)), (m[1], m[2], m[0]));
    std::thread::sleep(ms(5000)); // 2.5 TTLs after the moves
    assert_held(&c, &lock_a, "sync lock through redis-cli reshard");
    assert_held(&c, &lock_b, "async lock through SETSLOT/MIGRATE");
    let out = cli.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "the CLI kept its lock: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(get(&c, m[0], &key_c), None, "and released it on its new owner");
    let fence_a = lock_a.fence().unwrap();
    lock_a.release().unwrap();
    rt.block_on(lock_b.release_async()).unwrap();

    // --- A wait follows MOVED from the owner it knew to the new one. ---
    let waiter = LockClient::open_cluster(&c.urls()).unwrap();
    let holder = lock_on(&client, &key_a);
    let t = spawn_wait(&waiter, &key_a);
    until_queued(&client, &key_a);
    holder.release().unwrap();
    let got = t.join().unwrap().unwrap();
    assert!(got.fence().unwrap() > fence_a);
    got.release().unwrap();
    c.move_slot(c.slot_of(&key_a), m[2]); // the waiter's client still thinks m1
    let holder = lock_on(&client, &key_a);
    let t = spawn_wait(&waiter, &key_a);
    until_queued(&client, &key_a);
    assert_eq!(c.owner_of(&key_a), m[2]);
    holder.release().unwrap();
    let got = t.join().unwrap().unwrap();
    assert_held(&c, &got, "granted by the new owner after MOVED");
    got.release().unwrap();

    // --- A wait granted through ASK while its slot is half moved. ---
    let key_d = c.key_on("ask-d:", m[2]);
    let slot_d = c.slot_of(&key_d);
    let asker = LockClient::open_cluster(&[c.node(m[2]).url()]).unwrap();
    asker.try_acquire(&c.key_on("warm:", m[1]), ms(10_000)).unwrap().release().unwrap(); // learns: module
    c.open_slot_move(slot_d, m[2], m[0]);
    let d = asker.acquire(&key_d, ms(10_000), ms(2000)).unwrap();
    let on_target: Option<String> = {
        let mut con = c.node(m[0]).conn();
        redis::cmd("ASKING").query::<()>(&mut con).unwrap();
        redis::cmd("GET").arg(&key_d).query(&mut con).unwrap()
    };
    assert_eq!(on_target.as_deref(), Some(d.token()), "granted on the importing node");
    let on_source = redis::cmd("GET").arg(&key_d).query::<Option<String>>(&mut c.node(m[2]).conn()).unwrap_err();
    assert_eq!(on_source.code(), Some("ASK"), "absent from the migrating node: {on_source}");
    c.migrate_slot_keys(slot_d, m[2], m[0]);
    c.close_slot_move(slot_d, m[2], m[0]);
    d.renew(ms(10_000)).unwrap();
    assert_held(&c, &d, "ASK grant after the move closed");
    d.release().unwrap();

    // --- Manual failover: locks keep renewing on the promoted replica. ---
    let key_f = c.key_on("fail-f:", m[1]);
    let lock_f = client.try_acquire_with(&key_f, ms(2000), &watchdog).unwrap();
    let lock_g = rt.block_on(client.try_acquire_with_async(&c.key_on("fail-g:", m[1]), ms(2000), &watchdog)).unwrap();
    let promoted = c.failover(m[1], "");
    assert_eq!(c.owner_of(&key_f), promoted);
    std::thread::sleep(ms(5000));
    assert_held(&c, &lock_f, "sync lock through CLUSTER FAILOVER");
    assert_held(&c, &lock_g, "async lock through CLUSTER FAILOVER");
    lock_f.release().unwrap();
    rt.block_on(lock_g.release_async()).unwrap();

    // --- kill -9 of a master: a long lock renews on the promoted replica;
    // a short one that expires during the election says it is lost. ---
    let victim = c.owner_of(&c.key_on("kill:", m[2]));
    let long = client.try_acquire_with(&c.key_on("kill-long:", victim), ms(10_000), &watchdog).unwrap();
    let short = client.try_acquire_with(&c.key_on("kill-short:", victim), ms(400), &watchdog).unwrap();
    // Replication is asynchronous: make sure the replica has both grants.
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut c.node(victim).conn()).unwrap();
    assert_eq!(acked, 1);
    let promoted = c.kill_master(victim);
    long.renew(ms(10_000)).unwrap();
    assert_held(&c, &long, "a long lock through kill -9 and promotion");
    std::thread::sleep(ms(1000));
    if short.is_held() {
        assert_held(&c, &short, "a short lock still held after the failover");
    } else {
        assert!(short.loss_reason().is_some(), "a loss has a reason");
        assert_ne!(get(&c, promoted, short.key()).as_deref(), Some(short.token()), "lost, and the server agrees");
    }
    long.release().unwrap();
    drop(short);
    c.restart_node(victim);
}

fn lock_on(client: &LockClient, key: &str) -> Lock {
    client.try_acquire(key, ms(10_000)).unwrap()
}

fn spawn_wait(waiter: &LockClient, key: &str) -> std::thread::JoinHandle<Result<Lock, Error>> {
    let w = waiter.clone();
    let k = key.to_string();
    std::thread::spawn(move || w.acquire(&k, ms(10_000), ms(10_000)))
}

/// A waiter queued on a key whose slot `redis-cli --cluster reshard` moves:
/// the reshard succeeds, the waiter is served by the new owner once the
/// holder releases there, and the key never has two holders. (The module
/// answers a waiter whose slot is moving `TRYAGAIN`/`MOVED` instead of
/// granting it when MIGRATE deletes the key; the client re-issues the wait.)
#[test]
fn a_waiter_during_a_reshard_is_served_by_the_new_owner() {
    let c = Cluster::start(3, 0);
    let m = c.masters();
    let key = c.key_in_slot("resharded:", c.view(m[0]).slots[0]);
    let client = LockClient::open_cluster(&c.urls()).unwrap();
    let holder = lock_on(&client, &key);
    let waiter = LockClient::open_cluster(&c.urls()).unwrap();
    let t = spawn_wait(&waiter, &key);
    until_queued(&client, &key);
    c.reshard(m[0], m[1], 1); // asserts that redis-cli exits 0
    assert_eq!(c.owner_of(&key), m[1]);
    assert_eq!(get(&c, m[1], &key).as_deref(), Some(holder.token()), "the holder's lock moved, nobody else got it");
    holder.release().unwrap();
    let got = t.join().unwrap().expect("the waiter is served by the new owner");
    assert_held(&c, &got, "the waiter's grant");
    got.release().unwrap();
}

/// Four threads take turns on one key, each `acquire` with a wait, while
/// the key's master is killed (`kill -9`) and a replica takes over by
/// itself: no acquisition fails with a redirection or connection error
/// while its wait lasts (the client refreshes its view and retries), the
/// fences of successive holders keep increasing, and no two holders'
/// times overlap.
#[test]
fn acquires_with_a_wait_ride_out_a_master_kill() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let mut c = Cluster::start(3, 1);
    let m = c.masters();
    let key = c.key_on("contended:", m[0]);
    let victim = c.owner_of(&key);
    let stop = Arc::new(AtomicBool::new(false));
    // (acquired at, fence, released at) per grant; errors other than NotAcquired.
    let grants = Arc::new(Mutex::new(Vec::<(Instant, u64, Instant)>::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (stop, grants, errors, key) = (stop.clone(), grants.clone(), errors.clone(), key.clone());
            let client = LockClient::open_cluster(&c.urls()).unwrap();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // The wait outlasts a failover (node timeout 1 s + election).
                    match client.acquire(&key, ms(3000), ms(10_000)) {
                        Ok(lock) => {
                            let at = Instant::now();
                            std::thread::sleep(ms(20));
                            let fence = lock.fence().expect("the module gives fences");
                            let released = Instant::now();
                            // A release that fails in the failover leaves the key to its TTL.
                            let _ = lock.release();
                            grants.lock().unwrap().push((at, fence, released));
                        }
                        Err(Error::NotAcquired { .. }) => {}
                        Err(e) => errors.lock().unwrap().push(e.to_string()),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(ms(1500));
    let before = grants.lock().unwrap().len();
    let promoted = c.kill_master(victim);
    assert_eq!(c.owner_of(&key), promoted);
    std::thread::sleep(ms(3000));
    let after = grants.lock().unwrap().len();
    std::thread::sleep(ms(1000));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let errors = errors.lock().unwrap();
    assert!(errors.is_empty(), "{} acquisitions failed: {:?}", errors.len(), &errors[..errors.len().min(5)]);
    let mut grants = grants.lock().unwrap().clone();
    assert!(
        before > 0 && grants.len() > after,
        "grants before the kill ({before}) and after the failover ({} in all)",
        grants.len()
    );
    grants.sort_by_key(|g| g.0);
    for w in grants.windows(2) {
        let ((a0, f0, r0), (a1, f1, _)) = (w[0], w[1]);
        assert!(f1 > f0, "fences increase: {f0} then {f1}");
        assert!(a1 >= r0, "holders overlap: one held until {:?} after the next was granted", r0 - a1);
        let _ = a0;
    }
    c.restart_node(victim);
}
