//! Semaphores and read-write locks through the client (`NamedLock`,
//! `RwLock`), against private servers with the module, one without it,
//! and a cluster: limits, queues, fences, the watchdog and the loss
//! signal, sync and async. Leases are long wherever expiry is not the
//! point, and every wait for something that must happen is generous: only
//! a failure waits that long.

mod support;

use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

use redis_lock_client::{
    ClientOptions, Error, HoldersInfo, Lock, LockClient, LockKind, LockOptions, LossReason, WatchdogOptions,
};
use redis_lock_harness::{Cluster, Server};
use support::{ms, rt};

/// Far beyond any test: a lease that must not end by itself.
const LONG: Duration = Duration::from_secs(60);

/// How long a test waits for what must happen.
const PATIENCE: Duration = Duration::from_secs(20);

fn client(s: &Server) -> LockClient {
    LockClient::open_with(&s.url(), ClientOptions::new().response_timeout(ms(3000)).connect_timeout(ms(3000)))
        .expect("client")
}

fn eventually(f: impl FnMut() -> bool) -> bool {
    support::eventually(PATIENCE, f)
}

fn tokens(info: &Option<HoldersInfo>) -> BTreeSet<String> {
    info.iter().flat_map(|i| i.holders.iter().map(|h| h.token.clone())).collect()
}

fn set<'a>(locks: impl IntoIterator<Item = &'a Lock>) -> BTreeSet<String> {
    locks.into_iter().map(|l| l.token().to_string()).collect()
}

/// The holders' tokens as the server lists them (`SEM.INFO` or
/// `RWLOCK.INFO` sent by hand, not through the client under test).
fn server_tokens(con: &mut redis::Connection, command: &str, key: &str) -> BTreeSet<String> {
    let v: redis::Value = redis::cmd(command).arg(key).query(con).expect(command);
    let redis::Value::Array(fields) = v else { return BTreeSet::new() };
    let mut out = BTreeSet::new();
    for pair in fields.chunks(2) {
        if let [redis::Value::BulkString(name), redis::Value::Array(holders)] = pair {
            if name == b"holders" {
                for h in holders.chunks(2) {
                    if let redis::Value::BulkString(t) = &h[0] {
                        out.insert(String::from_utf8_lossy(t).into_owned());
                    }
                }
            }
        }
    }
    out
}

fn is_redis_error(r: &Result<Lock, Error>, words: &str) -> bool {
    matches!(r, Err(Error::Redis(e)) if e.to_string().contains(words))
}

