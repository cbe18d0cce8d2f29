//! Blocking `acquire`: in the server's queue with the module's WAIT
//! (`module::*`), by polling without the module (`scripts::*`).
//!
//! If the module answers that WAIT is unsupported, the module tests that
//! need it print a SKIPPED note on stderr (visible with `--nocapture`, and
//! in the test output of a failing run) and return.

mod support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_lock_client::{Backend, ClientOptions, LockClient, LockOptions, WatchdogOptions};
use redis_lock_harness::Server;
use support::{client, eventually, get, ms, rt};

/// The response timeout is far below the waits used here: a blocking wait
/// must not be cut off by it.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a test waits for what must happen: only a failure waits this
/// long, so it can be generous on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(10);

fn waiters(c: &LockClient, key: &str) -> u64 {
    c.info(key).expect("info").map_or(0, |i| i.waiters)
}

fn lock_stat(s: &Server, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("lock").query(&mut s.conn()).expect("INFO lock");
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:"))?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} not in {info}"))
}

/// Whether this module blocks on WAIT; prints a loud note when it does not.
fn wait_supported(s: &Server, test: &str) -> bool {
    let r: redis::RedisResult<redis::Value> =
        redis::cmd("LOCK.ACQUIRE").arg("wait-probe").arg("probe").arg(1000).arg("WAIT").arg(1).query(&mut s.conn());
    let _: () = s.conn().del("wait-probe").expect("DEL");
    match r {
        Err(e) if e.to_string().contains("WAIT is not supported") => {
            eprintln!("SKIPPED {test}: the lock module says WAIT is not supported ({e})");
            false
        }
        Err(e) => panic!("probing WAIT: {e}"),
        Ok(_) => true,
    }
}

/// Closes, server-side, the connections whose last command was a
/// LOCK.ACQUIRE: after `clients` last ran something else on their shared
/// connections, only idle wait connections are left with it.
fn kill_idle_wait_connections(s: &Server, clients: &[&LockClient]) -> usize {
    for c in clients {
        c.info("k").expect("info");
    }
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut s.conn()).expect("CLIENT LIST");
    let ids: Vec<&str> = list
        .lines()
        .filter(|l| l.contains(" cmd=lock.acquire"))
        .filter_map(|l| l.strip_prefix("id=")?.split(' ').next())
        .collect();
    for id in &ids {
        let _: () = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(*id).query(&mut s.conn()).expect("CLIENT KILL");
    }
    ids.len()
}

mod module {
    use super::*;

    #[test]
    fn waiter_is_woken_by_release() {
        let s = Server::start();
        if !wait_supported(&s, "module::waiter_is_woken_by_release (WAIT path)") {
            eprintln!("        module::waiter_is_woken_by_release tests the polling fallback instead");
            return falls_back_to_polling(s);
        }
        let (a, b, watcher) = (client(&s), client(&s), client(&s));
        let la = a.try_acquire("k", ms(30_000)).expect("a acquires");
        let fa = la.fence().expect("fence");
        // b learns the backend first, as any client does on its first call.
        assert!(b.try_acquire("k", ms(5000)).unwrap_err().is_not_acquired());
        assert_eq!(b.backend(), Backend::Module);
        let refusals = lock_stat(&s, "lock_refusals");
        let (tx, rx) = mpsc::channel();
        let waiter = thread::spawn(move || {
            let r = b.acquire("k", ms(5000), ms(10_000));
            tx.send(Instant::now()).expect("send");
            r
        });
        assert!(eventually(PATIENCE, || waiters(&watcher, "k") == 1), "b waits inside the server");
        // Longer than the response timeout: the wait is not cut off.
        thread::sleep(RESPONSE_TIMEOUT + ms(500));
        assert!(rx.try_recv().is_err(), "b returned while the lock was held");
        assert_eq!(waiters(&watcher, "k"), 1);
        la.release().expect("a releases");
        rx.recv_timeout(PATIENCE).expect("b returns");
        let lb = waiter.join().expect("waiter thread").expect("b gets the lock");
        assert_eq!(get(&s, "k").as_deref(), Some(lb.token()));
        assert!(lb.is_held());
        assert!(lb.fence().expect("fence") > fa);
        // One blocking call: the server refused nothing while b waited.
        assert_eq!(lock_stat(&s, "lock_refusals"), refusals, "the waiter polled");
        assert_eq!(lock_stat(&s, "lock_waits_granted"), 1);
        assert_eq!(waiters(&watcher, "k"), 0);
    }

