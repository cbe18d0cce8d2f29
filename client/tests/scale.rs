//! Many watchdog locks in one process: the client's renewal engine keeps
//! them all held, with no thread (or task, or connection) per lock.

mod support;

use std::time::Instant;

use redis_lock_client::{ClientOptions, Lock, LockClient, LockOptions, WatchdogOptions};
use redis_lock_harness::Server;
use support::{calls, ms};

/// Threads of this process, from the kernel.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").expect("/proc/self/task").count()
}

/// Which of `locks` the server says are held by their token.
fn held_on_server(s: &Server, locks: &[&Lock]) -> usize {
    let mut con = s.conn();
    let mut held = 0;
    for chunk in locks.chunks(1000) {
        let keys: Vec<&str> = chunk.iter().map(|l| l.key()).collect();
        let values: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(&mut con).expect("MGET");
        held += chunk.iter().zip(values).filter(|(l, v)| v.as_deref() == Some(l.token())).count();
    }
    held
}

#[test]
fn ten_thousand_watchdog_locks_stay_held_without_a_thread_per_lock() {
    const N: usize = 10_000;
    let s = Server::start();
    // Lock by lock (sessions off): the per-lock renewals' batches are what
    // this holds at scale (sessions.rs holds 100,000 with sessions).
    let client = LockClient::open_with(&s.url(), ClientOptions::new().sessions(false)).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let before = threads();
    // A renewal must be answered within TTL - TTL/3 of the one before it:
    // 5 s leaves a loaded 2-core machine over 3 s of stall (2 s lost all
    // 10,000 once, beside four compilers) for 15 s of test.
    let ttl = ms(5000);
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());

    // Half with the sync API, one after the other; half with the async API,
    // concurrently on the shared connection.
    let sync: Vec<Lock> =
        (0..N / 2).map(|i| client.try_acquire_with(&format!("scale:s:{i}"), ttl, &opts).unwrap()).collect();
    let aio: Vec<Lock> = rt.block_on(async {
        let tasks: Vec<_> = (0..N / 2)
            .map(|i| {
                let (c, o) = (client.clone(), opts.clone());
                tokio::spawn(async move { c.try_acquire_with_async(&format!("scale:a:{i}"), ttl, &o).await.unwrap() })
            })
            .collect();
        let mut locks = Vec::with_capacity(tasks.len());
        for t in tasks {
            locks.push(t.await.unwrap());
        }
        locks
    });
    let all: Vec<&Lock> = sync.iter().chain(&aio).collect();
    let renewals_before = calls(&mut s.conn(), "lock.renew");

    // Three TTLs; the thread count sampled all along.
    let start = Instant::now();
    let mut most = threads();
    while start.elapsed() < ttl * 3 {
        std::thread::sleep(ms(100));
        most = most.max(threads());
    }
    let renewals = calls(&mut s.conn(), "lock.renew") - renewals_before;
    let lost: Vec<&str> = all.iter().filter(|l| !l.is_held()).map(|l| l.key()).take(5).collect();
    assert!(lost.is_empty(), "{} locks lost, e.g. {lost:?}", all.iter().filter(|l| !l.is_held()).count());
    assert_eq!(held_on_server(&s, &all), N, "the server holds every lock for its token");
    // Each lock renews every TTL/3: about 9 renewals each in 3 TTLs.
    assert!(renewals >= (N * 6) as u64, "{renewals} renewals of {N} locks in 3 TTLs");
    assert!(most < before + 10, "threads: {before} before the locks, up to {most} while holding {N}");

    // Dropping them all: the async ones' releases are pipelined by the
    // engine, the sync ones release on the dropping thread.
    let t = Instant::now();
    drop(all);
    drop(sync);
    drop(aio);
    let mut con = s.conn();
    while redis::cmd("DBSIZE").query::<u64>(&mut con).unwrap() > 0 {
        assert!(t.elapsed() < ms(30_000), "releases still pending after 30 s");
        std::thread::sleep(ms(20));
    }
}