#[test]
fn a_semaphore_admits_its_limit_and_queues_the_rest() {
    let s = Server::start();
    let c = client(&s);
    let sem = c.semaphore("pool", 2);
    assert_eq!(sem.kind(), LockKind::Permit { limit: 2 });
    let a = sem.try_acquire(LONG).expect("first permit");
    let b = sem.try_acquire(LONG).expect("second permit");
    assert_eq!(a.kind(), LockKind::Permit { limit: 2 });
    let (fa, fb) = (a.fence().expect("fenced"), b.fence().expect("fenced"));
    assert!(fb > fa, "fences increase: {fb} after {fa}");
    assert!(matches!(sem.try_acquire(LONG), Err(Error::NotAcquired { .. })), "a third is refused");
    let info = sem.info().expect("info");
    assert_eq!(info.as_ref().map(|i| i.kind), Some(LockKind::Permit { limit: 2 }));
    assert_eq!(tokens(&info), set([&a, &b]));
    a.renew(LONG).expect("renew a permit");

    // A waiter is granted the permit a release frees, another the one a
    // drop frees; each grant's fence is larger than every earlier one.
    let queue = |sem: &redis_lock_client::NamedLock| {
        let waiter = thread::spawn({
            let sem = sem.clone();
            move || sem.acquire(LONG, PATIENCE)
        });
        assert!(eventually(|| sem.info().expect("info").is_some_and(|i| i.waiters == 1)), "the waiter is queued");
        waiter
    };
    let waiter = queue(&sem);
    a.release().expect("release");
    let c1 = waiter.join().expect("waiter").expect("granted the released permit");
    let f1 = c1.fence().expect("fenced");
    assert!(f1 > fb, "fence {f1} after {fb}");
    let waiter = queue(&sem);
    drop(b);
    let c2 = waiter.join().expect("waiter").expect("granted the dropped permit");
    assert!(c2.fence().expect("fenced") > f1);
    assert_eq!(tokens(&sem.info().expect("info")), set([&c1, &c2]));
    assert!(a.release().is_ok(), "a second release is a no-op");
    assert!(matches!(a.renew(LONG), Err(Error::NotHeld { .. })), "a released permit stays released");

    // The stored limit rules: another one is the server's error, and
    // changes nothing.
    assert!(is_redis_error(&c.semaphore("pool", 3).try_acquire(LONG), "limit differs"));
    assert_eq!(tokens(&sem.info().expect("info")), set([&c1, &c2]));
    // The two families and the exclusive lock never touch each other's keys.
    assert!(is_redis_error(&c.rw_lock("pool").read().try_acquire(LONG), "WRONGTYPE"));
    assert!(
        matches!(c.try_acquire("pool", LONG), Err(Error::NotAcquired { .. })),
        "LOCK.ACQUIRE is SET NX: the key exists"
    );
    let _plain = c.try_acquire("plain", LONG).expect("exclusive lock");
    assert!(is_redis_error(&c.semaphore("plain", 2).try_acquire(LONG), "WRONGTYPE"));
    assert!(matches!(c.semaphore("plain", 2).info(), Err(Error::Redis(e)) if e.to_string().contains("WRONGTYPE")));

    // Bad input is refused before anything is sent.
    for limit in [0, (1 << 53) + 1] {
        assert!(
            matches!(c.semaphore("other", limit).try_acquire(LONG), Err(Error::InvalidArgument(m)) if m.contains("limit"))
        );
    }
    assert!(matches!(c.semaphore("", 2).try_acquire(LONG), Err(Error::InvalidArgument(_))));
    assert!(matches!(c.semaphore("", 2).info(), Err(Error::InvalidArgument(_))));
    assert!(matches!(sem.try_acquire(Duration::ZERO), Err(Error::InvalidArgument(_))));
    assert_eq!(c.semaphore("other", 2).info().expect("info"), None, "nothing was sent");
    // LOCK.GUARD decides by the exclusive lock's ownership rule: a permit
    // is refused before anything is sent, and nothing is written.
    let mut set = redis::cmd("SET");
    set.arg("guarded").arg("v");
    assert!(matches!(c1.guard(&set), Err(Error::InvalidArgument(m)) if m.contains("exclusive")));
    assert!(c1.is_held(), "a refused guard leaves the permit held");
    let written: Option<String> = redis::cmd("GET").arg("guarded").query(&mut s.conn()).expect("get");
    assert_eq!(written, None);

    c1.release().expect("release");
    c2.release().expect("release");
    assert_eq!(sem.info().expect("info"), None, "the last release deletes the key");
}

