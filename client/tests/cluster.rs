//! The client and the CLI against a real local Redis Cluster (3 masters,
//! one replica each, the module on every node), with a steady topology:
//! acquire, renew, release, takeover, info and waits on keys of every master,
//! from every node as the only seed, sync and async. One cluster for the
//! whole file, in one test: a cluster takes seconds to start.
//! A second, smaller cluster has the module on some nodes only.

mod cli_support;
mod support;

use std::time::Instant;

use cli_support::cli;
use redis_lock_client::{Backend, Error, LockClient, LockOptions, WatchdogOptions};
use redis_lock_harness::{Cluster, Server};
use support::cluster::{get, pttl};
use support::{ms, rt};

#[test]
fn locks_on_every_master_from_any_seed() {
    let c = Cluster::start(3, 1);
    let masters = c.masters();
    assert_eq!(masters.len(), 3);
    let keys: Vec<(usize, String)> = masters.iter().map(|&m| (m, c.key_on("job:", m))).collect();
    let mut last_fence = vec![0u64; keys.len()];

    // Sync: each node alone as the seed, replicas included; every master's key.
    for seed in 0..c.len() {
        let client = LockClient::open_cluster(&[c.node(seed).url()]).unwrap();
        assert!(client.is_cluster());
        let other = LockClient::open_cluster(&[c.node((seed + 1) % c.len()).url()]).unwrap();
        for (k, (owner, key)) in keys.iter().enumerate() {
            let lock = client.try_acquire(key, ms(10_000)).unwrap_or_else(|e| panic!("seed {seed}, {key}: {e}"));
            assert_eq!(get(&c, *owner, key).as_deref(), Some(lock.token()), "the owner holds the token");
            let fence = lock.fence().expect("the module issues fences");
            assert!(fence > last_fence[k], "fences of {key} increase: {fence} after {}", last_fence[k]);
            last_fence[k] = fence;
            assert!(matches!(other.try_acquire(key, ms(10_000)), Err(Error::NotAcquired { .. })));
            lock.renew(ms(20_000)).unwrap();
            assert!(pttl(&c, *owner, key) > 10_000, "renewed on the owner");
            let info = other.info(key).unwrap().expect("held");
            assert_eq!(info.owner.as_deref(), Some(lock.token()));
            assert_eq!(info.waiters, 0);
            lock.release().unwrap();
            assert_eq!(get(&c, *owner, key), None, "released on the owner");
            assert_eq!(other.info(key).unwrap(), None);
            // Release by token (the CLI's operator path) and takeover.
            let l = client.takeover(key, "run-1", ms(10_000)).unwrap();
            assert_eq!(get(&c, *owner, key).unwrap(), format!(r#"{{"owner":"{}","runId":"run-1"}}"#, l.token()));
            assert!(l.fence().unwrap() > last_fence[k]);
            last_fence[k] = l.fence().unwrap();
            let again = other.takeover(key, "run-1", ms(10_000)).expect("same run takes over");
            assert!(matches!(other.takeover(key, "run-2", ms(10_000)), Err(Error::NotAcquired { .. })));
            assert!(matches!(l.renew(ms(10_000)), Err(Error::NotHeld { .. })), "taken over");
            client.release_token(key, again.token()).unwrap();
            assert_eq!(get(&c, *owner, key), None);
            std::mem::forget(again); // released by token above
        }
        assert_eq!(client.backend(), Backend::Module);
    }

    // Waits: a waiter queued on each master's key is handed the lock by the
    // holder's release, through the server's queue (not by polling).
    let holder = LockClient::open_cluster(&c.urls()).unwrap();
    let waiter =
        LockClient::open(&format!("redis+cluster://127.0.0.1:{},127.0.0.1:{}/", c.node(1).port(), c.node(4).port()))
            .unwrap();
    assert!(waiter.is_cluster());
    for (owner, key) in &keys {
        let held = holder.try_acquire(key, ms(10_000)).unwrap();
        let w = waiter.clone();
        let k = key.clone();
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            let l = w.acquire(&k, ms(10_000), ms(10_000));
            (l, start.elapsed())
        });
        let deadline = Instant::now() + ms(5000);
        while holder.info(key).unwrap().map_or(0, |i| i.waiters) == 0 {
            assert!(Instant::now() < deadline, "the waiter never queued on {key}");
            std::thread::sleep(ms(10));
        }
        let released = Instant::now();
        held.release().unwrap();
        let (got, _) = t.join().unwrap();
        let got = got.unwrap_or_else(|e| panic!("waiter on {key}: {e}"));
        assert!(released.elapsed() < ms(5000));
        assert_eq!(get(&c, *owner, key).as_deref(), Some(got.token()));
        assert!(got.fence().unwrap() > held.fence().unwrap());
        got.release().unwrap();
    }
    // A wait that runs out is refused.
    let held = holder.try_acquire(&keys[0].1, ms(10_000)).unwrap();
    let start = Instant::now();
    assert!(matches!(waiter.acquire(&keys[0].1, ms(1000), ms(300)), Err(Error::NotAcquired { .. })));
    assert!(start.elapsed() >= ms(300));
    held.release().unwrap();

    // A watchdog keeps a lock alive across several TTLs (a 3 s TTL:
    // renewals every second, so one a second late on a loaded machine
    // still finds it).
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());
    let ttl = ms(3000);
    let (owner, key) = &keys[2];
    let lock = holder.try_acquire_with(key, ttl, &opts).unwrap();
    std::thread::sleep(ttl * 2 + ms(1000));
    assert!(lock.is_held());
    let value = get(&c, *owner, key).unwrap_or_default();
    assert!(value.contains(lock.token()), "held (by the master's session): {value}");
    drop(lock);
    assert_eq!(get(&c, *owner, key), None, "released on drop");

    // Async: the same operations, and an async waiter.
    let rt = rt();
    rt.block_on(async {
        let client = LockClient::open_cluster(&[c.node(5).url()]).unwrap();
        for (owner, key) in &keys {
            let lock = client.try_acquire_with_async(key, ttl, &opts).await.unwrap();
            assert!(lock.fence().is_some());
            tokio::time::sleep(ttl + ms(1000)).await;
            assert!(lock.is_held(), "the async watchdog renews");
            let value = get(&c, *owner, key).unwrap_or_default();
            assert!(value.contains(lock.token()), "held (by the master's session): {value}");
            let info = client.info_async(key).await.unwrap().unwrap();
            assert_eq!(info.owner.as_deref(), Some(lock.token()));
            let w = client.clone();
            let k = key.clone();
            let waiting = tokio::spawn(async move { w.acquire_async(&k, ms(5000), ms(5000)).await });
            let deadline = Instant::now() + ms(5000);
            while client.info_async(key).await.unwrap().map_or(0, |i| i.waiters) == 0 {
                assert!(Instant::now() < deadline, "the async waiter never queued");
                tokio::time::sleep(ms(10)).await;
            }
            lock.release_async().await.unwrap();
            let got = waiting.await.unwrap().unwrap();
            assert_eq!(get(&c, *owner, key).as_deref(), Some(got.token()));
            got.renew_async(ms(5000)).await.unwrap();
            let t = client.takeover_async(key, "r", ms(5000)).await;
            assert!(matches!(t, Err(Error::NotAcquired { .. })), "held by a bare token");
            got.release_async().await.unwrap();
            assert_eq!(get(&c, *owner, key), None);
        }
        assert_eq!(client.backend_async(), Backend::Module);
    });

    // The CLI: run, info and release with --cluster and one or several
    // seeds (a replica among them), and with a redis+cluster:// URL.
    let seeds = [c.node(3).url(), c.node(0).url()];
    for (owner, key) in &keys {
        let script = format!("redis-cli -p {} GET {key}", c.node(*owner).port());
        let o = cli(&[
            "run",
            "--cluster",
            "--url",
            &seeds[0],
            "--url",
            &seeds[1],
            "--token",
            "cli-tok",
            key,
            "--",
            "sh",
            "-c",
            &script,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        let value = String::from_utf8_lossy(&o.stdout);
        assert!(value.contains("\"token\":\"cli-tok\""), "held by the master's session: {value}");
        assert_eq!(get(&c, *owner, key), None, "released after the command");

        let held = holder.try_acquire(key, ms(10_000)).unwrap();
        let o = cli(&["info", "--cluster", "--url", &seeds[0], key]);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("owner: {}", held.token())));
        let o = cli(&["run", "--cluster", "--url", &seeds[1], key, "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "held elsewhere: {}", String::from_utf8_lossy(&o.stderr));
        let url = format!("redis+cluster://127.0.0.1:{}/", c.node(4).port());
        let o = cli(&["release", "--url", &url, key, held.token()]);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(get(&c, *owner, key), None);
        std::mem::forget(held);
        // --wait through the CLI: queued, then handed the lock.
        let held = holder.try_acquire(key, ms(10_000)).unwrap();
        let seed = seeds[1].clone();
        let k = key.clone();
        let t =
            std::thread::spawn(move || cli(&["run", "--cluster", "--url", &seed, "--wait", "10000", &k, "--", "true"]));
        let deadline = Instant::now() + ms(5000);
        while holder.info(key).unwrap().map_or(0, |i| i.waiters) == 0 {
            assert!(Instant::now() < deadline, "the CLI never queued on {key}");
            std::thread::sleep(ms(10));
        }
        held.release().unwrap();
        let o = t.join().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // Without --cluster a node that does not own the key answers MOVED.
    let o = cli(&["info", "--url", &c.node(masters[0]).url(), &keys[1].1]);
    assert_eq!(o.status.code(), Some(69), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn backend_is_detected_per_node() {
    // Node 2 has no module: its slots fall back on the scripts (no fence),
    // the others use the module, from one client.
    let c = Cluster::start_with(3, 0, |i| if i == 2 { Server::builder().without_module() } else { Server::builder() });
    let client = LockClient::open_cluster(&c.urls()).unwrap();
    for round in 0..2 {
        for m in 0..3 {
            let key = c.key_on("mixed:", m);
            let lock = client.try_acquire(&key, ms(10_000)).unwrap();
            assert_eq!(lock.fence().is_some(), m != 2, "round {round}, node {m}");
            assert_eq!(client.backend(), if m == 2 { Backend::Scripts } else { Backend::Module });
            lock.renew(ms(10_000)).unwrap();
            assert_eq!(client.info(&key).unwrap().unwrap().owner.as_deref(), Some(lock.token()));
            // A wait on the scripts' node polls.
            let w = client.acquire(&key, ms(1000), ms(100));
            assert!(matches!(w, Err(Error::NotAcquired { .. })), "{w:?}");
            lock.release().unwrap();
            let l = client.acquire(&key, ms(1000), ms(100)).unwrap();
            l.release().unwrap();
            assert_eq!(get(&c, m, &key), None);
        }
    }
}