    /// A module without WAIT: the refusal is remembered and the wait polls.
    fn falls_back_to_polling(s: Server) {
        let (a, b) = (client(&s), client(&s));
        let la = a.try_acquire("k", ms(30_000)).expect("a acquires");
        let fa = la.fence().expect("fence");
        let refusals = lock_stat(&s, "lock_refusals");
        let (tx, rx) = mpsc::channel();
        let waiter = thread::spawn(move || {
            let r = b.acquire_with("k", ms(5000), ms(10_000), &LockOptions::new().retry_delay(ms(5), ms(50)));
            tx.send(Instant::now()).expect("send");
            r
        });
        thread::sleep(ms(800));
        assert!(rx.try_recv().is_err(), "b returned while the lock was held");
        assert!(lock_stat(&s, "lock_refusals") > refusals + 5, "the waiter polls");
        la.release().expect("release");
        rx.recv_timeout(PATIENCE).expect("b returns");
        let lb = waiter.join().expect("waiter").expect("b gets the lock");
        assert!(lb.fence().expect("fence") > fa);
        assert_eq!(get(&s, "k").as_deref(), Some(lb.token()));
    }

    #[test]
    fn wait_times_out_in_the_server() {
        let s = Server::start();
        if !wait_supported(&s, "module::wait_times_out_in_the_server") {
            return;
        }
        let (a, b) = (client(&s), client(&s));
        let _la = a.try_acquire("k", ms(30_000)).expect("a acquires");
        let t = Instant::now();
        assert!(b.acquire("k", ms(5000), ms(700)).unwrap_err().is_not_acquired());
        let took = t.elapsed();
        assert!(took >= ms(700) && took < PATIENCE, "gave up after {took:?}");
        assert_eq!(lock_stat(&s, "lock_waits_timed_out"), 1);
        assert_eq!(waiters(&a, "k"), 0);
        // The wait connection goes back to the pool and serves the next wait.
        assert!(b.acquire("k", ms(5000), ms(50)).unwrap_err().is_not_acquired());
        assert_eq!(lock_stat(&s, "lock_waits_timed_out"), 2);
        // An idle pooled connection closed by the server is replaced, not an error.
        assert_eq!(kill_idle_wait_connections(&s, &[&a, &b]), 1);
        assert!(b.acquire("k", ms(5000), ms(50)).unwrap_err().is_not_acquired());
        assert_eq!(lock_stat(&s, "lock_waits_timed_out"), 3);
        rt().block_on(async {
            assert!(b.acquire_async("k", ms(5000), ms(50)).await.unwrap_err().is_not_acquired());
            // Also the sync wait connection and b's async shared one (which
            // reconnects by itself), whose last command was an acquire too.
            assert!(kill_idle_wait_connections(&s, &[&a, &b]) >= 1);
            assert!(b.acquire_async("k", ms(5000), ms(50)).await.unwrap_err().is_not_acquired());
        });
        assert_eq!(lock_stat(&s, "lock_waits_timed_out"), 5);
    }

    #[test]
    fn grant_after_a_wait_longer_than_the_ttl_is_held() {
        let s = Server::start();
        if !wait_supported(&s, "module::grant_after_a_wait_longer_than_the_ttl_is_held") {
            return;
        }
        let (a, b) = (client(&s), client(&s));
        let la = a.try_acquire("k", ms(30_000)).expect("a acquires");
        let releaser = thread::spawn(move || {
            thread::sleep(ms(5_000));
            la.release().expect("release");
        });
        // TTL 2.5 s, granted after ~5 s: counted from the WAIT's sending,
        // it would be over before it began; the client confirms it instead.
        // (Long enough that a second's stall after the grant leaves it held.)
        let lb = b.acquire("k", ms(2_500), PATIENCE).expect("b acquires");
        assert!(lb.is_held(), "a fresh grant must be held: {:?}", lb.loss_reason());
        assert_eq!(get(&s, "k").as_deref(), Some(lb.token()));
        lb.release().expect("release");
        releaser.join().expect("releaser");
    }

    #[test]
    fn waiting_does_not_stall_the_clients_other_locks() {
        let s = Server::start();
        if !wait_supported(&s, "module::waiting_does_not_stall_the_clients_other_locks") {
            return;
        }
        let (c, other) = (client(&s), client(&s));
        let _held = other.try_acquire("busy", ms(30_000)).expect("other holds busy");
        let mine = c
            .try_acquire_with("mine", ms(3_000), &LockOptions::new().watchdog(WatchdogOptions::new()))
            .expect("c holds mine");
        let c2 = c.clone();
        let waiter = thread::spawn(move || c2.acquire("busy", ms(1000), ms(4_000)));
        // The watchdog renews "mine" (every second: a stalled watchdog
        // would let its lease end before the 4 s wait does, while a loaded
        // machine's late renewal does not) on the shared connection
        // while the wait blocks its own; so do plain calls of the client.
        thread::sleep(ms(1_000));
        c.info("busy").expect("info during the wait");
        let spare = c.try_acquire("spare", ms(1000)).expect("acquire during the wait");
        spare.release().expect("release during the wait");
        assert!(waiter.join().expect("waiter").unwrap_err().is_not_acquired());
        assert!(mine.is_held(), "lost {:?}", mine.loss_reason());
        assert_eq!(get(&s, "mine").as_deref(), Some(mine.token()));
    }