#[test]
fn the_watchdog_keeps_permits_alive_and_reports_their_loss() {
    let s = Server::start();
    let c = client(&s);
    let sem = c.semaphore("pool", 3);
    let ttl = ms(3000);
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());
    let a = sem.try_acquire_with(ttl, &opts).expect("a");
    let b = sem.try_acquire_with(ttl, &opts).expect("b");
    // Three TTLs: without renewals both would be gone.
    thread::sleep(ttl * 3);
    assert!(a.is_held() && b.is_held(), "{:?} {:?}", a.loss_reason(), b.loss_reason());
    assert_eq!(server_tokens(&mut s.conn(), "SEM.INFO", "pool"), set([&a, &b]), "the server still lists both");

    // A holder removed by hand: its next renewal finds it gone.
    let lost = a.lost_signal();
    let _: i64 = redis::cmd("ZREM").arg("pool").arg(a.token()).query(&mut s.conn()).expect("ZREM");
    assert_eq!(lost.wait_timeout(PATIENCE), Some(LossReason::NotOwner));
    assert!(!a.is_held());
    assert!(b.is_held(), "the other permit is kept: {:?}", b.loss_reason());
    assert!(matches!(a.release(), Err(Error::NotHeld { .. })));
    b.release().expect("release b");
    assert_eq!(b.lost_signal().reason(), None, "released, not lost");
    assert_eq!(sem.info().expect("info"), None);

    // Read and write leases go through the same engine.
    let rw = c.rw_lock("doc");
    let r = rw.read().try_acquire_with(ttl, &opts).expect("reader");
    thread::sleep(ttl * 3);
    assert!(r.is_held(), "{:?}", r.loss_reason());
    assert_eq!(server_tokens(&mut s.conn(), "RWLOCK.INFO", "doc"), set([&r]));
    let lost = r.lost_signal();
    let _: i64 = redis::cmd("ZREM").arg("doc").arg(r.token()).query(&mut s.conn()).expect("ZREM");
    assert_eq!(lost.wait_timeout(PATIENCE), Some(LossReason::NotOwner));
}

/// `max_hold` on a permit and a read lock: the server caps their
/// renewals (`SEM.RENEW` / `RWLOCK.RENEW` answer 2 near the limit), and
/// the watchdog reports the end as `MaxHold`, as for an exclusive lock.
#[test]
fn max_hold_ends_a_permit_and_a_read_lock_as_max_hold() {
    let s = Server::start();
    let c = client(&s);
    let opts = LockOptions::new().watchdog(WatchdogOptions::new()).max_hold(ms(7000));
    let permit = c.semaphore("capped", 2).try_acquire_with(ms(3000), &opts).expect("permit");
    let reader = c.rw_lock("capped:rw").read().try_acquire_with(ms(3000), &opts).expect("reader");
    let mut con = s.conn();
    let member = [&b"\0"[..], permit.token().as_bytes()].concat();
    let limit: Option<f64> = redis::cmd("ZSCORE").arg("capped").arg(member).query(&mut con).unwrap();
    assert!(limit.is_some_and(|l| l < -2.0), "the server keeps the permit's hold limit: {limit:?}");
    assert_eq!(permit.lost_signal().wait_timeout(PATIENCE), Some(LossReason::MaxHold));
    assert_eq!(reader.lost_signal().wait_timeout(PATIENCE), Some(LossReason::MaxHold));
    assert!(eventually(|| c.semaphore("capped", 2).info().is_ok_and(|i| i.is_none())), "the places end at the limit");
    // A capped renewal by hand is a renewal, up to the limit.
    let opts = LockOptions::new().max_hold(ms(6000));
    let permit = c.semaphore("manual", 1).try_acquire_with(ms(4000), &opts).expect("permit");
    thread::sleep(ms(2500));
    permit.renew(ms(4000)).expect("a capped renewal is a renewal");
    assert!(permit.is_held());
    assert_eq!(permit.lost_signal().wait_timeout(PATIENCE), Some(LossReason::MaxHold));
    // Below the TTL, refused before sending; a NUL-led token never leaves.
    let bad = LockOptions::new().max_hold(ms(500));
    assert!(matches!(c.semaphore("k", 2).try_acquire_with(ms(1000), &bad), Err(Error::InvalidArgument(_))));
    let nul = LockOptions::new().token("\0t");
    assert!(
        matches!(c.semaphore("k", 2).try_acquire_with(ms(1000), &nul), Err(Error::InvalidArgument(m)) if m.contains("NUL"))
    );
    assert!(c.try_acquire_with("k:lock", ms(1000), &nul).is_ok(), "an exclusive lock takes any token");
}

