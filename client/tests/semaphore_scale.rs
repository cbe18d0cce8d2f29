//! One semaphore of 10,000 permits, every one held by the same process
//! under the watchdog: the client's renewal engine keeps them all, and the
//! server's commands stay cheap however many holders the key has (each is
//! O(log N) in them, issue 20).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redis_lock_client::{ClientOptions, Error, Lock, LockClient, LockOptions, WatchdogOptions};
use redis_lock_harness::Server;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The holders' tokens as the server lists them (`SEM.INFO` sent by
/// hand, not through the client under test).
fn server_tokens(con: &mut redis::Connection, key: &str) -> BTreeSet<String> {
    let v: redis::Value = redis::cmd("SEM.INFO").arg(key).query(con).expect("SEM.INFO");
    let redis::Value::Array(fields) = v else { return BTreeSet::new() };
    let Some(redis::Value::Array(holders)) = fields.get(3) else { panic!("{fields:?}") };
    holders
        .chunks(2)
        .map(|p| match &p[0] {
            redis::Value::BulkString(t) => String::from_utf8(t.clone()).expect("utf-8 token"),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn ten_thousand_watchdog_permits_of_one_semaphore_stay_held() {
    const N: usize = 10_000;
    let s = Server::start();
    // Each permit renewed on its own (what this measures, as scale.rs for
    // locks); a session keeps permits in client/tests/sessions.rs.
    let options = ClientOptions::new().response_timeout(ms(5000)).connect_timeout(ms(5000)).sessions(false);
    let client = LockClient::open_with(&s.url(), options).expect("client");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // A renewal must be answered within TTL - TTL/3 of the one before it:
    // 5 s leaves a loaded 2-core machine over 3 s of stall.
    let ttl = ms(5000);
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());
    let pool = client.semaphore("pool", N as u64);

    // All at once, on the shared connection.
    let permits: Vec<Lock> = rt.block_on(async {
        let tasks: Vec<_> = (0..N)
            .map(|_| {
                let (p, o) = (pool.clone(), opts.clone());
                tokio::spawn(async move { p.try_acquire_with_async(ttl, &o).await })
            })
            .collect();
        let mut out = Vec::with_capacity(N);
        for t in tasks {
            out.push(t.await.unwrap().expect("a permit: fewer than the limit are held"));
        }
        out
    });
    assert!(matches!(pool.try_acquire(ttl), Err(Error::NotAcquired { .. })), "all 10,000 held: the next is refused");

    // Three TTLs: without renewals every permit would be gone.
    let start = Instant::now();
    while start.elapsed() < ttl * 3 {
        std::thread::sleep(ms(100));
    }
    let lost: Vec<_> = permits.iter().filter(|p| !p.is_held()).map(|p| p.loss_reason()).take(5).collect();
    assert!(lost.is_empty(), "{} permits lost, e.g. {lost:?}", permits.iter().filter(|p| !p.is_held()).count());
    let mut con = s.conn();
    let mine: BTreeSet<String> = permits.iter().map(|p| p.token().to_string()).collect();
    assert_eq!(mine.len(), N);
    assert_eq!(server_tokens(&mut con, "pool"), mine, "the server lists every permit, and only those");
    let members: u64 = redis::cmd("ZCARD").arg("pool").query(&mut con).unwrap();
    assert_eq!(members, N as u64 + 1, "10,000 holders and the tag");
    assert!(matches!(pool.try_acquire(ttl), Err(Error::NotAcquired { .. })), "still full");

    // Dropping them releases them; the last release deletes the key.
    let t = Instant::now();
    drop(permits);
    while redis::cmd("EXISTS").arg("pool").query::<u64>(&mut con).unwrap() > 0 {
        assert!(t.elapsed() < ms(60_000), "releases still pending after 60 s");
        std::thread::sleep(ms(20));
    }
}