    #[test]
    fn client_from_a_single_connection_polls() {
        let s = Server::start();
        let c = LockClient::from_connection(s.conn(), ClientOptions::new().response_timeout(RESPONSE_TIMEOUT))
            .expect("client");
        let a = client(&s);
        let la = a.try_acquire("k", ms(30_000)).expect("a acquires");
        let watcher = client(&s);
        let waiter = thread::spawn(move || c.acquire("k", ms(5000), PATIENCE));
        // Blocking its only connection would stall everything else it does.
        for _ in 0..10 {
            thread::sleep(ms(30));
            assert_eq!(waiters(&watcher, "k"), 0, "a single-connection client must not block in the server");
        }
        la.release().expect("release");
        let lock = waiter.join().expect("waiter").expect("acquired by polling");
        assert_eq!(get(&s, "k").as_deref(), Some(lock.token()));
        assert!(lock.fence().is_some(), "fenced like any module grant");
    }

    #[test]
    fn async_waiter_is_woken_and_cancel_leaves_the_queue() {
        let s = Server::start();
        if !wait_supported(&s, "module::async_waiter_is_woken_and_cancel_leaves_the_queue") {
            return;
        }
        rt().block_on(async {
            let (a, b, watcher) = (client(&s), client(&s), client(&s));
            let la = a.try_acquire_async("k", ms(30_000)).await.expect("a acquires");
            assert!(b.try_acquire_async("k", ms(5000)).await.unwrap_err().is_not_acquired());
            let b2 = b.clone();
            let waiter = tokio::spawn(async move { b2.acquire_async("k", ms(5000), ms(10_000)).await });
            let t = Instant::now();
            while watcher.info_async("k").await.expect("info").map_or(0, |i| i.waiters) != 1 {
                assert!(t.elapsed() < PATIENCE, "b never queued");
                tokio::time::sleep(ms(5)).await;
            }
            tokio::time::sleep(RESPONSE_TIMEOUT + ms(500)).await;
            assert!(!waiter.is_finished(), "b returned while the lock was held");
            la.release_async().await.expect("release");
            let r = waiter.await.expect("join");
            let lb = r.expect("b gets the lock");
            assert_eq!(lock_stat(&s, "lock_waits_granted"), 1, "granted from the server's queue");
            assert!(lb.fence() > la.fence());
            assert!(lb.is_held());
            // A waiter given up by its caller (dropped future) leaves the queue.
            assert!(tokio::time::timeout(ms(300), a.acquire_async("k", ms(5000), ms(10_000))).await.is_err());
            let t = Instant::now();
            while watcher.info_async("k").await.expect("info").map_or(0, |i| i.waiters) != 0 {
                assert!(t.elapsed() < PATIENCE, "the cancelled waiter stayed queued");
                tokio::time::sleep(ms(5)).await;
            }
            lb.release_async().await.expect("release");
        });
        // Nobody got the lock after the cancelled waiter left.
        assert!(eventually(PATIENCE, || get(&s, "k").is_none()));
    }
}

mod scripts {
    use super::*;

    #[test]
    fn waiter_polls_and_gets_the_lock() {
        let s = Server::builder().without_module().start();
        let (a, b) = (client(&s), client(&s));
        let la = a.try_acquire("k", ms(30_000)).expect("a acquires");
        let (tx, rx) = mpsc::channel();
        let waiter = thread::spawn(move || {
            let r = b.acquire_with("k", ms(5000), ms(10_000), &LockOptions::new().retry_delay(ms(5), ms(50)));
            tx.send(Instant::now()).expect("send");
            r
        });
        thread::sleep(ms(800));
        la.release().expect("release");
        rx.recv_timeout(PATIENCE).expect("b returns");
        let lb = waiter.join().expect("waiter").expect("b gets the lock");
        assert_eq!(lb.fence(), None);
        assert_eq!(get(&s, "k").as_deref(), Some(lb.token()));
    }

    #[test]
    fn async_waiter_polls_and_gets_the_lock() {
        let s = Server::builder().without_module().start();
        rt().block_on(async {
            let (a, b) = (client(&s), client(&s));
            let la = a.try_acquire_async("k", ms(30_000)).await.expect("a acquires");
            let waiter = tokio::spawn(async move { b.acquire_async("k", ms(5000), ms(10_000)).await });
            tokio::time::sleep(ms(700)).await;
            la.release_async().await.expect("release");
            let lb = tokio::time::timeout(PATIENCE, waiter).await.expect("in time").expect("join").expect("acquired");
            assert_eq!(lb.fence(), None);
        });
    }
}