#[test]
fn readers_share_and_a_writer_waits_for_them() {
    let s = Server::start();
    let c = client(&s);
    let rw = c.rw_lock("doc");
    let r1 = rw.read().try_acquire(LONG).expect("reader 1");
    let r2 = rw.read().try_acquire(LONG).expect("reader 2");
    assert_eq!((r1.kind(), r2.kind()), (LockKind::Read, LockKind::Read));
    assert!(r2.fence() > r1.fence());
    assert!(matches!(rw.write().try_acquire(LONG), Err(Error::NotAcquired { .. })), "no writer beside readers");
    let info = rw.info().expect("info").expect("held");
    assert_eq!(info.kind, LockKind::Read);
    assert_eq!(tokens(&Some(info)), set([&r1, &r2]));

    let writer = {
        let w = rw.write();
        thread::spawn(move || w.acquire(LONG, PATIENCE))
    };
    assert!(eventually(|| rw.info().expect("info").is_some_and(|i| i.waiters == 1)), "the writer is queued");
    assert!(
        matches!(rw.read().try_acquire(LONG), Err(Error::NotAcquired { .. })),
        "a waiting writer holds back new readers"
    );
    let f2 = r2.fence();
    r1.release().expect("release");
    drop(r2);
    let w = writer.join().expect("writer").expect("granted once the readers left");
    assert_eq!(w.kind(), LockKind::Write);
    assert!(w.fence() > f2);
    let info = rw.info().expect("info").expect("held");
    assert_eq!((info.kind, tokens(&Some(info.clone()))), (LockKind::Write, set([&w])));
    assert!(matches!(rw.read().try_acquire(LONG), Err(Error::NotAcquired { .. })), "no reader beside the writer");
    assert!(matches!(rw.write().try_acquire(LONG), Err(Error::NotAcquired { .. })), "one writer");
    w.release().expect("release");
    rw.read().try_acquire(LONG).expect("a reader after the writer").release().expect("release");
}

#[test]
fn async_twins() {
    let s = Server::start();
    let c = client(&s);
    rt().block_on(async {
        let sem = c.semaphore("pool", 2);
        let opts = LockOptions::new().watchdog(WatchdogOptions::new());
        let a = sem.try_acquire_with_async(LONG, &opts).await.expect("a");
        let b = sem.try_acquire_async(LONG).await.expect("b");
        assert!(b.fence() > a.fence());
        assert!(matches!(sem.try_acquire_async(LONG).await, Err(Error::NotAcquired { .. })));
        let waiter = tokio::spawn({
            let sem = sem.clone();
            async move { sem.acquire_async(LONG, PATIENCE).await }
        });
        let end = Instant::now() + PATIENCE;
        while sem.info_async().await.expect("info").is_none_or(|i| i.waiters != 1) {
            assert!(Instant::now() < end, "the waiter is never queued");
            tokio::time::sleep(ms(10)).await;
        }
        b.release_async().await.expect("release");
        let w = waiter.await.expect("task").expect("granted");
        assert!(w.fence() > b.fence());
        assert_eq!(tokens(&sem.info_async().await.expect("info")), set([&a, &w]));
        // Dropped async locks are released by the engine, in the background.
        drop(a);
        drop(w);
        let end = Instant::now() + PATIENCE;
        while sem.info_async().await.expect("info").is_some() {
            assert!(Instant::now() < end, "dropped permits are never released");
            tokio::time::sleep(ms(10)).await;
        }

        let rw = c.rw_lock("doc");
        let r = rw.read().try_acquire_async(LONG).await.expect("reader");
        assert!(matches!(rw.write().try_acquire_async(LONG).await, Err(Error::NotAcquired { .. })));
        r.renew_async(LONG).await.expect("renew");
        assert_eq!(rw.info_async().await.expect("info").map(|i| i.kind), Some(LockKind::Read));
        r.release_async().await.expect("release");
        let w = rw.write().acquire_with_async(LONG, ms(100), &opts).await.expect("writer on a free key");
        assert_eq!(rw.info_async().await.expect("info").map(|i| i.kind), Some(LockKind::Write));
        w.release_async().await.expect("release");
    });
}

#[test]
fn without_the_module_they_are_unsupported() {
    let plain = Server::builder().without_module().start();
    let c = client(&plain);
    // The exclusive lock falls back to the scripts, before and after.
    c.try_acquire("job", LONG).expect("exclusive lock by script").release().expect("release");
    let unsupported =
        |r: Result<Lock, Error>, command: &str| matches!(r, Err(Error::Unsupported { command: c }) if c == command);
    assert!(unsupported(c.semaphore("pool", 2).try_acquire(LONG), "SEM.ACQUIRE"));
    assert!(unsupported(c.semaphore("pool", 2).acquire(LONG, ms(200)), "SEM.ACQUIRE"));
    assert!(unsupported(c.rw_lock("doc").write().acquire(LONG, ms(200)), "RWLOCK.ACQUIRE"));
    assert!(matches!(c.semaphore("pool", 2).info(), Err(Error::Unsupported { command: "SEM.INFO" })));
    assert!(matches!(c.rw_lock("doc").info(), Err(Error::Unsupported { command: "RWLOCK.INFO" })));
    c.try_acquire("job", LONG).expect("exclusive lock by script").release().expect("release");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut plain.conn()).expect("KEYS");
    assert!(keys.is_empty(), "nothing written: {keys:?}");
    rt().block_on(async {
        assert!(unsupported(c.rw_lock("doc").read().try_acquire_async(LONG).await, "RWLOCK.ACQUIRE"));
        assert!(matches!(c.semaphore("pool", 2).info_async().await, Err(Error::Unsupported { command: "SEM.INFO" })));
    });
}

#[test]
fn semaphores_and_read_write_locks_on_a_cluster() {
    let cl = Cluster::start(3, 0);
    let c = LockClient::open_cluster_with(&[cl.node(0).url()], ClientOptions::new().response_timeout(ms(3000)))
        .expect("cluster client");
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());
    let ttl = ms(3000);
    let mut held = Vec::new();
    for m in cl.masters() {
        let key = cl.key_on("pool:", m);
        let sem = c.semaphore(&key, 2);
        let a = sem.try_acquire_with(ttl, &opts).unwrap_or_else(|e| panic!("{key}: {e}"));
        let b = sem.try_acquire(LONG).expect("second permit");
        assert!(b.fence() > a.fence());
        assert!(matches!(sem.try_acquire(LONG), Err(Error::NotAcquired { .. })));
        assert_eq!(server_tokens(&mut cl.node(m).conn(), "SEM.INFO", &key), set([&a, &b]), "held on the key's master");
        assert_eq!(tokens(&sem.info().expect("info")), set([&a, &b]));
        let waiter = {
            let sem = sem.clone();
            thread::spawn(move || sem.acquire(LONG, PATIENCE))
        };
        assert!(
            eventually(|| sem.info().expect("info").is_some_and(|i| i.waiters == 1)),
            "{key}: the waiter is queued"
        );
        b.release().expect("release");
        let w = waiter.join().expect("waiter").expect("granted");
        assert_eq!(server_tokens(&mut cl.node(m).conn(), "SEM.INFO", &key), set([&a, &w]));
        w.release().expect("release");
        held.push((m, key, a));

        let doc = cl.key_on("doc:", m);
        let r = c.rw_lock(&doc).read().try_acquire_with(ttl, &opts).expect("reader");
        assert!(matches!(c.rw_lock(&doc).write().try_acquire(LONG), Err(Error::NotAcquired { .. })));
        assert_eq!(server_tokens(&mut cl.node(m).conn(), "RWLOCK.INFO", &doc), set([&r]));
        held.push((m, doc, r));
    }
    // The engine renews them on every master, past several TTLs.
    thread::sleep(ttl * 3);
    for (m, key, lock) in &held {
        assert!(lock.is_held(), "{key}: {:?}", lock.loss_reason());
        let command = if lock.kind() == LockKind::Read { "RWLOCK.INFO" } else { "SEM.INFO" };
        assert_eq!(server_tokens(&mut cl.node(*m).conn(), command, key), set([lock]));
    }
    for (_, key, lock) in held {
        lock.release().expect("release");
        let gone: i64 = redis::cmd("EXISTS").arg(&key).query(&mut cl.node(cl.owner_of(&key)).conn()).expect("EXISTS");
        assert_eq!(gone, 0, "{key} released");
    }
}
